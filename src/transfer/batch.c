/* Batches: allocation, request validation, hand-off to transports,
 * completion accounting, waiting, batch notifications.
 *
 * Completion: every task is finished exactly once through
 * cr__xfer_task_done(). batch->running counts unfinished tasks; all
 * decrements but the last are lock-free, the last one (to zero) happens
 * under batch->lock so that batch_free() (which checks running under the
 * same lock) can never free a batch a completer is still touching. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/status.h"
#include "transfer/capability.h"
#include "transfer/checksum.h"
#include "transfer/xfer_internal.h"

int cr_xfer_batch_alloc(cr_xfer_engine_t *e, size_t capacity, cr_xfer_batch_t **out)
{
    if (!e || !out || capacity < 1 || capacity > CR_XFER_BATCH_MAX)
        return -EINVAL;
    cr_xfer_batch_t *b = calloc(1, sizeof *b);
    if (!b)
        return -ENOMEM;
    b->tasks = calloc(capacity, sizeof *b->tasks);
    if (!b->tasks) {
        free(b);
        return -ENOMEM;
    }
    b->engine = e;
    b->capacity = capacity;
    pthread_mutex_init(&b->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&e->batch_list_lock);
    b->next = e->batches;
    if (e->batches)
        e->batches->prev = b;
    e->batches = b;
    pthread_mutex_unlock(&e->batch_list_lock);
    *out = b;
    return 0;
}

static void batch_release(cr_xfer_batch_t *b)
{
    while (b->notifies) {
        cr__xfer_bnotify_t *n = b->notifies;
        b->notifies = n->next;
        free(n->counted);
        free(n);
    }
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->done_cv);
    free(b->tasks);
    free(b);
}

int cr_xfer_batch_free(cr_xfer_batch_t *b)
{
    if (!b)
        return -EINVAL;
    pthread_mutex_lock(&b->lock);
    int busy = atomic_load(&b->running) > 0 || b->waiters > 0;
    pthread_mutex_unlock(&b->lock);
    if (busy)
        return -EBUSY;
    cr_xfer_engine_t *e = b->engine;
    pthread_mutex_lock(&e->batch_list_lock);
    if (b->prev)
        b->prev->next = b->next;
    else
        e->batches = b->next;
    if (b->next)
        b->next->prev = b->prev;
    pthread_mutex_unlock(&e->batch_list_lock);
    batch_release(b);
    return 0;
}

void cr__xfer_batches_fini(cr_xfer_engine_t *e)
{
    pthread_mutex_lock(&e->batch_list_lock);
    cr_xfer_batch_t *b = e->batches;
    e->batches = NULL;
    pthread_mutex_unlock(&e->batch_list_lock);
    while (b) {
        cr_xfer_batch_t *n = b->next;
        /* a thread may still sit in cr_xfer_batch_wait(): the transports
         * finished every task, so it is about to leave; wait for it */
        pthread_mutex_lock(&b->lock);
        while (b->waiters > 0 && atomic_load(&b->running) == 0)
            pthread_cond_wait(&b->done_cv, &b->lock);
        pthread_mutex_unlock(&b->lock);
        if (atomic_load(&b->running) > 0)
            CR_LOG_ERROR("xfer", "batch %p still has %zu running requests at destroy", (void *)b,
                         atomic_load(&b->running));
        else
            batch_release(b);
        b = n;
    }
}

static int is_conn_error(int err)
{
    /* err went through cr__status_from_errno: ENETUNREACH and ECONNABORTED
     * arrive as -EHOSTUNREACH and -ECONNRESET */
    return err == -ECONNRESET || err == -ECONNREFUSED || err == -EHOSTUNREACH ||
           err == -EPIPE || err == -ETIMEDOUT;
}

/* batch notifications: the task finished; count it down in every record
 * that counted it (see cr_xfer_batch_notify). Records that reach zero are
 * unlinked under the lock and sent after it, however many complete at
 * once. */
