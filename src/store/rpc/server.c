/* Store RPC server: epoll event loops (server.h). */
#include "store/rpc/server.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/auth/auth.h"
#include "common/bytes.h"
#include "common/tls/tls.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "common/status.h"

#define MAX_LOOPS 16
#define SRC_BUCKETS 1024 /* per-source connection counts (open addressing) */
#define CONN_IN 4096 /* per-connection receive buffer: most frames fit whole */
/* Defaults for cr__rpc_server_params_t fields <= 0 (server.h). */
#define DEFAULT_THREADS 2
#define DEFAULT_MAX_CONNS 1024
#define DEFAULT_IDLE_TIMEOUT_MS 600000
#define DEFAULT_FRAME_TIMEOUT_MS 10000
#define DEFAULT_MAX_BUFFERED_BYTES (1ull << 30)
#define LISTEN_BACKLOG 512

typedef struct conn {
    int fd;
    struct conn *prev, *next; /* loop's connection list */
    uint8_t hdr[CR__RPC_HDR_SIZE];
    size_t hdr_got;
    cr__rpc_hdr_t h; /* valid once hdr_got == CR__RPC_HDR_SIZE */
    uint8_t *payload;
    size_t payload_got, payload_cap;
    cr__rpc_buf_t out; /* pending reply */
    size_t out_off;
    uint64_t last_ms;       /* last byte in or out */
    uint64_t frame_start_ms; /* first byte of the current partial frame */
    int writing;            /* waiting for EPOLLOUT; not reading */
    int pending;            /* no first frame yet (security on: not authenticated) */
    int authed;             /* security on: the handshake succeeded */
    int close_after_flush;  /* refused: send the reply, then close */
    uint64_t accepted_ms;
    int src_slot;           /* index in the per-source table, -1 = none */
    cr__auth_hs_t hs;       /* security on: handshake state */
    cr__tls_conn_t *tls;    /* TLS on: the connection's TLS state */
    int tls_hs;             /* TLS on: handshake not complete yet */
    uint32_t in_off, in_len; /* unparsed bytes are in[in_off, in_len) */
    uint8_t in[CONN_IN];
} conn_t;

typedef struct loop {
    struct cr__rpc_server *srv;
    pthread_t thread;
    int ep;
    conn_t *conns; /* owned by this loop's thread */
    int n_pending; /* owned by this loop's thread */
} loop_t;

typedef struct src_slot {
    uint8_t addr[16]; /* IPv4-mapped or IPv6 */
    int count;        /* 0 = free */
    /* request bytes buffered by this source's connections: atomic, not
     * under src_mu (the slot cannot be reused while a connection holds it) */
    uint64_t buffered;
} src_slot_t;

struct cr__rpc_server {
    cr__rpc_server_params_t p;
    int lfd, evfd;
    uint16_t port;
    int spinner; /* the loop busy-polling (spin_us), -1 = none; atomic */
    int n_loops;
    loop_t loops[MAX_LOOPS];
    pthread_mutex_t src_mu;
    src_slot_t src[SRC_BUCKETS]; /* guarded by src_mu */
    /* counters: relaxed atomics */
    uint64_t conns_accepted, conns_rejected, conns_open, frames, bad_frames, closed_bad_header,
        closed_timeout, closed_over_budget, buffered, auth_ok, auth_refused, closed_pending,
        rejected_per_source, closed_unauth_frame;
};

#define INC(x) __atomic_add_fetch(&(x), 1, __ATOMIC_RELAXED)
#define DEC(x) __atomic_sub_fetch(&(x), 1, __ATOMIC_RELAXED)
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

/* Takes one connection slot for the source address; returns the slot
 * index, -1 when the table is full (not counted), or -2 when the source is
 * at its cap. */
