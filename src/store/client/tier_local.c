/* Same-host disk tier reads (store/tier/tier.h, "same-host fast path").
 *
 * When the node holding a disk replica runs on this host (its abstract
 * Unix socket is reachable from here), it hands this process its data file
 * (read-only, O_DIRECT) once; from then on a disk read is one io_uring
 * readv per object: the header block into a small aligned scratch buffer
 * and the value straight into the caller's buffer (when that is 4 KiB
 * aligned; otherwise through an aligned bounce buffer and one copy). The
 * checks are the read server's: magic, header crc, key, version, size and
 * the value's crc32c, computed here while the next objects are still being
 * read. No byte goes through the node or a socket.
 *
 * Anything unusual (no local node, an I/O error, a torn or corrupted copy)
 * leaves the read to the read server, which re-reads it, counts a corrupt
 * copy and reports it to the master: the counters and the master's index
 * stay the read server's job. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>

#include <liburing.h>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/net.h"
#include "common/status.h"
#include "store/client/client.h"
#include "store/tier/ssd/ssd.h"
#include "store/tier/tier.h"

#define COMP "store-client"
#define RING_QD 64         /* objects in flight per batch, at most */
#define RETRY_MS 1000      /* after a failed connect, before trying again */
#define HELLO_TIMEOUT_MS 2000 /* a frozen node costs a local reader this once */

/* Connects to the node's local socket and receives its data file.
 * Returns 0 with the connection, the descriptor and the capacity, or -errno
 * (nothing listens: not local). */
static int local_connect(cr_store_t *s, const char *segment, int *ufd, int *dfd, uint64_t *cap)
{
    struct sockaddr_un sa;
    socklen_t sl = cr__tier_local_addr(&sa, segment);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return CR__ERRNO();
    if (connect(fd, (struct sockaddr *)&sa, sl)) {
        int e = CR__ERRNO();
        close(fd);
        return e;
    }
    /* the node must be one of ours: same uid (the kernel's word), and a
     * member when security is on (the handshake proves both sides) */
    struct ucred cr;
    socklen_t cl = sizeof cr;
    int rc = -EACCES;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) || cr.uid != geteuid())
        goto fail;
    if (cr__net_set_timeouts(fd, HELLO_TIMEOUT_MS))
        goto fail;
    if (s->auth && cr__auth_client_fd(s->auth, fd, "tier-local", HELLO_TIMEOUT_MS))
        goto fail;
    uint8_t h[CR__TIER_LOCAL_HELLO];
    int got = -1;
    ssize_t n = cr__net_recv_fd(fd, h, sizeof h, MSG_WAITALL, &got);
    uint32_t magic;
    memcpy(&magic, h, 4);
    if (n != (ssize_t)sizeof h || got < 0 || magic != CR__TIER_LOCAL_MAGIC) {
        if (got >= 0)
            close(got);
        rc = -EPROTO;
        goto fail;
    }
    memcpy(cap, h + 8, 8);
    *ufd = fd;
    *dfd = got;
    return 0;
fail:
    close(fd);
    return rc;
}

/* A private descriptor of segment's data file (dup: another thread may
 * drop the cached one meanwhile), or -1 (not local / not now). */
