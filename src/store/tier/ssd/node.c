/* Node disk tier runtime (node.h). */
#include "store/tier/ssd/node.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/auth/auth.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "common/status.h"
#include "store/rpc/client.h"
#include "store/tier/ssd/ssd.h"
#include "store/tier/tier.h"

#define COMP "tier"
#define CONN_MAX 64
/* Listener limits (issue 11, as every crescent listener): half of the
 * connections per source address (the same-host socket counts as one
 * source); a connection must send its first request (security off) or
 * finish the key's handshake (on) within FIRST_FRAME_MS, a request's bytes
 * within FIRST_FRAME_MS once it started, and an idle one is closed after
 * IDLE_MS (clients reconnect: tier_read.c retries a pooled connection the
 * node closed). */
#define CONN_PER_SOURCE (CONN_MAX / 2)
/* At CONN_MAX live connections a newcomer from a source holding fewer
 * than the busiest one takes the place of that source's longest-idle
 * connection (cr__net_fair_victim; docs/security.md), which is shut down
 * and closes by itself: CONN_SLOTS leaves room for those. */
#define CONN_SLOTS (2 * CONN_MAX)
#define FIRST_FRAME_MS 5000
#define IDLE_MS 60000
#define LOCAL_MAX 256 /* same-host clients holding the data file (watched, no thread) */
#define CONN_BUDGET (128ull << 20) /* bytes of objects read or being sent, per connection */
#define VALUE_MAX (1ull << 30)    /* largest object the read server serves */
#define CORRUPT_MAX 1024

typedef struct pend {
    char *key;
    uint32_t key_len;
    uint64_t version, off;
} pend_t;

struct cr__tier_node {
    cr__tier_node_cfg_t cfg;
    cr__ssd_t *ssd;
    char seg[CR__RPC_SEGMENT_NAME_MAX];
    char host[128];
    int lfd;
    int ufd, ro_fd; /* same-host fast path: abstract Unix listener, read-only data fd */
    uint16_t port;
    cr__rpc_client_t *rpc;
    pthread_t sync_thr, acc_thr;
    int sync_started, acc_started;
    cr__ssd_ring_t sync_ring; /* the sync thread's, made at start (a failure fails the start) */
    int sync_ring_ok;
    atomic_int stop;
    pthread_mutex_t mu; /* guards conns, n_conns, locals, n_locals, corrupt */
    pthread_cond_t cv;
    struct tconn *conns[CONN_SLOTS]; /* each freed by its thread once forgotten */
    int n_conns;                     /* including the evicted ones still closing */
    int locals[LOCAL_MAX]; /* same-host clients served: closed when they hang up */
    int n_locals;
    pend_t corrupt[CORRUPT_MAX];
    size_t n_corrupt;
    atomic_ullong reads, read_errors, crc_errors, offloads, offload_errors;
};

const char *cr__tier_node_segment(const cr__tier_node_t *t) { return t->seg; }

static void note_corrupt(cr__tier_node_t *t, const char *key, uint32_t kl, uint64_t version,
                         uint64_t off)
{
    atomic_fetch_add(&t->crc_errors, 1);
    CR_LOG_ERROR(COMP, "object '%.*s' at disk offset %" PRIu64 " failed its checks (torn or "
                 "corrupted): served as a miss, reported to the master",
                 kl > 64 ? 64 : (int)kl, key, off);
    pthread_mutex_lock(&t->mu);
    if (t->n_corrupt < CORRUPT_MAX) {
        char *k = malloc(kl);
        if (k) {
            memcpy(k, key, kl);
            t->corrupt[t->n_corrupt++] = (pend_t){k, kl, version, off};
        }
    }
    pthread_mutex_unlock(&t->mu);
}

/* ---- read server ----------------------------------------------------------- */

/* One read-server connection (TCP or the same-host socket). */
typedef struct tconn {
    int fd;
    int evicted; /* shut down for a newcomer, closing: not counted; t->mu */
    struct sockaddr_storage src;
    _Atomic uint64_t idle_ms; /* idle since (ms), CR__NET_BUSY during a request */
} tconn_t;

/* Forgets connection fd (t->mu held); the caller frees its record. */
static void conn_forget_locked(cr__tier_node_t *t, int fd)
{
    for (int i = 0; i < t->n_conns; i++)
        if (t->conns[i]->fd == fd) {
            t->n_conns--;
            t->conns[i] = t->conns[t->n_conns];
            break;
        }
}

typedef struct conn_arg {
    cr__tier_node_t *t;
    int fd;
    tconn_t *rec; /* the connection's, in t->conns */
} conn_arg_t;

/* The read server: one thread per connection runs an io_uring event loop
 * over a window of pipelined requests, each answered as soon as its object
 * is read and checked, in whatever order that is (the reply names the
 * request's tag, tier.h), so one slow read holds up no other reply:
 *
 *  - requests are taken from the socket whenever the window has room
 *    (non-blocking, parsed out of a receive buffer), also while earlier
 *    replies are still being read or sent;
 *  - each object is read with one read of its whole extent (as fio reads
 *    one block per I/O), keeping up to --ssd_queue_depth of them in flight;
 *  - reads start in request order; each object is checked as its read
 *    completes; the oldest checked one is sent with an io_uring sendmsg
 *    (reply header + value: the one copy, into the socket) while the disk
 *    keeps reading the next ones;
 *  - a slot (and its read buffer, kept for the next request) is free again
 *    once its reply is sent; a new request takes the lowest free slot, so an
 *    idle connection's buffers stay few.
 *
 * Bounds: WIN_MAX requests and CONN_BUDGET bytes of objects per connection
 * (one object of up to VALUE_MAX is always admitted), one send in flight,
 * a reply the client does not take within SEND_TIMEOUT_MS closes the
 * connection, and so do a peer that sends no first request (security off)
 * within FIRST_FRAME_MS, a request whose bytes do not all come within
 * FIRST_FRAME_MS once it started, and IDLE_MS without requests. */

#define WIN_MAX 256
#define RBUF_SIZE (64u << 10) /* receive buffer: >= one request of the longest key */
#define SEND_TIMEOUT_MS 30000
#define IDLE_FREE_POLLS 10 /* idle waits (500 ms) before the read buffers are freed */

