/* Blocking store RPC client (client.h). */
#include "store/rpc/client.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/auth/auth.h"
#include "common/bytes.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "common/status.h"
#include "common/tls/tls.h"

struct cr__rpc_client {
    pthread_mutex_t mu;
    char host[CR__HOST_MAX]; /* guarded by mu (cr__rpc_client_set_addr) */
    uint16_t port;
    _Atomic uint32_t *epoch; /* shared floor: highest leader epoch seen, or NULL */
    int connect_timeout_ms, call_timeout_ms;
    int fd;               /* guarded by mu; -1 when closed */
    uint64_t last_ok_ms;  /* guarded by mu: when a call last completed on fd */
    uint64_t next_req_id; /* guarded by mu */
    const cr__auth_t *auth; /* set before the first call; NULL = security off */
    const cr__tls_t *tls;   /* set before the first call; NULL = plain TCP */
    cr__tls_conn_t *tc;     /* guarded by mu: TLS state of fd (TLS on) */
    cr__rpc_buf_t out;    /* guarded by mu */
    uint64_t spin_ns;     /* guarded by mu: busy-poll budget for a reply (set_spin); 0 = off */
    uint64_t last_rtt_ns; /* guarded by mu: the last call's round trip (spin only when short) */
    uint8_t in[4096];     /* guarded by mu: a reply's first bytes (header + small payload) */
};

int cr__rpc_client_create(const char *addr, int connect_timeout_ms, int call_timeout_ms,
                          cr__rpc_client_t **out)
{
    if (!addr || !out || connect_timeout_ms <= 0 || call_timeout_ms <= 0)
        return -EINVAL;
    cr__rpc_client_t *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    if (cr__net_split_hostport(addr, c->host, &c->port, 0)) {
        free(c);
        return -EINVAL;
    }
    pthread_mutex_init(&c->mu, NULL);
    c->connect_timeout_ms = connect_timeout_ms;
    c->call_timeout_ms = call_timeout_ms;
    c->fd = -1;
    c->next_req_id = 1;
    cr__rpc_buf_init(&c->out);
    *out = c;
    return 0;
}

static void close_locked(cr__rpc_client_t *c)
{
    cr__tls_conn_free(c->tc);
    c->tc = NULL;
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
}

#define STALE_CHECK_MS 50

void cr__rpc_client_set_auth(cr__rpc_client_t *c, const cr__auth_t *auth)
{
    pthread_mutex_lock(&c->mu);
    c->auth = auth;
    close_locked(c);
    pthread_mutex_unlock(&c->mu);
}

void cr__rpc_client_set_tls(cr__rpc_client_t *c, const cr__tls_t *tls)
{
    pthread_mutex_lock(&c->mu);
    c->tls = tls;
    close_locked(c);
    pthread_mutex_unlock(&c->mu);
}

/* Whole-buffer I/O on a fresh connection (handshakes), through TLS when on. */
static int io_write_full(cr__tls_conn_t *tc, int fd, const void *p, size_t n, int ms)
{
    return tc ? cr__tls_conn_write_full(tc, p, n, ms) : cr__net_write_full(fd, p, n, ms);
}

static int io_read_full(cr__tls_conn_t *tc, int fd, void *p, size_t n, int ms)
{
    return tc ? cr__tls_conn_read_full(tc, p, n, ms) : cr__net_read_full(fd, p, n, ms);
}

