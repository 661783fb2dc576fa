/* tcp transport, initiating side: per-peer work queue, paths, connections,
 * slicing, failover. See tcp_internal.h for the threads and locks. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "common/status.h"
#include "transfer/transport/tcp/tcp_internal.h"

#define LOGC "tcp"
#define CARVE_MAX 64 /* slices one sender takes per lock acquisition */

/* ---- task accounting --------------------------------------------------- */

/* Settles len bytes of task t with err (0 or CR__ERRNO()). The last settlement
 * finishes the task; t must not be touched afterwards. */
static void settle(tcp_peer_t *p, cr__xfer_task_t *t, uint64_t len, int err)
{
    if (err) {
        int z = 0;
        atomic_compare_exchange_strong(&t->tp_error, &z, err);
    } else {
        cr__xfer_task_progress(t, len);
    }
    uint64_t total = t->length;
    if (atomic_fetch_add(&t->tp_settled, len) + len == total) {
        int e = atomic_load(&t->tp_error);
        atomic_fetch_sub(&p->outstanding, 1);
        cr__xfer_task_done(t, e);
    }
}

/* Fails the uncarved rest of queued task t (caller holds p->mu and has
 * unlinked t). */
static void fail_rest_locked(tcp_peer_t *p, cr__xfer_task_t *t, int err)
{
    uint64_t rest = t->length - t->tp_carved;
    t->tp_carved = t->length;
    if (rest)
        settle(p, t, rest, err);
}

static int retry_push_locked(tcp_peer_t *p, const tcp_slice_t *s)
{
    if (p->n_retry == p->cap_retry) {
        size_t nc = p->cap_retry ? 2 * p->cap_retry : 64;
        tcp_slice_t *n = realloc(p->retry, nc * sizeof *n);
        if (!n)
            return -ENOMEM;
        p->retry = n;
        p->cap_retry = nc;
    }
    p->retry[p->n_retry++] = *s;
    return 0;
}

/* Fails everything queued on the peer (tasks and retry slices). */
static void fail_queued_locked(tcp_peer_t *p, int err)
{
    while (p->n_retry) {
        tcp_slice_t s = p->retry[--p->n_retry];
        settle(p, s.task, s.len, err);
    }
    while (p->q_head) {
        cr__xfer_task_t *t = p->q_head;
        p->q_head = t->tp_next;
        if (!p->q_head)
            p->q_tail = NULL;
        fail_rest_locked(p, t, err);
    }
}

/* ---- wakeups -------------------------------------------------------------- */

/* Wakes c's sender if it sleeps in its carve loop (it announced so). */
static void wake_conn(tcp_conn_t *c)
{
    if (atomic_exchange(&c->waiting, 0))
        sem_post(&c->wake);
}

/* Something changed for every connection of the peer (work, retries, stop). */
static void wake_peer_locked(tcp_peer_t *p)
{
    pthread_cond_broadcast(&p->cv); /* unconnected senders wait on cv */
    for (int i = 0; i < p->n_conns; i++)
        if (p->conns[i])
            wake_conn(p->conns[i]);
}

/* ---- paths --------------------------------------------------------------- */

static int path_up(const tcp_path_t *pa, uint64_t now)
{
    return atomic_load(&pa->down_until_ns) <= now;
}

static uint32_t up_lnic_mask(tcp_peer_t *p, uint64_t now)
{
    uint32_t m = 0;
    for (int i = 0; i < p->n_paths; i++)
        if (path_up(&p->paths[i], now))
            m |= 1u << p->paths[i].lnic;
    return m;
}

/* May a connection on local NIC lnic carry task t? Preferred NICs while any
 * of them is up, then secondary ones, then any. */
static int allowed(const cr__xfer_task_t *t, int lnic, uint32_t up)
{
    uint32_t pref = t->nic_pref_mask & up, sec = t->nic_sec_mask & up;
    if (pref)
        return (pref >> lnic) & 1;
    if (sec)
        return (sec >> lnic) & 1;
    return 1;
}

static int all_paths_down(tcp_peer_t *p, uint64_t now)
{
    for (int i = 0; i < p->n_paths; i++)
        if (path_up(&p->paths[i], now))
            return 0;
    return 1;
}

/* ---- carving --------------------------------------------------------------- */

static uint32_t ring_used(tcp_conn_t *c)
{
    return atomic_load(&c->sent) - atomic_load(&c->head);
}

#define KIND_ANY 0 /* carve any mix of WRITE and READ slices */

/* Takes up to max slices for connection c (caller holds p->mu). kind is
 * KIND_ANY or one op (CR__TCP_WRITE / CR__TCP_READ): carving then stops at
 * the first slice of another kind. */
static int carve_locked(tcp_peer_t *p, tcp_conn_t *c, tcp_slice_t *out, int max, uint64_t now,
                        int kind)
{
    tcp_state_t *st = p->st;
    uint64_t infl = atomic_load(&c->inflight_bytes);
    int force_one = infl == 0; /* always make progress */
    /* a slice of op may go while the connection's in-flight bytes are
     * below op's window (the last one may overshoot it) */
#define ROOM(op) (force_one || infl < tcp_window_of(st, op))
    int n = 0;
    while (n < max && p->n_retry) {
        tcp_slice_t s = p->retry[p->n_retry - 1];
        if ((kind != KIND_ANY && s.op != kind) || !ROOM(s.op))
            return n;
        p->n_retry--;
        if (now > s.task->deadline_ns) {
            settle(p, s.task, s.len, -ETIMEDOUT);
            continue;
        }
        out[n++] = s;
        infl += s.len;
        force_one = 0;
    }
    uint32_t up = up_lnic_mask(p, now);
    int lnic = p->paths[c->path].lnic;
    uint64_t slice = st->cfg.slice_size;
    cr__xfer_task_t **pp = &p->q_head, *prev = NULL;
    int scanned = 0;
    while (*pp && n < max && scanned++ < TCP_SCAN_MAX) {
        cr__xfer_task_t *t = *pp;
        int expired = now > t->deadline_ns, failed = atomic_load(&t->tp_error) != 0;
        if (!expired && !failed && !allowed(t, lnic, up)) {
            prev = t;
            pp = &t->tp_next;
            continue;
        }
        if (!expired && !failed) {
            uint8_t op = t->opcode == CR_XFER_WRITE ? CR__TCP_WRITE : CR__TCP_READ;
            if (kind != KIND_ANY && op != kind)
                break; /* keep the queue's order: the sender takes it */
            while (n < max && t->tp_carved < t->length && ROOM(op)) {
                uint64_t len = t->length - t->tp_carved;
                if (len > slice)
                    len = slice;
                out[n].task = t;
                out[n].off = t->tp_carved;
                out[n].len = (uint32_t)len;
                out[n].op = op;
                n++;
                t->tp_carved += len;
                infl += len;
                force_one = 0;
            }
        }
        if (t->tp_carved == t->length || expired || failed) {
            *pp = t->tp_next; /* unlink */
            if (p->q_tail == t)
                p->q_tail = prev;
            if (t->tp_carved < t->length)
                fail_rest_locked(p, t, expired ? -ETIMEDOUT : atomic_load(&t->tp_error));
            continue;
        }
        break; /* out of window or of slots: the rest waits, in order */
    }
#undef ROOM
    return n;
}