enum { S_QUEUED = 1, S_READING, S_READY };
enum { U_READ = 1, U_SEND, U_POLL };

typedef struct rslot {
    char key[CR__RPC_KEY_MAX];
    uint32_t key_len;
    uint64_t version, off, size, roff, rlen;
    int status, state;
    uint64_t dl, got; /* disk length, bytes read so far */
    uint64_t seq;     /* arrival order on the connection */
    uint32_t tag;     /* the client's, echoed in the reply */
    uint8_t *mem;     /* CR__TIER_BLOCK-aligned read buffer (kept) */
    uint64_t cap;
} rslot_t;

typedef struct rconn {
    cr__tier_node_t *t;
    int fd;
    struct io_uring ring;
    int ring_ok;
    unsigned qd, reading; /* reads allowed / in flight */
    rslot_t *slots;
    size_t nslots, n, sent_si; /* slots, slots in use (state != 0), the one sending */
    uint64_t seq;              /* requests taken so far */
    uint64_t bytes;         /* disk bytes of the window's objects */
    uint8_t *rbuf;
    size_t rpos, rlen;
    int eof, bad, polling, sending;
    int starved;         /* intake stopped for want of bytes from the socket */
    uint64_t partial_t0; /* when a request began arriving that is not whole yet */
    uint64_t quiet_t0;   /* when the connection last became idle */
    unsigned quiet_max;  /* its allowed silence (first request, then idle) */
    uint64_t send_t0;
    uint8_t rep[CR__TIER_RD_REP]; /* the reply in flight */
    struct iovec iov[2];
    struct msghdr mh;
} rconn_t;

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static struct io_uring_sqe *rc_sqe(rconn_t *c)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring);
    if (!sqe) { /* cannot happen (the ring holds qd reads + a send + a poll) */
        io_uring_submit(&c->ring);
        sqe = io_uring_get_sqe(&c->ring);
    }
    return sqe;
}

static void rc_read_submit(rconn_t *c, size_t si)
{
    rslot_t *q = &c->slots[si];
    struct io_uring_sqe *sqe = rc_sqe(c);
    if (!sqe) {
        c->bad = 1;
        return;
    }
    uint64_t left = q->dl - q->got;
    io_uring_prep_read(sqe, cr__ssd_fd(c->t->ssd), q->mem + q->got,
                       (unsigned)(left > (1u << 30) ? (1u << 30) : left), q->off + q->got);
    io_uring_sqe_set_data64(sqe, ((uint64_t)U_READ << 32) | si);
    q->state = S_READING;
    c->reading++;
}

/* Takes the requests already received, while the window has room: 0, or
 * -1 to close (bad magic or key length, a peer that hung up, an error). */
static int rc_intake(rconn_t *c)
{
    cr__tier_node_t *t = c->t;
    c->starved = 0;
    while (c->n < c->nslots) {
        size_t avail = c->rlen - c->rpos;
        const uint8_t *h = c->rbuf + c->rpos;
        if (avail >= CR__TIER_RD_REQ_FIXED) {
            if (rd32(h) != CR__TIER_RD_MAGIC || rd32(h + 52) != 0)
                return -1;
            uint32_t kl = rd32(h + 4);
            if (kl == 0 || kl > CR__RPC_KEY_MAX)
                return -1;
            if (avail >= CR__TIER_RD_REQ_FIXED + kl) {
                uint64_t off = rd64(h + 16), size = rd64(h + 24), roff = rd64(h + 32),
                         rlen = rd64(h + 40);
                int st = 0;
                uint64_t dl = 0;
                if (size == 0 || size > VALUE_MAX || roff > size || rlen > size - roff ||
                    (off & (CR__TIER_BLOCK - 1)))
                    st = CR_E_INVALID_PARAMS;
                else if ((dl = cr__tier_disk_len(kl, size)) > cr__ssd_capacity(t->ssd) ||
                         off > cr__ssd_capacity(t->ssd) - dl)
                    st = CR_E_INVALID_PARAMS;
                if (st)
                    dl = 0;
                if (c->n && c->bytes + dl > CONN_BUDGET)
                    return 0; /* taken once the oldest replies are out */
                size_t si = 0;
                while (c->slots[si].state) /* c->n < c->nslots: one is free */
                    si++;
                rslot_t *q = &c->slots[si];
                memcpy(q->key, h + CR__TIER_RD_REQ_FIXED, kl);
                q->key_len = kl;
                q->version = rd64(h + 8);
                q->off = off;
                q->size = size;
                q->roff = roff;
                q->rlen = rlen;
                q->tag = rd32(h + 48);
                q->seq = c->seq++;
                q->dl = dl;
                q->got = 0;
                if (!st && q->cap < dl) {
                    free(q->mem);
                    q->cap = 0;
                    if (!(q->mem = cr__ssd_buf_alloc(dl, &q->cap)))
                        st = -ENOMEM;
                }
                if (st)
                    q->dl = 0;
                q->status = st;
                q->state = st ? S_READY : S_QUEUED;
                c->bytes += q->dl;
                c->n++;
                c->rpos += CR__TIER_RD_REQ_FIXED + kl;
                c->quiet_max = IDLE_MS; /* it sent a request */
                continue;
            }
        }
        if (c->eof)
            return 0;
        if (c->rpos) {
            memmove(c->rbuf, c->rbuf + c->rpos, avail);
            c->rlen = avail;
            c->rpos = 0;
        }
        ssize_t r = recv(c->fd, c->rbuf + c->rlen, RBUF_SIZE - c->rlen, MSG_DONTWAIT);
        if (r > 0) {
            c->rlen += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            c->starved = 1;
            return 0;
        }
        c->eof = 1; /* hung up (or failed): nobody to answer */
        return -1;
    }
    return 0;
}

/* The slot in `state` that arrived first, or nslots. */
static size_t rc_oldest(const rconn_t *c, int state)
{
    size_t best = c->nslots;
    for (size_t si = 0; si < c->nslots; si++)
        if (c->slots[si].state == state &&
            (best == c->nslots || c->slots[si].seq < c->slots[best].seq))
            best = si;
    return best;
}

/* Starts the reads of queued objects in request order, up to qd. */
static void rc_reads(rconn_t *c)
{
    while (c->reading < c->qd && !c->bad) {
        size_t si = rc_oldest(c, S_QUEUED);
        if (si == c->nslots)
            return;
        rc_read_submit(c, si);
    }
}