/* One handshake frame out, its reply in (header + want bytes of payload). */
static int auth_exchange(cr__rpc_client_t *c, cr__tls_conn_t *tc, int fd, uint16_t type,
                         const uint8_t *msg, size_t len, uint8_t *reply, size_t want,
                         int32_t *status)
{
    uint8_t f[CR__RPC_HDR_SIZE + CR__AUTH_MSG_MAX];
    memset(f, 0, CR__RPC_HDR_SIZE);
    cr__put_le(f, CR__RPC_MAGIC, 4);
    cr__put_le(f + 4, CR__RPC_VERSION, 2);
    cr__put_le(f + 6, type, 2);
    cr__put_le(f + 8, c->next_req_id++, 8);
    cr__put_le(f + 16, len, 4);
    memcpy(f + CR__RPC_HDR_SIZE, msg, len);
    int rc = io_write_full(tc, fd, f, CR__RPC_HDR_SIZE + len, c->connect_timeout_ms);
    if (rc)
        return rc;
    uint8_t hb[CR__RPC_HDR_SIZE];
    cr__rpc_hdr_t h;
    if ((rc = io_read_full(tc, fd, hb, sizeof hb, c->connect_timeout_ms)))
        return rc;
    if (cr__rpc_decode_hdr(hb, &h) || h.type != (type | CR__RPC_REPLY))
        return -EBADMSG;
    *status = h.status;
    if (h.status)
        return 0;
    if (h.payload_len != want)
        return -EBADMSG;
    return want ? io_read_full(tc, fd, reply, want, c->connect_timeout_ms) : 0;
}

/* Proves membership on a fresh connection (security on). Returns 0 or
 * CR_E_ILLEGAL_CLIENT (refused, or the master does not hold our key),
 * CR_E_RPC_FAIL (connection trouble). */
static int authenticate(cr__rpc_client_t *c, cr__tls_conn_t *tc, int fd)
{
    cr__auth_hs_t hs;
    uint8_t hello[CR__AUTH_HELLO_LEN], chal[CR__AUTH_CHALLENGE_LEN], proof[CR__AUTH_PROOF_LEN];
    int32_t st = 0;
    int rc = cr__auth_hs_client_hello(c->auth, &hs, "rpc", hello);
    if (!rc)
        rc = auth_exchange(c, tc, fd, CR__RPC_AUTH_HELLO, hello, sizeof hello, chal, sizeof chal, &st);
    if (!rc && st) {
        CR_LOG_ERROR("rpc", "master %s:%u refused authentication (%s): it runs without "
                     "security or with another cluster key", c->host, c->port, cr_strerror(st));
        return CR_E_ILLEGAL_CLIENT;
    }
    if (!rc && (rc = cr__auth_hs_client_proof(c->auth, &hs, chal, sizeof chal, proof)) == -EACCES) {
        CR_LOG_ERROR("rpc", "master %s:%u failed to prove the cluster key: not talking to it",
                     c->host, c->port);
        return CR_E_ILLEGAL_CLIENT;
    }
    if (!rc)
        rc = auth_exchange(c, tc, fd, CR__RPC_AUTH_PROOF, proof, sizeof proof, NULL, 0, &st);
    if (!rc && st) {
        CR_LOG_ERROR("rpc", "master %s:%u refused our proof: another cluster key?", c->host,
                     c->port);
        return CR_E_ILLEGAL_CLIENT;
    }
    if (rc) {
        CR_LOG_WARN("rpc", "authentication with %s:%u failed: %s", c->host, c->port,
                    cr_strerror(rc));
        return CR_E_RPC_FAIL;
    }
    return 0;
}

