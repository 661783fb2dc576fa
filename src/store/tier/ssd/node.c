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
#define FIRST_FRAME_MS 5000
#define IDLE_MS 60000
#define LOCAL_MAX 256 /* same-host clients holding the data file (watched, no thread) */
#define CONN_BUDGET (64ull << 20) /* bytes of reads in flight per connection */
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
    atomic_int stop;
    pthread_mutex_t mu; /* guards conns, n_conns, locals, n_locals, corrupt */
    pthread_cond_t cv;
    int conns[CONN_MAX];
    struct sockaddr_storage srcs[CONN_MAX]; /* conns[i]'s peer address */
    int n_conns;
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

/* 1 if a and b are the same source address (any two Unix peers are). */
static int same_source(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                       &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
    return 1;
}

/* Forgets connection fd (t->mu held). */
static void conn_forget_locked(cr__tier_node_t *t, int fd)
{
    for (int i = 0; i < t->n_conns; i++)
        if (t->conns[i] == fd) {
            t->n_conns--;
            t->conns[i] = t->conns[t->n_conns];
            t->srcs[i] = t->srcs[t->n_conns];
            break;
        }
}

typedef struct rreq {
    char key[CR__RPC_KEY_MAX];
    uint32_t key_len;
    uint64_t version, off, size, roff, rlen;
    int status;
    uint8_t *buf;
} rreq_t;

typedef struct conn_arg {
    cr__tier_node_t *t;
    int fd;
} conn_arg_t;

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

/* Reads one request header+key (blocking). 0, or <0 to close. */
static int read_req(int fd, rreq_t *q, int timeout_ms)
{
    uint8_t h[CR__TIER_RD_REQ_FIXED];
    int rc = cr__net_read_full(fd, h, sizeof h, timeout_ms);
    if (rc)
        return rc;
    if (rd32(h) != CR__TIER_RD_MAGIC)
        return -EPROTO;
    q->key_len = rd32(h + 4);
    q->version = rd64(h + 8);
    q->off = rd64(h + 16);
    q->size = rd64(h + 24);
    q->roff = rd64(h + 32);
    q->rlen = rd64(h + 40);
    if (q->key_len == 0 || q->key_len > CR__RPC_KEY_MAX)
        return -EPROTO;
    rc = cr__net_read_full(fd, q->key, q->key_len, timeout_ms);
    if (rc)
        return rc;
    q->status = 0;
    if (q->size == 0 || q->size > VALUE_MAX || q->roff > q->size || q->rlen > q->size - q->roff ||
        (q->off & (CR__TIER_BLOCK - 1)))
        q->status = CR_E_INVALID_PARAMS;
    return 0;
}

/* Header + bytes in one sendmsg where the socket takes them (the
 * connection is blocking with SO_SNDTIMEO and a large send buffer: one
 * system call per reply, no poll). */
