/* crescent-conductor service: POST /schedule (a decision from the
 * scheduler over the registered instances) and /load (instance loads). */
#include "conductor/service/service_priv.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "conductor/service/report.h"

/* The random policy may draw a slot excluded from this request: it draws
 * again, at most this many times. */
#define SCHEDULE_REDRAWS_MAX 256

void cr__csvc_h_schedule(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    char err[512];
    cr__creq_schedule_t r;
    int rc = cr__creq_parse_schedule(req->body, req->body_len, &s->rqlim, &r, err, sizeof err);
    if (rc)
        return cr__csvc_reply_error(s, resp, cr__csvc_parse_status(rc), err);
    uint32_t bs = (uint32_t)s->cfg.block_size;
    if (r.q.id.block_size && r.q.id.block_size != bs) {
        cr__creq_query_free(&r.q);
        snprintf(err, sizeof err, "block_size: /schedule hashes with the service block_size %u",
                 bs);
        return cr__csvc_reply_error(s, resp, 400, err);
    }
    r.q.id.block_size = 0; /* candidates of any block size; hashes only match their own */
    if (r.q.by_hash && !r.input_len)
        r.input_len = (uint64_t)r.q.n_hashes * bs;

    qhash_t qh;
    if (cr__csvc_qhash_pre(&r.q, bs, &qh)) {
        cr__creq_query_free(&r.q);
        return cr__csvc_reply_error(s, resp, 503, "out of memory");
    }
    pthread_mutex_lock(&s->lock);
    double now = now_s(s);
    int pc[NSLOT], dc[NSLOT], npc = 0, ndc = 0;
    for (int i = 0; i < NSLOT; i++) {
        const slot_t *sl = &s->slots[i];
        int ok = sl->used && cr__csvc_ident_matches(&sl->reg.id, &r.q.id);
        pc[i] = ok && (sl->reg.role & CR__ROLE_PREFILL);
        dc[i] = ok && (sl->reg.role & CR__ROLE_DECODE);
        npc += pc[i];
        ndc += dc[i];
        /* slots that are no candidate look infinitely busy / full */
        cr_cond_sched_set_prefill_load(s->sched, (uint32_t)i,
                                       pc[i] ? sl->busy_until : now + FAR_FUTURE_S);
        if (dc[i])
            cr_cond_sched_set_decode_load(s->sched, (uint32_t)i, sl->dbatch, sl->dctx, sl->dmax);
        else
            cr_cond_sched_set_decode_load(s->sched, (uint32_t)i, 1u << 30, 1ull << 40, 1);
    }
    if (!npc || !ndc) {
        pthread_mutex_unlock(&s->lock);
        free(qh.pre);
        cr__creq_query_free(&r.q);
        return cr__csvc_reply_error(s, resp, 503,
                           !npc ? "model: no prefill instance registered for this request"
                                    : "model: no decode instance registered for this request");
    }
    const uint64_t *h;
    size_t n = cr__csvc_qhash_get_locked(s, &r.q, &qh, bs, &h);
    cr_cond_request_t creq = {.block_hashes = h,
                              .n_blocks = n,
                              .input_len = r.input_len,
                              .output_len = r.output_len,
                              .now = now};
    cr_cond_decision_t d;
    rc = cr_cond_sched_schedule(s->sched, &creq, &d);
    uint64_t pmask = 0;
    for (int i = 0; i < NSLOT; i++)
        if (pc[i])
            pmask |= 1ull << i;
#define BAD_PICK(d) (!pc[(d).prefill] || !dc[(d).decode] || ((d).pipeline_mask & ~pmask))
    /* the random policy may draw an excluded slot: draw again (bounded) */
    for (int tries = 0; !rc && BAD_PICK(d) && tries < SCHEDULE_REDRAWS_MAX; tries++)
        rc = cr_cond_sched_schedule(s->sched, &creq, &d);
    if (!rc && BAD_PICK(d))
        rc = -EAGAIN;
#undef BAD_PICK
    free(qh.pre); /* the hashes are not needed after the decision */
    if (rc) {
        pthread_mutex_unlock(&s->lock);
        cr__creq_query_free(&r.q);
        return cr__csvc_reply_error(s, resp, 500, "scheduler: no decision could be made");
    }
    int rej = d.rejected;
    const char *why = d.rejected ? "service SLO" : NULL;
    if (r.ttft_slo_ms > 0 && d.est_ttft_s * 1e3 > r.ttft_slo_ms) {
        rej = 1;
        why = "ttft_slo_ms";
    }
    if (r.tbt_slo_ms > 0 && d.est_tbt_s * 1e3 > r.tbt_slo_ms) {
        rej = 1;
        why = why ? why : "tbt_slo_ms";
    }
    slot_t *ps = &s->slots[d.prefill];
    uint64_t stages = d.pipeline_mask ? d.pipeline_mask : 1ull << d.prefill;
    if (!rej && !r.dry_run) {
        /* account the decision until the next /load report: every stage of
         * a pipelined prefill is busy for its duration */
        for (int i = 0; i < NSLOT; i++) {
            if (!(stages & (1ull << i)))
                continue;
            slot_t *st = &s->slots[i];
            double start = st->busy_until > now ? st->busy_until : now;
            st->busy_until = start + d.est_transfer_s + d.est_prefill_s;
        }
    }
    json_t *j = json_object();
    json_object_set_new(j, "prefill", cr__csvc_slot_json(ps));
    if (d.pipeline_stages > 1) {
        json_t *pl = json_array();
        for (int i = 0; i < NSLOT; i++)
            if ((stages & (1ull << i)) && s->slots[i].used)
                json_array_append_new(pl, cr__csvc_slot_json(&s->slots[i]));
        json_object_set_new(j, "pipeline", pl);
    }
    json_object_set_new(j, "decode", cr__csvc_slot_json(&s->slots[d.decode]));
    json_object_set_new(j, "fetch_from",
                        d.fetch_from >= 0 && s->slots[d.fetch_from].used
                        ? cr__csvc_slot_json(&s->slots[d.fetch_from])
                        : json_null());
    /* why: the policy, its expected TTFT and parts, the matched prefix, and
     * what the predictor behind the estimates has learned */
    json_t *pj = cr__csvc_pred_json(cr_cond_sched_predictor(s->sched));
    pthread_mutex_unlock(&s->lock);
    char reason[384];
    cr__csvc_decision_reason(&d, cr_cond_policy_name(s->policy),
                             (unsigned long long)r.input_len, bs, reason, sizeof reason);
    json_object_set_new(j, "decided_by", json_string(cr_cond_policy_name(s->policy)));
    json_object_set_new(j, "reason", json_string(reason));
    json_object_set_new(j, "matched_prefix_tokens", json_integer((json_int_t)d.reused_tokens));
    json_object_set_new(j, "predictor", pj ? pj : json_null());
    json_object_set_new(j, "policy", json_string(cr_cond_policy_name(s->policy)));
    json_object_set_new(j, "block_size", json_integer(bs));
    json_object_set_new(j, "prompt_blocks", json_integer((json_int_t)n));
    json_object_set_new(j, "local_prefix_tokens",
                        json_integer((json_int_t)((uint64_t)d.local_prefix_blocks * bs)));
    json_object_set_new(j, "reused_tokens", json_integer((json_int_t)d.reused_tokens));
    json_object_set_new(j, "est_queue_ms", json_real(d.est_queue_s * 1e3));
    json_object_set_new(j, "est_transfer_ms", json_real(d.est_transfer_s * 1e3));
    json_object_set_new(j, "est_prefill_ms", json_real(d.est_prefill_s * 1e3));
    json_object_set_new(j, "est_ttft_ms", json_real(d.est_ttft_s * 1e3));
    json_object_set_new(j, "est_tbt_ms", json_real(d.est_tbt_s * 1e3));
    json_object_set_new(j, "rejected", json_boolean(rej));
    cr__creq_query_free(&r.q);
    if (rej) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s: the request would miss its SLO", why);
        json_object_set_new(j, "error", json_string(msg));
        json_object_set_new(j, "field", json_string(why));
        inc(s, CR__CSVC_M_SCHEDULE_REJECTS, 1);
        return cr__csvc_reply_json(resp, 429, j);
    }
    inc(s, CR__CSVC_M_SCHEDULES, 1);
    cr__csvc_reply_json(resp, 200, j);
}

