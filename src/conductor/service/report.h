/* crescent-conductor: what instances report about actual prefill and decode
 * times (POST /report), applied to the scheduler's predictor so its
 * estimates correct themselves; and how /schedule explains its decision.
 * Internal. */
#ifndef CR_CONDUCTOR_SERVICE_REPORT_H
#define CR_CONDUCTOR_SERVICE_REPORT_H

#include <stddef.h>

#include <jansson.h>

#include "crescent/conductor.h"

#define CR__CREPORT_MAX_ITEMS 1024 /* prefill + decode_steps entries per call */

/* Parses a /report body:
 *   {"instance_id": "...",                      (required, <= 127 bytes)
 *    "prefill": [{"input_tokens": n, "reused_tokens": r, "stages": k,
 *                 "seconds": s}, ...],          (stages optional, default 1)
 *    "decode_steps": [{"batch": b, "context_tokens": c, "seconds": s}, ...]}
 * and gives each entry to p (cr_cond_pred_observe_*). The body as a whole
 * must be one object with known fields and at most CR__CREPORT_MAX_ITEMS
 * entries, else nothing is applied: returns -EINVAL or -E2BIG with a message
 * naming the field in err. An entry that is itself wrong (a field missing,
 * out of range, seconds not > 0) is refused alone; the others still count.
 * On 0, *accepted is the number applied and *refused (new reference, an
 * array of {"field": "prefill[3].seconds", "error": "..."}) lists the
 * others. The caller holds the lock that guards p. */
int cr__csvc_report_apply(cr_cond_pred_t *p, const char *body, size_t len, size_t *accepted,
                          json_t **refused, char *err, size_t errlen);

/* {"prefill_factor", "prefill_sigma", "prefill_samples", "decode_factor",
 * "decode_sigma", "decode_samples"}: what the predictor has learned. New
 * reference, NULL on OOM. */
json_t *cr__csvc_pred_json(const cr_cond_pred_t *p);

/* One sentence saying why d was chosen: policy, expected TTFT and its parts
 * (queue, fetch, prefill), matched prefix, pipeline. Always NUL-terminated. */
void cr__csvc_decision_reason(const cr_cond_decision_t *d, const char *policy,
                              unsigned long long input_len, unsigned block_size, char *buf,
                              size_t n);

#endif
