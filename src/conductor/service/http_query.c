/* crescent-conductor service: POST /query and /query_by_hash, and the
 * query hashing shared with /schedule. */
#include "conductor/service/service_priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct qres {
    int slots[NSLOT];
    int n_slots;
    uint32_t block_size;
    uint32_t longest;                  /* blocks */
    uint32_t tier[CR_COND_TIER_COUNT]; /* blocks */
    uint32_t dp_blocks[NSLOT];         /* per slot */
} qres_t;

int cr__csvc_qhash_pre(cr__creq_query_t *q, uint32_t bs, qhash_t *qh)
{
    memset(qh, 0, sizeof *qh);
    qh->ns = cr__csvc_ns_of(&q->id);
    if (q->by_hash) {
        ns_apply(q->hashes, q->n_hashes, qh->ns); /* ours: parsed from the body */
        return 0;
    }
    if (!bs)
        return 0;
    size_t cap = q->n_tokens / bs;
    qh->pre = malloc((cap ? cap : 1) * sizeof *qh->pre);
    if (!qh->pre)
        return -ENOMEM;
    if (cr_cond_hash_tokens(q->tokens, q->n_tokens, bs, qh->pre, cap ? cap : 1, &qh->pre_n))
        qh->pre_n = 0;
    ns_apply(qh->pre, qh->pre_n, qh->ns);
    qh->pre_bs = bs;
    return 0;
}

size_t cr__csvc_qhash_get_locked(cr__csvc_t *s, const cr__creq_query_t *q, qhash_t *qh,
                                 uint32_t bs, const uint64_t **out)
{
    if (q->by_hash) {
        *out = q->hashes;
        return q->n_hashes;
    }
    if (qh->pre && qh->pre_bs == bs) {
        *out = qh->pre;
        return qh->pre_n;
    }
    if (qh->scratch_bs != bs) {
        size_t n = 0;
        if (cr_cond_hash_tokens(q->tokens, q->n_tokens, bs, s->scratch, s->scratch_cap, &n))
            n = 0;
        ns_apply(s->scratch, n, qh->ns);
        qh->scratch_bs = bs;
        qh->scratch_n = n;
    }
    *out = s->scratch;
    return qh->scratch_n;
}

void cr__csvc_h_query(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp,
                      int by_hash)
{
    char err[512];
    cr__creq_query_t q;
    int rc = cr__creq_parse_query(req->body, req->body_len, &s->rqlim, by_hash, &q, err,
                                  sizeof err);
    if (rc)
        return cr__csvc_reply_error(s, resp, cr__csvc_parse_status(rc), err);
    qres_t *res = calloc(NSLOT, sizeof *res);
    qhash_t qh;
    if (!res || cr__csvc_qhash_pre(&q, q.id.block_size, &qh)) {
        free(res);
        cr__creq_query_free(&q);
        return cr__csvc_reply_error(s, resp, 503, "out of memory");
    }
    int ng = 0;
    char names[NSLOT][2][CR__CREQ_NAME_MAX]; /* tenant, instance of each group */
    uint32_t dp_rank[NSLOT];
    pthread_mutex_lock(&s->lock);
    /* group the matching slots by (tenant, instance) */
    for (int i = 0; i < NSLOT; i++) {
        const slot_t *sl = &s->slots[i];
        if (!sl->used || !cr__csvc_ident_matches(&sl->reg.id, &q.id))
            continue;
        dp_rank[i] = sl->reg.id.dp_rank;
        int g = 0;
        for (; g < ng; g++)
            if (!strcmp(names[g][0], sl->reg.id.tenant_id) &&
                !strcmp(names[g][1], sl->reg.id.instance_id))
                break;
        if (g == ng) {
            memcpy(names[g][0], sl->reg.id.tenant_id, CR__CREQ_NAME_MAX);
            memcpy(names[g][1], sl->reg.id.instance_id, CR__CREQ_NAME_MAX);
            res[g].block_size = sl->reg.id.block_size;
            ng++;
        }
        res[g].slots[res[g].n_slots++] = i;
    }
    for (int g = 0; g < ng; g++) {
        qres_t *r = &res[g];
        const uint64_t *h;
        size_t n = cr__csvc_qhash_get_locked(s, &q, &qh, r->block_size, &h);
        /* per DP rank: each slot's own longest prefix */
        for (int k = 0; k < r->n_slots; k++) {
            cr_cond_match_t m;
            if (r->slots[k] >= 0 && s->slots[r->slots[k]].reg.id.block_size == r->block_size &&
                !cr_cond_index_match(s->idx, (uint32_t)r->slots[k], h, n, &m))
                r->dp_blocks[r->slots[k]] = m.blocks;
        }
        /* instance: a block counts if any of its slots holds it on any tier;
         * per medium: blocks of that prefix held on the medium */
        for (size_t i = 0; i < n; i++) {
            unsigned any = 0;
            for (int k = 0; k < r->n_slots; k++)
                if (s->slots[r->slots[k]].reg.id.block_size == r->block_size)
                    any |= cr_cond_index_lookup(s->idx, (uint32_t)r->slots[k], h[i]);
            if (!any)
                break;
            r->longest++;
            for (int t = 0; t < CR_COND_TIER_COUNT; t++)
                if (any & (1u << t))
                    r->tier[t]++;
        }
    }
    pthread_mutex_unlock(&s->lock);

    json_t *root = json_object();
    for (int g = 0; g < ng; g++) {
        const qres_t *r = &res[g];
        json_t *ten = json_object_get(root, names[g][0]);
        if (!ten) {
            ten = json_object();
            json_object_set_new(root, names[g][0], ten);
        }
        json_t *inst = json_object();
        uint64_t bs = r->block_size;
        json_object_set_new(inst, "longest_matched", json_integer((json_int_t)(r->longest * bs)));
        for (int t = 0; t < CR_COND_TIER_COUNT; t++)
            json_object_set_new(inst, cr__csvc_tier_key[t],
                                json_integer((json_int_t)(r->tier[t] * bs)));
        json_t *dp = json_object();
        for (int k = 0; k < r->n_slots; k++) {
            char key[16];
            snprintf(key, sizeof key, "%u", dp_rank[r->slots[k]]);
            json_object_set_new(dp, key,
                                json_integer((json_int_t)(r->dp_blocks[r->slots[k]] * bs)));
        }
        json_object_set_new(inst, "DP", dp);
        json_object_set_new(ten, names[g][1], inst);
    }
    free(res);
    free(qh.pre);
    cr__creq_query_free(&q);
    inc(s, CR__CSVC_M_QUERIES, 1);
    cr__csvc_reply_json(resp, 200, root);
}