static void rc_send_submit(rconn_t *c)
{
    struct io_uring_sqe *sqe = rc_sqe(c);
    if (!sqe) {
        c->bad = 1;
        return;
    }
    io_uring_prep_sendmsg(sqe, c->fd, &c->mh, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, (uint64_t)U_SEND << 32);
    c->sending = 1;
}

/* Sends the reply of the oldest object that is read and checked. */
static void rc_send(rconn_t *c)
{
    if (c->sending || !c->n || c->bad)
        return;
    size_t si = rc_oldest(c, S_READY);
    if (si == c->nslots)
        return;
    rslot_t *q = &c->slots[si];
    c->sent_si = si;
    int32_t st = q->status;
    uint64_t len = q->status ? 0 : q->rlen;
    memcpy(c->rep, &st, 4);
    memcpy(c->rep + 4, &q->tag, 4);
    memcpy(c->rep + 8, &len, 8);
    c->iov[0] = (struct iovec){.iov_base = c->rep, .iov_len = sizeof c->rep};
    c->iov[1] = (struct iovec){.iov_base = len ? q->mem + cr__tier_hdr_len(q->key_len) + q->roff
                                               : NULL,
                               .iov_len = len};
    c->mh = (struct msghdr){.msg_iov = c->iov, .msg_iovlen = len ? 2 : 1};
    rc_send_submit(c);
    c->send_t0 = cr__now_ms();
}

static void rc_read_done(rconn_t *c, size_t si, int res)
{
    cr__tier_node_t *t = c->t;
    rslot_t *q = &c->slots[si];
    c->reading--;
    if (res <= 0) {
        q->status = CR_E_TRANSFER_FAIL;
        q->state = S_READY;
        atomic_fetch_add(&t->read_errors, 1);
        CR_LOG_RL(CR__LOG_WARN, COMP, "read server: disk read at %" PRIu64 ": %s", q->off,
                  res ? strerror(-res) : "short read");
        return;
    }
    q->got += (uint64_t)res;
    if (q->got < q->dl) {
        rc_read_submit(c, si); /* the rest of a short read */
        return;
    }
    int ck = cr__ssd_check(q->mem, q->key, q->key_len, q->version, q->size);
    if (ck) {
        q->status = CR_E_OBJECT_NOT_FOUND; /* a miss, never the bytes */
        /* a well-formed object of another key/version is a reader that
         * outlived its lease on a reused extent: not a corrupt disk */
        if (ck == -EBADMSG)
            note_corrupt(t, q->key, q->key_len, q->version, q->off);
    }
    q->state = S_READY;
}

static void rc_send_done(rconn_t *c, int res)
{
    c->sending = 0;
    if (res < 0) {
        if (res == -EINTR || res == -EAGAIN) {
            rc_send_submit(c); /* the same bytes again */
            return;
        }
        c->bad = 1;
        return;
    }
    size_t n = (size_t)res;
    while (c->mh.msg_iovlen && n >= c->mh.msg_iov->iov_len) {
        n -= c->mh.msg_iov->iov_len;
        c->mh.msg_iov++;
        c->mh.msg_iovlen--;
    }
    if (c->mh.msg_iovlen) {
        /* a partial send: the rest, same reply */
        c->mh.msg_iov->iov_base = (uint8_t *)c->mh.msg_iov->iov_base + n;
        c->mh.msg_iov->iov_len -= n;
        rc_send_submit(c);
        return;
    }
    rslot_t *q = &c->slots[c->sent_si];
    if (!q->status)
        atomic_fetch_add(&c->t->reads, 1);
    c->bytes -= q->dl;
    q->state = 0;
    c->n--;
}

static void *conn_main(void *arg)
{
    conn_arg_t *ca = arg;
    cr__tier_node_t *t = ca->t;
    int fd = ca->fd;
    tconn_t *rec = ca->rec;
    free(ca);
    /* on the heap: leaked with the buffers if I/O could not be drained */
    rconn_t *c = calloc(1, sizeof *c);
    if (!c) {
        CR_LOG_ERROR(COMP, "read connection: out of memory");
        goto gone;
    }
    c->t = t;
    c->fd = fd;
    unsigned qd = t->cfg.qd ? t->cfg.qd : 32;
    if (qd > 254)
        qd = 254;
    c->qd = qd;
    c->nslots = 2 * (size_t)qd < WIN_MAX ? 2 * (size_t)qd : WIN_MAX;
    c->slots = calloc(c->nslots, sizeof *c->slots);
    c->rbuf = malloc(RBUF_SIZE);
    if (!c->slots || !c->rbuf || io_uring_queue_init(qd + 2, &c->ring, 0) < 0) {
        CR_LOG_ERROR(COMP, "read connection: out of memory or io_uring unavailable");
        goto out;
    }
    c->ring_ok = 1;
    int sndbuf = 4 << 20; /* a 1 MiB reply in one call (capped by net.core.wmem_max) */
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    cr__net_set_timeouts(fd, 30000);
    /* security on: nothing is served to a peer without the cluster key */
    if (t->cfg.auth && cr__auth_server_fd(t->cfg.auth, fd, "tier", 5000)) {
        CR_LOG_RL(CR__LOG_WARN, COMP, "read server: refused a peer without the cluster key");
        goto out;
    }
    int idle = 0;
    /* a member proved itself in the handshake; a peer of an open node must
     * send its first request within FIRST_FRAME_MS */
    c->quiet_max = t->cfg.auth ? IDLE_MS : FIRST_FRAME_MS;
    c->quiet_t0 = cr__now_ms();
    while (!atomic_load(&t->stop) && !c->bad) {
        /* requests: when the poll said so, or ones already received that
         * waited for room */
        if ((!c->polling || c->rpos < c->rlen) && rc_intake(c))
            break;
        /* a request begun must be whole within FIRST_FRAME_MS */
        if (c->starved && c->rpos < c->rlen) {
            uint64_t now = cr__now_ms();
            if (!c->partial_t0)
                c->partial_t0 = now;
            else if (now - c->partial_t0 >= FIRST_FRAME_MS)
                break;
        } else {
            c->partial_t0 = 0;
        }
        rc_reads(c);
        rc_send(c);
        if (c->bad)
            break;
        /* for the fair share of the slots: busy or since when idle */
        atomic_store_explicit(&rec->idle_ms,
                              c->n || c->rpos < c->rlen ? CR__NET_BUSY : c->quiet_t0,
                              memory_order_relaxed);
        /* wake up for more requests while there is room for them */
        if (!c->polling && c->starved) {
            struct io_uring_sqe *sqe = rc_sqe(c);
            if (!sqe)
                break;
            io_uring_prep_poll_add(sqe, fd, POLLIN);
            io_uring_sqe_set_data64(sqe, (uint64_t)U_POLL << 32);
            c->polling = 1;
        }
        if (io_uring_submit(&c->ring) < 0)
            break;
        struct io_uring_cqe *cqe;
        struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = 500 * 1000000L};
        int rc = io_uring_wait_cqe_timeout(&c->ring, &cqe, &ts);
        if (rc == -ETIME) {
            if (!c->n && !c->partial_t0 && cr__now_ms() - c->quiet_t0 >= c->quiet_max)
                break; /* idle, or never sent a request */
            if (c->sending && cr__now_ms() - c->send_t0 > SEND_TIMEOUT_MS) {
                CR_LOG_RL(CR__LOG_WARN, COMP, "read server: a client took no reply for %d s: "
                          "closing it", SEND_TIMEOUT_MS / 1000);
                break;
            }
            if (!c->n && ++idle >= IDLE_FREE_POLLS) {
                for (size_t i = 0; i < c->nslots; i++) {
                    free(c->slots[i].mem);
                    c->slots[i].mem = NULL;
                    c->slots[i].cap = 0;
                }
                idle = 0;
            }
            continue;
        }
        if (rc < 0 && rc != -EINTR)
            break;
        idle = 0;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&c->ring, head, cqe) {
            uint64_t u = io_uring_cqe_get_data64(cqe);
            int kind = (int)(u >> 32);
            if (kind == U_READ)
                rc_read_done(c, (size_t)(uint32_t)u, cqe->res);
            else if (kind == U_SEND) {
                rc_send_done(c, cqe->res);
                if (!c->n)
                    c->quiet_t0 = cr__now_ms(); /* the last reply is out: idle from now */
            }
            else if (kind == U_POLL)
                c->polling = 0;
            seen++;
        }
        io_uring_cq_advance(&c->ring, seen);
    }
