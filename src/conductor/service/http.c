/* crescent-conductor service: HTTP routing, JSON replies and the GET
 * endpoints (/health, /metrics, /instances). */
#include "conductor/service/service_priv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cr__csvc_reply_json(cr__http_resp_t *resp, int status, json_t *j)
{
    char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!txt) {
        cr__http_resp_printf(resp, 500, "out of memory\n");
        return;
    }
    free(resp->body);
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = txt;
    resp->body_len = strlen(txt);
}

/* {"error": msg, "field": <text before the first ':'>} */
void cr__csvc_reply_error(cr__csvc_t *s, cr__http_resp_t *resp, int status, const char *msg)
{
    json_t *j = json_object();
    json_object_set_new(j, "error", json_string(msg));
    const char *colon = strchr(msg, ':');
    if (colon && colon > msg && (size_t)(colon - msg) < 128 && !memchr(msg, ' ', (size_t)(colon - msg)))
        json_object_set_new(j, "field", json_stringn(msg, (size_t)(colon - msg)));
    if (status >= 400 && status < 500)
        inc(s, CR__CSVC_M_HTTP_CLIENT_ERRORS, 1);
    cr__csvc_reply_json(resp, status, j);
}

int cr__csvc_parse_status(int rc) { return rc == -E2BIG ? 413 : rc == -ENOMEM ? 503 : 400; }

int cr__csvc_ident_matches(const cr__creq_ident_t *reg, const cr__creq_ident_t *q)
{
    if (q->model[0] && strcmp(q->model, reg->model))
        return 0;
    if (strcmp(q->tenant_id, reg->tenant_id))
        return 0;
    if (strcmp(q->lora_name, reg->lora_name))
        return 0;
    if (strcmp(q->salt, reg->salt))
        return 0;
    if (q->instance_id[0] && strcmp(q->instance_id, reg->instance_id))
        return 0;
    if (q->block_size && q->block_size != reg->block_size)
        return 0;
    return 1;
}

json_t *cr__csvc_slot_json(const slot_t *sl)
{
    return json_pack("{s:s,s:s,s:I,s:s}", "instance_id", sl->reg.id.instance_id, "tenant_id",
                     sl->reg.id.tenant_id, "dp_rank", (json_int_t)sl->reg.id.dp_rank, "endpoint",
                     sl->reg.endpoint);
}

void cr__csvc_h_instances(cr__csvc_t *s, cr__http_resp_t *resp)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&s->lock);
    double now = now_s(s);
    for (int i = 0; i < NSLOT; i++) {
        const slot_t *sl = &s->slots[i];
        if (!sl->used)
            continue;
        static const char *roles[] = {"", "prefill", "decode", "both"};
        json_t *o = cr__csvc_slot_json(sl);
        json_object_set_new(o, "model", json_string(sl->reg.id.model));
        json_object_set_new(o, "lora_name", json_string(sl->reg.id.lora_name));
        json_object_set_new(o, "block_size", json_integer(sl->reg.id.block_size));
        json_object_set_new(o, "type", json_string(sl->reg.type));
        json_object_set_new(o, "role", json_string(roles[sl->reg.role & 3]));
        json_object_set_new(o, "batches", json_integer((json_int_t)sl->batches));
        json_object_set_new(o, "events", json_integer((json_int_t)sl->events));
        json_object_set_new(o, "bad_batches", json_integer((json_int_t)sl->bad_batches));
        json_object_set_new(o, "seq_gaps", json_integer((json_int_t)sl->seq_gaps));
        json_object_set_new(o, "last_seq",
                            sl->have_seq ? json_integer((json_int_t)sl->last_seq) : json_null());
        json_object_set_new(o, "mapped_blocks", json_integer((json_int_t)sl->map.n));
        json_t *tiers = json_object();
        for (int t = 0; t < CR_COND_TIER_COUNT; t++)
            json_object_set_new(
                tiers, cr__csvc_tier_key[t],
                json_integer((json_int_t)cr_cond_index_count(s->idx, (uint32_t)i,
                                                             (cr_cond_tier_t)t)));
        json_object_set_new(o, "blocks", tiers);
        double q = sl->busy_until > now ? sl->busy_until - now : 0;
        json_object_set_new(o, "prefill_queue_ms", json_real(q * 1e3));
        json_array_append_new(arr, o);
    }
    pthread_mutex_unlock(&s->lock);
    cr__csvc_reply_json(resp, 200, json_pack("{s:o}", "instances", arr));
}