static int connect_locked(cr__rpc_client_t *c)
{
    if (c->fd >= 0) {
        /* A cached connection that the master closed (idle timeout,
         * restart) is readable (EOF) or hung up: drop it before sending, so
         * that even non-idempotent calls go out on a live connection. A
         * connection that completed a call in the last STALE_CHECK_MS is
         * live (the master's idle timeout is seconds, and a master that died
         * since failed that thread's calls, which closed it): no poll(). */
        if (cr__now_ms() - c->last_ok_ms < STALE_CHECK_MS)
            return 0;
        struct pollfd pf = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
        if (poll(&pf, 1, 0) == 0)
            return 0;
        close_locked(c);
    }
    int fd = cr__net_connect(c->host, c->port, NULL, c->connect_timeout_ms);
    if (fd < 0) {
        CR_LOG_DEBUG("rpc", "connect %s:%u: %s", c->host, c->port, cr_strerror(fd));
        return CR_E_RPC_FAIL;
    }
    cr__tls_conn_t *tc = NULL;
    if (c->tls) {
        int rc = cr__tls_conn_new(c->tls, fd, 0, &tc);
        if (!rc)
            rc = cr__tls_conn_handshake(tc, c->connect_timeout_ms);
        if (rc) {
            CR_LOG_RL(CR__LOG_WARN, "rpc", "TLS handshake with %s:%u failed: %s", c->host,
                      c->port,
                      rc == -EACCES ? "its certificate is not of our CA (or it refused ours)"
                                    : cr_strerror(rc));
            cr__tls_conn_free(tc);
            close(fd);
            return rc == -EACCES ? CR_E_ILLEGAL_CLIENT : CR_E_RPC_FAIL;
        }
    }
    if (c->auth) {
        int rc = authenticate(c, tc, fd);
        if (rc) {
            cr__tls_conn_free(tc);
            close(fd);
            return rc;
        }
    }
    c->tc = tc;
    /* bounds each blocking recv (recv_some); sends never block (MSG_DONTWAIT) */
    int slice = c->call_timeout_ms / 4;
    cr__net_set_timeouts(fd, slice > 0 ? slice : 1);
    c->fd = fd;
    return 0;
}

void cr__rpc_client_destroy(cr__rpc_client_t *c)
{
    if (!c)
        return;
    close_locked(c);
    cr__rpc_buf_free(&c->out);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static int remaining_ms(uint64_t deadline)
{
    uint64_t now = cr__now_ms();
    return now >= deadline ? 0 : (int)(deadline - now);
}

/* Sends n bytes before deadline: the send is tried first and poll only
 * waits when the socket buffer is full (a request fits in it almost always,
 * so a call costs one send). Returns 0, -ETIMEDOUT, -ECONNRESET or -errno
 * (through cr__status_from_errno);
 * *moved counts bytes sent. */
/* Waits until fd is ready for events or deadline passes. Returns 0,
 * -ETIMEDOUT or -errno. */
static int wait_ready(int fd, short events, uint64_t deadline)
{
    struct pollfd pf = {.fd = fd, .events = events};
    int ms = remaining_ms(deadline);
    if (ms == 0)
        return -ETIMEDOUT;
    int pr = poll(&pf, 1, ms);
    if (pr < 0 && errno != EINTR)
        return CR__ERRNO();
    return pr == 0 ? -ETIMEDOUT : 0;
}

static int send_full_tls(cr__tls_conn_t *tc, int fd, const uint8_t *p, size_t n,
                         uint64_t deadline, size_t *moved)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = cr__tls_conn_write(tc, p + done, n - done);
        if (k > 0) {
            done += (size_t)k;
            *moved += (size_t)k;
            continue;
        }
        if (k != -EAGAIN)
            return (int)k;
        int w = wait_ready(fd, cr__tls_conn_want(tc), deadline);
        if (w)
            return w;
    }
    return 0;
}

static int send_full(cr__tls_conn_t *tc, int fd, const uint8_t *p, size_t n, uint64_t deadline,
                     size_t *moved)
{
    if (tc)
        return send_full_tls(tc, fd, p, n, deadline, moved);
    size_t done = 0;
    while (done < n) {
        ssize_t k = send(fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            done += (size_t)k;
            *moved += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno != EAGAIN)
            return errno == EPIPE ? -ECONNRESET : CR__ERRNO();
        int w = wait_ready(fd, POLLOUT, deadline);
        if (w)
            return w;
    }
    return 0;
}

/* Receives between min and max bytes before deadline. The socket blocks
 * with SO_RCVTIMEO set to a quarter of the call timeout (connect_locked), so
 * a reply costs one recv() instead of poll() + recv(), and a silent master is
 * noticed within a quarter timeout of the deadline. Returns the count,
 * -ETIMEDOUT, -ECONNRESET (EOF or reset before any byte), -EPROTO (after
 * some) or -errno. */