out:
    if (c->ring_ok) {
        /* reads, a send or a poll may still be in flight into/from the
         * slots' buffers: end the socket's (the send and the poll complete)
         * and wait for all before freeing anything */
        shutdown(fd, SHUT_RDWR);
        io_uring_submit(&c->ring);
        for (int waits = 0; c->reading || c->sending || c->polling;) {
            struct io_uring_cqe *cqe;
            struct __kernel_timespec ts = {.tv_sec = 1, .tv_nsec = 0};
            int rc = io_uring_wait_cqe_timeout(&c->ring, &cqe, &ts);
            if (rc == -ETIME && ++waits < 60)
                continue;
            if (rc < 0 && rc != -EINTR) {
                /* the kernel may still write into the buffers: leak them */
                CR_LOG_ERROR(COMP, "read connection: I/O still in flight at close (%s): its "
                             "buffers are not freed", strerror(-rc));
                c = NULL;
                break;
            }
            if (rc < 0)
                continue;
            uint64_t u = io_uring_cqe_get_data64(cqe);
            int kind = (int)(u >> 32);
            if (kind == U_READ)
                c->reading--;
            else if (kind == U_SEND)
                c->sending = 0;
            else if (kind == U_POLL)
                c->polling = 0;
            io_uring_cqe_seen(&c->ring, cqe);
        }
        if (c)
            io_uring_queue_exit(&c->ring);
    }
    if (c) {
        if (c->slots)
            for (size_t i = 0; i < c->nslots; i++)
                free(c->slots[i].mem);
        free(c->slots);
        free(c->rbuf);
        free(c);
    }
gone:
    pthread_mutex_lock(&t->mu);
    conn_forget_locked(t, fd);
    close(fd);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    free(rec);
    return NULL;
}

/* ---- same-host fast path (tier.h) ------------------------------------------
 * A local client gets the data file (read-only, O_DIRECT) and reads disk
 * replicas itself: no copy through this process, no socket. This thread
 * runs the checks and sends the descriptor; the connection then joins
 * t->locals, which the accept thread only watches (closed when the client
 * hangs up): its end (this node stopping or dying) tells the client to
 * stop using the descriptor. */
static void *local_main(void *arg)
{
    conn_arg_t *ca = arg;
    cr__tier_node_t *t = ca->t;
    int fd = ca->fd;
    tconn_t *rec = ca->rec;
    free(ca);
    int keep = 0;
    struct ucred cr;
    socklen_t cl = sizeof cr;
    cr__net_set_timeouts(fd, 5000);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) || cr.uid != geteuid()) {
        CR_LOG_RL(CR__LOG_WARN, COMP, "local read path: refused a process of another user");
        goto done;
    }
    if (t->cfg.auth && cr__auth_server_fd(t->cfg.auth, fd, "tier-local", 5000)) {
        CR_LOG_RL(CR__LOG_WARN, COMP, "local read path: refused pid %d without the cluster key",
                  (int)cr.pid);
        goto done;
    }
    uint8_t h[CR__TIER_LOCAL_HELLO] = {0};
    uint32_t magic = CR__TIER_LOCAL_MAGIC;
    uint64_t cap = cr__ssd_capacity(t->ssd);
    memcpy(h, &magic, 4);
    memcpy(h + 8, &cap, 8);
    keep = cr__net_send_fd(fd, h, sizeof h, t->ro_fd) == (ssize_t)sizeof h;
done:
    pthread_mutex_lock(&t->mu);
    conn_forget_locked(t, fd);
    if (keep && t->n_locals < LOCAL_MAX && !atomic_load(&t->stop))
        t->locals[t->n_locals++] = fd; /* watched by acc_main from now on */
    else
        close(fd); /* (beyond LOCAL_MAX the client still holds the file) */
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    free(rec);
    return NULL;
}

/* Closes the same-host connections whose client hung up (p: a snapshot of
 * t->locals; only this thread removes from it). */