void cr__csvc_h_metrics(cr__csvc_t *s, cr__http_resp_t *resp)
{
    static const char *const names[] = {
#define X(id, name, help) name,
        CR__CSVC_METRICS(X)
#undef X
    };
    static const char *const helps[] = {
#define X(id, name, help) help,
        CR__CSVC_METRICS(X)
#undef X
    };
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return (void)cr__http_resp_printf(resp, 503, "out of memory\n");
    for (int i = 0; i < CR__CSVC_M__COUNT; i++)
        fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %" PRIu64 "\n", names[i], helps[i],
                names[i], names[i], __atomic_load_n(&s->m[i], __ATOMIC_RELAXED));
    cr_cond_index_stats_t st = {0};
    int ninst = 0;
    pthread_mutex_lock(&s->lock);
    cr_cond_index_stats(s->idx, &st);
    for (int i = 0; i < NSLOT; i++)
        ninst += s->slots[i].used;
    pthread_mutex_unlock(&s->lock);
    const struct {
        const char *name, *help;
        uint64_t v;
    } gauges[] = {
        {"crescent_conductor_instances", "registered publishers", (uint64_t)ninst},
        {"crescent_conductor_index_blocks", "distinct block hashes indexed", st.blocks},
        {"crescent_conductor_index_entries", "(block, instance, tier) entries", st.entries},
        {"crescent_conductor_index_bytes", "heap bytes held by the index", st.bytes},
    };
    for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++)
        fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s %" PRIu64 "\n", gauges[i].name,
                gauges[i].help, gauges[i].name, gauges[i].name, gauges[i].v);
    if (fclose(f) || !buf) {
        free(buf);
        return (void)cr__http_resp_printf(resp, 503, "out of memory\n");
    }
    free(resp->body);
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4";
    resp->body = buf;
    resp->body_len = len;
}

void cr__csvc_handle(void *user, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    cr__csvc_t *s = user;
    inc(s, CR__CSVC_M_HTTP_REQUESTS, 1);
    const char *p = req->path ? req->path : "";
    int get = req->method && !strcmp(req->method, "GET");
    int post = req->method && !strcmp(req->method, "POST");
    static const char *const posts[] = {"/register", "/unregister",    "/query",
                                        "/query_by_hash", "/schedule", "/load",
                                        "/report"};
    static const char *const gets[] = {"/health", "/metrics", "/instances"};
    for (size_t i = 0; i < sizeof posts / sizeof posts[0]; i++)
        if (!strcmp(p, posts[i])) {
            if (!post)
                return cr__csvc_reply_error(s, resp, 405, "method: use POST");
            switch (i) {
            case 0: return cr__csvc_h_register(s, req, resp);
            case 1: return cr__csvc_h_unregister(s, req, resp);
            case 2: return cr__csvc_h_query(s, req, resp, 0);
            case 3: return cr__csvc_h_query(s, req, resp, 1);
            case 4: return cr__csvc_h_schedule(s, req, resp);
            case 5: return cr__csvc_h_load(s, req, resp);
            default: return cr__csvc_h_report(s, req, resp);
            }
        }
    for (size_t i = 0; i < sizeof gets / sizeof gets[0]; i++)
        if (!strcmp(p, gets[i])) {
            if (!get)
                return cr__csvc_reply_error(s, resp, 405, "method: use GET");
            if (i == 0) {
                int n = 0;
                pthread_mutex_lock(&s->lock);
                for (int k = 0; k < NSLOT; k++)
                    n += s->slots[k].used;
                pthread_mutex_unlock(&s->lock);
                return cr__csvc_reply_json(resp, 200,
                                  json_pack("{s:s,s:i}", "status", "ok", "instances", n));
            }
            if (i == 1)
                return cr__csvc_h_metrics(s, resp);
            return cr__csvc_h_instances(s, resp);
        }
    cr__csvc_reply_error(s, resp, 404, "path: no such endpoint");
}