static int src_acquire(struct cr__rpc_server *s, const struct sockaddr_storage *ss)
{
    uint8_t a[16] = {0};
    if (ss->ss_family == AF_INET) {
        a[10] = a[11] = 0xff;
        memcpy(a + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        memcpy(a, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    } else {
        return -1;
    }
    uint32_t h = 2166136261u;
    for (int i = 0; i < 16; i++)
        h = (h ^ a[i]) * 16777619u;
    int rc = -1;
    pthread_mutex_lock(&s->src_mu);
    int free_slot = -1;
    for (int i = 0; i < 128; i++) { /* bounded probe; a miss means "not counted" */
        int k = (int)((h + (uint32_t)i) & (SRC_BUCKETS - 1));
        src_slot_t *e = &s->src[k];
        if (e->count && memcmp(e->addr, a, 16) == 0) {
            if (e->count >= s->p.max_conns_per_source) {
                rc = -2;
            } else {
                e->count++;
                rc = k;
            }
            goto out;
        }
        if (!e->count && free_slot < 0)
            free_slot = k;
    }
    if (free_slot >= 0) {
        memcpy(s->src[free_slot].addr, a, 16);
        s->src[free_slot].count = 1;
        rc = free_slot;
    }
out:
    pthread_mutex_unlock(&s->src_mu);
    return rc;
}

static void src_release(struct cr__rpc_server *s, int slot)
{
    if (slot < 0)
        return;
    pthread_mutex_lock(&s->src_mu);
    s->src[slot].count--;
    pthread_mutex_unlock(&s->src_mu);
}

/* Charges grow request bytes to the server-wide budget and to the
 * connection's source. Returns 0, or -1 (nothing charged) when either bound
 * would be passed. */
static int budget_take(struct cr__rpc_server *s, conn_t *c, uint64_t grow)
{
    if (__atomic_add_fetch(&s->buffered, grow, __ATOMIC_RELAXED) > s->p.max_buffered_bytes) {
        __atomic_sub_fetch(&s->buffered, grow, __ATOMIC_RELAXED);
        return -1;
    }
    if (c->src_slot >= 0) {
        uint64_t *b = &s->src[c->src_slot].buffered;
        if (__atomic_add_fetch(b, grow, __ATOMIC_RELAXED) > s->p.max_buffered_bytes_per_source) {
            __atomic_sub_fetch(b, grow, __ATOMIC_RELAXED);
            __atomic_sub_fetch(&s->buffered, grow, __ATOMIC_RELAXED);
            return -1;
        }
    }
    return 0;
}

static void budget_give(struct cr__rpc_server *s, conn_t *c, uint64_t n)
{
    __atomic_sub_fetch(&s->buffered, n, __ATOMIC_RELAXED);
    if (c->src_slot >= 0)
        __atomic_sub_fetch(&s->src[c->src_slot].buffered, n, __ATOMIC_RELAXED);
}

static void conn_close(loop_t *l, conn_t *c)
{
    /* give the buffer budget back before the peer can see the close (and
     * before the source slot may be reused) */
    budget_give(l->srv, c, c->payload_cap);
    c->payload_cap = 0;
    src_release(l->srv, c->src_slot);
    if (c->pending)
        l->n_pending--;
    DEC(l->srv->conns_open);
    epoll_ctl(l->ep, EPOLL_CTL_DEL, c->fd, NULL);
    cr__tls_conn_free(c->tls);
    close(c->fd);
    if (c->prev)
        c->prev->next = c->next;
    else
        l->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c->payload);
    cr__rpc_buf_free(&c->out);
    free(c);
}

/* A reply built by hand (types the encoder does not know: errors for
 * undecodable frames, authentication): header + len raw payload bytes. */
static int raw_reply(conn_t *c, uint16_t type, uint64_t req_id, int status, const void *payload,
                     size_t len)
{
    c->out.len = 0;
    if (c->out.cap < CR__RPC_HDR_SIZE + len) {
        uint8_t *d = realloc(c->out.data, CR__RPC_HDR_SIZE + len);
        if (!d)
            return -ENOMEM;
        c->out.data = d;
        c->out.cap = CR__RPC_HDR_SIZE + len;
    }
    uint8_t *h = c->out.data;
    memset(h, 0, CR__RPC_HDR_SIZE);
    cr__put_le(h, CR__RPC_MAGIC, 4);
    cr__put_le(h + 4, CR__RPC_VERSION, 2);
    cr__put_le(h + 6, type | CR__RPC_REPLY, 2);
    cr__put_le(h + 8, req_id, 8);
    cr__put_le(h + 16, (uint32_t)len, 4);
    cr__put_le(h + 20, (uint32_t)status, 4);
    if (len)
        memcpy(h + CR__RPC_HDR_SIZE, payload, len);
    c->out.len = CR__RPC_HDR_SIZE + len;
    return 0;
}

static int error_reply(conn_t *c, uint16_t type, uint64_t req_id, int status)
{
    return raw_reply(c, type, req_id, status, NULL, 0);
}

static void conn_admitted(loop_t *l, conn_t *c)
{
    if (c->pending) {
        c->pending = 0;
        l->n_pending--;
    }
}

/* Security on, connection not yet authenticated: only the handshake. */
static int auth_frame(loop_t *l, conn_t *c, const uint8_t *payload)
{
    struct cr__rpc_server *s = l->srv;
    uint16_t t = c->h.type;
    int rc = -EACCES;
    if (t == CR__RPC_AUTH_HELLO && c->hs.step == 0) {
        uint8_t chal[CR__AUTH_CHALLENGE_LEN];
        rc = cr__auth_hs_server_challenge(s->p.auth, &c->hs, "rpc", payload, c->h.payload_len,
                                          chal);
        if (rc == 0)
            return raw_reply(c, t, c->h.req_id, 0, chal, sizeof chal);
    } else if (t == CR__RPC_AUTH_PROOF && c->hs.step == 2) {
        rc = cr__auth_hs_server_verify(s->p.auth, &c->hs, payload, c->h.payload_len);
        if (rc == 0) {
            c->authed = 1;
            conn_admitted(l, c);
            INC(s->auth_ok);
            return raw_reply(c, t, c->h.req_id, 0, NULL, 0);
        }
    }
    INC(s->auth_refused);
    CR_LOG_RL(CR__LOG_WARN, "rpc", "fd %d: refused an unauthenticated %s frame (0x%x): %s",
              c->fd, t == CR__RPC_AUTH_HELLO || t == CR__RPC_AUTH_PROOF ? "auth" : "request",
              (unsigned)t, cr_strerror(rc));
    c->close_after_flush = 1;
    return error_reply(c, t, c->h.req_id, CR_E_ILLEGAL_CLIENT);
}

/* Security on, connection not yet authenticated: 1 if the frame whose
 * header is c->h may be read, i.e. it is a handshake message of its exact
 * size. Anything else is refused at the header, before a payload byte is
 * buffered: a stranger costs the receive buffer, not the request budget. */
static int auth_hdr_ok(const conn_t *c)
{
    return (c->h.type == CR__RPC_AUTH_HELLO && c->h.payload_len == CR__AUTH_HELLO_LEN) ||
           (c->h.type == CR__RPC_AUTH_PROOF && c->h.payload_len == CR__AUTH_PROOF_LEN);
}

/* Handles the complete frame in c (header c->h, payload bytes at payload);
 * leaves the reply in c->out. */
static int handle_frame(loop_t *l, conn_t *c, const uint8_t *payload)
{
    struct cr__rpc_server *s = l->srv;
    INC(s->frames);
    if (s->p.auth && !c->authed)
        return auth_frame(l, c, payload);
    conn_admitted(l, c);
    cr__rpc_msg_t req;
    int rc = -EBADMSG;
    if (!(c->h.type & CR__RPC_REPLY))
        rc = cr__rpc_decode(&c->h, payload, c->h.payload_len, &req);
    if (rc) {
        INC(s->bad_frames);
        CR_LOG_INFO("rpc", "fd %d: undecodable %s frame (%u bytes): %s", c->fd,
                    cr__rpc_type_name(c->h.type), c->h.payload_len, cr_strerror(rc));
        return error_reply(c, c->h.type, c->h.req_id,
                           rc == -ENOMEM ? CR_E_INTERNAL_ERROR : CR_E_INVALID_PARAMS);
    }
    cr__rpc_msg_t rep;
    memset(&rep, 0, sizeof rep);
    rep.type = (uint16_t)(req.type | CR__RPC_REPLY);
    rep.req_id = req.req_id;
    s->p.fn(s->p.user, &req, &rep);
    rep.type = (uint16_t)(req.type | CR__RPC_REPLY);
    rep.req_id = req.req_id;
    rc = cr__rpc_encode(&rep, &c->out);
    cr__rpc_msg_free(&rep);
    cr__rpc_msg_free(&req);
    if (rc) {
        CR_LOG_ERROR("rpc", "reply to %s does not encode: %s", cr__rpc_type_name(c->h.type),
                     cr_strerror(rc));
        return error_reply(c, c->h.type, c->h.req_id, CR_E_INTERNAL_ERROR);
    }
    return 0;
}

/* recv/send through TLS when it is on. Return the count, 0 on EOF (recv),
 * -EAGAIN (would block) or another negative value (close). */
static ssize_t conn_recv(conn_t *c, void *buf, size_t len)
{
    if (c->tls)
        return cr__tls_conn_read(c->tls, buf, len);
    ssize_t k = recv(c->fd, buf, len, MSG_DONTWAIT);
    if (k < 0)
        return errno == EAGAIN || errno == EINTR ? -EAGAIN : -EIO;
    return k;
}

static ssize_t conn_send(conn_t *c, const void *buf, size_t len)
{
    if (c->tls)
        return cr__tls_conn_write(c->tls, buf, len);
    ssize_t k = send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0)
        return errno == EAGAIN || errno == EINTR ? -EAGAIN : -EIO;
    return k;
}