static void notify_task_finished(cr_xfer_batch_t *b, cr__xfer_task_t *t, int err)
{
    cr_xfer_engine_t *e = b->engine;
    cr__xfer_bnotify_t *due = NULL;
    uint32_t idx = t->index;
    pthread_mutex_lock(&b->lock);
    cr__xfer_bnotify_t **pp = &b->notifies;
    while (*pp) {
        cr__xfer_bnotify_t *n = *pp;
        if (idx < n->upto && (n->counted[idx / 8] & (1u << (idx % 8)))) {
            n->counted[idx / 8] &= (uint8_t)~(1u << (idx % 8));
            if (err)
                n->failed = 1;
            if (--n->remaining == 0) {
                *pp = n->next;
                n->next = due;
                due = n;
                continue;
            }
        }
        pp = &n->next;
    }
    pthread_mutex_unlock(&b->lock);
    while (due) {
        cr__xfer_bnotify_t *n = due;
        due = n->next;
        cr__xfer_outmsg_t *m = n->failed ? NULL : malloc(sizeof *m + n->len);
        if (n->failed) {
            CR_LOG_INFO("xfer", "batch notification to %s dropped: a write failed",
                        n->peer->name);
        } else if (!m) {
            CR_LOG_WARN("xfer", "batch notification to %s dropped: out of memory",
                        n->peer->name);
        } else {
            m->peer = n->peer;
            m->len = n->len;
            memcpy(m->msg, n->msg, n->len);
            cr__xfer_notify_enqueue(e, m);
        }
        free(n->counted);
        free(n);
    }
}

void cr__xfer_task_progress(cr__xfer_task_t *t, uint64_t bytes)
{
    atomic_fetch_add_explicit(&t->bytes, bytes, memory_order_relaxed);
}

void cr__xfer_task_crc_add(cr__xfer_task_t *t, uint64_t off, uint64_t len, uint32_t raw)
{
    if (!t->want_crc || !len)
        return;
    /* raw registers from 0 are linear in the bytes: each piece's, carried
     * over the bytes after it, XORs into the whole buffer's (crc32c.h) */
    uint32_t r = cr__crc32c_shift(raw, t->length - off - len);
    atomic_fetch_xor_explicit(&t->crc_acc, r, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->crc_bytes, len, memory_order_relaxed);
}

void cr__xfer_task_crc_range(cr__xfer_task_t *t, uint64_t off, uint64_t len)
{
    if (t->want_crc && len)
        cr__xfer_task_crc_add(t, off, len, cr__crc32c_raw(0, t->local + off, (size_t)len));
}

/* The crc32c of a task that completed: from the pieces its transport
 * reported when they cover it exactly, else one pass over the buffer. */
static void task_crc_finish(cr__xfer_task_t *t)
{
    if (atomic_load(&t->crc_bytes) == t->length)
        t->crc = ~(atomic_load(&t->crc_acc) ^ cr__crc32c_shift(0xFFFFFFFFu, t->length));
    else
        t->crc = cr__crc32c(0, t->local, (size_t)t->length);
    t->crc_valid = 1;
}

static void task_done(cr__xfer_task_t *t, int err, int waited);

void cr__xfer_task_done(cr__xfer_task_t *t, int err) { task_done(t, err, 1); }

/* waited: the task went to its transport (a -ETIMEDOUT then is a stall
 * waited out: cr__xfer_timeouts_waited), else it failed at submit */
static void task_done(cr__xfer_task_t *t, int err, int waited)
{
    cr_xfer_batch_t *b = t->batch;
    err = cr__status_from_errno(err); /* one meaning per number (common.h) */
    if (waited && err == -ETIMEDOUT)
        atomic_fetch_add(&b->engine->timeouts_waited, 1);
    if (err == 0 && t->want_crc)
        task_crc_finish(t); /* before the state: a reader that sees COMPLETED sees it */
    if (err == 0)
        atomic_store_explicit(&t->bytes, t->length, memory_order_relaxed);
    else if (t->peer && is_conn_error(err))
        atomic_store(&t->peer->stale, 1);
    atomic_store(&t->error, err);
    atomic_store(&t->state, err ? CR_XFER_STATE_FAILED : CR_XFER_STATE_COMPLETED);
    if (atomic_load(&b->has_notify) && t->opcode == CR_XFER_WRITE)
        notify_task_finished(b, t, err);
    /* last touch of the batch: see the comment at the top */
    size_t old = atomic_load(&b->running);
    for (;;) {
        if (old > 1) {
            if (atomic_compare_exchange_weak(&b->running, &old, old - 1))
                return;
            continue;
        }
        pthread_mutex_lock(&b->lock);
        if (atomic_fetch_sub(&b->running, 1) == 1)
            pthread_cond_broadcast(&b->done_cv);
        pthread_mutex_unlock(&b->lock);
        return;
    }
}