static void locals_reap(cr__tier_node_t *t, const struct pollfd *p, int n)
{
    for (int i = 0; i < n; i++) {
        if (!p[i].revents)
            continue;
        char c;
        ssize_t r = recv(p[i].fd, &c, 1, MSG_DONTWAIT);
        if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR)))
            continue; /* a client sends nothing; a byte is ignored */
        pthread_mutex_lock(&t->mu);
        for (int j = 0; j < t->n_locals; j++)
            if (t->locals[j] == p[i].fd) {
                t->locals[j] = t->locals[--t->n_locals];
                break;
            }
        pthread_mutex_unlock(&t->mu);
        close(p[i].fd);
    }
}

static void *acc_main(void *arg)
{
    cr__tier_node_t *t = arg;
    struct pollfd p[2 + LOCAL_MAX];
    while (!atomic_load(&t->stop)) {
        p[0] = (struct pollfd){.fd = t->lfd, .events = POLLIN};
        p[1] = (struct pollfd){.fd = t->ufd, .events = POLLIN};
        pthread_mutex_lock(&t->mu);
        int nl = t->n_locals;
        for (int i = 0; i < nl; i++)
            p[2 + i] = (struct pollfd){.fd = t->locals[i], .events = POLLIN};
        pthread_mutex_unlock(&t->mu);
        if (poll(p, (nfds_t)(2 + nl), 200) < 1)
            continue;
        locals_reap(t, p + 2, nl);
        if (!((p[0].revents | p[1].revents) & POLLIN))
            continue;
        int local = !(p[0].revents & POLLIN);
        struct sockaddr_storage src;
        socklen_t sl = sizeof src;
        memset(&src, 0, sizeof src);
        int fd = accept4(local ? t->ufd : t->lfd, (struct sockaddr *)&src, &sl, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        if (!local)
            cr__net_set_nodelay(fd); /* request/reply: no Nagle wait after a handshake */
        src.ss_family = local ? AF_UNIX : src.ss_family;
        tconn_t *rec = malloc(sizeof *rec);
        if (!rec) {
            close(fd);
            continue;
        }
        *rec = (tconn_t){.fd = fd, .src = src};
        atomic_store(&rec->idle_ms, cr__now_ms());
        const char *why = NULL;
        pthread_mutex_lock(&t->mu);
        int same = 0, live = 0;
        cr__net_peer_t peers[CONN_SLOTS];
        int idx[CONN_SLOTS];
        for (int i = 0; i < t->n_conns; i++) {
            tconn_t *o = t->conns[i];
            if (o->evicted)
                continue;
            same += cr__net_same_source(&o->src, &src);
            peers[live] = (cr__net_peer_t){&o->src, atomic_load(&o->idle_ms)};
            idx[live++] = i;
        }
        if (atomic_load(&t->stop))
            why = "stopping";
        else if (same >= CONN_PER_SOURCE)
            why = "too many connections from one address";
        else if (t->n_conns >= CONN_SLOTS)
            why = "too many connections (closing ones included)";
        else if (live >= CONN_MAX) {
            int v = cr__net_fair_victim(peers, live, &src);
            if (v < 0) {
                why = "too many connections, this address among the busiest";
            } else {
                tconn_t *victim = t->conns[idx[v]];
                victim->evicted = 1;
                shutdown(victim->fd, SHUT_RDWR); /* its thread closes it */
                CR_LOG_RL(CR__LOG_WARN, COMP, "read server: too many connections: closed the "
                          "longest-idle one of the busiest address for a new one");
            }
        }
        if (why) {
            pthread_mutex_unlock(&t->mu);
            CR_LOG_RL(CR__LOG_WARN, COMP, "read server: %s, refusing one", why);
            free(rec);
            close(fd);
            continue;
        }
        t->conns[t->n_conns++] = rec;
        pthread_mutex_unlock(&t->mu);
        conn_arg_t *ca = malloc(sizeof *ca);
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (!ca || (ca->t = t, ca->fd = fd, ca->rec = rec,
                    pthread_create(&th, &at, local ? local_main : conn_main, ca))) {
            free(ca);
            pthread_mutex_lock(&t->mu);
            conn_forget_locked(t, fd);
            pthread_mutex_unlock(&t->mu);
            close(fd);
            free(rec);
        }
        pthread_attr_destroy(&at);
    }
    return NULL;
}

/* ---- master side: mount, report, sync ------------------------------------- */

static int call(cr__tier_node_t *t, cr__rpc_msg_t *req, cr__rpc_msg_t *rep)
{
    req->client_id = t->cfg.id;
    req->segment = t->seg;
    int rc = cr__rpc_client_call(t->rpc, req, rep);
    if (rc)
        return rc;
    return rep->status;
}

typedef struct report_ctx {
    cr__tier_node_t *t;
    cr__rpc_msg_t req;
    uint32_t n;
    uint64_t adopted, refused;
    int err;
    cr__ssd_ring_t *ring;
} report_ctx_t;

static void erase_at(cr__tier_node_t *t, cr__ssd_ring_t *ring, const uint64_t *offs, size_t n)
{
    static _Alignas(4096) const uint8_t zero[CR__TIER_BLOCK];
    cr__ssd_io_t ios[64];
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < 64 && i < n; k++, i++)
            ios[k] = (cr__ssd_io_t){.write = 1, .buf = (void *)zero, .off = offs[i],
                                    .len = CR__TIER_BLOCK};
        cr__ssd_run(t->ssd, ring, ios, k);
    }
}

static int report_flush(report_ctx_t *c)
{
    if (!c->n)
        return 0;
    cr__rpc_msg_t rep = {0};
    c->req.type = CR__RPC_TIER_REPORT;
    c->req.n_items = c->n;
    int rc = call(c->t, &c->req, &rep);
    if (rc == 0) {
        uint64_t offs[CR__RPC_BATCH_MAX];
        size_t ne = 0;
        for (uint32_t i = 0; i < rep.n_items && i < c->n; i++) {
            if (rep.items[i].status == 0)
                c->adopted++;
            else {
                c->refused++;
                /* the master holds another version (or the extent is bad):
                 * this copy is stale, erase it so it never comes back */
                if (rep.items[i].status == CR_E_OBJECT_ALREADY_EXISTS)
                    offs[ne++] = c->req.items[i].replicas[0].shards[0].addr;
            }
        }
        if (ne && c->ring)
            erase_at(c->t, c->ring, offs, ne);
    }
    cr__rpc_msg_free(&rep);
    cr__rpc_msg_free(&c->req);
    c->n = 0;
    return rc;
}