/* A short read drained the socket unless TLS still holds decrypted bytes. */
static int conn_drained(const conn_t *c, size_t got, size_t asked)
{
    return got < asked && !(c->tls && cr__tls_conn_pending(c->tls));
}

static void set_events(loop_t *l, conn_t *c, uint32_t ev)
{
    struct epoll_event e = {.events = ev, .data.ptr = c};
    epoll_ctl(l->ep, EPOLL_CTL_MOD, c->fd, &e);
}

/* Writes pending output. Returns 0 (done or would block) or -1 (close). */
static int conn_flush(loop_t *l, conn_t *c, uint64_t now)
{
    while (c->out_off < c->out.len) {
        ssize_t k = conn_send(c, c->out.data + c->out_off, c->out.len - c->out_off);
        if (k < 0) {
            if (k == -EAGAIN) {
                if (!c->writing) {
                    c->writing = 1;
                    set_events(l, c, EPOLLOUT);
                }
                return 0;
            }
            return -1;
        }
        c->out_off += (size_t)k;
        c->last_ms = now;
    }
    c->out.len = 0;
    c->out_off = 0;
    if (c->out.cap > (1u << 20)) { /* do not keep a big reply buffer around */
        cr__rpc_buf_free(&c->out);
    }
    if (c->writing) {
        c->writing = 0;
        set_events(l, c, EPOLLIN | EPOLLRDHUP);
    }
    return 0;
}

