/* tcp transport, serving side: listeners, one acceptor thread, one thread
 * per accepted connection, which first passes the engine's connection-setup
 * hook (cr__xfer_conn_accepted). Every WRITE/READ is checked with
 * cr__xfer_cap_check() (the capability it carries, if the engine checks
 * them) and cr__xfer_mem_pin() before memory is touched; a bad header (magic,
 * version, opcode, oversized length) closes that connection only. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "common/status.h"
#include "common/tsan.h"
#include "transfer/transport/tcp/tcp_internal.h"

#define LOGC "tcp"
_Static_assert(CR__TCP_CAP_LEN == CR__CAP_LEN, "a tcp capability trailer is one capability");
#define SCRATCH (64u << 10)
#define ACK_BATCH 32

void cr__tcp_tune_socket(tcp_state_t *st, int fd)
{
    cr__net_set_nodelay(fd);
    if (st->cc[0] && !atomic_load(&st->cc_fallback) &&
        setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, st->cc, (socklen_t)strlen(st->cc))) {
        /* not available, or not allowed for this user (only
         * net.ipv4.tcp_allowed_congestion_control is): reno always is */
        CR_LOG_INFO(LOGC, "congestion control %s: %s; using reno", st->cc, strerror(errno));
        atomic_store(&st->cc_fallback, 1);
    }
    if (st->cc[0] && atomic_load(&st->cc_fallback))
        setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, "reno", 4);
    if (st->sockbuf > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &st->sockbuf, sizeof st->sockbuf);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &st->sockbuf, sizeof st->sockbuf);
    }
}

int cr__tcp_writev_full(int fd, struct iovec *iov, int cnt)
{
    while (cnt > 0) {
        /* sendmsg + MSG_NOSIGNAL, not writev: a dead peer must give EPIPE,
         * never a SIGPIPE to the application */
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)(cnt > IOV_MAX ? IOV_MAX : cnt)};
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EPIPE ? -ECONNRESET : errno == EAGAIN ? -ETIMEDOUT : CR__ERRNO();
        }
        while (cnt > 0 && (size_t)n >= iov->iov_len) {
            n -= (ssize_t)iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}

/* blocking read of exactly len bytes; SO_RCVTIMEO bounds each wait */
int cr__tcp_recv_full(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        ssize_t n = recv(fd, p, len, MSG_WAITALL);
        if (n == 0)
            return -ECONNRESET;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN ? -ETIMEDOUT : CR__ERRNO();
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Busy-polls for the next request by receiving its header (recv
 * MSG_DONTWAIT, sched_yield between) until until_ns: no poll() before the
 * receive (each system call costs over a microsecond on a VM). Returns 1
 * when the connection has news -- header bytes (in sc->nh, sc->nh_have),
 * EOF or an error, which the loop's next receive reports -- and 0 when
 * the time ran out. */
static int spin_recv_header(srv_conn_t *sc, uint64_t until_ns)
{
    for (;;) {
        ssize_t n = recv(sc->fd, &sc->nh, sizeof sc->nh, MSG_DONTWAIT);
        if (n > 0) {
            sc->nh_have = (size_t)n;
            return 1;
        }
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return 1;
        if (cr__now_ns() >= until_ns)
            return 0;
        /* the client we wait for may share this CPU: let it run (free when
         * nothing else is runnable) */
        sched_yield();
    }
}

/* Receives a WRITE payload of len bytes into dst and, in the same
 * recvmsg(), whatever is already queued of the next request header (into
 * sc->nh): one syscall per slice instead of two while requests stream in. */
static int recv_payload(srv_conn_t *sc, char *dst, uint64_t len)
{
    uint64_t got = 0;
    while (got < len) {
        struct iovec iov[2] = {{dst + got, len - got}, {&sc->nh, sizeof sc->nh}};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
        /* A remote WRITE lands in registered memory like DMA: its order
         * against other writers of the same bytes is the initiator's,
         * established through the sockets, which TSan cannot see. E.g. when
         * a connection is cut (test_xfer_multinic's failover), the initiator
         * resends the slice on another connection after it saw this one
         * fail, and another server thread writes the same bytes. (A slice
         * the initiator aborted may still be copied here late, after a
         * frozen target resumes: memory ordering cannot exclude that; the
         * store's end-to-end crc32c makes such bytes a miss.) */
        CR_TSAN_IGNORE_BEGIN();
        ssize_t n = recvmsg(sc->fd, &mh, 0);
        CR_TSAN_IGNORE_END();
        if (n == 0)
            return -ECONNRESET;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN ? -ETIMEDOUT : CR__ERRNO();
        }
        if ((uint64_t)n > len - got) {
            sc->nh_have = (size_t)((uint64_t)n - (len - got));
            got = len;
        } else {
            got += (uint64_t)n;
        }
    }
    return 0;
}

