/* Per-object capabilities on the Transfer Engine (docs/security.md,
 * "Capabilities"): the store's side of it. The serving check that
 * transports call is cr__xfer_cap_check (transport/transport.h).
 *
 * A store node installs the capability key the master gave it for its
 * mounted segment; from then on its engine serves a remote READ or WRITE
 * only with a capability minted under that key that covers the access.
 * Initiators pass the capabilities from the master's replica lists with
 * their requests. One key per engine (a store client mounts one segment).
 */
#ifndef CR_TRANSFER_CAPABILITY_H
#define CR_TRANSFER_CAPABILITY_H

#include <stddef.h>
#include <stdint.h>

#include "common/auth/cap.h"
#include "crescent/transfer.h"

/* Installs (or replaces) the engine's capability key: capabilities for
 * segment id seg_id minted with key; the epoch floor is raised to epoch.
 * Turns the check on for good. Thread-safe. */
void cr__xfer_cap_key_set(cr_xfer_engine_t *e, const uint8_t key[CR__CAP_KEY_LEN],
                          uint64_t seg_id, uint32_t epoch);

/* Turns the check on with a random key nobody holds: every remote READ
 * and WRITE is refused until cr__xfer_cap_key_set (a store client with a
 * cluster key and no segment, or before its mount). Returns 0 or -EIO. */
int cr__xfer_cap_deny_all(cr_xfer_engine_t *e);

/* Turns the check off (the master grants no capabilities: security on
 * with --capabilities=false). */
void cr__xfer_cap_disable(cr_xfer_engine_t *e);
/* 1 if the engine checks capabilities. */
int cr__xfer_cap_enforced(cr_xfer_engine_t *e);

/* A master epoch was seen (e.g. in a heartbeat reply): capabilities of
 * older epochs are refused from now on. Thread-safe, never lowers. */
void cr__xfer_cap_epoch_seen(cr_xfer_engine_t *e, uint32_t epoch);

/* Requests refused so far for want of a valid capability (tests, metrics). */
uint64_t cr__xfer_cap_refused(cr_xfer_engine_t *e);

/* cr_xfer_transfer_sync with a capability per request: caps[i] is NULL or
 * CR__CAP_LEN bytes (copied: the caller may free them once this returns).
 * Same returns. */
int cr__xfer_transfer_sync_caps(cr_xfer_engine_t *e, const cr_xfer_request_t *reqs,
                                const uint8_t *const *caps, size_t n, int *results);

/* cr_xfer_batch_submit with a capability per request (as above). */
int cr__xfer_batch_submit_caps(cr_xfer_batch_t *b, const cr_xfer_request_t *reqs,
                               const uint8_t *const *caps, size_t n);

#endif