/* Reads and serves frames until the socket would block or a reply is
 * pending. Bytes come in CONN_IN-sized recvs into c->in, so a small frame
 * costs one recv and its payload is decoded in place; only a frame that does
 * not fit is assembled in c->payload (big remainders are received straight
 * into it). A short recv means the socket is empty: epoll is level-triggered
 * and reports anything that arrives later, so no recv is spent on EAGAIN.
 * Returns 0 or -1 (close). */
static int conn_read(loop_t *l, conn_t *c, uint64_t now)
{
    struct cr__rpc_server *s = l->srv;
    int drained = 0;
    for (;;) {
        if (c->writing)
            return 0;
        int hdr_done = c->hdr_got == CR__RPC_HDR_SIZE;
        if (c->in_off == c->in_len &&
            !(hdr_done && c->h.payload_len - c->payload_got >= CONN_IN)) {
            if (drained)
                return 0;
            ssize_t k = conn_recv(c, c->in, CONN_IN);
            if (k == 0)
                return -1;
            if (k < 0)
                return k == -EAGAIN ? 0 : -1;
            c->in_off = 0;
            c->in_len = (uint32_t)k;
            c->last_ms = now;
            drained = conn_drained(c, (size_t)k, CONN_IN);
        }
        size_t avail = c->in_len - c->in_off;
        if (!hdr_done) {
            size_t t = CR__RPC_HDR_SIZE - c->hdr_got;
            if (t > avail)
                t = avail;
            if (c->hdr_got == 0)
                c->frame_start_ms = now;
            memcpy(c->hdr + c->hdr_got, c->in + c->in_off, t);
            c->hdr_got += t;
            c->in_off += (uint32_t)t;
            avail -= t;
            if (c->hdr_got < CR__RPC_HDR_SIZE)
                continue;
            if (cr__rpc_decode_hdr(c->hdr, &c->h)) {
                INC(s->closed_bad_header);
                CR_LOG_INFO("rpc", "fd %d: bad frame header, closing", c->fd);
                return -1;
            }
            c->payload_got = 0;
            if (s->p.auth && !c->authed && !auth_hdr_ok(c)) {
                /* answered ILLEGAL_CLIENT (a client without the key learns
                 * why) and closed; the payload is never read */
                INC(s->auth_refused);
                INC(s->closed_unauth_frame);
                CR_LOG_RL(CR__LOG_WARN, "rpc",
                          "fd %d: refused an unauthenticated frame (0x%x, %u bytes) at its header",
                          c->fd, (unsigned)c->h.type, c->h.payload_len);
                c->hdr_got = 0;
                if (error_reply(c, c->h.type, c->h.req_id, CR_E_ILLEGAL_CLIENT))
                    return -1;
                conn_flush(l, c, now);
                return -1;
            }
        }
        const uint8_t *payload = c->payload;
        if (c->payload_got == 0 && avail >= c->h.payload_len) {
            /* the whole payload is buffered: decode it in place */
            payload = c->in + c->in_off;
            c->in_off += c->h.payload_len;
        } else {
            /* grow with the bytes actually received, never to payload_len
             * up front: a peer announcing 64 MiB costs only what it sends */
            size_t want = c->h.payload_len - c->payload_got;
            if (c->payload_cap - c->payload_got < want && c->payload_cap < c->h.payload_len) {
                size_t cap = c->payload_cap ? c->payload_cap * 2 : 4096;
                if (cap < c->payload_got + 4096)
                    cap = c->payload_got + 4096;
                if (cap > c->h.payload_len)
                    cap = c->h.payload_len;
                uint64_t grow = cap - c->payload_cap;
                if (budget_take(s, c, grow)) {
                    INC(s->closed_over_budget);
                    CR_LOG_RL(CR__LOG_WARN, "rpc",
                              "fd %d: request buffers over budget (server or source), closing",
                              c->fd);
                    return -1;
                }
                uint8_t *d = realloc(c->payload, cap);
                if (!d) {
                    budget_give(s, c, grow);
                    return -1;
                }
                c->payload = d;
                c->payload_cap = cap;
            }
            size_t room = c->payload_cap - c->payload_got;
            if (room > want)
                room = want;
            if (avail) {
                size_t t = room < avail ? room : avail;
                memcpy(c->payload + c->payload_got, c->in + c->in_off, t);
                c->in_off += (uint32_t)t;
                c->payload_got += t;
            } else {
                ssize_t k = conn_recv(c, c->payload + c->payload_got, room);
                if (k == 0)
                    return -1;
                if (k < 0)
                    return k == -EAGAIN ? 0 : -1;
                c->payload_got += (size_t)k;
                c->last_ms = now;
                drained = conn_drained(c, (size_t)k, room);
            }
            if (c->payload_got < c->h.payload_len)
                continue;
            payload = c->payload;
        }
        /* complete frame */
        int rc = handle_frame(l, c, payload);
        c->hdr_got = 0;
        c->payload_got = 0;
        if (c->payload_cap > (1u << 20)) {
            budget_give(s, c, c->payload_cap);
            free(c->payload);
            c->payload = NULL;
            c->payload_cap = 0;
        }
        if (rc)
            return -1;
        if (conn_flush(l, c, now) || c->close_after_flush)
            return -1;
    }
}