static int local_fd(cr_store_t *s, const char *segment, uint64_t *cap)
{
    pthread_mutex_lock(&s->tier_mu);
    int i = 0;
    for (; i < s->n_tier_local; i++)
        if (!strcmp(s->tier_local[i].name, segment))
            break;
    if (i < s->n_tier_local) {
        int ufd = s->tier_local[i].ufd;
        if (ufd < 0 && cr__now_ms() < s->tier_local[i].retry_ms) {
            pthread_mutex_unlock(&s->tier_mu);
            return -1;
        }
        if (ufd >= 0) {
            /* the node closes its end when it stops or dies */
            struct pollfd p = {.fd = ufd, .events = POLLIN};
            if (poll(&p, 1, 0) == 0) {
                int fd = fcntl(s->tier_local[i].dfd, F_DUPFD_CLOEXEC, 0);
                *cap = s->tier_local[i].cap;
                pthread_mutex_unlock(&s->tier_mu);
                return fd < 0 ? -1 : fd;
            }
            close(ufd);
            close(s->tier_local[i].dfd);
        }
        s->tier_local[i] = s->tier_local[--s->n_tier_local];
    }
    pthread_mutex_unlock(&s->tier_mu);
    /* connect outside the lock (a slow handshake must not stall others) */
    int ufd = -1, dfd = -1;
    uint64_t c = 0;
    int rc = local_connect(s, segment, &ufd, &dfd, &c);
    if (rc && rc != -ENOENT && rc != -ECONNREFUSED)
        CR_LOG_RL(CR__LOG_WARN, COMP, "%s: same-host read path refused (%s): using the read "
                  "server", segment, strerror(-rc));
    int ret = -1;
    pthread_mutex_lock(&s->tier_mu);
    for (i = 0; i < s->n_tier_local; i++)
        if (!strcmp(s->tier_local[i].name, segment))
            break; /* another thread got there first: keep its entry */
    if (i == s->n_tier_local && s->n_tier_local < CR__SC_TIER_LOCAL) {
        s->n_tier_local++;
        snprintf(s->tier_local[i].name, sizeof s->tier_local[i].name, "%s", segment);
        s->tier_local[i].ufd = ufd;
        s->tier_local[i].dfd = dfd;
        s->tier_local[i].cap = c;
        s->tier_local[i].retry_ms = cr__now_ms() + RETRY_MS;
        ufd = dfd = -1; /* owned by the entry now */
    }
    if (i < s->n_tier_local && s->tier_local[i].dfd >= 0) {
        ret = fcntl(s->tier_local[i].dfd, F_DUPFD_CLOEXEC, 0);
        *cap = s->tier_local[i].cap;
    } else if (dfd >= 0) {
        ret = dfd; /* no room to remember it: used once */
        *cap = c;
        dfd = -1;
    }
    pthread_mutex_unlock(&s->tier_mu);
    if (ufd >= 0)
        close(ufd);
    if (dfd >= 0)
        close(dfd);
    return ret < 0 ? -1 : ret;
}

void cr__sc_tier_local_close_all(cr_store_t *s)
{
    pthread_mutex_lock(&s->tier_mu);
    for (int i = 0; i < s->n_tier_local; i++)
        if (s->tier_local[i].ufd >= 0) {
            close(s->tier_local[i].ufd);
            close(s->tier_local[i].dfd);
        }
    s->n_tier_local = 0;
    for (int i = 0; i < s->n_tier_rings; i++) {
        io_uring_queue_exit(s->tier_rings[i]);
        free(s->tier_rings[i]);
    }
    s->n_tier_rings = 0;
    pthread_mutex_unlock(&s->tier_mu);
}

static struct io_uring *ring_take(cr_store_t *s)
{
    pthread_mutex_lock(&s->tier_mu);
    struct io_uring *r = s->n_tier_rings ? s->tier_rings[--s->n_tier_rings] : NULL;
    pthread_mutex_unlock(&s->tier_mu);
    if (r)
        return r;
    r = malloc(sizeof *r);
    if (r && io_uring_queue_init(RING_QD, r, 0)) {
        free(r);
        r = NULL;
    }
    return r;
}

static void ring_give(cr_store_t *s, struct io_uring *r)
{
    pthread_mutex_lock(&s->tier_mu);
    if (s->n_tier_rings < CR__SC_TIER_RINGS) {
        s->tier_rings[s->n_tier_rings++] = r;
        r = NULL;
    }
    pthread_mutex_unlock(&s->tier_mu);
    if (r) {
        io_uring_queue_exit(r);
        free(r);
    }
}

/* One object being read. */
typedef struct lread {
    cr__sc_tier_rd_t *q;
    uint8_t *scratch; /* header block(s) [+ tail block] or the whole object */
    int direct;       /* value blocks straight into q->dst */
    uint64_t want;    /* bytes the readv must return */
    struct iovec iov[3];
} lread_t;