static int has_work_locked(tcp_peer_t *p, tcp_conn_t *c, uint64_t now)
{
    if (p->n_retry)
        return 1;
    uint32_t up = up_lnic_mask(p, now);
    int lnic = p->paths[c->path].lnic, scanned = 0;
    for (cr__xfer_task_t *t = p->q_head; t && scanned++ < TCP_SCAN_MAX; t = t->tp_next)
        if (allowed(t, lnic, up) || now > t->deadline_ns || atomic_load(&t->tp_error))
            return 1;
    return 0;
}

/* ---- connections --------------------------------------------------------- */

static void cond_wait_until(tcp_peer_t *p, uint64_t until_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(until_ns / 1000000000ull),
                          .tv_nsec = (long)(until_ns % 1000000000ull)};
    pthread_cond_timedwait(&p->cv, &p->mu, &ts);
}

static void *receiver_main(void *arg);

/* the remote address of path pa as the peer's descriptor says now */
static int path_remote(tcp_peer_t *p, tcp_path_t *pa, cr__seg_nic_t *out)
{
    cr__seg_nic_t nics[CR_XFER_MAX_NICS];
    uint32_t nn = cr__xfer_peer_nics(p->xp, nics, CR_XFER_MAX_NICS);
    if ((uint32_t)pa->rnic >= nn)
        return -EHOSTUNREACH;
    *out = nics[pa->rnic];
    return 0;
}

/* Connects from local NIC lnic to remote, tunes the socket and passes the
 * engine's connection-setup hook. Returns the fd or -errno. */