static void fail_now(cr__xfer_task_t *t, int err)
{
    task_done(t, err, 0);
}

/* A peer whose descriptor one submit refetched, and how that went. */
typedef struct refreshed {
    cr__xfer_peer_t *peer;
    int rc;
} refreshed_t;

/* Whether a failed refresh means the peer itself does not answer: in p2p
 * mode the descriptor comes from the peer's own control server, so a
 * timeout, an unreachable host or a refused connection there is the
 * peer's (frozen, dead, unreachable). With a metadata server the failure is the server's. */
static int refresh_says_down(const cr_xfer_engine_t *e, int rc)
{
    return e->cfg.p2p && (rc == -ETIMEDOUT || rc == -EHOSTUNREACH || rc == -ECONNREFUSED);
}

/* Validates one request into task t. Returns 0 or the request's error. */
static int validate(cr_xfer_engine_t *e, const cr_xfer_request_t *r, cr__xfer_task_t *t,
                    refreshed_t *refreshed, size_t *n_refreshed)
{
    if (r->opcode != CR_XFER_READ && r->opcode != CR_XFER_WRITE)
        return -EINVAL;
    if (r->length == 0 || r->length > CR__XFER_MAX_REQUEST)
        return -EINVAL;
    if (!r->local_addr)
        return -EFAULT;
    pthread_rwlock_rdlock(&e->mem_lock);
    cr__memreg_t *m = cr__xfer_mem_find_locked(e, (uint64_t)(uintptr_t)r->local_addr, r->length);
    if (m) {
        t->nic_pref_mask = m->nic_pref_mask;
        t->nic_sec_mask = m->nic_sec_mask;
    }
    pthread_rwlock_unlock(&e->mem_lock);
    if (!m)
        return -EFAULT;
    cr__xfer_peer_t *p = cr__xfer_peer_get(e, r->target);
    if (!p)
        return -ENOENT;
    t->opcode = r->opcode; /* known even if the target check fails (batch notify) */
    t->peer = p;
    int tried = 0, rrc = 0;
    for (size_t i = 0; i < *n_refreshed; i++)
        if (refreshed[i].peer == p) {
            tried = 1;
            rrc = refreshed[i].rc;
        }
    if (!tried && atomic_load(&p->stale)) {
        rrc = cr__xfer_peer_refresh(e, p);
        if (*n_refreshed < 16)
            refreshed[(*n_refreshed)++] = (refreshed_t){p, rrc};
        tried = 1;
    }
    /* a peer that failed a transfer (stale) and then did not answer the
     * refresh either: its request fails now, with the refresh's error,
     * instead of waiting out the stall time on it once more (a frozen
     * node cost every later get of its keys two waits, 2 s, not one) */
    if (rrc && refresh_says_down(e, rrc))
        return rrc;
    for (;;) {
        pthread_mutex_lock(&e->peer_lock);
        int ok = cr__seg_desc_contains(&p->desc, r->target_addr, r->length);
        pthread_mutex_unlock(&e->peer_lock);
        if (ok)
            break;
        if (tried)
            return -EFAULT;
        /* the cached descriptor may be stale: refetch once before failing */
        rrc = cr__xfer_peer_refresh(e, p);
        if (*n_refreshed < 16)
            refreshed[(*n_refreshed)++] = (refreshed_t){p, rrc};
        tried = 1;
    }
    t->opcode = r->opcode;
    t->local = r->local_addr;
    t->remote_addr = r->target_addr;
    t->length = r->length;
    t->peer = p;
    return 0;
}