typedef struct ack_buf {
    cr__tcp_hdr_t h[ACK_BATCH + 1];
    int n;
    uint64_t bytes;
} ack_buf_t;

static int acks_flush(int fd, ack_buf_t *a, struct iovec *extra, int n_extra)
{
    struct iovec iov[4];
    int cnt = 0;
    if (a->n) {
        iov[cnt].iov_base = a->h;
        iov[cnt].iov_len = (size_t)a->n * sizeof a->h[0];
        cnt++;
    }
    for (int i = 0; i < n_extra; i++)
        iov[cnt++] = extra[i];
    a->n = 0;
    a->bytes = 0;
    return cnt ? cr__tcp_writev_full(fd, iov, cnt) : 0;
}

/* reads and throws away len bytes (payload of a refused WRITE) */
static int drain(srv_conn_t *sc, uint64_t len)
{
    if (!sc->scratch && !(sc->scratch = malloc(SCRATCH)))
        return -ENOMEM;
    while (len) {
        size_t k = len < SCRATCH ? (size_t)len : SCRATCH;
        int rc = cr__tcp_recv_full(sc->fd, sc->scratch, k);
        if (rc)
            return rc;
        len -= k;
    }
    return 0;
}

/* The capability check, then the registration check: 0 or -errno. */
static int admit(srv_conn_t *sc, const cr__tcp_hdr_t *h, const uint8_t *cap, void **tok)
{
    cr_xfer_engine_t *e = sc->st->engine;
    int status = cr__xfer_cap_check(e, &sc->capc, cap, h->opcode == CR__TCP_WRITE, h->addr, h->len);
    return status ? status : cr__xfer_mem_pin(e, h->addr, h->len, tok);
}

/* Serves one request whose header is h (cap: the capability that came with
 * it, or NULL). Returns 0 to continue, <0 to close. */
static int serve_one(srv_conn_t *sc, cr__tcp_hdr_t *h, const uint8_t *cap, ack_buf_t *acks)
{
    tcp_state_t *st = sc->st;
    cr_xfer_engine_t *e = st->engine;
    int fd = sc->fd;
    cr__tcp_hdr_t r;
    void *tok;
    int rc;
    switch (h->opcode) {
    case CR__TCP_WRITE: {
        if (h->len == 0 || h->len > CR__TCP_MAX_SLICE)
            return -EPROTO;
        int status = admit(sc, h, cap, &tok);
        if (status == 0) {
            rc = recv_payload(sc, (char *)(uintptr_t)h->addr, h->len);
            cr__xfer_mem_unpin(e, tok);
        } else {
            CR_LOG_INFO(LOGC, "refused WRITE 0x%llx+%llu: %s", (unsigned long long)h->addr,
                        (unsigned long long)h->len, cr_strerror(status));
            rc = drain(sc, h->len);
        }
        if (rc)
            return rc;
        cr__tcp_hdr_enc(&acks->h[acks->n++], CR__TCP_WRITE | CR__TCP_RESP, status, h->seq,
                        h->addr, 0);
        acks->bytes += h->len;
        /* a waiting caller with nothing more queued gets its ack now, not
         * after one more recv() finds the socket empty */
        if (acks->n >= ACK_BATCH || acks->bytes >= TCP_ACK_FLUSH_BYTES ||
            ((h->flags & CR__TCP_F_WAITS) && !sc->nh_have))
            return acks_flush(fd, acks, NULL, 0);
        return 0;
    }
    case CR__TCP_READ: {
        if (h->len == 0 || h->len > CR__TCP_MAX_SLICE)
            return -EPROTO;
        int status = admit(sc, h, cap, &tok);
        cr__tcp_hdr_enc(&r, CR__TCP_READ | CR__TCP_RESP, status, h->seq, h->addr, h->len);
        struct iovec iov[2] = {{&r, sizeof r}, {(void *)(uintptr_t)h->addr, h->len}};
        rc = acks_flush(fd, acks, iov, status ? 1 : 2);
        if (status == 0) {
            cr__xfer_mem_unpin(e, tok);
            return rc;
        }
        CR_LOG_INFO(LOGC, "refused READ 0x%llx+%llu: %s", (unsigned long long)h->addr,
                    (unsigned long long)h->len, cr_strerror(status));
        /* a refused READ is answered with len bytes of zeros: the reply
         * layout never depends on the status (see tcp-wire.md) */
        static const char zeros[SCRATCH];
        for (uint64_t left = h->len; !rc && left;) {
            size_t k = left < SCRATCH ? (size_t)left : SCRATCH;
            struct iovec z = {(void *)zeros, k};
            rc = cr__tcp_writev_full(fd, &z, 1);
            left -= k;
        }
        return rc;
    }
    default:
        return -EPROTO;
    }
}