static int dial(tcp_state_t *st, int lnic, const cr__seg_nic_t *remote)
{
    /* a peer that does not answer the connect and its setup hook within
     * twice the stall time is as good as frozen (the watchdog fails queued
     * work after one stall time anyway; the margin keeps a handshake on a
     * loaded machine from failing a healthy path) */
    unsigned ct_ms = st->cfg.timeout_ms < TCP_CONNECT_TIMEOUT_MS ? st->cfg.timeout_ms
                                                               : TCP_CONNECT_TIMEOUT_MS;
    if (st->cfg.stall_ms && 2 * st->cfg.stall_ms < ct_ms)
        ct_ms = 2 * st->cfg.stall_ms;
    int ct = (int)ct_ms;
    int fd = cr__net_connect(remote->addr, remote->port, st->cfg.nics[lnic], ct);
    if (fd < 0)
        return fd;
    cr__tcp_tune_socket(st, fd);
    int rc = cr__xfer_conn_connected(st->engine, fd, ct);
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

static int conn_open(tcp_conn_t *c, const cr__seg_nic_t *remote)
{
    tcp_peer_t *p = c->peer;
    tcp_state_t *st = p->st;
    tcp_path_t *pa = &p->paths[c->path];
    int fd = dial(st, pa->lnic, remote);
    if (fd < 0)
        return fd;
    pthread_mutex_lock(&p->mu);
    c->fd = fd;
    atomic_store(&c->dead, 0);
    atomic_store(&c->head, 0);
    atomic_store(&c->sent, 0);
    atomic_store(&c->inflight_bytes, 0);
    atomic_store(&c->inflight_writes, 0);
    atomic_store(&c->last_progress_ns, cr__now_ns());
    pthread_mutex_unlock(&p->mu);
    if (pthread_create(&c->receiver, NULL, receiver_main, c)) {
        pthread_mutex_lock(&p->mu);
        c->fd = -1;
        pthread_mutex_unlock(&p->mu);
        close(fd);
        return -ENOMEM;
    }
    {
        char tname[16];
        snprintf(tname, sizeof tname, "cr-tcp-rx%u", (unsigned)c->idx % 100u);
        pthread_setname_np(c->receiver, tname);
    }
    c->receiver_running = 1;
    return 0;
}

/* Tears the connection down (sender thread only): its in-flight slices go
 * back to the peer's retry list, or fail when the engine stops / their
 * deadline passed. */
static void conn_fail(tcp_conn_t *c, int err)
{
    tcp_peer_t *p = c->peer;
    atomic_store(&c->dead, 1);
    pthread_mutex_lock(&p->mu);
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_unlock(&p->mu);
    if (c->receiver_running) {
        pthread_join(c->receiver, NULL);
        c->receiver_running = 0;
    }
    uint64_t now = cr__now_ns();
    pthread_mutex_lock(&p->mu);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    uint32_t h = atomic_load(&c->head), s = atomic_load(&c->sent);
    int stopping = p->stopping || atomic_load(&p->st->stopping);
    int unreachable = all_paths_down(p, now); /* another connection found the peer gone */
    int aborted = c->aborted;
    c->aborted = 0;
    for (; h != s; h++) {
        tcp_slice_t *sl = &c->ring[h % TCP_RING];
        if (stopping)
            settle(p, sl->task, sl->len, -ECANCELED);
        else if (aborted)
            settle(p, sl->task, sl->len, -ETIMEDOUT);
        else if (unreachable)
            settle(p, sl->task, sl->len, -EHOSTUNREACH);
        else if (now > sl->task->deadline_ns)
            settle(p, sl->task, sl->len, -ETIMEDOUT);
        else if (retry_push_locked(p, sl))
            settle(p, sl->task, sl->len, -ENOMEM);
    }
    atomic_store(&c->head, 0);
    atomic_store(&c->sent, 0);
    atomic_store(&c->inflight_bytes, 0);
    atomic_store(&c->inflight_writes, 0);
    if (s != 0 && !stopping && !aborted)
        CR_LOG_INFO(LOGC, "connection to %s (path %d) failed: %s; retrying its slices",
                    p->xp->name, c->path, cr_strerror(err));
    wake_peer_locked(p);
    pthread_mutex_unlock(&p->mu);
}

/* A connect on path failed: set the path aside (re-probed after
 * TCP_REPROBE_NS); with every path down, fail what is queued (the peer is
 * unreachable) and return 1. */
static int path_failed(tcp_peer_t *p, int path, const cr__seg_nic_t *remote, int err)
{
    /* the descriptor was refreshed while this dial was under way (a target
     * restarted on another port): the address that failed is no longer the
     * path's, so nothing is set aside or failed; the next dial uses the new
     * one. Read before p->mu: the descriptor has its own lock. */
    cr__seg_nic_t now_remote;
    memset(&now_remote, 0, sizeof now_remote);
    if (!path_remote(p, &p->paths[path], &now_remote) &&
        (strcmp(now_remote.addr, remote->addr) || now_remote.port != remote->port)) {
        pthread_mutex_lock(&p->mu);
        wake_peer_locked(p);
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    uint64_t now = cr__now_ns();
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->paths[path].down_until_ns, now + TCP_REPROBE_NS);
    p->paths[path].failed = *remote;
    int gone = all_paths_down(p, now);
    if (gone) {
        CR_LOG_WARN(LOGC, "segment %s unreachable on every path: %s", p->xp->name,
                    cr_strerror(err));
        fail_queued_locked(p, err == -ETIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH);
    }
    wake_peer_locked(p);
    pthread_mutex_unlock(&p->mu);
    return gone;
}

/* Publishes slices sl[0..n) to c's ring and sends them (headers + WRITE
 * payloads) with one gathered sendmsg() on fd. Caller holds c->tx_mu.
 * Returns 0 or -errno. */
static int conn_send(tcp_conn_t *c, int fd, const tcp_slice_t *sl, int n)
{
    cr__tcp_hdr_t hdr[CARVE_MAX];
    /* capabilities copied next to the headers: a task may complete (its
     * batch freed) while sendmsg() is still returning, and only this
     * thread's stack is sure to outlive the call */
    uint8_t caps[CARVE_MAX][CR__TCP_CAP_LEN];
    struct iovec iov[3 * CARVE_MAX];
    /* publish to the ring before sending: the receiver matches replies */
    uint32_t s = atomic_load(&c->sent);
    if (s == atomic_load(&c->head))
        atomic_store(&c->last_progress_ns, cr__now_ns());
    int cnt = 0;
    uint64_t bytes = 0;
    unsigned writes = 0;
    for (int i = 0; i < n; i++) {
        c->ring[(s + (uint32_t)i) % TCP_RING] = sl[i];
        atomic_store_explicit(&c->ack[(s + (uint32_t)i) % TCP_RING], 0, memory_order_relaxed);
        cr__tcp_hdr_enc(&hdr[i], sl[i].op, 0, s + (uint32_t)i,
                        sl[i].task->remote_addr + sl[i].off, sl[i].len);
        iov[cnt].iov_base = &hdr[i];
        iov[cnt++].iov_len = sizeof hdr[i];
        if (sl[i].task->has_cap) { /* the grant travels with every slice (tcp_wire.h) */
            cr__tcp_hdr_set_cap(&hdr[i]);
            memcpy(caps[i], sl[i].task->cap, CR__TCP_CAP_LEN);
            iov[cnt].iov_base = caps[i];
            iov[cnt++].iov_len = CR__TCP_CAP_LEN;
        }
        if (sl[i].op == CR__TCP_WRITE) {
            iov[cnt].iov_base = sl[i].task->local + sl[i].off;
            iov[cnt++].iov_len = sl[i].len;
            writes++;
        }
        bytes += sl[i].len;
    }
    atomic_fetch_add(&c->inflight_bytes, bytes);
    atomic_fetch_add(&c->inflight_writes, writes);
    atomic_store_explicit(&c->sent, s + (uint32_t)n, memory_order_release);
    int rc = cr__tcp_writev_full(fd, iov, cnt);
    /* Ack hand-off: the target may acknowledge a WRITE (it has every byte:
     * the kernel copied them) while this sendmsg() still runs for later
     * slices. Finishing its task then would let the caller free or reuse
     * the buffer that this call's iovec still names (and sanitizers check
     * after the call returns: test_tcp_stall). So such a WRITE is settled
     * here, after the call; a WRITE not yet acknowledged is left to the
     * receiver (or to conn_fail if the connection dies). READ requests
     * name no task memory (capabilities are copied above). */
    for (int i = 0; i < n; i++) {
        if (sl[i].op != CR__TCP_WRITE)
            continue;
        int a = atomic_exchange(&c->ack[(s + (uint32_t)i) % TCP_RING], TCP_ACK_SENT);
        if (a > 0)
            settle(c->peer, sl[i].task, sl[i].len, 1 - a);
    }
    return rc;
}

static void *sender_main(void *arg)
{
    tcp_conn_t *c = arg;
    tcp_peer_t *p = c->peer;
    tcp_path_t *pa = &p->paths[c->path];
    tcp_slice_t sl[CARVE_MAX];
    for (;;) {
        if (c->fd < 0) {
            pthread_mutex_lock(&p->mu);
            uint64_t now = cr__now_ns();
            while (!p->stopping && !has_work_locked(p, c, now)) {
                pthread_cond_wait(&p->cv, &p->mu);
                now = cr__now_ns();
            }
            if (p->stopping) {
                pthread_mutex_unlock(&p->mu);
                break;
            }
            pthread_mutex_unlock(&p->mu);
            cr__seg_nic_t remote;
            memset(&remote, 0, sizeof remote);
            int rc = path_remote(p, pa, &remote);
            pthread_mutex_lock(&p->mu);
            uint64_t du = atomic_load(&pa->down_until_ns);
            if (now < du && (rc || (!strcmp(remote.addr, pa->failed.addr) &&
                                    remote.port == pa->failed.port))) {
                /* path set aside: re-probe later (a refreshed descriptor
                 * with another address is tried at once) */
                cond_wait_until(p, du);
                pthread_mutex_unlock(&p->mu);
                continue;
            }
            pthread_mutex_unlock(&p->mu);
            if (!rc)
                rc = conn_open(c, &remote);
            if (rc) {
                CR_LOG_INFO(LOGC, "connect to %s (path %d) failed: %s", p->xp->name, c->path,
                            cr_strerror(rc));
                path_failed(p, c->path, &remote, rc);
                continue;
            }
            atomic_store(&pa->down_until_ns, 0);
        }

        pthread_mutex_lock(&c->tx_mu);
        pthread_mutex_lock(&p->mu);
        int n = 0;
        for (;;) {
            if (p->stopping || atomic_load(&c->dead))
                break;
            uint64_t now = cr__now_ns();
            uint32_t used0 = ring_used(c);
            uint64_t infl0 = atomic_load(&c->inflight_bytes);
            uint32_t room = TCP_RING - used0;
            if (room > 0) {
                n = carve_locked(p, c, sl, room < CARVE_MAX ? (int)room : CARVE_MAX, now,
                                 KIND_ANY);
                if (n)
                    break;
            }
            /* nothing we may send now: sleep on our own semaphore until
             * work arrives (submit posts after queueing under p->mu, and we
             * announce `waiting` under p->mu) or the receiver frees space
             * (it posts when it sees `waiting`; re-check after announcing
             * so a completion in between is not lost). A stray post only
             * costs one more pass. */
            atomic_store(&c->waiting, 1);
            if (ring_used(c) != used0 || atomic_load(&c->inflight_bytes) != infl0) {
                atomic_store(&c->waiting, 0);
                continue;
            }
            pthread_mutex_unlock(&p->mu);
            pthread_mutex_unlock(&c->tx_mu); /* the receiver may refill meanwhile */
            while (sem_wait(&c->wake) && errno == EINTR)
                ;
            pthread_mutex_lock(&c->tx_mu);
            pthread_mutex_lock(&p->mu);
        }
        int stop = p->stopping, dead = atomic_load(&c->dead);
        pthread_mutex_unlock(&p->mu);
        if (n == 0) {
            pthread_mutex_unlock(&c->tx_mu);
            if (stop)
                break;
            if (dead)
                conn_fail(c, -ECONNRESET);
            continue;
        }
        int rc = conn_send(c, c->fd, sl, n);
        pthread_mutex_unlock(&c->tx_mu);
        if (rc)
            conn_fail(c, rc);
    }
    /* stopping: cut the connection; in-flight slices fail with -ECANCELED */
    if (c->fd >= 0 || c->receiver_running)
        conn_fail(c, -ECANCELED);
    return NULL;
}

/* ---- receiver ---------------------------------------------------------------- */

#define RX_WINDOW 64 /* replies one recvmsg() may cover */

/* The receiver refills its connection's window with READ requests itself,
 * which saves waking the sender (two context switches) per freed
 * half-window: measured with 4 MiB and 1 MiB READs on loopback, the
 * initiator's voluntary context switches per MiB halved (docs/benchmarks.md).
 * It must never block on a send while the target blocks on one to it (both
 * socket buffers full, neither side reading), so it sends only READ headers
 * and only while no WRITE is in flight: then our send buffer only ever holds
 * small headers. WRITEs stay with the sender (it may block in sendmsg while
 * this thread keeps reading); refilling WRITEs from here too was measured
 * and was slower at more CPU per byte. Returns 1 if it sent or there was
 * nothing to send, 0 if the sender should do it, or -errno of a failed
 * send. */
static int refill(tcp_conn_t *c, int fd)
{
    tcp_peer_t *p = c->peer;
    if (pthread_mutex_trylock(&c->tx_mu))
        return 0; /* the sender is carving or sending: it comes back for more */
    uint32_t used = ring_used(c), writes = atomic_load(&c->inflight_writes);
    int kind = writes == 0 ? CR__TCP_READ : -1;
    tcp_slice_t sl[CARVE_MAX];
    int n = 0, r = 0;
    pthread_mutex_lock(&p->mu);
    if (kind >= 0 && !p->stopping && !atomic_load(&c->dead) && used < TCP_RING) {
        uint32_t room = TCP_RING - used;
        n = carve_locked(p, c, sl, room < CARVE_MAX ? (int)room : CARVE_MAX, cr__now_ns(), kind);
        /* 1 unless work of the other kind is left for the sender */
        r = n > 0 || !has_work_locked(p, c, cr__now_ns());
    }
    pthread_mutex_unlock(&p->mu);
    if (n > 0) {
        int rc = conn_send(c, fd, sl, n);
        if (rc)
            r = rc;
    }
    pthread_mutex_unlock(&c->tx_mu);
    return r;
}

/* The reply stream's layout is known from the ring: a WRITE reply is a
 * header, a READ reply is a header followed by exactly the slice's length
 * (data, or zero padding when refused). So the receiver scatters whatever
 * the socket holds straight into the header slots and the destinations of
 * the next replies with one recvmsg(), and completes the whole replies. */
static void *receiver_main(void *arg)
{
    tcp_conn_t *c = arg;
    tcp_peer_t *p = c->peer;
    tcp_state_t *st = p->st;
    int fd = c->fd;
    cr__tcp_hdr_t hdr[RX_WINDOW]; /* slot k % RX_WINDOW holds reply k's header */
    struct iovec iov[2 * RX_WINDOW];
    uint64_t got = 0; /* bytes of reply h received so far */
    int rc = 0;
    uint32_t h = atomic_load(&c->head);
    int lowat = 1; /* the socket's SO_RCVLOWAT */
    for (;;) {
        uint32_t s = atomic_load_explicit(&c->sent, memory_order_acquire);
        int cnt = 0;
        if (s == h) {
            /* nothing in flight yet: only a header can be expected (its
             * slice may be published while we block) */
            iov[0].iov_base = (char *)&hdr[h % RX_WINDOW] + got;
            iov[0].iov_len = sizeof hdr[0] - got;
            cnt = 1;
        } else {
            uint64_t skip = got;
            for (uint32_t k = h; k != s && k - h < RX_WINDOW; k++) {
                tcp_slice_t *sl = &c->ring[k % TCP_RING];
                char *hp = (char *)&hdr[k % RX_WINDOW];
                if (skip < sizeof hdr[0]) {
                    iov[cnt].iov_base = hp + skip;
                    iov[cnt++].iov_len = sizeof hdr[0] - skip;
                    skip = 0;
                } else {
                    skip -= sizeof hdr[0];
                }
                if (sl->op == CR__TCP_READ) {
                    iov[cnt].iov_base = sl->task->local + sl->off + skip;
                    iov[cnt++].iov_len = sl->len - skip;
                }
                skip = 0;
            }
        }
        if (st->rcvlowat > 1) {
            uint64_t want = 0;
            for (int i = 0; i < cnt; i++)
                want += iov[i].iov_len;
            int lw = want >= 2 * (uint64_t)st->rcvlowat ? st->rcvlowat : 1;
            if (lw != lowat && setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lw, sizeof lw) == 0) {
                lowat = lw;
                if (lw > 1)
                    atomic_fetch_add_explicit(&st->lowat_raised, 1, memory_order_relaxed);
            }
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t n = recvmsg(fd, &mh, 0);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            rc = n == 0 ? -ECONNRESET : CR__ERRNO();
            break;
        }
        uint64_t left = (uint64_t)n;
        int freed = 0;
        while (left) {
            s = atomic_load_explicit(&c->sent, memory_order_acquire);
            tcp_slice_t *sl = &c->ring[h % TCP_RING];
            uint64_t plen = sl->op == CR__TCP_READ ? sl->len : 0;
            if (h == s) { /* bytes of a reply to a request not published yet? */
                if (got + left >= sizeof hdr[0]) {
                    rc = -EPROTO; /* a whole reply nobody asked for */
                    break;
                }
                got += left;
                left = 0;
                break;
            }
            uint64_t need = sizeof hdr[0] + plen - got;
            if (left < need) {
                got += left;
                left = 0;
                break;
            }
            left -= need;
            got = 0;
            cr__tcp_hdr_t *r = &hdr[h % RX_WINDOW];
            if (cr__tcp_hdr_dec(r) || r->opcode != (sl->op | CR__TCP_RESP) || r->seq != h ||
                r->len != plen) {
                rc = -EPROTO;
                break;
            }
            int status = r->status > 0 || r->status < -4095 ? -EPROTO : r->status;
            uint32_t len = sl->len;
            if (status == 0)
                atomic_fetch_add_explicit(&st->nic_bytes[p->paths[c->path].lnic], len,
                                          memory_order_relaxed);
            if (sl->op != CR__TCP_WRITE) {
                /* a READ's bytes are hashed while this core still holds
                 * them (the store would read them from memory later) */
                if (status == 0 && sl->task->want_crc && st->crc_read)
                    cr__xfer_task_crc_range(sl->task, sl->off, len);
                settle(p, sl->task, len, status);
            } else {
                atomic_fetch_sub(&c->inflight_writes, 1);
                /* settled here once its send returned, else by the sender
                 * when it does (conn_send, "ack hand-off") */
                if (atomic_exchange(&c->ack[h % TCP_RING], 1 - status) == TCP_ACK_SENT)
                    settle(p, sl->task, len, status);
            }
            atomic_fetch_sub(&c->inflight_bytes, len);
            atomic_store_explicit(&c->head, ++h, memory_order_release);
            uint64_t tnow = cr__now_ns();
            atomic_store(&c->last_progress_ns, tnow);
            atomic_store_explicit(&p->progress_ns, tnow, memory_order_relaxed);
            freed = 1;
        }
        if (rc)
            break;
        /* once half the window and half the ring are free (fewer, bigger
         * sendmsg()s), refill the window from this thread; only when that
         * is not possible, wake the sender if it waits for space */
        if (freed &&
            atomic_load(&c->inflight_bytes) <=
                tcp_window_of(st, atomic_load(&c->inflight_writes) ? CR__TCP_WRITE : CR__TCP_READ) /
                    2 &&
            atomic_load(&c->sent) - h <= TCP_RING / 2) {
            int r = refill(c, fd);
            if (r < 0) {
                rc = r;
                break;
            }
            if (r == 0 && atomic_load(&c->waiting))
                wake_conn(c);
        }
    }
    if (rc != -ECONNRESET || atomic_load(&c->sent) != h)
        CR_LOG_DEBUG(LOGC, "receiver for %s ends: %s", p->xp->name, cr_strerror(rc));
    atomic_store(&c->dead, 1);
    pthread_mutex_lock(&p->mu);
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR); /* unblocks the sender's writev */
    pthread_cond_broadcast(&p->cv);
    sem_post(&c->wake); /* unconditionally: the sender must notice `dead` */
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- peers ------------------------------------------------------------------ */