/* Prepares the readv of one object. 0, or -ENOMEM / -EINVAL (not served
 * here). */
static int lread_prep(lread_t *l, cr__sc_tier_rd_t *q, uint64_t cap)
{
    uint64_t hl = cr__tier_hdr_len(q->key_len);
    uint64_t dl = cr__tier_disk_len(q->key_len, q->size);
    if (q->size == 0 || q->disk_off % CR__TIER_BLOCK || q->disk_off > cap ||
        dl > cap - q->disk_off || q->roff > q->size || q->rlen > q->size - q->roff)
        return -EINVAL;
    uint64_t body = q->size & ~(uint64_t)(CR__TIER_BLOCK - 1);
    uint64_t tail = q->size - body ? CR__TIER_BLOCK : 0;
    l->q = q;
    l->direct = q->roff == 0 && q->rlen == q->size && body &&
                !((uintptr_t)q->dst & (CR__TIER_BLOCK - 1));
    uint64_t sl = l->direct ? hl + tail : dl;
    if (posix_memalign((void **)&l->scratch, CR__TIER_BLOCK, sl))
        return -ENOMEM;
    int n = 0;
    if (l->direct) {
        l->iov[n++] = (struct iovec){l->scratch, hl};
        l->iov[n++] = (struct iovec){q->dst, body};
        if (tail)
            l->iov[n++] = (struct iovec){l->scratch + hl, tail};
    } else {
        l->iov[n++] = (struct iovec){l->scratch, dl};
    }
    l->want = dl;
    return n;
}

/* Checks a completed read and settles q (or leaves it to the server).
 * stale_miss: a well-formed object of another key/version is a miss (a
 * reused extent); otherwise it is left unsettled like a bad one. */
static void lread_finish(lread_t *l, int res, int stale_miss)
{
    cr__sc_tier_rd_t *q = l->q;
    if (res < 0 || (uint64_t)res != l->want)
        return; /* an I/O error: the read server tries (and counts it) */
    uint32_t vcrc, crc;
    int c = cr__ssd_check_hdr(l->scratch, q->key, q->key_len, q->version, q->size, &vcrc);
    if (c == -ESTALE && stale_miss) {
        q->result = CR_E_OBJECT_NOT_FOUND; /* the extent holds another object now */
        return;
    }
    if (c)
        return; /* torn or corrupted: the server re-reads, counts, reports */
    uint64_t hl = cr__tier_hdr_len(q->key_len);
    if (l->direct) {
        uint64_t body = q->size & ~(uint64_t)(CR__TIER_BLOCK - 1);
        crc = cr__crc32c(0, q->dst, body);
        crc = cr__crc32c(crc, l->scratch + hl, q->size - body);
        if (crc != vcrc)
            return;
        if (q->size > body)
            memcpy((uint8_t *)q->dst + body, l->scratch + hl, q->size - body);
    } else {
        crc = cr__crc32c(0, l->scratch + hl, q->size);
        if (crc != vcrc)
            return;
        memcpy(q->dst, l->scratch + hl + q->roff, q->rlen);
    }
    q->crc = crc;
    q->crc_known = 1;
    q->result = 0;
}

/* Queues reads from *next on while the window has room: at most RING_QD
 * objects and s->tier_read_window value bytes in flight (always at least
 * one object). */
static void uring_fill(const cr_store_t *s, struct io_uring *ring, lread_t *ls,
                       cr__sc_tier_rd_t *rd, const size_t *idx, size_t m, const int *fds,
                       const uint64_t *caps, size_t *next, size_t *inflight, uint64_t *bytes)
{
    while (*next < m && *inflight < RING_QD) {
        cr__sc_tier_rd_t *q = &rd[idx[*next]];
        if (*inflight && *bytes + q->size > s->tier_read_window)
            return;
        lread_t *l = &ls[*next];
        int niov = fds[*next] < 0 ? -1 : lread_prep(l, q, caps[*next]);
        int fd = fds[*next];
        (*next)++;
        if (niov < 0)
            continue; /* left to the caller's other path */
        struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
        if (!sqe) { /* cannot happen: inflight < the ring's size */
            free(l->scratch);
            l->scratch = NULL;
            return;
        }
        io_uring_prep_readv(sqe, fd, l->iov, (unsigned)niov, q->disk_off);
        io_uring_sqe_set_data(sqe, l);
        (*inflight)++;
        *bytes += q->size;
    }
}