void cr__csvc_h_load(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    char err[512];
    cr__creq_load_t l;
    int rc = cr__creq_parse_load(req->body, req->body_len, &s->rqlim, &l, err, sizeof err);
    if (rc)
        return cr__csvc_reply_error(s, resp, cr__csvc_parse_status(rc), err);
    int n = 0;
    pthread_mutex_lock(&s->lock);
    double now = now_s(s);
    for (int i = 0; i < NSLOT; i++) {
        slot_t *sl = &s->slots[i];
        if (!sl->used || strcmp(sl->reg.id.instance_id, l.id.instance_id) ||
            strcmp(sl->reg.id.tenant_id, l.id.tenant_id) ||
            (l.id.has_dp_rank && sl->reg.id.dp_rank != l.id.dp_rank))
            continue;
        if (l.has_prefill)
            sl->busy_until = now + l.prefill_queue_ms / 1e3;
        if (l.has_decode) {
            sl->dbatch = l.decode_batch;
            sl->dctx = l.decode_context_tokens;
            sl->dmax = l.decode_max_batch;
        }
        n++;
    }
    pthread_mutex_unlock(&s->lock);
    if (!n)
        return cr__csvc_reply_error(s, resp, 404, "instance_id: not registered");
    cr__csvc_reply_json(resp, 200, json_pack("{s:s,s:i}", "status", "ok", "updated", n));
}