/* TLS on: one handshake step (non-blocking). Returns 0 (done, or waiting
 * for the socket: events set) or -1 (refused: close). */
static int tls_step(loop_t *l, conn_t *c)
{
    struct cr__rpc_server *s = l->srv;
    int r = cr__tls_conn_step(c->tls);
    if (r == 0) {
        c->tls_hs = 0;
        set_events(l, c, EPOLLIN | EPOLLRDHUP);
        return 0;
    }
    if (r == CR__TLS_WANT_READ || r == CR__TLS_WANT_WRITE) {
        set_events(l, c, r == CR__TLS_WANT_READ ? EPOLLIN | EPOLLRDHUP : EPOLLOUT);
        return 0;
    }
    INC(s->auth_refused);
    CR_LOG_RL(CR__LOG_WARN, "rpc", "fd %d: refused a TLS connection: %s", c->fd,
              r == -EACCES   ? "no certificate of the cluster CA"
              : r == -EPROTO ? "not TLS"
                             : cr_strerror(r));
    return -1;
}

static void do_accept(loop_t *l, uint64_t now)
{
    struct cr__rpc_server *s = l->srv;
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if ((int)LOAD(s->conns_open) >= s->p.max_conns) {
            INC(s->conns_rejected);
            CR_LOG_RL(CR__LOG_WARN, "rpc", "connection limit (%d) reached, refusing",
                      s->p.max_conns);
            close(fd);
            continue;
        }
        int slot = src_acquire(s, &ss);
        if (slot == -2) {
            INC(s->rejected_per_source);
            CR_LOG_RL(CR__LOG_WARN, "rpc", "per-source connection limit (%d) reached, refusing",
                      s->p.max_conns_per_source);
            close(fd);
            continue;
        }
        /* too many connections that have not sent a first frame (or not
         * authenticated): drop the oldest of them, not the newcomer */
        int cap = s->p.max_pending / s->p.n_threads;
        if (cap < 8)
            cap = 8;
        if (l->n_pending >= cap) {
            conn_t *old = NULL;
            for (conn_t *x = l->conns; x; x = x->next)
                if (x->pending)
                    old = x; /* the list is newest first */
            if (old) {
                INC(s->closed_pending);
                CR_LOG_RL(CR__LOG_WARN, "rpc", "%d connections without a first frame: closing "
                          "the oldest", l->n_pending);
                conn_close(l, old);
            }
        }
        conn_t *c = calloc(1, sizeof *c);
        if (!c) {
            src_release(s, slot);
            close(fd);
            continue;
        }
        c->src_slot = slot;
        c->pending = 1;
        c->accepted_ms = now;
        cr__net_set_nodelay(fd);
        c->fd = fd;
        c->last_ms = now;
        cr__rpc_buf_init(&c->out);
        if (s->p.tls) {
            if (cr__tls_conn_new(s->p.tls, fd, 1, &c->tls)) {
                src_release(s, slot);
                close(fd);
                free(c);
                continue;
            }
            c->tls_hs = 1;
        }
        struct epoll_event e = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &e)) {
            src_release(s, slot);
            close(fd);
            free(c);
            continue;
        }
        l->n_pending++;
        c->next = l->conns;
        if (l->conns)
            l->conns->prev = c;
        l->conns = c;
        INC(s->conns_accepted);
        INC(s->conns_open);
    }
}