static int report_cb(void *arg, const char *key, uint32_t kl, uint64_t version, uint64_t size,
                     uint64_t off, uint64_t dl)
{
    report_ctx_t *c = arg;
    if (!c->req.items) {
        c->req.items = cr__rpc_msg_alloc(&c->req, CR__RPC_BATCH_MAX * sizeof *c->req.items);
        if (!c->req.items)
            return c->err = -ENOMEM;
    }
    cr__rpc_item_t *it = &c->req.items[c->n];
    it->key = cr__rpc_msg_strdup(&c->req, key, kl);
    it->key_len = kl;
    it->version = version;
    it->size = size;
    it->replica_id = off;
    it->n_replicas = 1;
    it->replicas = cr__rpc_msg_alloc(&c->req, sizeof *it->replicas);
    cr__rpc_shard_t *sh = cr__rpc_msg_alloc(&c->req, sizeof *sh);
    if (!it->key || !it->replicas || !sh)
        return c->err = -ENOMEM;
    *sh = (cr__rpc_shard_t){.segment = c->t->seg, .addr = off, .len = dl};
    it->replicas[0] = (cr__rpc_replica_t){.n_shards = 1, .shards = sh};
    if (++c->n == CR__RPC_BATCH_MAX) {
        int rc = report_flush(c);
        if (rc)
            return c->err = rc;
    }
    return 0;
}

/* Mounts the disk segment and re-reports everything on disk. */
static int mount_and_report(cr__tier_node_t *t, cr__ssd_ring_t *ring, char *err, size_t errlen)
{
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = CR__RPC_TIER_MOUNT;
    req.size = cr__ssd_capacity(t->ssd);
    int rc = call(t, &req, &rep);
    cr__rpc_msg_free(&rep);
    if (rc) {
        if (err)
            snprintf(err, errlen, "mounting disk segment %s at %s: %s (%d)", t->seg,
                     t->cfg.master, cr_strerror(rc), rc);
        return rc;
    }
    report_ctx_t c = {.t = t, .ring = ring};
    uint64_t trunc = 0;
    long found = cr__ssd_scan(t->ssd, report_cb, &c, &trunc);
    if (!c.err)
        c.err = report_flush(&c);
    else
        cr__rpc_msg_free(&c.req);
    if (found < 0 || c.err) {
        if (err)
            snprintf(err, errlen, "re-reporting disk objects: %s",
                     found < 0 ? strerror((int)-found) : cr_strerror(c.err));
        return found < 0 ? (int)found : c.err;
    }
    CR_LOG_INFO(COMP, "disk segment %s: %ld objects on disk, %" PRIu64 " adopted, %" PRIu64
                " refused (stale), %" PRIu64 " truncated extents skipped",
                t->seg, found, c.adopted, c.refused, trunc);
    return 0;
}

typedef struct task_buf {
    uint8_t *buf;
    uint64_t cap;
} task_buf_t;

/* Offload writes: each object is encoded (header, value copied with its
 * crc computed) right before its write is submitted, so the disk writes
 * one while the next is encoded. */
typedef struct off_ctx {
    const cr__rpc_item_t *items;
    const cr__ssd_io_t *ios;
    const size_t *map;
} off_ctx_t;

static int off_prep(void *arg, size_t j)
{
    off_ctx_t *oc = arg;
    const cr__rpc_item_t *it = &oc->items[oc->map[j]];
    cr__ssd_encode(oc->ios[j].buf, it->key, it->key_len, it->version,
                   (const void *)(uintptr_t)it->replicas[0].shards[0].addr, it->size);
    return 0;
}