static int send_reply(int fd, const rreq_t *q)
{
    uint8_t h[CR__TIER_RD_REP] = {0};
    int32_t st = q->status;
    uint64_t len = q->status ? 0 : q->rlen;
    memcpy(h, &st, 4);
    memcpy(h + 8, &len, 8);
    struct iovec iov[2] = {
        {.iov_base = h, .iov_len = sizeof h},
        {.iov_base = len ? q->buf + cr__tier_hdr_len(q->key_len) + q->roff : NULL,
         .iov_len = len},
    };
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
    while (mh.msg_iovlen) {
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN ? -ETIMEDOUT : CR__ERRNO();
        }
        while (mh.msg_iovlen && (size_t)n >= mh.msg_iov->iov_len) {
            n -= (ssize_t)mh.msg_iov->iov_len;
            mh.msg_iov++;
            mh.msg_iovlen--;
        }
        if (mh.msg_iovlen) {
            mh.msg_iov->iov_base = (uint8_t *)mh.msg_iov->iov_base + n;
            mh.msg_iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}

/* Replies of one batch, sent in request order as reads complete. A read
 * is split into chunks of READ_CHUNK bytes submitted in request order, so
 * with the queue depth in flight the objects complete one after the other
 * (the first can be sent while the disk reads the rest) instead of all at
 * the end of the batch. */
#define READ_CHUNK (512u << 10)

typedef struct stream {
    cr__tier_node_t *t;
    int fd;
    rreq_t *qs;
    size_t n, next;
    uint8_t *ready;
    uint32_t *left;      /* chunks still in flight per request */
    const size_t *owner; /* chunk -> request */
    int bad;
} stream_t;

static void stream_flush(stream_t *st)
{
    while (st->next < st->n && st->ready[st->next]) {
        rreq_t *q = &st->qs[st->next++];
        if (!st->bad && send_reply(st->fd, q))
            st->bad = 1;
        if (!q->status)
            atomic_fetch_add(&st->t->reads, 1);
    }
}

static void stream_chunk_done(void *arg, size_t j, int result)
{
    stream_t *st = arg;
    size_t i = st->owner[j];
    rreq_t *q = &st->qs[i];
    if (result && !q->status) {
        q->status = CR_E_TRANSFER_FAIL;
        atomic_fetch_add(&st->t->read_errors, 1);
    }
    if (--st->left[i])
        return;
    int c = q->status ? 0 : cr__ssd_check(q->buf, q->key, q->key_len, q->version, q->size);
    if (c) {
        q->status = CR_E_OBJECT_NOT_FOUND; /* a miss, never the bytes */
        /* a well-formed object of another key/version is a reader that
         * outlived its lease on a reused extent: not a corrupt disk */
        if (c == -EBADMSG)
            note_corrupt(st->t, q->key, q->key_len, q->version, q->off);
    }
    st->ready[i] = 1;
    stream_flush(st);
}

typedef struct stream_hook {
    stream_t *st;
    const cr__ssd_io_t *ios;
} stream_hook_t;

static void stream_done(void *arg, size_t j)
{
    stream_hook_t *h = arg;
    stream_chunk_done(h->st, j, h->ios[j].result);
}

static void *conn_main(void *arg)
{
    conn_arg_t *ca = arg;
    cr__tier_node_t *t = ca->t;
    int fd = ca->fd;
    free(ca);
    cr__ssd_ring_t ring;
    uint8_t *arena = NULL; /* read buffers of one batch, kept for the next */
    uint64_t arena_cap = 0;
    size_t maxq = t->cfg.qd ? t->cfg.qd : 32;
    if (maxq > 256)
        maxq = 256;
    rreq_t *qs = calloc(maxq, sizeof *qs);
    size_t ios_cap = CONN_BUDGET / READ_CHUNK + maxq; /* grows for larger objects */
    cr__ssd_io_t *ios = calloc(ios_cap, sizeof *ios);
    size_t *owner = calloc(ios_cap, sizeof *owner);
    uint8_t *sendq = calloc(maxq, 1);
    uint32_t *left = calloc(maxq, sizeof *left);
    if (!qs || !ios || !owner || !sendq || !left || cr__ssd_ring_init(&ring, (unsigned)maxq)) {
        CR_LOG_ERROR(COMP, "read connection: out of memory or io_uring unavailable");
        goto out;
    }
    int sndbuf = 4 << 20; /* a 1 MiB reply in one call (capped by net.core.wmem_max) */
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    cr__net_set_timeouts(fd, 30000);
    /* security on: nothing is served to a peer without the cluster key */
    if (t->cfg.auth && cr__auth_server_fd(t->cfg.auth, fd, "tier", 5000)) {
        CR_LOG_RL(CR__LOG_WARN, COMP, "read server: refused a peer without the cluster key");
        goto done;
    }
    /* a member proved itself in the handshake; a peer of an open node must
     * send its first request within FIRST_FRAME_MS */
    unsigned quiet_max = t->cfg.auth ? IDLE_MS : FIRST_FRAME_MS;
    uint64_t quiet_since = cr__now_ms();
    while (!atomic_load(&t->stop)) {
        /* one request (waits), then whatever else is already queued */
        size_t n = 0;
        uint64_t budget = 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, 500);
        if (pr == 0) {
            if (cr__now_ms() - quiet_since >= quiet_max)
                break; /* idle, or never sent a request */
            continue;
        }
        if (pr < 0 || (p.revents & (POLLERR | POLLNVAL)))
            break;
        for (;;) {
            rreq_t *q = &qs[n];
            if (read_req(fd, q, FIRST_FRAME_MS))
                goto done;
            q->buf = NULL;
            uint64_t dl = cr__tier_disk_len(q->key_len, q->size);
            if (!q->status && q->off + dl > cr__ssd_capacity(t->ssd))
                q->status = CR_E_INVALID_PARAMS;
            if (!q->status) {
                /* buffers come from this connection's arena (reused: no
                 * page faults per read); the batch stops when it is full */
                q->buf = (uint8_t *)(uintptr_t)budget; /* offset, made a pointer below */
                budget += dl;
            }
            n++;
            if (n == maxq || budget >= CONN_BUDGET)
                break;
            p.revents = 0;
            if (poll(&p, 1, 0) != 1 || !(p.revents & POLLIN))
                break;
        }
        if (budget > arena_cap) {
            free(arena);
            arena_cap = 0;
            if (posix_memalign((void **)&arena, CR__TIER_BLOCK, budget))
                arena = NULL;
            else
                arena_cap = budget;
        }
        /* the valid reads, in chunks, in request order; each reply goes
         * out (in request order) as soon as its object is read and
         * checked, while the disk works on the next ones */
        size_t need = 0;
        for (size_t i = 0; i < n; i++)
            if (!qs[i].status)
                need += (cr__tier_disk_len(qs[i].key_len, qs[i].size) + READ_CHUNK - 1) /
                        READ_CHUNK;
        if (need > ios_cap) {
            cr__ssd_io_t *ni = realloc(ios, need * sizeof *ios);
            if (ni)
                ios = ni;
            size_t *no = ni ? realloc(owner, need * sizeof *owner) : NULL;
            if (no)
                owner = no;
            if (!ni || !no) {
                CR_LOG_ERROR(COMP, "read connection: out of memory");
                break;
            }
            ios_cap = need;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            rreq_t *q = &qs[i];
            left[i] = 0;
            if (!q->status && !arena)
                q->status = -ENOMEM;
            if (q->status) {
                q->buf = NULL;
                continue;
            }
            q->buf = arena + (uintptr_t)q->buf;
            uint64_t dl = cr__tier_disk_len(q->key_len, q->size);
            for (uint64_t o = 0; o < dl; o += READ_CHUNK) {
                uint64_t cl = dl - o < READ_CHUNK ? dl - o : READ_CHUNK;
                ios[k] = (cr__ssd_io_t){.write = 0, .buf = q->buf + o, .off = q->off + o,
                                        .len = cl};
                owner[k++] = i;
                left[i]++;
            }
        }
        for (size_t i = 0; i < n; i++)
            sendq[i] = qs[i].status != 0; /* ready to answer */
        stream_t st = {.t = t, .fd = fd, .qs = qs, .n = n, .ready = sendq, .left = left,
                       .owner = owner};
        stream_flush(&st);
        if (k) {
            stream_hook_t sh = {.st = &st, .ios = ios};
            cr__ssd_hooks_t h = {.done = stream_done, .arg = &sh};
            cr__ssd_run_hooked(t->ssd, &ring, ios, k, &h);
        }
        stream_flush(&st);
        int bad = st.bad;
        for (size_t i = 0; i < n; i++)
            qs[i].buf = NULL;
        if (bad)
            break;
        quiet_max = IDLE_MS;
        quiet_since = cr__now_ms();
    }
done:
    cr__ssd_ring_fini(&ring);
out:
    free(arena);
    free(qs);
    free(ios);
    free(owner);
    free(sendq);
    free(left);
    pthread_mutex_lock(&t->mu);
    conn_forget_locked(t, fd);
    close(fd);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
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
    struct iovec iov = {.iov_base = h, .iov_len = sizeof h};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof u.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &t->ro_fd, sizeof(int));
    keep = sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)sizeof h;