static void sweep(loop_t *l, uint64_t now)
{
    struct cr__rpc_server *s = l->srv;
    conn_t *c = l->conns;
    while (c) {
        conn_t *n = c->next;
        int partial = c->hdr_got > 0 || c->writing || c->in_off < c->in_len;
        if ((partial && now - c->frame_start_ms > (uint64_t)s->p.frame_timeout_ms) ||
            now - c->last_ms > (uint64_t)s->p.idle_timeout_ms ||
            (c->pending && now - c->accepted_ms > (uint64_t)s->p.first_frame_timeout_ms)) {
            INC(s->closed_timeout);
            CR_LOG_INFO("rpc", "fd %d: timed out, closing", c->fd);
            conn_close(l, c);
        }
        c = n;
    }
}

static void *loop_main(void *arg)
{
    loop_t *l = arg;
    struct cr__rpc_server *s = l->srv;
    struct epoll_event evs[64];
    uint64_t last_sweep = cr__now_ms();
    /* Busy-poll (spin_us): after serving, the loop polls on without
     * sleeping until spin_us pass without an event, so that a client's
     * next request wakes no sleeping thread (on a VM a cross-CPU wakeup
     * costs several microseconds on each side). Only while it pays: the
     * loop spins after a batch only if the idle gap before that batch was
     * within spin_us (a spin that timed out, or a longer sleep, makes the
     * next batch sleep at once and measure again), so a server whose
     * requests come less often than that never spins. One loop at a time
     * (s->spinner): never more than one core. */
    uint64_t spin_ns = (uint64_t)s->p.spin_us * 1000u, spin_until = 0, idle_since = 0;
    uint64_t gap = UINT64_MAX; /* the idle time before the last batch */
    int me = (int)(l - s->loops);
    for (;;) {
        int timeout = 500;
        if (spin_until && cr__now_ns() < spin_until) {
            timeout = 0;
        } else if (spin_until) {
            spin_until = 0;
            __atomic_store_n(&s->spinner, -1, __ATOMIC_RELAXED);
        }
        int n = epoll_wait(l->ep, evs, 64, timeout);
        if (n == 0 && timeout == 0) {
            /* spinning: a client sharing this CPU gets it (its request is
             * what we wait for); free when nothing else is runnable */
            sched_yield();
            continue;
        }
        uint64_t now = cr__now_ms();
        if (n > 0 && spin_ns) {
            uint64_t t = cr__now_ns();
            gap = idle_since ? t - idle_since : UINT64_MAX;
        }
        for (int i = 0; i < n; i++) {
            void *ptr = evs[i].data.ptr;
            if (ptr == &s->evfd)
                goto out;
            if (ptr == &s->lfd) {
                do_accept(l, now);
                continue;
            }
            conn_t *c = ptr;
            int bad = 0;
            if (c->tls_hs) {
                if (tls_step(l, c)) {
                    conn_close(l, c);
                    continue;
                }
                if (c->tls_hs)
                    continue;
            }
            if (c->writing && (evs[i].events & EPOLLOUT)) {
                if (conn_flush(l, c, now))
                    bad = 1;
            }
            /* bytes already buffered in c->in are served once a blocked
             * reply is out, even without a new EPOLLIN */
            if (!bad && !c->writing &&
                ((evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) || c->in_off < c->in_len))
                bad = conn_read(l, c, now) != 0;
            if (!bad && (evs[i].events & EPOLLERR))
                bad = 1;
            if (bad)
                conn_close(l, c);
        }
        if (now - last_sweep >= 250) {
            sweep(l, now);
            last_sweep = now;
        }
        if (n > 0 && spin_ns) {
            idle_since = cr__now_ns();
            int none = -1;
            if (gap > spin_ns) {
                if (spin_until) { /* stop: the last wait was long */
                    spin_until = 0;
                    __atomic_store_n(&s->spinner, -1, __ATOMIC_RELAXED);
                }
            } else if (spin_until || __atomic_compare_exchange_n(&s->spinner, &none, me, 0,
                                                                 __ATOMIC_RELAXED,
                                                                 __ATOMIC_RELAXED)) {
                spin_until = idle_since + spin_ns;
            }
        }
    }
out:
    while (l->conns)
        conn_close(l, l->conns);
    return NULL;
}