#define READ_BATCH 32

/* Serves k READ requests (raw headers h[0..k)) with one writev() of all
 * replies, straight from the registered memory. If any range is refused,
 * falls back to serving them one by one (with error replies). */
static int serve_reads(srv_conn_t *sc, cr__tcp_hdr_t *h, const uint8_t *const *caps, int k,
                       ack_buf_t *acks)
{
    cr_xfer_engine_t *e = sc->st->engine;
    void *tok[READ_BATCH];
    cr__tcp_hdr_t r[READ_BATCH];
    struct iovec iov[1 + 2 * READ_BATCH];
    int pinned = 0, rc = 0;
    for (; pinned < k; pinned++)
        if (admit(sc, &h[pinned], caps[pinned], &tok[pinned]))
            break;
    if (pinned < k) {
        for (int i = 0; i < pinned; i++)
            cr__xfer_mem_unpin(e, tok[i]);
        for (int i = 0; i < k && !rc; i++)
            rc = serve_one(sc, &h[i], caps[i], acks);
        return rc;
    }
    int cnt = 0;
    if (acks->n) {
        iov[cnt].iov_base = acks->h;
        iov[cnt++].iov_len = (size_t)acks->n * sizeof acks->h[0];
        acks->n = 0;
        acks->bytes = 0;
    }
    for (int i = 0; i < k; i++) {
        cr__tcp_hdr_enc(&r[i], CR__TCP_READ | CR__TCP_RESP, 0, h[i].seq, h[i].addr, h[i].len);
        iov[cnt].iov_base = &r[i];
        iov[cnt++].iov_len = sizeof r[i];
        iov[cnt].iov_base = (void *)(uintptr_t)h[i].addr;
        iov[cnt++].iov_len = h[i].len;
    }
    rc = cr__tcp_writev_full(sc->fd, iov, cnt);
    for (int i = 0; i < k; i++)
        cr__xfer_mem_unpin(e, tok[i]);
    return rc;
}

/* After a READ, more READ requests are likely queued: peek, and take a run
 * of them (each a header, plus a capability if flagged) with one recv()
 * into buf. Returns the number consumed into h, with caps[i] pointing into
 * buf or NULL (0: none). */