static int by_peer_then_index(const void *a, const void *b)
{
    const cr__xfer_task_t *x = *(cr__xfer_task_t *const *)a, *y = *(cr__xfer_task_t *const *)b;
    if (x->peer != y->peer)
        return (uintptr_t)x->peer < (uintptr_t)y->peer ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* caps: NULL, or one capability pointer (NULL or CR__CAP_LEN bytes) per request */
static int batch_submit(cr_xfer_batch_t *b, const cr_xfer_request_t *reqs,
                        const uint8_t *const *caps, size_t n)
{
    if (!b || (n && !reqs))
        return -EINVAL;
    cr_xfer_engine_t *e = b->engine;
    if (atomic_load(&e->destroying))
        return -ECANCELED;
    if (n == 0)
        return 0;
    cr__xfer_task_t **group = malloc(n * sizeof *group);
    if (!group)
        return -ENOMEM;
    pthread_mutex_lock(&b->lock);
    if (n > b->capacity - b->n) {
        pthread_mutex_unlock(&b->lock);
        free(group);
        return -EINVAL;
    }
    size_t base = b->n;
    b->n += n;
    atomic_fetch_add(&b->running, n);
    pthread_mutex_unlock(&b->lock);

    uint64_t deadline = cr__now_ns() + (uint64_t)e->cfg.timeout_ms * 1000000ull;
    refreshed_t refreshed[16];
    size_t n_refreshed = 0;
    size_t nv = 0, runs = 0;
    for (size_t i = 0; i < n; i++) {
        cr__xfer_task_t *t = &b->tasks[base + i];
        t->batch = b;
        t->index = (uint32_t)(base + i);
        t->deadline_ns = deadline;
        t->caller_waits = b->caller_waits;
        t->want_crc = 0; /* set below for a transport that hashes (crc_pieces) */
        atomic_init(&t->crc_acc, 0);
        atomic_init(&t->crc_bytes, 0);
        t->crc_valid = 0;
        t->has_cap = caps && caps[i];
        if (t->has_cap)
            memcpy(t->cap, caps[i], CR__CAP_LEN);
        int err = validate(e, &reqs[i], t, refreshed, &n_refreshed);
        if (err) {
            fail_now(t, err);
            continue;
        }
        runs += !nv || t->peer != group[nv - 1]->peer;
        group[nv++] = t;
    }
    /* One submit per peer, not per run of consecutive requests to it: a
     * batch whose requests alternate between peers (a store batch whose
     * keys the master spread over two nodes) would otherwise reach its
     * transport one request at a time, and a transport could merge none
     * of them into one copy call or one gathered send. Order is kept among
     * the requests to one peer (stable: index breaks ties). */
    if (runs > 1)
        qsort(group, nv, sizeof *group, by_peer_then_index);
    for (size_t i = 0; i < nv;) {
        cr__xfer_peer_t *gp = group[i]->peer;
        size_t ng = 1;
        while (i + ng < nv && group[i + ng]->peer == gp)
            ng++;
        void *st;
        const struct cr_xfer_transport_ops *ops = cr__xfer_transport_of(e, &st, gp);
        for (size_t k = 0; ops && b->want_crc && k < ng; k++)
            group[i + k]->want_crc = (ops->crc_pieces >> group[i + k]->opcode) & 1u;
        int rc = ops && st ? ops->submit(st, gp, group + i, ng) : -EHOSTUNREACH;
        if (rc)
            for (size_t k = 0; k < ng; k++)
                fail_now(group[i + k], rc);
        i += ng;
    }
    free(group);
    return 0;
}

int cr_xfer_batch_submit(cr_xfer_batch_t *b, const cr_xfer_request_t *reqs, size_t n)
{
    return batch_submit(b, reqs, NULL, n);
}

int cr__xfer_batch_submit_caps(cr_xfer_batch_t *b, const cr_xfer_request_t *reqs,
                               const uint8_t *const *caps, size_t n)
{
    return batch_submit(b, reqs, caps, n);
}

void cr__xfer_batch_want_crc(cr_xfer_batch_t *b)
{
    if (b)
        b->want_crc = 1;
}

int cr__xfer_batch_crc_wanted(const cr_xfer_batch_t *b, size_t index)
{
    /* want_crc is written by the submit that returned to the caller */
    return b && index < b->capacity && b->tasks[index].want_crc;
}

int cr__xfer_batch_crc(cr_xfer_batch_t *b, size_t index, uint32_t *crc)
{
    cr_xfer_status_t st; /* checks b and index; its state load orders crc_valid after it */
    int rc = crc ? cr_xfer_batch_status(b, index, &st) : -EINVAL;
    if (rc)
        return rc;
    const cr__xfer_task_t *t = &b->tasks[index];
    if (st.state != CR_XFER_STATE_COMPLETED || !t->crc_valid)
        return -ENODATA;
    *crc = t->crc;
    return 0;
}

int cr_xfer_batch_status(cr_xfer_batch_t *b, size_t index, cr_xfer_status_t *out)
{
    if (!b || !out)
        return -EINVAL;
    pthread_mutex_lock(&b->lock);
    size_t n = b->n;
    pthread_mutex_unlock(&b->lock);
    if (index >= n)
        return -EINVAL;
    cr__xfer_task_t *t = &b->tasks[index];
    out->state = (cr_xfer_state_t)atomic_load(&t->state);
    out->error = atomic_load(&t->error);
    out->bytes_transferred = atomic_load(&t->bytes);
    return 0;
}

/* first error by index, or 0; sums bytes */
static int batch_summary(cr_xfer_batch_t *b, uint64_t *bytes)
{
    pthread_mutex_lock(&b->lock);
    size_t n = b->n;
    pthread_mutex_unlock(&b->lock);
    int first = 0;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        int err = atomic_load(&b->tasks[i].error);
        if (err && !first)
            first = err;
        sum += atomic_load(&b->tasks[i].bytes);
    }
    if (bytes)
        *bytes = sum;
    return first;
}