static ssize_t recv_some(cr__tls_conn_t *tc, int fd, uint8_t *p, size_t min, size_t max,
                         uint64_t deadline, uint64_t spin_until_ns)
{
    size_t done = 0;
    while (done < min) {
        if (tc) { /* blocking fd with SO_RCVTIMEO: -EAGAIN is a timeout slice */
            ssize_t k = cr__tls_conn_read(tc, p + done, max - done);
            if (k == 0)
                return done ? -EPROTO : -ECONNRESET;
            if (k == -EAGAIN) {
                if (remaining_ms(deadline) == 0)
                    return -ETIMEDOUT;
                continue;
            }
            if (k < 0)
                return done ? -EPROTO : k;
            done += (size_t)k;
            continue;
        }
        /* busy-poll until spin_until_ns, then block (see attempt_locked) */
        int spin = spin_until_ns && cr__now_ns() < spin_until_ns;
        ssize_t k = recv(fd, p + done, max - done, spin ? MSG_DONTWAIT : 0);
        if (k == 0)
            return done ? -EPROTO : -ECONNRESET;
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
                if (spin) {
                    /* a master sharing this CPU gets it (spinning here
                     * would only delay the reply); free when none waits */
                    sched_yield();
                    continue;
                }
                if (remaining_ms(deadline) == 0)
                    return -ETIMEDOUT;
                continue;
            }
            return done ? -EPROTO : CR__ERRNO();
        }
        done += (size_t)k;
    }
    return (ssize_t)done;
}

static int idempotent(uint16_t type)
{
    switch (type) {
    case CR__RPC_PING:
    case CR__RPC_MOUNT_SEGMENT:
    case CR__RPC_UNMOUNT_SEGMENT:
    case CR__RPC_GET_REPLICA_LIST:
    case CR__RPC_EXIST:
    case CR__RPC_GET_SIZE:
    case CR__RPC_VALIDATE:
    case CR__RPC_BATCH_GET_REPLICA_LIST:
    case CR__RPC_BATCH_EXIST:
    case CR__RPC_BATCH_GET_SIZE:
    case CR__RPC_BATCH_VALIDATE:
        return 1;
    default:
        return 0;
    }
}

/* during (cr__rpc_client_call_during): *during runs (and is cleared) once
 * the request is out. */
typedef struct during {
    void (*fn)(void *);
    void *arg;
} during_t;

static void during_run(during_t *d)
{
    if (d && d->fn) {
        void (*fn)(void *) = d->fn;
        d->fn = NULL;
        fn(d->arg);
    }
}

static int recv_reply_locked(cr__rpc_client_t *c, uint16_t type, uint64_t req_id,
                             uint64_t deadline, uint64_t spin_until, size_t first_max,
                             cr__rpc_msg_t *reply);

/* One attempt. Returns 0 with *reply, -EAGAIN (connection broke: retry
 * allowed if idempotent), or CR_E_RPC_FAIL / -ENOMEM. */