#define READ_REC (sizeof(cr__tcp_hdr_t) + CR__TCP_CAP_LEN)
static int take_read_run(int fd, uint8_t *buf, cr__tcp_hdr_t *h, const uint8_t **caps)
{
    ssize_t n = recv(fd, buf, READ_BATCH * READ_REC, MSG_PEEK | MSG_DONTWAIT);
    if (n < (ssize_t)(2 * sizeof *h))
        return 0;
    int k = 0;
    size_t off = 0;
    while (k < READ_BATCH && off + sizeof *h <= (size_t)n) {
        cr__tcp_hdr_t t;
        memcpy(&t, buf + off, sizeof t);
        if (cr__tcp_hdr_dec(&t) || t.opcode != CR__TCP_READ || t.len == 0 ||
            t.len > CR__TCP_MAX_SLICE)
            break;
        size_t rec = sizeof t + ((t.flags & CR__TCP_F_CAP) ? CR__TCP_CAP_LEN : 0);
        if (off + rec > (size_t)n)
            break;
        caps[k] = (t.flags & CR__TCP_F_CAP) ? buf + off + sizeof t : NULL;
        h[k++] = t;
        off += rec;
    }
    if (k < 2)
        return 0;
    /* consume exactly the k requests we decoded (they are already queued:
     * the same bytes land in buf again, so caps stay valid) */
    if (cr__tcp_recv_full(fd, buf, off))
        return -1;
    return k;
}

static void *srv_main(void *arg)
{
    srv_conn_t *sc = arg;
    tcp_state_t *st = sc->st;
    int fd = sc->fd;
    ack_buf_t acks;
    acks.n = 0;
    acks.bytes = 0;
    int last_read = 0;
    /* Busy-poll for the next request (st->spin_ns), so that a caller who
     * waits for each reply (CR__TCP_F_WAITS) and sends its next request
     * soon after wakes no sleeping thread: on a VM a cross-CPU wakeup costs
     * several microseconds on each side. Only while it pays: after a reply
     * to a waiting caller, and only if the idle gap before the last request
     * was within the budget (a spin that ran out, or a longer sleep, makes
     * the next wait sleep at once and measure again); one connection of the
     * engine at a time (st->spinner). Streams of queued slices never set
     * the flag, so bulk transfers never spin. */
    int waits = 0;
    uint64_t gap = UINT64_MAX;
    /* the engine's connection-setup hook (authentication) runs in this
     * thread, so a slow handshake never holds up the acceptor */
    int rc = cr__xfer_conn_accepted(st->engine, fd, (int)st->cfg.timeout_ms);
    while (!rc) {
        if (last_read && sc->nh_have == 0) {
            cr__tcp_hdr_t run[READ_BATCH];
            const uint8_t *run_caps[READ_BATCH];
            uint8_t raw[READ_BATCH * READ_REC];
            int k = take_read_run(fd, raw, run, run_caps);
            if (k < 0) {
                rc = -ECONNRESET;
                break;
            }
            if (k > 0) {
                waits = (run[k - 1].flags & CR__TCP_F_WAITS) != 0;
                if ((rc = serve_reads(sc, run, run_caps, k, &acks)) != 0)
                    break;
                continue;
            }
        }
        cr__tcp_hdr_t h;
        ssize_t n;
        if (sc->nh_have) { /* read ahead with the previous WRITE payload */
            memcpy(&h, &sc->nh, sc->nh_have);
            n = (ssize_t)sc->nh_have;
            sc->nh_have = 0;
        } else {
            n = recv(fd, &h, sizeof h, MSG_DONTWAIT);
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            /* idle: answer what we owe, then wait without a time limit */
            if ((rc = acks_flush(fd, &acks, NULL, 0)) != 0)
                break;
            uint64_t idle = cr__now_ns();
            int ready = 0;
            if (waits && st->spin_ns && gap <= st->spin_ns && !atomic_exchange(&st->spinner, 1)) {
                ready = spin_recv_header(sc, idle + st->spin_ns);
                atomic_store(&st->spinner, 0);
                if (ready)
                    atomic_fetch_add_explicit(&st->spin_hits, 1, memory_order_relaxed);
            }
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (!ready && poll(&p, 1, -1) < 0 && errno != EINTR) {
                rc = CR__ERRNO();
                break;
            }
            gap = cr__now_ns() - idle;
            if (atomic_load(&st->stopping)) {
                rc = -ECANCELED;
                break;
            }
            continue;
        }
        if (n == 0) {
            rc = -ECONNRESET;
            break;
        }
        if (n < 0) {
            rc = CR__ERRNO();
            break;
        }
        if ((size_t)n < sizeof h && (rc = cr__tcp_recv_full(fd, (char *)&h + n, sizeof h - (size_t)n)))
            break;
        if (cr__tcp_hdr_dec(&h)) {
            CR_LOG_RL(CR__LOG_WARN, LOGC,
                      "bad header (magic/version) from a client: closing its connection");
            rc = -EPROTO;
            break;
        }
        uint8_t cap[CR__TCP_CAP_LEN];
        if ((h.flags & CR__TCP_F_CAP) && (rc = cr__tcp_recv_full(fd, cap, sizeof cap)))
            break;
        last_read = h.opcode == CR__TCP_READ;
        waits = (h.flags & CR__TCP_F_WAITS) != 0;
        if ((rc = serve_one(sc, &h, (h.flags & CR__TCP_F_CAP) ? cap : NULL, &acks)) != 0) {
            if (rc == -EPROTO)
                CR_LOG_RL(CR__LOG_WARN, LOGC,
                          "bad request (opcode %u, len %llu): closing the connection",
                          h.opcode, (unsigned long long)h.len);
            break;
        }
    }
    CR_LOG_DEBUG(LOGC, "server connection closed: %s", cr_strerror(rc));
    pthread_mutex_lock(&st->srv_mu);
    if (sc->prev)
        sc->prev->next = sc->next;
    else
        st->srv_list = sc->next;
    if (sc->next)
        sc->next->prev = sc->prev;
    st->n_srv--;
    close(sc->fd);
    free(sc->scratch); /* freed before n_srv is seen dropping (fuzz harness) */
    free(sc);
    pthread_cond_broadcast(&st->srv_cv);
    pthread_mutex_unlock(&st->srv_mu);
    return NULL;
}

