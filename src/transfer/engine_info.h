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

#endif