static int attempt_locked(cr__rpc_client_t *c, uint16_t type, uint64_t req_id, uint64_t deadline,
                          int fresh, int nospin, during_t *during, cr__rpc_msg_t *reply)
{
    int crc = connect_locked(c);
    if (crc)
        return crc;
    size_t sent = 0;
    uint64_t t_sent = c->spin_ns ? cr__now_ns() : 0;
    int rc = send_full(c->tc, c->fd, c->out.data, c->out.len, deadline, &sent);
    if (rc) {
        close_locked(c);
        /* a stale cached connection fails at once: allow one retry */
        return (rc == -ECONNRESET || rc == -ECONNREFUSED || rc == -ENOTCONN) && !fresh
                   ? -EAGAIN
                   : CR_E_RPC_FAIL;
    }
    int overlapped = during && during->fn;
    during_run(during);
    /* One recv brings the header and, for most replies, the whole payload.
     * Only one call is outstanding on a connection, so a byte past this
     * reply is a protocol violation. */
    /* A reply that comes within spin_ns is busy-polled for instead of
     * slept on: the caller's thread does not sleep, so the master's reply
     * wakes no one (on a VM a cross-CPU wakeup costs several microseconds
     * on each side). Only while the calls are that short: after a call
     * that took longer than the budget, the next one sleeps at once (and
     * measures again). */
    uint64_t spin_until = c->spin_ns && !nospin && !c->tc && c->last_rtt_ns <= c->spin_ns
                              ? t_sent + c->spin_ns
                              : 0;
    rc = recv_reply_locked(c, type, req_id, deadline, spin_until, sizeof c->in, reply);
    if (c->spin_ns && rc == 0 && !overlapped) /* an overlapped call's time is not the master's */
        c->last_rtt_ns = cr__now_ns() - t_sent;
    if (rc == -ECONNRESET)
        return fresh ? CR_E_RPC_FAIL : -EAGAIN;
    return rc;
}

/* Receives the reply of type to request req_id into *reply. The first
 * recv asks for up to first_max bytes (a reply's header and small payload
 * in one recv when nothing else can follow it; exactly the header when
 * further replies may be queued behind it: pipelined calls). Returns 0,
 * -ECONNRESET (the connection ended before any byte), CR_E_RPC_FAIL or
 * -ENOMEM; the connection is closed on any failure. */
static int recv_reply_locked(cr__rpc_client_t *c, uint16_t type, uint64_t req_id,
                             uint64_t deadline, uint64_t spin_until, size_t first_max,
                             cr__rpc_msg_t *reply)
{
    ssize_t got = recv_some(c->tc, c->fd, c->in, CR__RPC_HDR_SIZE, first_max, deadline,
                            spin_until);
    if (got < 0) {
        close_locked(c);
        return got == -ECONNRESET ? -ECONNRESET : CR_E_RPC_FAIL;
    }
    cr__rpc_hdr_t h;
    if (cr__rpc_decode_hdr(c->in, &h) || h.req_id != req_id ||
        h.type != (uint16_t)(type | CR__RPC_REPLY) ||
        (size_t)got > CR__RPC_HDR_SIZE + (size_t)h.payload_len) {
        CR_LOG_WARN("rpc", "bad reply header from %s:%u for %s", c->host, c->port,
                    cr__rpc_type_name(type));
        close_locked(c);
        return CR_E_RPC_FAIL;
    }
    size_t have = (size_t)got - CR__RPC_HDR_SIZE;
    uint8_t *payload = c->in + CR__RPC_HDR_SIZE, *big = NULL;
    if (h.payload_len > sizeof c->in - CR__RPC_HDR_SIZE) {
        big = malloc(h.payload_len);
        if (!big) {
            close_locked(c);
            return -ENOMEM;
        }
        memcpy(big, payload, have);
        payload = big;
    }
    if (have < h.payload_len) {
        ssize_t k = recv_some(c->tc, c->fd, payload + have, h.payload_len - have,
                              h.payload_len - have, deadline, 0);
        if (k < 0) {
            free(big);
            close_locked(c);
            return CR_E_RPC_FAIL;
        }
    }
    int rc = cr__rpc_decode(&h, payload, h.payload_len, reply);
    free(big);
    if (rc == 0)
        c->last_ok_ms = cr__now_ms();
    if (rc) {
        CR_LOG_WARN("rpc", "malformed %s reply from %s:%u", cr__rpc_type_name(type), c->host,
                    c->port);
        close_locked(c);
        return rc == -ENOMEM ? -ENOMEM : CR_E_RPC_FAIL;
    }
    return 0;
}

/* HA fencing of reply r (set_epoch): raises the shared floor to its epoch,
 * or refuses a reply of a deposed leader (older than the floor): frees r,
 * closes the connection and returns CR_E_RPC_FAIL. Else 0. */