static void *sync_main(void *arg)
{
    cr__tier_node_t *t = arg;
    cr__ssd_ring_t *ring = &t->sync_ring;
    cr__rpc_msg_t done = {0}; /* completions for the next sync */
    uint32_t n_done = 0;
    task_buf_t *bufs = calloc(CR__RPC_BATCH_MAX, sizeof *bufs);
    cr__ssd_io_t *ios = calloc(CR__RPC_BATCH_MAX, sizeof *ios);
    size_t *map = calloc(CR__RPC_BATCH_MAX, sizeof *map);
    int idle = 0, unlinked = 0;
    uint64_t next_link_check = 0;
    while (bufs && ios && map && !atomic_load(&t->stop)) {
        /* the data file deleted (or replaced) behind the node: still used
         * through its descriptor, lost at the next start. Said once, loud. */
        uint64_t tnow = cr__now_ns();
        if (tnow >= next_link_check) {
            const char *path;
            int linked = cr__ssd_linked(t->ssd, &path);
            if (!linked && !unlinked)
                CR_LOG_ERROR(COMP, "disk tier: %s was deleted or replaced while in use: its "
                                   "objects stay readable until this node stops and are lost "
                                   "then; restart the node on a directory it owns",
                             path);
            else if (linked && unlinked)
                CR_LOG_WARN(COMP, "disk tier: %s is back", path);
            unlinked = !linked;
            next_link_check = tnow + 5000000000ull;
        }
        cr__rpc_msg_t req = done, rep = {0};
        memset(&done, 0, sizeof done);
        req.type = CR__RPC_TIER_SYNC;
        req.n_items = n_done;
        /* corruption reports */
        pthread_mutex_lock(&t->mu);
        size_t nc = t->n_corrupt;
        pend_t cor[CORRUPT_MAX];
        memcpy(cor, t->corrupt, nc * sizeof *cor);
        t->n_corrupt = 0;
        pthread_mutex_unlock(&t->mu);
        if (nc) {
            cr__rpc_item_t *its = cr__rpc_msg_alloc(&req, (n_done + nc) * sizeof *its);
            if (its) {
                if (n_done)
                    memcpy(its, req.items, n_done * sizeof *its);
                for (size_t i = 0; i < nc; i++)
                    its[n_done + i] = (cr__rpc_item_t){.key = cr__rpc_msg_strdup(&req, cor[i].key, cor[i].key_len),
                                                      .key_len = cor[i].key_len,
                                                      .version = cor[i].version,
                                                      .replica_id = cor[i].off,
                                                      .flags = CR__TIER_OP_CORRUPT};
                req.items = its;
                req.n_items = n_done + (uint32_t)nc;
            }
            for (size_t i = 0; i < nc; i++)
                free(cor[i].key);
        }
        n_done = 0;
        int rc = call(t, &req, &rep);
        cr__rpc_msg_free(&req);
        if (rc == CR_E_SEGMENT_NOT_FOUND) {
            /* the master restarted or dropped us: mount again, re-report */
            cr__rpc_msg_free(&rep);
            if (mount_and_report(t, ring, NULL, 0))
                usleep(500 * 1000);
            continue;
        }
        if (rc) {
            cr__rpc_msg_free(&rep);
            usleep(200 * 1000);
            continue;
        }
        uint32_t n = rep.n_items;
        if (!n) {
            cr__rpc_msg_free(&rep);
            idle = idle < 10 ? idle + 1 : idle;
            usleep(idle < 3 ? 5000 : 50000);
            continue;
        }
        idle = 0;
        done.items = cr__rpc_msg_alloc(&done, n * sizeof *done.items);
        if (!done.items) {
            cr__rpc_msg_free(&rep);
            continue;
        }
        /* erases first: a later write to the same place must land after */
        uint64_t offs[CR__RPC_BATCH_MAX];
        size_t ne = 0;
        for (uint32_t i = 0; i < n; i++)
            if (rep.items[i].flags == CR__TIER_OP_ERASE)
                offs[ne++] = rep.items[i].replica_id;
        if (ne)
            erase_at(t, ring, offs, ne);
        size_t k = 0;
        for (uint32_t i = 0; i < n; i++) {
            cr__rpc_item_t *it = &rep.items[i];
            cr__rpc_item_t *d = &done.items[n_done++];
            *d = (cr__rpc_item_t){.key = cr__rpc_msg_strdup(&done, it->key, it->key_len),
                                  .key_len = it->key_len,
                                  .version = it->version,
                                  .replica_id = it->replica_id,
                                  .flags = it->flags};
            if (it->flags != CR__TIER_OP_OFFLOAD)
                continue;
            d->status = CR_E_INVALID_PARAMS;
            if (it->n_replicas != 2 || it->replicas[0].n_shards != 1 ||
                it->replicas[1].n_shards != 1)
                continue;
            const cr__rpc_shard_t *src = &it->replicas[0].shards[0];
            const cr__rpc_shard_t *dst = &it->replicas[1].shards[0];
            uint64_t dl = cr__tier_disk_len(it->key_len, it->size);
            uintptr_t base = (uintptr_t)t->cfg.dram_base;
            if (src->len != it->size || src->addr < base ||
                src->addr + src->len > base + t->cfg.dram_size || dst->len != dl ||
                dst->addr + dl > cr__ssd_capacity(t->ssd) || (dst->addr & (CR__TIER_BLOCK - 1)))
                continue;
            task_buf_t *b = &bufs[k];
            if (b->cap < dl) {
                free(b->buf);
                b->buf = NULL;
                b->cap = 0;
                if (!(b->buf = cr__ssd_buf_alloc(dl, &b->cap))) {
                    d->status = -ENOMEM;
                    continue;
                }
            }
            /* encoded in off_prep, just before its write is submitted */
            ios[k] = (cr__ssd_io_t){.write = 1, .buf = b->buf, .off = dst->addr, .len = dl};
            map[k] = n_done - 1;
            k++;
        }
        if (k) {
            off_ctx_t oc = {.items = rep.items, .ios = ios, .map = map};
            cr__ssd_hooks_t h = {.prep = off_prep, .arg = &oc};
            cr__ssd_run_hooked(t->ssd, ring, ios, k, &h);
        }
        for (size_t j = 0; j < k; j++) {
            done.items[map[j]].status = ios[j].result ? CR_E_TRANSFER_FAIL : 0;
            if (ios[j].result) {
                atomic_fetch_add(&t->offload_errors, 1);
                CR_LOG_ERROR(COMP, "offload write at %" PRIu64 ": %s", ios[j].off,
                             strerror(-ios[j].result));
            } else {
                atomic_fetch_add(&t->offloads, 1);
            }
        }
        /* promotions: read + check the disk copy, then copy the value into
         * the DRAM range the master reserved (it attaches that range only
         * after this completion). done.items[i] belongs to rep.items[i]. */
        size_t kp = 0;
        for (uint32_t i = 0; i < n; i++) {
            cr__rpc_item_t *it = &rep.items[i];
            if (it->flags != CR__TIER_OP_PROMOTE)
                continue;
            done.items[i].status = CR_E_INVALID_PARAMS;
            if (it->n_replicas != 2 || it->replicas[0].n_shards != 1 ||
                it->replicas[1].n_shards != 1)
                continue;
            const cr__rpc_shard_t *src = &it->replicas[0].shards[0];
            const cr__rpc_shard_t *dst = &it->replicas[1].shards[0];
            uint64_t dl = cr__tier_disk_len(it->key_len, it->size);
            uintptr_t base = (uintptr_t)t->cfg.dram_base;
            if (src->len != dl || src->addr + dl > cr__ssd_capacity(t->ssd) ||
                (src->addr & (CR__TIER_BLOCK - 1)) || dst->len != it->size || dst->addr < base ||
                dst->addr + dst->len > base + t->cfg.dram_size)
                continue;
            task_buf_t *b = &bufs[kp];
            if (b->cap < dl) {
                free(b->buf);
                b->buf = NULL;
                b->cap = 0;
                if (!(b->buf = cr__ssd_buf_alloc(dl, &b->cap))) {
                    done.items[i].status = -ENOMEM;
                    continue;
                }
            }
            ios[kp] = (cr__ssd_io_t){.write = 0, .buf = b->buf, .off = src->addr, .len = dl};
            map[kp++] = i;
        }
        if (kp)
            cr__ssd_run(t->ssd, ring, ios, kp);
        for (size_t j = 0; j < kp; j++) {
            cr__rpc_item_t *it = &rep.items[map[j]];
            cr__rpc_item_t *d = &done.items[map[j]];
            if (ios[j].result) {
                d->status = CR_E_TRANSFER_FAIL;
                continue;
            }
            int c = cr__ssd_check(ios[j].buf, it->key, it->key_len, it->version, it->size);
            if (c) {
                d->status = CR_E_OBJECT_NOT_FOUND;
                if (c == -EBADMSG)
                    note_corrupt(t, it->key, it->key_len, it->version, ios[j].off);
                continue;
            }
            memcpy((void *)(uintptr_t)it->replicas[1].shards[0].addr,
                   (const uint8_t *)ios[j].buf + cr__tier_hdr_len(it->key_len), it->size);
            d->status = 0;
        }
        if (kp > k)
            k = kp;
        /* buffers above 64 MiB are not kept */
        for (size_t j = 0; j < k; j++)
            if (bufs[j].cap > (64ull << 20)) {
                free(bufs[j].buf);
                bufs[j].buf = NULL;
                bufs[j].cap = 0;
            }
        cr__rpc_msg_free(&rep);
    }
    cr__rpc_msg_free(&done);
    if (bufs)
        for (size_t j = 0; j < CR__RPC_BATCH_MAX; j++)
            free(bufs[j].buf);
    free(bufs);
    free(ios);
    free(map);
    cr__ssd_ring_fini(ring);
    return NULL;
}

