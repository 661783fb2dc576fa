/* Settings of an engine that other components run their own peer
 * connections by (the store client's disk-tier reads give up on a silent
 * node after the same stall time as the engine's transfers). */
#ifndef CR_TRANSFER_ENGINE_INFO_H
#define CR_TRANSFER_ENGINE_INFO_H

#include "crescent/transfer.h"

/* The engine's stall time (ms): a peer that answers nothing for this long
 * fails its requests (cr_xfer_params_t.stall_timeout_ms, its default or
 * $CRESCENT_XFER_STALL_MS). */
unsigned cr__xfer_stall_ms(const cr_xfer_engine_t *e);

/* Timeouts this engine waited out on peers that did not answer: requests
 * a transport failed with -ETIMEDOUT (a stall) and descriptor refreshes
 * that timed out. Each is a wait of up to a stall time for the caller, so
 * tests count them to check how often a frozen node is waited on. */
uint64_t cr__xfer_timeouts_waited(const cr_xfer_engine_t *e);

#endif