int cr_xfer_batch_status_all(cr_xfer_batch_t *b, cr_xfer_status_t *out)
{
    if (!b || !out)
        return -EINVAL;
    int running = atomic_load(&b->running) > 0;
    uint64_t bytes;
    int err = batch_summary(b, &bytes);
    out->bytes_transferred = bytes;
    out->error = running ? 0 : err;
    out->state = running ? CR_XFER_STATE_WAITING
                         : err ? CR_XFER_STATE_FAILED : CR_XFER_STATE_COMPLETED;
    return 0;
}

int cr_xfer_batch_wait(cr_xfer_batch_t *b, int timeout_ms)
{
    if (!b)
        return -EINVAL;
    uint64_t ms = timeout_ms >= 0 ? (uint64_t)timeout_ms
                                  : 2ull * b->engine->cfg.timeout_ms + 5000; /* safety net */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (ms % 1000) * 1000000ull;
    ts.tv_sec += (time_t)(ms / 1000 + ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    int timed_out = 0;
    /* a transport whose threads copy may let this thread copy queued work
     * of b first (transport.h, help): no handoff to a sleeping worker and
     * back for work the waiter can do itself. Not for a poll. */
    for (size_t i = 0; timeout_ms != 0 && i < b->engine->n_transports; i++) {
        const cr__xfer_transport_t *t = &b->engine->transports[i];
        if (t->ops->help && atomic_load(&b->running) > 0)
            t->ops->help(t->state, b);
    }
    pthread_mutex_lock(&b->lock);
    b->waiters++;
    while (atomic_load(&b->running) > 0 && !timed_out)
        timed_out = pthread_cond_timedwait(&b->done_cv, &b->lock, &ts) == ETIMEDOUT;
    int running = atomic_load(&b->running) > 0;
    int rc = -ETIMEDOUT;
    if (!running) { /* summarize before leaving: destroy may free b once waiters is 0 */
        rc = 0;
        for (size_t i = 0; i < b->n && !rc; i++)
            rc = atomic_load(&b->tasks[i].error);
    }
    b->waiters--;
    if (b->waiters == 0)
        pthread_cond_broadcast(&b->done_cv);
    pthread_mutex_unlock(&b->lock);
    return rc;
}

int cr_xfer_batch_notify(cr_xfer_batch_t *b, cr_xfer_segment_t target, const void *msg,
                         size_t len)
{
    if (!b || (len && !msg) || len > CR_XFER_NOTIFY_MAX)
        return -EINVAL;
    cr_xfer_engine_t *e = b->engine;
    cr__xfer_peer_t *p = cr__xfer_peer_get(e, target);
    if (!p)
        return -EINVAL;
    size_t nl = strlen(e->local.name);
    size_t plen = 2 + nl + len;
    cr__xfer_bnotify_t *rec = malloc(sizeof *rec + plen);
    if (!rec)
        return -ENOMEM;
    rec->peer = p;
    rec->remaining = 0;
    rec->failed = 0;
    rec->len = plen;
    rec->msg[0] = (char)(nl & 0xff);
    rec->msg[1] = (char)(nl >> 8);
    memcpy(rec->msg + 2, e->local.name, nl);
    if (len)
        memcpy(rec->msg + 2 + nl, msg, len);

    atomic_store(&b->has_notify, 1); /* seq_cst: pairs with task_done's state store */
    pthread_mutex_lock(&b->lock);
    rec->upto = (uint32_t)b->n;
    rec->counted = calloc(b->n / 8 + 1, 1);
    if (!rec->counted) {
        pthread_mutex_unlock(&b->lock);
        free(rec);
        return -ENOMEM;
    }
    /* A task that is still WAITING here will take b->lock in task_done
     * after we release it (it stores its state before reading has_notify),
     * so it finds its bit; one that already finished is not counted. */
    for (size_t i = 0; i < b->n; i++) {
        cr__xfer_task_t *t = &b->tasks[i];
        if (t->peer != p || t->opcode != CR_XFER_WRITE)
            continue;
        int st = atomic_load(&t->state);
        if (st == CR_XFER_STATE_WAITING) {
            rec->counted[i / 8] |= (uint8_t)(1u << (i % 8));
            rec->remaining++;
        } else if (st == CR_XFER_STATE_FAILED) {
            rec->failed = 1;
        }
    }
    cr__xfer_outmsg_t *now = NULL;
    int dropped = 0;
    if (rec->remaining == 0) { /* nothing to wait for: decide now */
        if (rec->failed)
            dropped = 1;
        else if ((now = malloc(sizeof *now + plen)) != NULL) {
            now->peer = p;
            now->len = plen;
            memcpy(now->msg, rec->msg, plen);
        }
        free(rec->counted);
        free(rec);
        rec = NULL;
    } else {
        rec->next = b->notifies;
        b->notifies = rec;
    }
    pthread_mutex_unlock(&b->lock);
    if (now)
        cr__xfer_notify_enqueue(e, now);
    else if (dropped)
        CR_LOG_INFO("xfer", "batch notification to %s dropped: a write failed", p->name);
    return now || rec || dropped ? 0 : -ENOMEM;
}

int cr__xfer_transfer_sync_caps(cr_xfer_engine_t *e, const cr_xfer_request_t *reqs,
                                const uint8_t *const *caps, size_t n, int *results)
{
    if (!e || !reqs || n == 0 || n > CR_XFER_BATCH_MAX)
        return -EINVAL;
    cr_xfer_batch_t *b;
    int rc = cr_xfer_batch_alloc(e, n, &b);
    if (rc)
        return rc;
    /* a lone request may be run by this thread (a transport may copy it
     * here rather than wake a worker and be woken back); several stay
     * parallel */
    b->caller_waits = n == 1;
    rc = batch_submit(b, reqs, caps, n);
    if (rc) {
        cr_xfer_batch_free(b);
        return rc;
    }
    do
        rc = cr_xfer_batch_wait(b, -1);
    while (rc == -ETIMEDOUT && atomic_load(&b->running) > 0);
    if (results)
        for (size_t i = 0; i < n; i++)
            results[i] = atomic_load(&b->tasks[i].error);
    cr_xfer_batch_free(b);
    return rc;
}

int cr_xfer_transfer_sync(cr_xfer_engine_t *e, const cr_xfer_request_t *reqs, size_t n,
                          int *results)
{
    return cr__xfer_transfer_sync_caps(e, reqs, NULL, n, results);
}
