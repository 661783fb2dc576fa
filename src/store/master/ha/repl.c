/* Master replication (repl.h). */
#include "store/master/ha/repl.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "store/master/ha/elect.h"
#include "store/rpc/client.h"

#define COMP "ha-repl"
#define CHUNK_MAX (16u << 20)
#define FLAG_SNAP 0x2u     /* a snapshot chunk */
#define FLAG_SNAP_END 0x4u /* its last chunk: applied = count afterwards */
#define MAX_FOLLOWERS 16
/* A record nobody waits for yet (a PutStart carved from a known window,
 * window.c) is pushed at the latest this long after it was produced, or at
 * once when a wait starts: so it rides with the PutEnd that follows instead
 * of costing each standby a round trip of its own (store-ha.md, "Where a
 * put's time goes"). */
#define LAZY_PUSH_MS 2

typedef struct follower {
    struct follower *next;
    char addr[CR__HA_ADDR_MAX];
    char id[CR__HA_ID_MAX];
    cr__ha_repl_t *r;
    pthread_t th;
    int stop;      /* guarded by r->mu */
    int in_sync;   /* guarded by r->mu: waited for */
    int pinned;    /* guarded by r->mu: resyncing, the log keeps from acked on */
    int listed;    /* guarded by r->mu: in the in-sync set published in etcd */
    int want;      /* guarded by r->mu: in the set being published */
    uint64_t acked; /* guarded by r->mu */
    uint64_t sync_mark; /* guarded by r->mu: seq when it became in sync; listed
                           once acked passes it (it then has every acked change) */
} follower_t;

struct cr__ha_repl {
    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv;  /* acks, stop: wakes the waiting handlers */
    pthread_cond_t pcv; /* records wanted by a wait, stop: wakes the pushers (apart, so
                           one standby's ack wakes no other pusher) */
    pthread_cond_t mcv; /* the in-sync set may have to change: wakes the manager */
    char self[CR__HA_ADDR_MAX];
    char self_id[CR__HA_ID_MAX];
    const struct cr__auth *auth; /* immutable after set_auth: key for standby connections */
    const struct cr__tls *tls;   /* immutable after set_tls */
    cr__ha_journal_t *local;
    int sync_timeout_ms;
    /* leader */
    int leading, stop_mgr, mgr_started;
    int republish; /* the in-sync key holds garbage: write the set again */
    uint32_t epoch;
    cr__master_t *m;
    cr__meta_t *etcd;
    char cid[80];
    pthread_t mgr;
    cr__ha_buf_t log;   /* frames of records log_base..seq */
    uint64_t *offs;     /* offs[i]: start of record log_base+i in log */
    size_t n_offs, cap_offs;
    uint64_t log_base, seq;
    uint64_t want_seq;  /* a wait needs the standbys to have every record below this */
    uint64_t lazy_since_ms; /* oldest record not yet wanted by a wait (0: none) */
    follower_t *fl;
    /* standby */
    cr__ha_shadow_t *sh;
    uint64_t applied;
    uint32_t floor;
    int snap_first; /* the next snapshot chunk rewrites the local journal */
    cr__ha_rec_t *rec; /* decode scratch of cr__ha_repl_apply (~57 KiB: once, not per append) */
    int need_reset; /* the state came from elsewhere (journal, nothing): the next
                       stream must start with a snapshot (RESET), never append
                       a leader's log to it */
    cr__ha_repl_stats_t st;
};

static void wait_cv_ms(cr__ha_repl_t *r, pthread_cond_t *cv, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)ms * 1000000ull;
    ts.tv_sec += (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    pthread_cond_timedwait(cv, &r->mu, &ts);
}

/* a pusher waits for work (pcv) */
static void wait_ms(cr__ha_repl_t *r, int ms) { wait_cv_ms(r, &r->pcv, ms); }

static void wake_all(cr__ha_repl_t *r)
{
    pthread_cond_broadcast(&r->cv);
    pthread_cond_broadcast(&r->pcv);
}

/* f stops being waited for; the manager unlists it (caller holds mu) */
static void drop_locked(cr__ha_repl_t *r, follower_t *f)
{
    f->in_sync = 0;
    f->pinned = 0;
    pthread_cond_signal(&r->mcv);
}