done:
    pthread_mutex_lock(&t->mu);
    conn_forget_locked(t, fd);
    if (keep && t->n_locals < LOCAL_MAX && !atomic_load(&t->stop))
        t->locals[t->n_locals++] = fd; /* watched by acc_main from now on */
    else
        close(fd); /* (beyond LOCAL_MAX the client still holds the file) */
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
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
        pthread_mutex_lock(&t->mu);
        int same = 0;
        for (int i = 0; i < t->n_conns; i++)
            same += same_source(&t->srcs[i], &src);
        if (t->n_conns >= CONN_MAX || same >= CONN_PER_SOURCE || atomic_load(&t->stop)) {
            pthread_mutex_unlock(&t->mu);
            CR_LOG_RL(CR__LOG_WARN, COMP, "read server: too many connections%s, refusing one",
                      same >= CONN_PER_SOURCE ? " from one address" : "");
            close(fd);
            continue;
        }
        t->srcs[t->n_conns] = src;
        t->conns[t->n_conns++] = fd;
        pthread_mutex_unlock(&t->mu);
        conn_arg_t *ca = malloc(sizeof *ca);
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (!ca || (ca->t = t, ca->fd = fd,
                    pthread_create(&th, &at, local ? local_main : conn_main, ca))) {
            free(ca);
            pthread_mutex_lock(&t->mu);
            conn_forget_locked(t, fd);
            pthread_mutex_unlock(&t->mu);
            close(fd);
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
    cr__ssd_ring_t ring;
    unsigned qd = t->cfg.qd ? t->cfg.qd : 32;
    if (cr__ssd_ring_init(&ring, qd)) {
        CR_LOG_ERROR(COMP, "sync thread: io_uring unavailable");
        return NULL;
    }
    cr__rpc_msg_t done = {0}; /* completions for the next sync */
    uint32_t n_done = 0;
    task_buf_t *bufs = calloc(CR__RPC_BATCH_MAX, sizeof *bufs);
    cr__ssd_io_t *ios = calloc(CR__RPC_BATCH_MAX, sizeof *ios);
    size_t *map = calloc(CR__RPC_BATCH_MAX, sizeof *map);
    int idle = 0;
    while (bufs && ios && map && !atomic_load(&t->stop)) {
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
            if (mount_and_report(t, &ring, NULL, 0))
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
            erase_at(t, &ring, offs, ne);
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
                if (posix_memalign((void **)&b->buf, CR__TIER_BLOCK, dl)) {
                    b->buf = NULL;
                    d->status = -ENOMEM;
                    continue;
                }
                b->cap = dl;
            }
            /* encoded in off_prep, just before its write is submitted */
            ios[k] = (cr__ssd_io_t){.write = 1, .buf = b->buf, .off = dst->addr, .len = dl};
            map[k] = n_done - 1;
            k++;
        }
        if (k) {
            off_ctx_t oc = {.items = rep.items, .ios = ios, .map = map};
            cr__ssd_hooks_t h = {.prep = off_prep, .arg = &oc};
            cr__ssd_run_hooked(t->ssd, &ring, ios, k, &h);
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
                if (posix_memalign((void **)&b->buf, CR__TIER_BLOCK, dl)) {
                    b->buf = NULL;
                    done.items[i].status = -ENOMEM;
                    continue;
                }
                b->cap = dl;
            }
            ios[kp] = (cr__ssd_io_t){.write = 0, .buf = b->buf, .off = src->addr, .len = dl};
            map[kp++] = i;
        }
        if (kp)
            cr__ssd_run(t->ssd, &ring, ios, kp);
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
    cr__ssd_ring_fini(&ring);
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
        pthread_join(t->sync_thr, NULL);
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n_conns; i++)
        shutdown(t->conns[i], SHUT_RDWR);
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