/* The same-host listener (tier.h). Optional: without it local clients use
 * the read server. CRESCENT_TIER_LOCAL=0 turns it off. */
static void local_listen(cr__tier_node_t *t)
{
    const char *env = getenv("CRESCENT_TIER_LOCAL");
    if (env && !strcmp(env, "0"))
        return;
    struct sockaddr_un sa;
    socklen_t sl = cr__tier_local_addr(&sa, t->seg);
    t->ro_fd = cr__ssd_open_readonly(t->ssd);
    t->ufd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (t->ro_fd < 0 || t->ufd < 0 || bind(t->ufd, (struct sockaddr *)&sa, sl) ||
        listen(t->ufd, 64)) {
        CR_LOG_WARN(COMP, "same-host read path unavailable (%s): local clients use the read "
                    "server", strerror(errno));
        if (t->ufd >= 0)
            close(t->ufd);
        if (t->ro_fd >= 0)
            close(t->ro_fd);
        t->ufd = t->ro_fd = -1;
    }
}

int cr__tier_node_start(const cr__tier_node_cfg_t *c, cr__tier_node_t **out, char *err,
                        size_t errlen)
{
    cr__tier_node_t *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    t->cfg = *c;
    t->lfd = t->ufd = t->ro_fd = -1;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    int rc = cr__ssd_open(c->dir, c->capacity, &t->ssd, err, errlen);
    if (rc)
        goto fail;
    snprintf(t->host, sizeof t->host, "%s", c->host && c->host[0] ? c->host : "127.0.0.1");
    rc = cr__net_listen(t->host, c->port, 64, &t->port);
    if (rc < 0) {
        snprintf(err, errlen, "disk tier read server on %s:%u: %s", t->host, c->port,
                 strerror(-rc));
        goto fail;
    }
    t->lfd = rc;
    cr__auth_warn_open(c->auth, "disk tier read server", t->host);
    snprintf(t->seg, sizeof t->seg, CR__TIER_SSD_PREFIX "%s:%u", t->host, t->port);
    local_listen(t);
    rc = cr__rpc_client_create(c->master, (int)c->rpc_timeout_ms, (int)c->rpc_timeout_ms, &t->rpc);
    if (rc) {
        snprintf(err, errlen, "master address %s: %s", c->master, strerror(-rc));
        goto fail;
    }
    cr__rpc_client_set_auth(t->rpc, c->auth);
    cr__rpc_client_set_tls(t->rpc, c->tls);
    cr__ssd_ring_t ring;
    if ((rc = cr__ssd_ring_init(&ring, 8)) != 0) {
        snprintf(err, errlen, "io_uring: %s", strerror(-rc));
        goto fail;
    }
    rc = mount_and_report(t, &ring, err, errlen);
    cr__ssd_ring_fini(&ring);
    if (rc)
        goto fail;
    if (pthread_create(&t->acc_thr, NULL, acc_main, t)) {
        snprintf(err, errlen, "cannot start threads");
        rc = -EAGAIN;
        goto fail;
    }
    t->acc_started = 1;
    if ((rc = cr__ssd_ring_init(&t->sync_ring, c->qd ? c->qd : 32)) != 0) {
        snprintf(err, errlen, "io_uring (queue depth %u): %s", c->qd ? c->qd : 32, strerror(-rc));
        goto fail;
    }
    t->sync_ring_ok = 1;
    if (pthread_create(&t->sync_thr, NULL, sync_main, t)) {
        snprintf(err, errlen, "cannot start threads");
        rc = -EAGAIN;
        goto fail;
    }
    t->sync_started = 1;
    *out = t;
    return 0;
fail:
    cr__tier_node_stop(t);
    return rc;
}

void cr__tier_node_stop(cr__tier_node_t *t)
{
    if (!t)
        return;
    atomic_store(&t->stop, 1);
    if (t->acc_started)
        pthread_join(t->acc_thr, NULL);
    if (t->sync_started)
        pthread_join(t->sync_thr, NULL); /* the thread closed its ring */
    else if (t->sync_ring_ok)
        cr__ssd_ring_fini(&t->sync_ring);
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n_conns; i++)
        shutdown(t->conns[i]->fd, SHUT_RDWR);
    while (t->n_conns)
        pthread_cond_wait(&t->cv, &t->mu);
    for (int i = 0; i < t->n_locals; i++)
        close(t->locals[i]);
    t->n_locals = 0;
    for (size_t i = 0; i < t->n_corrupt; i++)
        free(t->corrupt[i].key);
    pthread_mutex_unlock(&t->mu);
    if (t->lfd >= 0)
        close(t->lfd);
    if (t->ufd >= 0)
        close(t->ufd);
    if (t->ro_fd >= 0)
        close(t->ro_fd);
    if (t->rpc && t->sync_started) {
        /* clean stop: the master forgets the disk copies now (they stay on
         * disk and come back when a node opens this directory again) */
        cr__rpc_msg_t req = {0}, rep = {0};
        req.type = CR__RPC_UNMOUNT_SEGMENT;
        call(t, &req, &rep);
        cr__rpc_msg_free(&rep);
    }
    cr__rpc_client_destroy(t->rpc);
    cr__ssd_close(t->ssd);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}