int cr__ha_repl_create(const char *self_rpc, const char *self_id, cr__ha_journal_t *local,
                       int sync_timeout_ms, cr__ha_repl_t **out)
{
    cr__ha_repl_t *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    if (cr__ha_shadow_create(&r->sh)) {
        free(r);
        return -ENOMEM;
    }
    snprintf(r->self, sizeof r->self, "%s", self_rpc);
    snprintf(r->self_id, sizeof r->self_id, "%s", self_id);
    r->local = local;
    r->sync_timeout_ms = sync_timeout_ms > 0 ? sync_timeout_ms : 1000;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_cond_init(&r->pcv, &ca);
    pthread_cond_init(&r->mcv, &ca);
    pthread_condattr_destroy(&ca);
    r->snap_first = 1;
    r->need_reset = 1;
    *out = r;
    return 0;
}

void cr__ha_repl_destroy(cr__ha_repl_t *r)
{
    if (!r)
        return;
    cr__ha_repl_unlead(r);
    cr__ha_shadow_destroy(r->sh);
    free(r->rec);
    cr__ha_buf_free(&r->log);
    free(r->offs);
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->pcv);
    pthread_cond_destroy(&r->mcv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* ---- leader: the log ------------------------------------------------------------ */

/* Drops records every standby has (or that none needs); caller holds mu. */
static void trim_locked(cr__ha_repl_t *r)
{
    uint64_t keep = r->seq;
    for (follower_t *f = r->fl; f; f = f->next)
        if ((f->in_sync || f->pinned) && f->acked < keep)
            keep = f->acked;
    if (r->log.len > CR__HA_LOG_MAX) { /* too far behind: resync them */
        keep = r->seq;
        for (follower_t *f = r->fl; f; f = f->next)
            if (f->acked < keep && (f->in_sync || f->pinned)) {
                drop_locked(r, f);
                CR_LOG_WARN(COMP, "standby %s fell %" PRIu64 " records behind: resyncing", f->addr,
                            r->seq - f->acked);
            }
    }
    if (keep <= r->log_base)
        return;
    uint64_t drop = keep - r->log_base;
    uint64_t bytes = drop < r->n_offs ? r->offs[drop] : r->log.len;
    memmove(r->log.p, r->log.p + bytes, r->log.len - bytes);
    r->log.len -= bytes;
    size_t left = r->n_offs - (size_t)drop;
    for (size_t i = 0; i < left; i++)
        r->offs[i] = r->offs[i + drop] - bytes;
    r->n_offs = left;
    r->log_base = keep;
}

void cr__ha_repl_record(void *user, const uint8_t *frame, size_t len)
{
    cr__ha_repl_t *r = user;
    if (r->local)
        cr__ha_journal_record(r->local, frame, len);
    pthread_mutex_lock(&r->mu);
    if (r->n_offs == r->cap_offs) {
        size_t nc = r->cap_offs ? r->cap_offs * 2 : 4096;
        uint64_t *n = realloc(r->offs, nc * sizeof *n);
        if (!n) { /* cannot keep it: every standby must resync */
            for (follower_t *f = r->fl; f; f = f->next)
                drop_locked(r, f);
            r->seq++;
            pthread_mutex_unlock(&r->mu);
            return;
        }
        r->offs = n;
        r->cap_offs = nc;
    }
    r->offs[r->n_offs++] = r->log.len;
    cr__ha_buf_append(&r->log, frame, len);
    r->seq++;
    if (r->fl == NULL || r->log.len > (1u << 20))
        trim_locked(r);
    /* no wakeup: a wait (cr__ha_repl_wait) wakes the pushers, and a pusher
     * idle with records to send pushes them after LAZY_PUSH_MS anyway */
    if (!r->lazy_since_ms)
        r->lazy_since_ms = cr__now_ms();
    pthread_mutex_unlock(&r->mu);
}

/* ---- leader: one pusher per standby ---------------------------------------------- */

typedef struct snap_at {
    cr__ha_repl_t *r;
    follower_t *f;
    uint64_t seq;
} snap_at_t;

static void at_snap(void *u)
{
    snap_at_t *a = u;
    pthread_mutex_lock(&a->r->mu);
    a->seq = a->r->seq;
    a->f->acked = a->seq; /* the log keeps what follows the snapshot */
    a->f->pinned = 1;
    pthread_mutex_unlock(&a->r->mu);
}

/* One REPL_APPEND. Returns 0 and *acked, -ESTALE (the standby knows a newer
 * epoch: this leader is deposed) or -EIO. */
static int send_append(cr__ha_repl_t *r, cr__rpc_client_t *c, uint32_t flags, uint64_t count,
                       const uint8_t *blob, size_t len, uint64_t *acked)
{
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = CR__RPC_REPL_APPEND;
    req.flags = flags;
    req.count = count;
    req.blob = blob;
    req.blob_len = (uint32_t)len;
    req.epoch = r->epoch;
    int rc = cr__rpc_client_call(c, &req, &rep);
    if (rc) {
        CR_LOG_INFO(COMP, "append to a standby: rpc %d", rc);
        return -EIO;
    }
    if (rep.status)
        CR_LOG_INFO(COMP, "append to a standby refused: %d (its epoch %u)", rep.status,
                    rep.epoch);
    /* deposed only if the standby names a newer epoch: a master that is not
     * a standby right now (leading, stopping, starting) answers "busy" */
    rc = rep.status == 0 ? 0
         : rep.status == CR_E_UNAVAILABLE_IN_CURRENT_MODE && rep.epoch > r->epoch ? -ESTALE
                                                                                   : -EIO;
    if (!rc)
        *acked = rep.count;
    cr__rpc_msg_free(&rep);
    return rc;
}

static int send_snapshot(cr__ha_repl_t *r, follower_t *f, cr__rpc_client_t *c)
{
    cr__ha_buf_t snap = {0};
    snap_at_t at = {.r = r, .f = f};
    int rc = cr__master_dump(r->m, &snap, at_snap, &at);
    if (rc) {
        cr__ha_buf_free(&snap);
        return -EIO;
    }
    /* chunks end on record boundaries */
    size_t off = 0;
    uint32_t flags = CR__RPC_F_REPL_RESET | FLAG_SNAP;
    uint64_t acked = 0;
    cr__ha_rec_t *rec = malloc(sizeof *rec); /* ~57 KiB: not in TLS nor on the stack */
    if (!rec) {
        cr__ha_buf_free(&snap);
        return -EIO;
    }
    do {
        size_t end = off;
        while (end < snap.len) {
            long n = cr__ha_rec_get(snap.p + end, snap.len - end, rec);
            if (n <= 0 || (end > off && end - off + (size_t)n > CHUNK_MAX))
                break;
            end += (size_t)n;
        }
        if (end >= snap.len)
            flags |= FLAG_SNAP_END;
        rc = send_append(r, c, flags, at.seq, snap.p + off, end - off, &acked);
        flags = FLAG_SNAP;
        off = end;
    } while (!rc && off < snap.len);
    free(rec);
    pthread_mutex_lock(&r->mu);
    r->st.snapshots_sent += !rc;
    r->st.bytes_sent += snap.len;
    if (!rc && acked == at.seq) {
        f->in_sync = 1;
        f->pinned = 0;
        f->sync_mark = r->seq; /* changes up to here were acknowledged without it */
        pthread_cond_signal(&r->mcv);
        CR_LOG_INFO(COMP, "standby %s in sync (snapshot of %zu bytes at seq %" PRIu64 ")",
                    f->addr, snap.len, at.seq);
    } else if (!rc) {
        rc = -EIO;
    }
    pthread_mutex_unlock(&r->mu);
    cr__ha_buf_free(&snap);
    return rc;
}

static void *pusher_main(void *arg)
{
    follower_t *f = arg;
    cr__ha_repl_t *r = f->r;
    cr__rpc_client_t *c = NULL;
    cr__rpc_client_create(f->addr, 1000, 5000, &c);
    if (c) {
        cr__rpc_client_set_auth(c, r->auth);
        cr__rpc_client_set_tls(c, r->tls);
    }
    int need_snap = 1, failing = 0;
    uint8_t *buf = NULL;
    pthread_mutex_lock(&r->mu);
    while (!f->stop && c) {
        if (need_snap) {
            /* a snapshot rewrites the standby's journal: never while its id is
             * still listed (killed mid-snapshot it would restart listed on a
             * partial index) — the manager unlists it first */
            int listed = 0;
            for (follower_t *o = r->fl; o; o = o->next)
                listed |= o->listed && !strcmp(o->id, f->id);
            if (listed) {
                wait_ms(r, 100);
                continue;
            }
            pthread_mutex_unlock(&r->mu);
            int rc = send_snapshot(r, f, c);
            pthread_mutex_lock(&r->mu);
            if (rc == -ESTALE)
                break;
            if (rc) {
                if (!failing++)
                    CR_LOG_WARN(COMP, "snapshot to standby %s failed (%d); retrying", f->addr, rc);
                drop_locked(r, f);
                wait_ms(r, 200);
                continue;
            }
            failing = 0;
            need_snap = 0;
        }
        if (!f->in_sync) { /* dropped by a timeout or a trim */
            need_snap = 1;
            continue;
        }
        if (f->acked >= r->seq) {
            wait_ms(r, 100);
            continue;
        }
        if (f->acked >= r->want_seq && !f->stop) { /* nobody waits for these yet */
            uint64_t now = cr__now_ms(), due = r->lazy_since_ms + LAZY_PUSH_MS;
            if (r->lazy_since_ms && now < due) {
                wait_ms(r, (int)(due - now));
                continue;
            }
        }
        if (f->acked < r->log_base) {
            need_snap = 1;
            continue;
        }
        /* the records f lacks, at most one chunk */
        size_t i0 = (size_t)(f->acked - r->log_base), i1 = i0;
        while (i1 < r->n_offs && (i1 == i0 || r->offs[i1] - r->offs[i0] < CHUNK_MAX))
            i1++;
        size_t from = r->offs[i0], to = i1 < r->n_offs ? r->offs[i1] : r->log.len;
        uint64_t first = f->acked;
        uint8_t *nb = realloc(buf, to - from);
        if (!nb) {
            wait_ms(r, 100);
            continue;
        }
        buf = nb;
        memcpy(buf, r->log.p + from, to - from);
        pthread_mutex_unlock(&r->mu);
        uint64_t acked = 0;
        int rc = send_append(r, c, 0, first, buf, to - from, &acked);
        pthread_mutex_lock(&r->mu);
        if (rc == -ESTALE)
            break;
        if (rc || acked != first + (i1 - i0)) {
            drop_locked(r, f);
            need_snap = 1;
            wait_ms(r, 100);
            continue;
        }
        f->acked = acked;
        if (acked >= r->seq)
            r->lazy_since_ms = 0; /* (another standby may still lack them: it pushes
                                     at once, its wait above sees lazy_since_ms 0) */
        if (f->in_sync && !f->listed && acked >= f->sync_mark)
            pthread_cond_signal(&r->mcv); /* caught up: may be listed */
        r->st.records_sent += i1 - i0;
        r->st.appends_sent++;
        r->st.bytes_sent += to - from;
        pthread_cond_broadcast(&r->cv);
    }
    if (!f->stop) {
        CR_LOG_WARN(COMP, "standby %s has seen a newer epoch than %u: this leader is deposed",
                    f->addr, r->epoch);
        r->st.deposed = 1; /* the role manager sees it through cr__ha_repl_stats */
    }
    drop_locked(r, f);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    free(buf);
    cr__rpc_client_destroy(c);
    return NULL;
}

/* Publishes the in-sync set in etcd when it must change (caller holds mu;
 * released during the etcd call). A standby is listed once it is in sync
 * and has caught up past its sync mark; it is unlisted when it drops out,
 * and until then every acknowledgement waits (cr__ha_repl_wait): a listed
 * master always holds every acknowledged change, so any listed master may
 * win the next election. Returns 0 or the publish error. */
static int publish_locked(cr__ha_repl_t *r)
{
    int change = 0, n = 1;
    for (follower_t *f = r->fl; f; f = f->next) {
        f->want = f->in_sync && !f->stop && f->acked >= f->sync_mark;
        change |= f->want != f->listed;
        n += f->want;
    }
    if (!change && !r->republish)
        return 0;
    const char **ids = calloc((size_t)n, sizeof *ids);
    if (!ids)
        return -ENOMEM;
    int k = 0;
    ids[k++] = r->self_id;
    for (follower_t *f = r->fl; f; f = f->next)
        if (f->want)
            ids[k++] = f->id; /* followers are freed only by this thread */
    uint32_t epoch = r->epoch;
    pthread_mutex_unlock(&r->mu);
    int rc = cr__ha_insync_publish(r->etcd, r->cid, epoch, ids, k);
    pthread_mutex_lock(&r->mu);
    free(ids);
    if (rc == 0) {
        r->st.insync_published++;
        r->republish = 0;
        for (follower_t *f = r->fl; f; f = f->next) {
            if (f->want != f->listed)
                CR_LOG_INFO(COMP, "standby %s %s the in-sync set", f->addr,
                            f->want ? "joins" : "leaves");
            f->listed = f->want;
        }
        wake_all(r); /* waits on an unlisting may end; a pusher may snapshot */
    } else if (rc == -ESTALE) {
        CR_LOG_WARN(COMP, "in-sync set not written: epoch %u is no longer the newest", epoch);
        r->st.deposed = 1;
    } else {
        CR_LOG_WARN(COMP, "in-sync set not written (%d); retrying", rc);
    }
    return rc;
}

static void *mgr_main(void *arg)
{
    cr__ha_repl_t *r = arg;
    char (*addrs)[CR__HA_ADDR_MAX] = calloc(MAX_FOLLOWERS, sizeof *addrs);
    char (*ids)[CR__HA_ID_MAX] = calloc(MAX_FOLLOWERS, sizeof *ids);
    uint64_t next_poll = 0;
    pthread_mutex_lock(&r->mu);
    while (!r->stop_mgr && addrs && ids) {
        if (cr__now_ms() >= next_poll) {
            pthread_mutex_unlock(&r->mu);
            int n = cr__ha_members(r->etcd, r->cid, addrs, ids, MAX_FOLLOWERS);
            /* garbage written over the in-sync set (by hand, a bug): while it
             * stands no standby could take over; this leader knows the set */
            int bad = cr__ha_insync_check(r->etcd, r->cid) == -EBADMSG;
            pthread_mutex_lock(&r->mu);
            if (bad && !r->republish) {
                CR_LOG_ERROR(COMP, "the in-sync set key holds garbage: writing the set again");
                r->republish = 1;
                r->st.insync_repaired++;
            }
            next_poll = cr__now_ms() + 500;
            /* a standby whose member key is gone (stopped, killed, restarted
             * under a new address) loses its pusher: the list stays bounded.
             * A listed one stays until the set without it is published. */
            follower_t *gone = NULL;
            for (follower_t **pp = &r->fl; n >= 0 && *pp;) {
                follower_t *f = *pp;
                int i = 0;
                while (i < n && (strcmp(f->addr, addrs[i]) || strcmp(f->id, ids[i])))
                    i++;
                if (i < n || f->listed) {
                    if (i >= n && !f->stop) {
                        f->stop = 1;
                        drop_locked(r, f);
                        wake_all(r);
                    }
                    pp = &f->next;
                    continue;
                }
                *pp = f->next;
                f->stop = 1;
                drop_locked(r, f);
                f->next = gone;
                gone = f;
                CR_LOG_INFO(COMP, "standby %s left: no longer streaming to it", f->addr);
            }
            if (gone) {
                wake_all(r);
                pthread_mutex_unlock(&r->mu);
                while (gone) {
                    follower_t *nx = gone->next;
                    pthread_join(gone->th, NULL);
                    free(gone);
                    gone = nx;
                }
                pthread_mutex_lock(&r->mu);
            }
            for (int i = 0; i < n && !r->stop_mgr; i++) {
                if (!strcmp(addrs[i], r->self) || !strcmp(ids[i], r->self_id))
                    continue;
                follower_t *f = r->fl;
                while (f && (strcmp(f->addr, addrs[i]) || strcmp(f->id, ids[i])))
                    f = f->next;
                if (f)
                    continue;
                f = calloc(1, sizeof *f);
                if (!f)
                    break;
                memcpy(f->addr, addrs[i], sizeof f->addr);
                f->addr[sizeof f->addr - 1] = 0;
                memcpy(f->id, ids[i], sizeof f->id);
                f->id[sizeof f->id - 1] = 0;
                f->r = r;
                if (pthread_create(&f->th, NULL, pusher_main, f)) {
                    free(f);
                    break;
                }
                f->next = r->fl;
                r->fl = f;
                CR_LOG_INFO(COMP, "standby %s found: streaming to it", f->addr);
            }
        }
        int rc = r->stop_mgr ? 0 : publish_locked(r);
        if (!r->stop_mgr) {
            uint64_t now = cr__now_ms();
            int ms = rc ? 100 : next_poll > now ? (int)(next_poll - now) : 1;
            wait_cv_ms(r, &r->mcv, ms);
        }
    }
    pthread_mutex_unlock(&r->mu);
    free(addrs);
    free(ids);
    return NULL;
}

int cr__ha_repl_lead(cr__ha_repl_t *r, cr__master_t *m, uint32_t epoch, cr__meta_t *etcd,
                     const char *cluster_id)
{
    pthread_mutex_lock(&r->mu);
    r->leading = 1;
    r->epoch = epoch;
    r->floor = epoch;
    r->m = m;
    r->etcd = etcd;
    snprintf(r->cid, sizeof r->cid, "%s", cluster_id);
    r->log.len = 0;
    r->n_offs = 0;
    r->log_base = r->seq = 0;
    r->want_seq = 0;
    r->lazy_since_ms = 0;
    r->stop_mgr = 0;
    int rc = pthread_create(&r->mgr, NULL, mgr_main, r) ? -ENOMEM : 0;
    r->mgr_started = rc == 0;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void cr__ha_repl_unlead(cr__ha_repl_t *r)
{
    pthread_mutex_lock(&r->mu);
    int started = r->mgr_started;
    r->stop_mgr = 1;
    r->mgr_started = 0;
    for (follower_t *f = r->fl; f; f = f->next)
        f->stop = 1;
    wake_all(r);
    pthread_cond_broadcast(&r->mcv);
    follower_t *fl = r->fl;
    r->fl = NULL;
    pthread_mutex_unlock(&r->mu);
    if (started)
        pthread_join(r->mgr, NULL);
    while (fl) {
        follower_t *n = fl->next;
        pthread_join(fl->th, NULL);
        free(fl);
        fl = n;
    }
    pthread_mutex_lock(&r->mu);
    r->leading = 0;
    r->st.deposed = 0;
    r->log.len = 0;
    r->n_offs = 0;
    r->log_base = r->seq = 0;
    r->want_seq = 0;
    r->lazy_since_ms = 0;
    pthread_mutex_unlock(&r->mu);
}

uint64_t cr__ha_repl_mark(cr__ha_repl_t *r)
{
    pthread_mutex_lock(&r->mu);
    uint64_t s = r->seq;
    pthread_mutex_unlock(&r->mu);
    return s;
}

int cr__ha_repl_wait(cr__ha_repl_t *r, uint64_t mark)
{
    pthread_mutex_lock(&r->mu);
    uint64_t target = r->seq;
    pthread_mutex_unlock(&r->mu);
    if (target == mark)
        return 0; /* nothing changed while the request ran: nothing to wait for */
    if (r->local && cr__ha_journal_sync(r->local))
        return -EIO;
    uint64_t t0 = cr__now_ns();
    pthread_mutex_lock(&r->mu);
    if (r->want_seq < target) {
        r->want_seq = target;
        pthread_cond_broadcast(&r->pcv); /* the pushers send now */
    }
    uint64_t deadline = cr__now_ms() + (uint64_t)r->sync_timeout_ms;
    /* a dropped standby that is still listed must be unlisted first (one
     * etcd write by the manager): at most another sync timeout */
    uint64_t hard = deadline + (uint64_t)r->sync_timeout_ms;
    int waited = 0, rc = 0;
    for (;;) {
        int lag = 0;
        for (follower_t *f = r->fl; f; f = f->next)
            lag |= (f->in_sync && f->acked < target) || (f->listed && !f->in_sync);
        if (!lag)
            break;
        waited = 1;
        uint64_t now = cr__now_ms();
        if (now >= hard) {
            rc = -ETIMEDOUT; /* not acknowledged: a listed standby may lack it */
            break;
        }
        if (now >= deadline) {
            for (follower_t *f = r->fl; f; f = f->next)
                if (f->in_sync && f->acked < target) {
                    drop_locked(r, f);
                    r->st.sync_timeouts++;
                    CR_LOG_WARN(COMP, "standby %s did not acknowledge within %d ms: out of sync",
                                f->addr, r->sync_timeout_ms);
                }
        }
        wait_cv_ms(r, &r->cv, (int)((now < deadline ? deadline : hard) - now));
    }
    if (waited) {
        r->st.waits++;
        r->st.wait_us_total += (cr__now_ns() - t0) / 1000;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* ---- standby ------------------------------------------------------------------------ */

int cr__ha_repl_apply(cr__ha_repl_t *r, uint32_t epoch, uint32_t flags, uint64_t first_seq,
                      const uint8_t *blob, size_t len, uint64_t *applied)
{
    pthread_mutex_lock(&r->mu);
    if (!r->rec && !(r->rec = malloc(sizeof *r->rec))) { /* not in TLS nor on the stack */
        pthread_mutex_unlock(&r->mu);
        return -ENOMEM;
    }
    cr__ha_rec_t *rec = r->rec; /* guarded by mu, like the whole apply */
    int rc = 0;
    if (epoch < r->floor || r->leading) {
        r->st.appends_refused++;
        rc = r->leading && epoch >= r->floor ? -EBUSY : -ESTALE;
        goto out;
    }
    r->floor = epoch;
    if (flags & CR__RPC_F_REPL_RESET) {
        cr__ha_shadow_reset(r->sh);
        r->applied = 0;
        r->st.resets_applied++;
        r->snap_first = 1;
        r->need_reset = 0;
    } else if (r->need_reset || (!(flags & FLAG_SNAP) && first_seq != r->applied)) {
        rc = -EPROTO;
        goto out;
    }
    size_t off = 0;
    uint64_t n = 0;
    while (off < len) {
        long k = cr__ha_rec_get(blob + off, len - off, rec);
        if (k <= 0) {
            rc = -EPROTO;
            break;
        }
        if ((rc = cr__ha_shadow_apply(r->sh, blob + off, (size_t)k, rec)))
            break;
        off += (size_t)k;
        n++;
    }
    if (rc) {
        r->applied = UINT64_MAX; /* unusable until the next snapshot */
        goto out;
    }
    if (r->local) {
        if ((flags & FLAG_SNAP) && r->snap_first) {
            rc = cr__ha_journal_rewrite(r->local, blob, len);
            r->snap_first = 0;
        } else {
            cr__ha_journal_record(r->local, blob, len);
            rc = cr__ha_journal_sync(r->local);
        }
        if (rc) {
            rc = -EIO;
            goto out;
        }
    }
    if (flags & FLAG_SNAP)
        r->applied = (flags & FLAG_SNAP_END) ? first_seq : UINT64_MAX; /* whole at the end */
    else
        r->applied += n;
    r->st.seq = r->applied;
    *applied = r->applied;
out:
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void cr__ha_repl_adopt_shadow(cr__ha_repl_t *r, cr__ha_shadow_t *sh)
{
    pthread_mutex_lock(&r->mu);
    cr__ha_shadow_destroy(r->sh);
    r->sh = sh;
    r->applied = 0;     /* a usable state... */
    r->need_reset = 1;  /* ...that no leader's log is appended to */
    pthread_mutex_unlock(&r->mu);
}

cr__ha_shadow_t *cr__ha_repl_shadow(cr__ha_repl_t *r) { return r->sh; }

uint32_t cr__ha_repl_floor(cr__ha_repl_t *r)
{
    pthread_mutex_lock(&r->mu);
    uint32_t f = r->floor;
    pthread_mutex_unlock(&r->mu);
    return f;
}

void cr__ha_repl_fence(cr__ha_repl_t *r, uint32_t epoch)
{
    pthread_mutex_lock(&r->mu);
    if (epoch > r->floor)
        r->floor = epoch;
    pthread_mutex_unlock(&r->mu);
}

void cr__ha_repl_reset(cr__ha_repl_t *r)
{
    pthread_mutex_lock(&r->mu);
    cr__ha_shadow_reset(r->sh);
    r->applied = UINT64_MAX;
    r->need_reset = 1;
    pthread_mutex_unlock(&r->mu);
}

void cr__ha_repl_stats(cr__ha_repl_t *r, cr__ha_repl_stats_t *st)
{
    pthread_mutex_lock(&r->mu);
    *st = r->st;
    st->usable = r->applied != UINT64_MAX;
    if (!r->leading)
        st->seq = r->applied == UINT64_MAX ? 0 : r->applied;
    if (r->leading || r->mgr_started) {
        st->seq = r->seq;
        for (follower_t *f = r->fl; f; f = f->next) {
            st->followers++;
            if (f->in_sync && f->listed) {
                st->in_sync++;
                if (r->seq - f->acked > st->max_lag_records)
                    st->max_lag_records = r->seq - f->acked;
            }
        }
    }
    pthread_mutex_unlock(&r->mu);
}

void cr__ha_repl_set_tls(cr__ha_repl_t *r, const struct cr__tls *tls)
{
    if (r)
        r->tls = tls;
}

void cr__ha_repl_set_auth(cr__ha_repl_t *r, const struct cr__auth *a)
{
    if (r)
        r->auth = a;
}