static void accept_one(tcp_state_t *st, int lfd, int nic)
{
    struct sockaddr_storage src;
    socklen_t sl = sizeof src;
    memset(&src, 0, sizeof src);
    int fd = accept4(lfd, (struct sockaddr *)&src, &sl, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    cr__tcp_tune_socket(st, fd);
    /* bounds a stalled client mid-message; idle waits use poll() */
    cr__net_set_timeouts(fd, (int)st->cfg.timeout_ms);
    srv_conn_t *sc = calloc(1, sizeof *sc);
    if (!sc) {
        close(fd);
        return;
    }
    sc->st = st;
    sc->fd = fd;
    sc->nic = nic;
    sc->src = src;
    pthread_mutex_lock(&st->srv_mu);
    int same = 0; /* connections this source holds (accepts are rare: a scan is fine) */
    for (srv_conn_t *o = st->srv_list; o; o = o->next)
        same += cr__net_same_source(&o->src, &src);
    if (st->n_srv >= TCP_MAX_SRV_CONNS || same >= TCP_MAX_SRV_CONNS / CR__XFER_PER_SOURCE_DIV ||
        atomic_load(&st->stopping)) {
        pthread_mutex_unlock(&st->srv_mu);
        CR_LOG_RL(CR__LOG_WARN, LOGC, "too many connections%s: refusing one",
                  st->n_srv >= TCP_MAX_SRV_CONNS ? "" : " from one address");
        close(fd);
        free(sc);
        return;
    }
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, TCP_THREAD_STACK);
    pthread_t th;
    sc->next = st->srv_list;
    if (st->srv_list)
        st->srv_list->prev = sc;
    st->srv_list = sc;
    st->n_srv++;
    if (pthread_create(&th, &at, srv_main, sc)) {
        st->srv_list = sc->next;
        if (sc->next)
            sc->next->prev = NULL;
        st->n_srv--;
        close(fd);
        free(sc);
    } else {
        pthread_setname_np(th, "cr-tcp-srv"); /* one per accepted connection */
    }
    pthread_mutex_unlock(&st->srv_mu);
    pthread_attr_destroy(&at);
}