/* The reads of a batch, a window at a time. The checks (crc32c over every
 * byte) run on the calling thread while the next reads are in flight:
 * completions are taken off the ring, their places refilled and submitted
 * first, and only then checked. With the whole batch in flight at once the
 * disk serves the reads side by side, they complete together, and every
 * check came after the last byte had arrived (16 x 1 MiB here: ~2 ms of
 * crc behind ~5.4 ms of reading). A window of s->tier_read_window bytes
 * (CRESCENT_TIER_READ_WINDOW, 8 MiB: a large read is parallel inside the
 * device, so a few keep it busy) spreads the completions and leaves only
 * the last window's checks after the last read. */
int cr__sc_tier_uring_read(cr_store_t *s, cr__sc_tier_rd_t *rd, const size_t *idx, size_t m,
                           const int *fds, const uint64_t *caps, int stale_miss)
{
    struct io_uring *ring = ring_take(s);
    lread_t *ls = ring ? calloc(m, sizeof *ls) : NULL;
    if (!ls)
        goto out;
    size_t next = 0, inflight = 0;
    uint64_t bytes = 0;
    int broken = 0;
    for (;;) {
        uring_fill(s, ring, ls, rd, idx, m, fds, caps, &next, &inflight, &bytes);
        if (!inflight)
            break;
        /* submit what is queued and wait for a completion: one system call.
         * No timeout: until a read completes the kernel may still write
         * into the caller's buffer. */
        int rc = io_uring_submit_and_wait(ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            broken = 1;
            break;
        }
        lread_t *done[RING_QD];
        int res[RING_QD];
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(ring, head, cqe)
        {
            if (seen == RING_QD)
                break; /* cannot happen: at most inflight <= RING_QD */
            done[seen] = io_uring_cqe_get_data(cqe);
            res[seen++] = cqe->res;
        }
        io_uring_cq_advance(ring, seen);
        inflight -= seen;
        for (unsigned i = 0; i < seen; i++)
            bytes -= done[i]->q->size;
        /* refill and submit before checking: the disk works meanwhile */
        uring_fill(s, ring, ls, rd, idx, m, fds, caps, &next, &inflight, &bytes);
        if (io_uring_sq_ready(ring) && io_uring_submit(ring) < 0) {
            broken = 1;
            break;
        }
        for (unsigned i = 0; i < seen; i++) {
            lread_finish(done[i], res[i], stale_miss);
            free(done[i]->scratch);
            done[i]->scratch = NULL;
        }
    }
    if (broken) {
        /* io_uring failed with reads in flight: the buffers and the ring
         * are left alone (leaked), never reused while DMA may target them;
         * the unsettled reads go to the caller's other path */
        CR_LOG_ERROR(COMP, "disk reads: io_uring failed with %zu in flight", inflight);
        return -EIO;
    }
    free(ls);
out:
    if (ring)
        ring_give(s, ring);
    return ls ? 0 : -ENOMEM;
}

void cr__sc_tier_local_read(cr_store_t *s, const char *segment, cr__sc_tier_rd_t *rd,
                            const size_t *idx, size_t m)
{
    if (!s->tier_local_on || !m)
        return;
    uint64_t cap = 0;
    int fd = local_fd(s, segment, &cap);
    if (fd < 0)
        return;
    int *fds = malloc(m * sizeof *fds);
    uint64_t *caps = malloc(m * sizeof *caps);
    for (size_t j = 0; fds && caps && j < m; j++) {
        fds[j] = fd;
        caps[j] = cap;
    }
    if (fds && caps)
        cr__sc_tier_uring_read(s, rd, idx, m, fds, caps, 1);
    free(fds);
    free(caps);
    close(fd); /* reads still in flight (a broken ring) hold their own reference */
}