static void peer_free(tcp_peer_t *p)
{
    for (int i = 0; p->conns && i < p->n_conns; i++)
        if (p->conns[i]) {
            sem_destroy(&p->conns[i]->wake);
            pthread_mutex_destroy(&p->conns[i]->tx_mu);
            free(p->conns[i]);
        }
    free(p->conns);
    free(p->retry);
    for (int i = 0; i < TCP_SYNC_SLOTS; i++)
        if (p->sync[i].fd >= 0)
            close(p->sync[i].fd);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

static void peer_stop(tcp_peer_t *p)
{
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    for (int i = 0; i < p->n_conns; i++) {
        if (p->conns[i]->fd >= 0)
            shutdown(p->conns[i]->fd, SHUT_RDWR);
        sem_post(&p->conns[i]->wake);
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_conns; i++)
        if (p->conns[i]->sender_started)
            pthread_join(p->conns[i]->sender, NULL);
    pthread_mutex_lock(&p->mu);
    fail_queued_locked(p, -ECANCELED);
    /* callers running the sync path: cut their connections, wait for them */
    for (int i = 0; i < TCP_SYNC_SLOTS; i++)
        if (p->sync[i].busy && p->sync[i].fd >= 0)
            shutdown(p->sync[i].fd, SHUT_RDWR);
    while (p->sync_busy)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static tcp_peer_t *peer_create(tcp_state_t *st, cr__xfer_peer_t *xp)
{
    tcp_peer_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->st = st;
    p->xp = xp;
    for (int i = 0; i < TCP_SYNC_SLOTS; i++)
        p->sync[i].fd = -1;
    atomic_init(&p->sync_fast, 1); /* busy-poll until a reply says it does not pay */
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    cr__seg_nic_t nics[CR_XFER_MAX_NICS];
    uint32_t nr = cr__xfer_peer_nics(xp, nics, CR_XFER_MAX_NICS);
    uint32_t nl = st->cfg.n_nics;
    if (nr == 0)
        nr = 1; /* connect fails later with -EHOSTUNREACH */
    /* NIC k talks to remote NIC k (mod counts): max(nl, nr) paths */
    p->n_paths = (int)(nl > nr ? nl : nr);
    for (int i = 0; i < p->n_paths; i++) {
        p->paths[i].lnic = i % (int)nl;
        p->paths[i].rnic = i % (int)nr;
    }
    p->n_conns = p->n_paths * (int)st->cfg.conns_per_path;
    p->conns = calloc((size_t)p->n_conns, sizeof *p->conns);
    if (!p->conns)
        goto fail;
    for (int i = 0; i < p->n_conns; i++) {
        tcp_conn_t *c = calloc(1, sizeof *c);
        if (!c)
            goto fail;
        sem_init(&c->wake, 0, 0);
        pthread_mutex_init(&c->tx_mu, NULL);
        c->peer = p;
        c->path = i % p->n_paths;
        c->idx = i;
        c->fd = -1;
        p->conns[i] = c;
    }
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, TCP_THREAD_STACK);
    for (int i = 0; i < p->n_conns; i++) {
        if (pthread_create(&p->conns[i]->sender, &at, sender_main, p->conns[i])) {
            pthread_attr_destroy(&at);
            peer_stop(p);
            goto fail;
        }
        char tname[16]; /* per connection: cr-tcp-tx<i> sends, cr-tcp-rx<i> receives */
        snprintf(tname, sizeof tname, "cr-tcp-tx%u", (unsigned)i % 100u);
        pthread_setname_np(p->conns[i]->sender, tname);
        p->conns[i]->sender_started = 1;
    }
    pthread_attr_destroy(&at);
    return p;
fail:
    peer_free(p);
    return NULL;
}

tcp_peer_t *cr__tcp_peer_get(tcp_state_t *st, cr__xfer_peer_t *xp)
{
    pthread_mutex_lock(&st->peers_mu);
    tcp_peer_t *p = xp->transport_peer;
    if (!p && !atomic_load(&st->stopping)) {
        p = peer_create(st, xp);
        if (p) {
            p->next = st->peers;
            st->peers = p;
            xp->transport_peer = p;
        }
    }
    pthread_mutex_unlock(&st->peers_mu);
    return p;
}

/* ---- sync path: a lone request run by the thread that waits for it --------- */

/* A request submitted through cr_xfer_transfer_sync alone (caller_waits) and
 * at most one in-flight window (1 MiB by default) is run by the submitting thread on a
 * connection of its own, taken from the peer's sync slots: it sends the
 * slices and reads the replies itself, so no sender or receiver thread is
 * woken and handed back (four context switches per request saved). Same
 * wire protocol, same server. Anything unusual (no free slot, no usable
 * path, connect or I/O failure) hands the request to the normal queue,
 * which owns failover and retries; a status refused by the server is final.
 * Returns 1 if the task was completed here, 0 to queue it. */
#define SYNC_GROUP 16 /* slices sent before their replies are read */

static void sync_release(tcp_peer_t *p, struct tcp_sync_slot *sl, int close_fd)
{
    pthread_mutex_lock(&p->mu);
    if (close_fd && sl->fd >= 0) {
        close(sl->fd);
        sl->fd = -1;
    }
    sl->busy = 0;
    if (--p->sync_busy == 0 && p->stopping)
        pthread_cond_broadcast(&p->cv); /* peer_stop waits for it */
    pthread_mutex_unlock(&p->mu);
}

/* Receives one reply, its header into *r and (a READ's) its len bytes of
 * data into data, busy-polling with the receive itself until until_ns
 * (recvmsg MSG_DONTWAIT, sched_yield between) and blocking after that: the
 * reply is taken in as few system calls as it arrives in, with no poll()
 * before it (each call costs over a microsecond on a VM). The layout is
 * fixed (data, or zeros when refused, always follows), so the bytes can go
 * to their place before the header is checked; a bad header fails the
 * request, which is then run again. *hdr_ns gets when the header was in.
 * Returns 0, -ECONNRESET, -ETIMEDOUT (SO_RCVTIMEO) or -errno. */
static int spin_recv_reply(int fd, cr__tcp_hdr_t *r, char *data, uint64_t len, uint64_t until_ns,
                           uint64_t *hdr_ns)
{
    size_t hgot = 0;
    uint64_t dgot = 0;
    int spin = 1;
    while (hgot < sizeof *r || dgot < len) {
        struct iovec iov[2];
        int n = 0;
        if (hgot < sizeof *r)
            iov[n++] = (struct iovec){(char *)r + hgot, sizeof *r - hgot};
        if (dgot < len)
            iov[n++] = (struct iovec){data + dgot, (size_t)(len - dgot)};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        spin = spin && cr__now_ns() < until_ns;
        ssize_t g = recvmsg(fd, &mh, spin ? MSG_DONTWAIT : MSG_WAITALL);
        if (g > 0) {
            size_t h = (size_t)g < sizeof *r - hgot ? (size_t)g : sizeof *r - hgot;
            hgot += h;
            dgot += (uint64_t)g - h;
            if (h && hgot == sizeof *r)
                *hdr_ns = cr__now_ns();
            continue;
        }
        if (g == 0)
            return -ECONNRESET;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return CR__ERRNO();
        if (!spin)
            return -ETIMEDOUT; /* SO_RCVTIMEO: the peer stalled */
        sched_yield(); /* the thread we wait for may share this CPU */
    }
    return 0;
}

/* Runs slices [first, first + k) of t on fd (with crc, hashing a READ's
 * slices as they land); *status gets the first error
 * the server returned. With spin_ns, the first reply is busy-polled for up
 * to spin_ns after the send while *fast says replies come that soon; *fast
 * is then set from this reply's latency. Returns 0 or an I/O error (the
 * connection is then unusable). */
static int sync_group(int fd, cr__xfer_task_t *t, uint64_t slice, uint64_t first, int k,
                      int crc, uint64_t spin_ns, atomic_int *fast, int *status)
{
    cr__tcp_hdr_t h[SYNC_GROUP];
    struct iovec iov[3 * SYNC_GROUP];
    int cnt = 0, write = t->opcode == CR_XFER_WRITE;
    uint8_t op = write ? CR__TCP_WRITE : CR__TCP_READ;
    for (int i = 0; i < k; i++) {
        uint64_t off = (first + (uint64_t)i) * slice;
        uint64_t len = t->length - off < slice ? t->length - off : slice;
        cr__tcp_hdr_enc(&h[i], op, 0, (uint32_t)i, t->remote_addr + off, len);
        cr__tcp_hdr_add_flags(&h[i], CR__TCP_F_WAITS);
        iov[cnt].iov_base = &h[i];
        iov[cnt++].iov_len = sizeof h[i];
        if (t->has_cap) {
            cr__tcp_hdr_set_cap(&h[i]);
            iov[cnt].iov_base = t->cap;
            iov[cnt++].iov_len = CR__TCP_CAP_LEN;
        }
        if (write) {
            iov[cnt].iov_base = t->local + off;
            iov[cnt++].iov_len = len;
        }
    }
    int rc = cr__tcp_writev_full(fd, iov, cnt);
    uint64_t sent = spin_ns ? cr__now_ns() : 0;
    int spin = !rc && spin_ns && atomic_load_explicit(fast, memory_order_relaxed);
    for (int i = 0; !rc && i < k; i++) {
        uint64_t off = (first + (uint64_t)i) * slice;
        uint64_t len = t->length - off < slice ? t->length - off : slice;
        cr__tcp_hdr_t r;
        int data_in = i == 0 && spin && !write; /* the first reply's data comes with it */
        uint64_t hdr_ns = 0;
        if (i == 0 && spin)
            rc = spin_recv_reply(fd, &r, data_in ? t->local + off : NULL, data_in ? len : 0,
                                 sent + spin_ns, &hdr_ns);
        else
            rc = cr__tcp_recv_full(fd, &r, sizeof r);
        if (rc)
            break;
        if (i == 0 && spin_ns) /* the peer's latency: until its reply began */
            atomic_store_explicit(fast, (hdr_ns ? hdr_ns : cr__now_ns()) - sent <= spin_ns,
                                  memory_order_relaxed);
        if (cr__tcp_hdr_dec(&r) || r.opcode != (op | CR__TCP_RESP) || r.seq != (uint32_t)i ||
            r.addr != t->remote_addr + off || r.len != (write ? 0 : len)) {
            rc = -EPROTO;
            break;
        }
        if (!write && !data_in) /* data, or zeros when refused: the layout never depends on status */
            rc = cr__tcp_recv_full(fd, t->local + off, len);
        if (!write && !rc && !r.status && t->want_crc && crc)
            cr__xfer_task_crc_range(t, off, len);
        if (r.status && !*status)
            *status = r.status < 0 ? r.status : -EIO;
    }
    return rc;
}

static int sync_try(tcp_state_t *st, tcp_peer_t *p, cr__xfer_task_t *t)
{
    /* at most 1 MiB and one in-flight window: more on one connection at
     * once thrashes the cache (the queue spreads it over its connections) */
    if (!st->sync_path || !t->caller_waits || t->length > TCP_SYNC_MAX ||
        t->length > st->window_bytes)
        return 0;
    uint64_t now = cr__now_ns();
    pthread_mutex_lock(&p->mu);
    if (p->stopping || p->n_retry || p->q_head) { /* the queue runs: keep order with it */
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    uint32_t up = up_lnic_mask(p, now);
    int pi = -1;
    for (int i = 0; i < p->n_paths && pi < 0; i++)
        if (path_up(&p->paths[i], now) && allowed(t, p->paths[i].lnic, up))
            pi = i;
    struct tcp_sync_slot *sl = NULL;
    for (int i = 0; pi >= 0 && i < TCP_SYNC_SLOTS; i++) {
        struct tcp_sync_slot *x = &p->sync[i];
        if (x->busy)
            continue;
        if (x->fd >= 0 && x->path == pi) { /* a live connection on our path: best */
            sl = x;
            break;
        }
        if (!sl || (sl->fd >= 0 && x->fd < 0))
            sl = x; /* else an empty slot, else one connected elsewhere */
    }
    if (!sl) {
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    sl->busy = 1;
    p->sync_busy++;
    if (sl->fd >= 0 && sl->path != pi) {
        close(sl->fd);
        sl->fd = -1;
    }
    pthread_mutex_unlock(&p->mu);

    tcp_path_t *pa = &p->paths[pi];
    if (sl->fd < 0) {
        cr__seg_nic_t remote;
        memset(&remote, 0, sizeof remote);
        if (path_remote(p, pa, &remote)) {
            sync_release(p, sl, 0);
            return 0;
        }
        int fd = dial(st, pa->lnic, &remote);
        if (fd < 0) {
            /* as a sender would: with no path left the peer is unreachable
             * now, fail at once rather than let the queue wait out another
             * connect timeout */
            int gone = path_failed(p, pi, &remote, fd);
            sync_release(p, sl, 0);
            if (!gone)
                return 0; /* the queue tries the other paths */
            cr__xfer_task_done(t, fd == -ETIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH);
            return 1;
        }
        /* per send/receive call, i.e. progress-based: a frozen peer fails
         * the caller after the stall time, a slow but moving one never */
        cr__net_set_timeouts(fd, (int)(st->cfg.stall_ms ? st->cfg.stall_ms : st->cfg.timeout_ms));
        pthread_mutex_lock(&p->mu);
        sl->fd = fd;
        sl->path = pi;
        int stop = p->stopping;
        pthread_mutex_unlock(&p->mu);
        if (stop) {
            sync_release(p, sl, 1);
            return 0;
        }
    }
    uint64_t slice = st->cfg.slice_size;
    uint64_t n_sl = (t->length + slice - 1) / slice;
    int status = 0, rc = 0;
    for (uint64_t first = 0; !rc && first < n_sl; first += SYNC_GROUP) {
        if (t->deadline_ns && cr__now_ns() > t->deadline_ns) {
            rc = -ETIMEDOUT;
            break;
        }
        int k = (int)(n_sl - first < SYNC_GROUP ? n_sl - first : SYNC_GROUP);
        rc = sync_group(sl->fd, t, slice, first, k, st->crc_read, st->spin_ns, &p->sync_fast,
                        &status);
    }
    if (rc) {
        sync_release(p, sl, 1);
        if (rc != -ETIMEDOUT && !(t->deadline_ns && cr__now_ns() > t->deadline_ns))
            return 0; /* queue it: failover and retries live there */
        cr__xfer_task_done(t, -ETIMEDOUT);
        return 1;
    }
    sync_release(p, sl, 0);
    if (!status) {
        atomic_fetch_add_explicit(&st->nic_bytes[pa->lnic], t->length, memory_order_relaxed);
        cr__xfer_task_progress(t, t->length);
    }
    atomic_fetch_add_explicit(&st->sync_done, 1, memory_order_relaxed);
    cr__xfer_task_done(t, status);
    return 1;
}

int cr__tcp_submit(void *state, cr__xfer_peer_t *xp, cr__xfer_task_t **tasks, size_t n)
{
    tcp_state_t *st = state;
    if (atomic_load(&st->stopping))
        return -ECANCELED;
    tcp_peer_t *p = cr__tcp_peer_get(st, xp);
    if (!p)
        return -ENOMEM;
    if (n == 1 && sync_try(st, p, tasks[0]))
        return 0;
    pthread_mutex_lock(&p->mu);
    if (p->stopping) {
        pthread_mutex_unlock(&p->mu);
        return -ECANCELED;
    }
    for (size_t i = 0; i < n; i++) {
        cr__xfer_task_t *t = tasks[i];
        t->tp_next = NULL;
        t->tp_carved = 0;
        atomic_store(&t->tp_settled, 0);
        atomic_store(&t->tp_error, 0);
        if (p->q_tail)
            p->q_tail->tp_next = t;
        else
            p->q_head = t;
        p->q_tail = t;
    }
    if (atomic_fetch_add(&p->outstanding, n) == 0) /* idle -> busy: the stall clock starts */
        atomic_store_explicit(&p->progress_ns, cr__now_ns(), memory_order_relaxed);
    wake_peer_locked(p);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void cr__tcp_peers_stop(tcp_state_t *st)
{
    pthread_mutex_lock(&st->peers_mu);
    tcp_peer_t *p = st->peers;
    st->peers = NULL;
    pthread_mutex_unlock(&st->peers_mu);
    while (p) {
        tcp_peer_t *n = p->next;
        peer_stop(p);
        p->xp->transport_peer = NULL;
        peer_free(p);
        p = n;
    }
}

/* Watchdog pass: cut connections that stopped making progress (their
 * slices are retried elsewhere) and fail queued work past its deadline. */
void cr__tcp_watchdog_scan(tcp_state_t *st)
{
    uint64_t now = cr__now_ns();
    pthread_mutex_lock(&st->peers_mu);
    for (tcp_peer_t *p = st->peers; p; p = p->next) {
        pthread_mutex_lock(&p->mu);
        for (int i = 0; i < p->n_conns; i++) {
            tcp_conn_t *c = p->conns[i];
            if (c->fd < 0 || atomic_load(&c->dead) || ring_used(c) == 0)
                continue;
            uint64_t lp = atomic_load(&c->last_progress_ns);
            if (now > lp && now - lp > st->stall_ns) {
                CR_LOG_WARN(LOGC, "connection to %s (path %d) stalled for %llu ms: cutting it",
                            p->xp->name, c->path, (unsigned long long)((now - lp) / 1000000));
                atomic_store(&c->dead, 1);
                shutdown(c->fd, SHUT_RDWR);
            }
        }
        /* fault isolation: a peer with work that answered nothing for
         * abort_ns (frozen, or every connection black-holed) fails all of
         * it with -ETIMEDOUT, in flight and queued, so callers fail over to
         * another replica instead of waiting out the request timeout */
        uint64_t pr = atomic_load_explicit(&p->progress_ns, memory_order_relaxed);
        if (st->abort_ns && atomic_load(&p->outstanding) > 0 && now > pr &&
            now - pr > st->abort_ns) {
            CR_LOG_RL(CR__LOG_WARN, LOGC,
                      "segment %s: no progress for %llu ms with %zu requests in flight: "
                      "failing them", p->xp->name, (unsigned long long)((now - pr) / 1000000),
                      atomic_load(&p->outstanding));
            atomic_store(&p->progress_ns, now);
            atomic_fetch_add(&st->aborts, 1);
            for (int i = 0; i < p->n_conns; i++) {
                tcp_conn_t *c = p->conns[i];
                if (c->fd < 0 || ring_used(c) == 0)
                    continue;
                c->aborted = 1;
                atomic_store(&c->dead, 1);
                shutdown(c->fd, SHUT_RDWR);
            }
            fail_queued_locked(p, -ETIMEDOUT);
        }
        /* deadlines of queued work */
        for (size_t i = 0; i < p->n_retry;) {
            if (now > p->retry[i].task->deadline_ns) {
                tcp_slice_t s = p->retry[i];
                p->retry[i] = p->retry[--p->n_retry];
                settle(p, s.task, s.len, -ETIMEDOUT);
            } else {
                i++;
            }
        }
        cr__xfer_task_t **pp = &p->q_head, *prev = NULL;
        while (*pp) {
            cr__xfer_task_t *t = *pp;
            if (now > t->deadline_ns) {
                *pp = t->tp_next;
                if (p->q_tail == t)
                    p->q_tail = prev;
                fail_rest_locked(p, t, -ETIMEDOUT);
                continue;
            }
            prev = t;
            pp = &t->tp_next;
        }
        wake_peer_locked(p); /* also bounds any missed wakeup to 100 ms */
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_unlock(&st->peers_mu);
}

uint64_t cr__xfer_tcp_debug_aborts(void *state)
{
    return atomic_load(&((tcp_state_t *)state)->aborts);
}

void cr__xfer_tcp_debug_nic_bytes(void *state, uint64_t out[CR_XFER_MAX_NICS])
{
    tcp_state_t *st = state;
    for (int i = 0; i < CR_XFER_MAX_NICS; i++)
        out[i] = atomic_load(&st->nic_bytes[i]);
}
