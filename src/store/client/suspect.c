/* Segments that recently failed a transfer (fault isolation, issue 11).
 *
 * A frozen or unreachable node fails its transfers only after the TE's
 * stall time (cr_xfer_params_t.stall_timeout_ms). Without memory of that,
 * every get whose first-choice replica sits on that node pays the stall
 * time again. The client remembers such segments for CR__SC_SUSPECT_MS and
 * visits their replicas last (ops.c, replica_order): other replicas serve
 * the reads, the suspect one is still tried when nothing else is left.
 * A node's disk-tier read server that gave up (tier_read.c) is remembered
 * the same way, by its segment name. Puts name them to the master as an
 * exclusion list (cr__sc_suspect_names; ops.c put_start and RESERVE).
 * Bounded (CR__SC_SUSPECT_MAX entries, the oldest is replaced); lock-free
 * when nothing is suspect (one atomic load per get). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "store/client/client.h"

#define COMP "store"

static int is_node_failure(int err)
{
    return err == -ETIMEDOUT || err == -EHOSTUNREACH || err == -ECONNREFUSED ||
           err == -ECONNRESET || err == -EPIPE;
}

void cr__sc_suspect_mark(cr_store_t *s, cr_xfer_segment_t h, int err)
{
    if (!is_node_failure(err))
        return;
    char name[CR_XFER_NAME_MAX] = "";
    pthread_mutex_lock(&s->seg_mu);
    for (size_t i = 0; i < s->n_segs; i++)
        if (s->segs[i].handle == h) {
            memcpy(name, s->segs[i].name, sizeof name);
            break;
        }
    pthread_mutex_unlock(&s->seg_mu);
    if (name[0])
        cr__sc_suspect_mark_name(s, name, err);
}

void cr__sc_suspect_mark_name(cr_store_t *s, const char *segment, int err)
{
    if (!is_node_failure(err) || !segment[0])
        return;
    char name[CR_XFER_NAME_MAX];
    snprintf(name, sizeof name, "%s", segment);
    uint64_t now = cr__now_ms(), until = now + CR__SC_SUSPECT_MS;
    pthread_mutex_lock(&s->sus_mu);
    size_t slot = 0;
    for (size_t i = 0; i < CR__SC_SUSPECT_MAX; i++) {
        if (!strcmp(s->suspects[i].name, name)) {
            slot = i;
            break;
        }
        if (s->suspects[i].until_ms < s->suspects[slot].until_ms)
            slot = i; /* expired or oldest */
    }
    int fresh = strcmp(s->suspects[slot].name, name) || s->suspects[slot].until_ms <= now;
    memcpy(s->suspects[slot].name, name, sizeof name);
    s->suspects[slot].until_ms = until;
    atomic_store(&s->sus_until_ms, until); /* the latest expiry: nothing suspect after it */
    pthread_mutex_unlock(&s->sus_mu);
    if (fresh)
        CR_LOG_WARN(COMP, "segment %s failed a transfer (%s): its replicas are read last for %d ms",
                    name, cr_strerror(err), CR__SC_SUSPECT_MS);
}

int cr__sc_any_suspect(cr_store_t *s)
{
    return atomic_load_explicit(&s->sus_until_ms, memory_order_relaxed) > cr__now_ms();
}

int cr__sc_suspect(cr_store_t *s, const char *segment)
{
    uint64_t now = cr__now_ms();
    if (atomic_load_explicit(&s->sus_until_ms, memory_order_relaxed) <= now)
        return 0;
    int hit = 0;
    pthread_mutex_lock(&s->sus_mu);
    for (size_t i = 0; i < CR__SC_SUSPECT_MAX && !hit; i++)
        hit = s->suspects[i].until_ms > now && !strcmp(s->suspects[i].name, segment);
    pthread_mutex_unlock(&s->sus_mu);
    return hit;
}

uint32_t cr__sc_suspect_names(cr_store_t *s, cr__rpc_msg_t *m, const char ***names)
{
    _Static_assert(CR__SC_SUSPECT_MAX <= CR__RPC_EXCLUDE_MAX, "every suspect fits a PutStart");
    if (!cr__sc_any_suspect(s))
        return 0;
    const char **v = cr__rpc_msg_alloc(m, CR__SC_SUSPECT_MAX * sizeof *v);
    if (!v)
        return 0;
    uint32_t n = 0;
    uint64_t now = cr__now_ms();
    pthread_mutex_lock(&s->sus_mu);
    for (size_t i = 0; i < CR__SC_SUSPECT_MAX; i++)
        if (s->suspects[i].until_ms > now &&
            (v[n] = cr__rpc_msg_strdup(m, s->suspects[i].name, strlen(s->suspects[i].name))))
            n++;
    pthread_mutex_unlock(&s->sus_mu);
    *names = v;
    return n;
}