int cr__rpc_server_start(const cr__rpc_server_params_t *p, cr__rpc_server_t **out)
{
    if (!p || !p->fn || !out)
        return -EINVAL;
    struct cr__rpc_server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->p = *p;
    if (s->p.n_threads <= 0)
        s->p.n_threads = DEFAULT_THREADS;
    if (s->p.n_threads > MAX_LOOPS)
        s->p.n_threads = MAX_LOOPS;
    if (s->p.max_conns <= 0)
        s->p.max_conns = DEFAULT_MAX_CONNS;
    if (s->p.idle_timeout_ms <= 0)
        s->p.idle_timeout_ms = DEFAULT_IDLE_TIMEOUT_MS;
    if (s->p.frame_timeout_ms <= 0)
        s->p.frame_timeout_ms = DEFAULT_FRAME_TIMEOUT_MS;
    if (s->p.max_buffered_bytes == 0)
        s->p.max_buffered_bytes = DEFAULT_MAX_BUFFERED_BYTES;
    if (s->p.max_buffered_bytes_per_source == 0)
        s->p.max_buffered_bytes_per_source = s->p.max_buffered_bytes / 4;
    if (s->p.first_frame_timeout_ms <= 0)
        s->p.first_frame_timeout_ms = 5000;
    if (s->p.max_pending <= 0)
        s->p.max_pending = 128;
    if (s->p.max_conns_per_source <= 0)
        s->p.max_conns_per_source = s->p.max_conns / 4 < 16 ? 16 : s->p.max_conns / 4;
    if (s->p.spin_us < 0)
        s->p.spin_us = 0;
    s->spinner = -1;
    pthread_mutex_init(&s->src_mu, NULL);
    s->p.host = NULL; /* not kept */
    int rc;
    s->lfd = cr__net_listen(p->host, p->port, LISTEN_BACKLOG, &s->port);
    if (s->lfd < 0) {
        rc = s->lfd;
        free(s);
        return rc;
    }
    fcntl(s->lfd, F_SETFL, fcntl(s->lfd, F_GETFL) | O_NONBLOCK);
    s->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->evfd < 0) {
        rc = CR__ERRNO();
        close(s->lfd);
        free(s);
        return rc;
    }
    int started = 0;
    rc = 0;
    for (int i = 0; i < s->p.n_threads; i++) {
        loop_t *l = &s->loops[i];
        l->srv = s;
        l->ep = epoll_create1(EPOLL_CLOEXEC);
        if (l->ep < 0) {
            rc = CR__ERRNO();
            break;
        }
        struct epoll_event e = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &s->lfd};
        struct epoll_event w = {.events = EPOLLIN, .data.ptr = &s->evfd};
        if (epoll_ctl(l->ep, EPOLL_CTL_ADD, s->lfd, &e) ||
            epoll_ctl(l->ep, EPOLL_CTL_ADD, s->evfd, &w)) {
            rc = CR__ERRNO();
            close(l->ep);
            break;
        }
        if ((rc = -pthread_create(&l->thread, NULL, loop_main, l))) {
            close(l->ep);
            break;
        }
        started++;
    }
    s->n_loops = started;
    if (rc) {
        cr__rpc_server_stop(s);
        return rc;
    }
    *out = s;
    return 0;
}

