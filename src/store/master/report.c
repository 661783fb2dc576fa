/* Master reports: stats snapshot, Prometheus text from the metrics list,
 * JSON views of a key and of the mounted segments (master.h). */
#include "store/master/master_priv.h"
#include "store/tier/tier.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cr__master_stats(cr__master_t *m, cr__master_stats_t *st)
{
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&m->mu);
    memcpy(st->counters, m->counters, sizeof st->counters);
    st->keys = m->n_complete;
    st->pending_puts = m->n_pending;
    for (uint32_t i = 0; i < m->n_segs; i++)
        st->segments += m->segs[i].live != 0;
    for (uint32_t i = 0; i < m->n_clients; i++)
        st->clients += m->clients[i].live != 0;
    st->capacity_bytes = m->capacity;
    st->allocated_bytes = m->allocated;
    st->quarantine_bytes = m->quarantine_bytes;
    cr__m_tier_stats_locked(m, st->counters);
    cr__m_fs_stats_locked(m, st->counters);
    cr__m_resv_stats_locked(m, st->counters);
    pthread_mutex_unlock(&m->mu);
    st->counters[CR__MM_keys] = st->keys;
    st->counters[CR__MM_pending_puts] = st->pending_puts;
    st->counters[CR__MM_segments] = st->segments;
    st->counters[CR__MM_clients] = st->clients;
    st->counters[CR__MM_capacity_bytes] = st->capacity_bytes;
    st->counters[CR__MM_allocated_bytes] = st->allocated_bytes;
    st->counters[CR__MM_quarantine_bytes] = st->quarantine_bytes;
}

/* growable text buffer */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    int err;
} sbuf_t;

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf_t *b, const char *fmt, ...)
{
    if (b->err)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->err = 1;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t nc = b->cap ? b->cap * 2 : 1024;
        while (nc < b->len + (size_t)n + 1)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->err = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
}

static void sb_json_str(sbuf_t *b, const char *s, size_t len)
{
    sb_printf(b, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            sb_printf(b, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            sb_printf(b, "\\u%04x", c);
        else
            sb_printf(b, "%c", c);
    }
    sb_printf(b, "\"");
}

static int sb_finish(sbuf_t *b, char **out, size_t *len)
{
    if (b->err || !b->p) {
        free(b->p);
        return -ENOMEM;
    }
    *out = b->p;
    if (len)
        *len = b->len;
    return 0;
}

#define METRIC_ROW(name, type, help) {#name, #type, help},
static const struct {
    const char *name, *type, *help;
} metric_rows[] = {CR__MASTER_METRICS(METRIC_ROW)};

int cr__master_metrics_text(cr__master_t *m, char **out, size_t *len)
{
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    sbuf_t b = {0};
    for (int i = 0; i < CR__MM_COUNT; i++)
        sb_printf(&b, "# HELP crescent_master_%s %s\n# TYPE crescent_master_%s %s\ncrescent_master_%s %" PRIu64 "\n",
                  metric_rows[i].name, metric_rows[i].help, metric_rows[i].name,
                  metric_rows[i].type, metric_rows[i].name, st.counters[i]);
    return sb_finish(&b, out, len);
}

int cr__master_query_key_json(cr__master_t *m, const char *key, size_t key_len, uint64_t now,
                              char **out, size_t *len)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    sbuf_t b = {0};
    pthread_mutex_lock(&m->mu);
    obj_t *o = cr__m_lookup(m, key, key_len);
    if (!o) {
        pthread_mutex_unlock(&m->mu);
        return CR_E_OBJECT_NOT_FOUND;
    }
    int complete = (o->flags & OF_COMPLETE) != 0;
    sb_printf(&b, "{\"key\":");
    sb_json_str(&b, obj_key(o), o->key_len);
    sb_printf(&b,
              ",\"state\":\"%s\",\"version\":%" PRIu64 ",\"size\":%" PRIu64
              ",\"lease_remaining_ms\":%" PRIu64 ",\"put_deadline_ms\":%" PRIu64
              ",\"hard_pin\":%s,\"soft_pin\":%s,\"replicas\":[",
              complete ? "complete" : "pending", o->version, (uint64_t)o->size,
              complete && o->until_ms > now ? o->until_ms - now : 0,
              !complete && o->until_ms > now ? o->until_ms - now : 0,
              (o->flags & OF_HARD_PIN) ? "true" : "false",
              (o->flags & OF_SOFT_PIN) ? "true" : "false");
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    int first = 1;
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD)) {
            sb_printf(&b, "%s{\"replica_id\":%" PRIu64 ",\"tier\":\"%s\",\"shards\":[",
                      first ? "" : ",", REPLICA_ID(o->version, r),
                      n && m->segs[sh[0].seg].tier ? "ssd" : "dram");
            first = 0;
            for (uint32_t k = 0; k < n; k++) {
                seg_t *sg = &m->segs[sh[k].seg];
                sb_printf(&b, "%s{\"segment\":", k ? "," : "");
                sb_json_str(&b, sg->name, strlen(sg->name));
                sb_printf(&b, ",\"addr\":%" PRIu64 ",\"bytes\":%" PRIu64 "}",
                          sg->base + cr__oalloc_block_offset(sg->alloc, sh[k].blk),
                          cr__oalloc_block_size(sg->alloc, sh[k].blk));
            }
            sb_printf(&b, "]}");
        }
        sh += n;
    }
    if (o->flags & OF_FS) /* its file on the shared-FS tier (fs.c) */
        sb_printf(&b, "%s{\"replica_id\":%" PRIu64 ",\"tier\":\"fs\",\"shards\":[{"
                      "\"segment\":\"" CR__TIER_FS_SEGMENT "\",\"addr\":0,\"bytes\":%" PRIu64 "}]}",
                  first ? "" : ",", REPLICA_ID(o->version, FS_REPLICA_IDX), (uint64_t)o->size);
    sb_printf(&b, "]}\n");
    pthread_mutex_unlock(&m->mu);
    return sb_finish(&b, out, len);
}

int cr__master_segments_json(cr__master_t *m, char **out, size_t *len)
{
    sbuf_t b = {0};
    sb_printf(&b, "[");
    pthread_mutex_lock(&m->mu);
    int first = 1;
    for (uint32_t i = 0; i < m->n_segs; i++) {
        seg_t *sg = &m->segs[i];
        if (!sg->live)
            continue;
        /* never the owner's client_id: it is the credential UnmountSegment
         * and MountSegment accept (issue 11, attack 4) */
        sb_printf(&b, "%s{\"name\":", first ? "" : ",");
        first = 0;
        sb_json_str(&b, sg->name, strlen(sg->name));
        sb_printf(&b,
                  ",\"base\":%" PRIu64 ",\"size\":%" PRIu64 ",\"capacity\":%" PRIu64
                  ",\"used\":%" PRIu64 "}",
                  sg->base, sg->size, cr__oalloc_capacity(sg->alloc), cr__oalloc_used(sg->alloc));
    }
    pthread_mutex_unlock(&m->mu);
    sb_printf(&b, "]\n");
    return sb_finish(&b, out, len);
}