static int epoch_check_locked(cr__rpc_client_t *c, cr__rpc_msg_t *r)
{
    if (!c->epoch || !r->epoch)
        return 0;
    uint32_t seen = atomic_load(c->epoch);
    while (r->epoch > seen && !atomic_compare_exchange_weak(c->epoch, &seen, r->epoch))
        ;
    if (r->epoch < seen) {
        cr__rpc_msg_free(r);
        close_locked(c);
        return CR_E_RPC_FAIL;
    }
    return 0;
}

/* req into c->out with the next request id (*req_id) and the epoch floor.
 * Returns 0, -EINVAL (does not encode: a bound exceeded) or -ENOMEM.
 * Caller holds mu. */
static int encode_locked(cr__rpc_client_t *c, const cr__rpc_msg_t *req, uint64_t *req_id)
{
    cr__rpc_msg_t m = *req;
    m.req_id = *req_id = c->next_req_id++;
    m.status = 0;
    if (c->epoch)
        m.epoch = atomic_load(c->epoch);
    int rc = cr__rpc_encode(&m, &c->out);
    return rc == -E2BIG ? -EINVAL : rc;
}

int cr__rpc_client_call(cr__rpc_client_t *c, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply)
{
    return cr__rpc_client_call_during(c, req, reply, NULL, NULL);
}

int cr__rpc_client_call_during(cr__rpc_client_t *c, const cr__rpc_msg_t *req,
                               cr__rpc_msg_t *reply, void (*fn)(void *), void *arg)
{
    return cr__rpc_client_call_flags(c, req, reply, fn, arg, 0);
}

int cr__rpc_client_call_flags(cr__rpc_client_t *c, const cr__rpc_msg_t *req,
                              cr__rpc_msg_t *reply, void (*fn)(void *), void *arg,
                              unsigned flags)
{
    int nospin = (flags & CR__RPC_CALL_NOSPIN) != 0;
    during_t during = {fn, arg};
    if (!c || !req || !reply || (req->type & CR__RPC_REPLY)) {
        during_run(&during);
        return -EINVAL;
    }
    pthread_mutex_lock(&c->mu);
    uint64_t req_id;
    int rc = encode_locked(c, req, &req_id);
    if (rc) {
        pthread_mutex_unlock(&c->mu);
        during_run(&during);
        return rc;
    }
    uint64_t deadline = cr__now_ms() + (uint64_t)c->call_timeout_ms;
    cr__rpc_msg_t r;
    memset(&r, 0, sizeof r);
    int fresh = c->fd < 0;
    rc = attempt_locked(c, req->type, req_id, deadline, fresh, nospin, &during, &r);
    if (rc == -EAGAIN) {
        if (idempotent(req->type))
            rc = attempt_locked(c, req->type, req_id, deadline, 1, nospin, &during, &r);
        else
            rc = CR_E_RPC_FAIL;
        if (rc == -EAGAIN)
            rc = CR_E_RPC_FAIL;
    }
    if (rc == 0)
        rc = epoch_check_locked(c, &r); /* a reply of a deposed leader is refused */
    pthread_mutex_unlock(&c->mu);
    during_run(&during); /* the request never went out */
    if (rc == 0)
        *reply = r;
    return rc;
}

int cr__rpc_client_set_addr(cr__rpc_client_t *c, const char *addr)
{
    char host[CR__HOST_MAX];
    uint16_t port;
    if (!c || !addr || cr__net_split_hostport(addr, host, &port, 0))
        return -EINVAL;
    pthread_mutex_lock(&c->mu);
    if (strcmp(host, c->host) || port != c->port) {
        close_locked(c);
        memcpy(c->host, host, sizeof host);
        c->port = port;
    }
    pthread_mutex_unlock(&c->mu);
    return 0;
}