uint16_t cr__rpc_server_port(const cr__rpc_server_t *s) { return s->port; }

void cr__rpc_server_stats(const cr__rpc_server_t *s, cr__rpc_server_stats_t *o)
{
    o->conns_accepted = LOAD(s->conns_accepted);
    o->conns_rejected = LOAD(s->conns_rejected);
    o->conns_open = LOAD(s->conns_open);
    o->frames = LOAD(s->frames);
    o->bad_frames = LOAD(s->bad_frames);
    o->closed_bad_header = LOAD(s->closed_bad_header);
    o->closed_timeout = LOAD(s->closed_timeout);
    o->closed_over_budget = LOAD(s->closed_over_budget);
    o->buffered_bytes = LOAD(s->buffered);
    o->auth_ok = LOAD(s->auth_ok);
    o->auth_refused = LOAD(s->auth_refused);
    o->closed_pending = LOAD(s->closed_pending);
    o->rejected_per_source = LOAD(s->rejected_per_source);
    o->closed_unauth_frame = LOAD(s->closed_unauth_frame);
}

void cr__rpc_server_stop(cr__rpc_server_t *s)
{
    if (!s)
        return;
    uint64_t one = 1;
    if (write(s->evfd, &one, sizeof one) < 0) {
        /* eventfd write only fails on overflow; the loops are woken anyway */
    }
    for (int i = 0; i < s->n_loops; i++) {
        pthread_join(s->loops[i].thread, NULL);
        close(s->loops[i].ep);
    }
    close(s->evfd);
    close(s->lfd);
    free(s);
}