static void *acceptor_main(void *arg)
{
    tcp_state_t *st = arg;
    struct pollfd p[CR_XFER_MAX_NICS + 1];
    int map[CR_XFER_MAX_NICS + 1];
    while (!atomic_load(&st->stopping)) {
        int n = 0;
        p[n].fd = st->wake[0];
        p[n].events = POLLIN;
        map[n++] = -1;
        pthread_mutex_lock(&st->srv_mu);
        for (int i = 0; i < st->n_listen; i++)
            if (st->listen_fd[i] >= 0) {
                p[n].fd = st->listen_fd[i];
                p[n].events = POLLIN;
                map[n++] = i;
            }
        pthread_mutex_unlock(&st->srv_mu);
        if (poll(p, (nfds_t)n, -1) < 0)
            continue;
        if (p[0].revents) {
            char b[64];
            if (read(st->wake[0], b, sizeof b) < 0) {
                /* nothing: the wake pipe only interrupts poll */
            }
            continue; /* listener set may have changed */
        }
        for (int i = 1; i < n; i++)
            if (p[i].revents & POLLIN)
                accept_one(st, p[i].fd, map[i]);
    }
    return NULL;
}

static void wake_acceptor(tcp_state_t *st)
{
    char c = 1;
    if (write(st->wake[1], &c, 1) < 0) {
        /* pipe full: the acceptor is already due to wake up */
    }
}

int cr__tcp_server_start(tcp_state_t *st, cr__seg_desc_t *local)
{
    if (pipe2(st->wake, O_CLOEXEC | O_NONBLOCK))
        return CR__ERRNO();
    /* an ephemeral port, the same on every NIC: the port the engine is
     * known by (cfg.port) belongs to its control channel */
    int rc = cr__net_listen_all((const char(*)[64])st->cfg.nics, st->cfg.n_nics, 0, TCP_BACKLOG,
                                st->listen_fd, &st->port);
    if (rc) {
        close(st->wake[0]);
        close(st->wake[1]);
        return rc;
    }
    st->n_listen = (int)st->cfg.n_nics;
    for (uint32_t i = 0; i < st->cfg.n_nics; i++)
        local->nics[i].port = st->port;
    if (pthread_create(&st->acceptor, NULL, acceptor_main, st)) {
        while (st->n_listen > 0)
            close(st->listen_fd[--st->n_listen]);
        close(st->wake[0]);
        close(st->wake[1]);
        return -ENOMEM;
    }
    {
        pthread_setname_np(st->acceptor, "cr-tcp-accept");
    }
    st->acceptor_started = 1;
    return 0;
}

void cr__tcp_server_stop(tcp_state_t *st)
{
    if (st->acceptor_started) {
        wake_acceptor(st);
        pthread_join(st->acceptor, NULL);
        st->acceptor_started = 0;
        close(st->wake[0]);
        close(st->wake[1]);
    }
    for (int i = 0; i < st->n_listen; i++)
        if (st->listen_fd[i] >= 0)
            close(st->listen_fd[i]);
    st->n_listen = 0;
    pthread_mutex_lock(&st->srv_mu);
    for (srv_conn_t *sc = st->srv_list; sc; sc = sc->next)
        shutdown(sc->fd, SHUT_RDWR);
    while (st->n_srv > 0)
        pthread_cond_wait(&st->srv_cv, &st->srv_mu);
    pthread_mutex_unlock(&st->srv_mu);
}

int cr__xfer_tcp_debug_nic(void *state, int nic, int down)
{
    tcp_state_t *st = state;
    if (nic < 0 || nic >= st->n_listen)
        return -EINVAL;
    pthread_mutex_lock(&st->srv_mu);
    int rc = 0;
    if (down) {
        if (st->listen_fd[nic] >= 0)
            close(st->listen_fd[nic]);
        st->listen_fd[nic] = -1;
        for (srv_conn_t *sc = st->srv_list; sc; sc = sc->next)
            if (sc->nic == nic)
                shutdown(sc->fd, SHUT_RDWR);
    } else if (st->listen_fd[nic] < 0) {
        int fd = cr__net_listen(st->cfg.nics[nic], st->port, TCP_BACKLOG, NULL);
        if (fd < 0)
            rc = fd;
        else
            st->listen_fd[nic] = fd;
    }
    pthread_mutex_unlock(&st->srv_mu);
    wake_acceptor(st);
    return rc;
}