void cr__rpc_client_set_spin(cr__rpc_client_t *c, unsigned us)
{
    pthread_mutex_lock(&c->mu);
    c->spin_ns = (uint64_t)us * 1000u;
    c->last_rtt_ns = 0;
    pthread_mutex_unlock(&c->mu);
}

void cr__rpc_client_set_epoch(cr__rpc_client_t *c, _Atomic uint32_t *epoch)
{
    pthread_mutex_lock(&c->mu);
    c->epoch = epoch;
    pthread_mutex_unlock(&c->mu);
}

/* ---- pipelined calls (client.h) ------------------------------------------ */

void cr__rpc_pipe_begin(cr__rpc_client_t *c, cr__rpc_pipe_t *p)
{
    memset(p, 0, sizeof *p);
    p->c = c;
    pthread_mutex_lock(&c->mu);
}

int cr__rpc_pipe_send(cr__rpc_pipe_t *p, const cr__rpc_msg_t *req)
{
    cr__rpc_client_t *c = p->c;
    if (!req || (req->type & CR__RPC_REPLY))
        return -EINVAL;
    if (p->err)
        return p->err;
    if (p->sent - p->got >= CR__RPC_PIPE_MAX)
        return -ENOSPC;
    uint64_t req_id;
    int rc = encode_locked(c, req, &req_id);
    if (rc)
        return rc;
    /* a connection opened for a pipe that already sent is never opened
     * here: a request must not follow on another connection than the
     * earlier ones, or the master could apply it before them */
    if (p->sent == p->got && !p->opened) {
        rc = connect_locked(c);
        if (rc)
            return p->err = rc;
        p->opened = 1;
    } else if (c->fd < 0) {
        return p->err = CR_E_RPC_FAIL;
    }
    uint64_t deadline = cr__now_ms() + (uint64_t)c->call_timeout_ms;
    size_t sent = 0;
    rc = send_full(c->tc, c->fd, c->out.data, c->out.len, deadline, &sent);
    if (rc) {
        close_locked(c);
        return p->err = CR_E_RPC_FAIL;
    }
    size_t k = p->sent % CR__RPC_PIPE_MAX;
    p->ids[k] = req_id;
    p->types[k] = req->type;
    p->deadlines[k] = deadline;
    p->sent++;
    return 0;
}

int cr__rpc_pipe_recv(cr__rpc_pipe_t *p, cr__rpc_msg_t *reply, unsigned flags)
{
    cr__rpc_client_t *c = p->c;
    if (p->got == p->sent)
        return -ENOENT;
    size_t k = p->got % CR__RPC_PIPE_MAX;
    p->got++;
    if (p->err)
        return p->err;
    if (c->fd < 0)
        return p->err = CR_E_RPC_FAIL;
    cr__rpc_msg_t r;
    memset(&r, 0, sizeof r);
    /* busy-polled for like an ordinary call's reply (set_spin), from now:
     * a pipelined request's own round trip is not measured (it overlapped
     * the caller's work) */
    uint64_t spin_until = c->spin_ns && !(flags & CR__RPC_CALL_NOSPIN) && !c->tc &&
                                  c->last_rtt_ns <= c->spin_ns
                              ? cr__now_ns() + c->spin_ns
                              : 0;
    /* exactly this reply's header first: the next reply may follow it */
    int rc = recv_reply_locked(c, p->types[k], p->ids[k], p->deadlines[k], spin_until,
                               CR__RPC_HDR_SIZE, &r);
    if (rc == 0)
        rc = epoch_check_locked(c, &r);
    if (rc) {
        close_locked(c);
        return p->err = rc == -ENOMEM ? -ENOMEM : CR_E_RPC_FAIL;
    }
    *reply = r;
    return 0;
}

void cr__rpc_pipe_end(cr__rpc_pipe_t *p)
{
    cr__rpc_client_t *c = p->c;
    if (p->got != p->sent) /* replies left unread must never be taken for later ones */
        close_locked(c);
    pthread_mutex_unlock(&c->mu);
    p->c = NULL;
}
