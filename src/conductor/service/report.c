/* POST /report: actual prefill / decode-step times from instances, applied
 * to the scheduler's predictor (see report.h). */
#include "conductor/service/report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static int fail(char *err, size_t errlen, int rc, const char *fmt, const char *a)
{
    if (err && errlen)
        snprintf(err, errlen, fmt, a);
    return rc;
}

/* a JSON number >= 0 and <= max that is an integer; 0 or -1 */
static int get_u(json_t *o, const char *k, double max, int required, double *out)
{
    json_t *v = json_object_get(o, k);
    if (!v)
        return required ? -1 : 0;
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0 || (double)x > max)
        return -1;
    *out = (double)x;
    return 0;
}

static int get_secs(json_t *o, double *out)
{
    json_t *v = json_object_get(o, "seconds");
    if (!v || !json_is_number(v))
        return -1;
    double x = json_number_value(v);
    if (!(x > 0) || !isfinite(x) || x > 86400)
        return -1;
    *out = x;
    return 0;
}

static int only_fields(json_t *o, const char *const *allowed)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            ok |= !strcmp(k, *a);
        if (!ok)
            return -1;
    }
    return 0;
}

static void refuse(json_t *arr, const char *list, size_t i, const char *msg)
{
    char f[64];
    snprintf(f, sizeof f, "%s[%zu]", list, i);
    json_array_append_new(arr, json_pack("{s:s,s:s}", "field", f, "error", msg));
}

int cr__csvc_report_apply(cr_cond_pred_t *p, const char *body, size_t len, size_t *accepted,
                          json_t **refused, char *err, size_t errlen)
{
    if (!p || !body || !accepted || !refused)
        return -EINVAL;
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return fail(err, errlen, -EINVAL, "body: %s", o ? "expected a JSON object" : je.text);
    }
    static const char *const top[] = {"instance_id", "prefill", "decode_steps", NULL};
    int rc = 0;
    json_t *id = json_object_get(o, "instance_id");
    json_t *pf = json_object_get(o, "prefill"), *ds = json_object_get(o, "decode_steps");
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        int ok = 0;
        for (const char *const *a = top; *a; a++)
            ok |= !strcmp(k, *a);
        if (!ok) {
            rc = fail(err, errlen, -EINVAL, "%s: unknown field", k);
            goto out;
        }
    }
    if (!id || !json_is_string(id) || json_string_length(id) == 0 ||
        json_string_length(id) > 127) {
        rc = fail(err, errlen, -EINVAL, "%s: expected a string of 1..127 bytes", "instance_id");
        goto out;
    }
    if ((pf && !json_is_array(pf)) || (ds && !json_is_array(ds))) {
        rc = fail(err, errlen, -EINVAL, "%s: expected an array",
                  pf && !json_is_array(pf) ? "prefill" : "decode_steps");
        goto out;
    }
    if (!pf && !ds) {
        rc = fail(err, errlen, -EINVAL, "%s: give prefill and/or decode_steps", "body");
        goto out;
    }
    size_t npf = pf ? json_array_size(pf) : 0, nds = ds ? json_array_size(ds) : 0;
    if (npf + nds > CR__CREPORT_MAX_ITEMS) {
        char m[96];
        snprintf(m, sizeof m, "prefill + decode_steps: at most %d entries per call",
                 CR__CREPORT_MAX_ITEMS);
        rc = fail(err, errlen, -E2BIG, "%s", m);
        goto out;
    }
    json_t *arr = json_array();
    if (!arr) {
        rc = -ENOMEM;
        goto out;
    }
    size_t n = 0;
    static const char *const pff[] = {"input_tokens", "reused_tokens", "stages", "seconds", NULL};
    static const char *const dsf[] = {"batch", "context_tokens", "seconds", NULL};
    for (size_t i = 0; i < npf; i++) {
        json_t *e = json_array_get(pf, i);
        double in = 0, re = 0, st = 1, sec = 0;
        if (!json_is_object(e) || only_fields(e, pff) ||
            get_u(e, "input_tokens", 16777216.0, 1, &in) ||
            get_u(e, "reused_tokens", 16777216.0, 0, &re) ||
            get_u(e, "stages", CR_COND_MAX_INSTANCES, 0, &st) || get_secs(e, &sec)) {
            refuse(arr, "prefill", i,
                   "expected {input_tokens: 1..16777216, reused_tokens < input_tokens, "
                   "stages: 1..64, seconds: > 0 and <= 86400}");
            continue;
        }
        if (cr_cond_pred_observe_prefill(p, (uint64_t)in, (uint64_t)re, (uint32_t)st, sec)) {
            refuse(arr, "prefill", i, "reused_tokens must be < input_tokens, stages >= 1");
            continue;
        }
        n++;
    }
    for (size_t i = 0; i < nds; i++) {
        json_t *e = json_array_get(ds, i);
        double b = 0, c = 0, sec = 0;
        if (!json_is_object(e) || only_fields(e, dsf) || get_u(e, "batch", 1048576, 1, &b) ||
            b < 1 || get_u(e, "context_tokens", 1e15, 1, &c) || get_secs(e, &sec) ||
            cr_cond_pred_observe_decode_step(p, (uint32_t)b, (uint64_t)c, sec)) {
            refuse(arr, "decode_steps", i,
                   "expected {batch: 1..1048576, context_tokens: >= 0, seconds: > 0 and "
                   "<= 86400}");
            continue;
        }
        n++;
    }
    *accepted = n;
    *refused = arr;
out:
    json_decref(o);
    return rc;
}

json_t *cr__csvc_pred_json(const cr_cond_pred_t *p)
{
    cr_cond_pred_stats_t s;
    if (cr_cond_pred_stats(p, &s))
        return NULL;
    return json_pack("{s:f,s:f,s:I,s:f,s:f,s:I}", "prefill_factor", s.prefill_factor,
                     "prefill_sigma", s.prefill_sigma, "prefill_samples",
                     (json_int_t)s.prefill_samples, "decode_factor", s.decode_factor,
                     "decode_sigma", s.decode_sigma, "decode_samples",
                     (json_int_t)s.decode_samples);
}

void cr__csvc_decision_reason(const cr_cond_decision_t *d, const char *policy,
                              unsigned long long input_len, unsigned block_size, char *buf,
                              size_t n)
{
    if (!buf || !n)
        return;
    char pipe[64] = "";
    if (d->pipeline_stages > 1)
        snprintf(pipe, sizeof pipe, ", pipelined over %u instances", d->pipeline_stages);
    snprintf(buf, n,
             "%s: lowest expected TTFT %.0f ms (predicted: queue %.0f ms, prefix fetch %.0f "
             "ms, prefill %.0f ms); %llu of %llu prompt tokens reused (%llu already on the prefill "
             "instance%s)%s",
             policy, d->est_ttft_s * 1e3, d->est_queue_s * 1e3, d->est_transfer_s * 1e3,
             d->est_prefill_s * 1e3, (unsigned long long)d->reused_tokens, input_len,
             (unsigned long long)d->local_prefix_blocks * block_size,
             d->fetch_from >= 0 ? "; the rest fetched" : "", pipe);
}
