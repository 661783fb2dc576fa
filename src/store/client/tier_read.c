/* Client reads of disk-tier replicas (store/tier/tier.h): the replica's
 * segment names the node's tier read server ("ssd@host:port"); the node
 * reads and checks the object and sends the bytes, which land straight in
 * the caller's buffer (any memory: nothing is registered for this path).
 * Requests to one node are pipelined on one connection, so the node reads
 * them from disk in parallel (its io_uring queue depth); it answers each as
 * soon as it has it (the reply's tag is the request's index in the batch),
 * so one slow disk read holds up no other object. A node on this host is
 * read without it first (tier_local.c).
 *
 * Fault isolation (issue 11): a node that sends nothing for the engine's
 * stall time (plus what its disk may need to read the object waited for)
 * fails the read, like a Transfer Engine peer would: the connect, the
 * handshake and every wait for bytes are bounded by it, so a frozen node
 * costs a reader about the stall time, not the 30 s transfer timeout. The
 * node's segment is then suspect (suspect.c): its replicas are read last. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "common/crc32c.h"
#include "common/log.h"
#include "common/net.h"
#include "common/status.h"
#include "store/client/client.h"
#include "store/tier/tier.h"

#define COMP "store-client"

/* The disk may take this long per byte of the object a reply waits for
 * (the node replies once it has read and checked the whole object):
 * 64 MiB/s, far below any SSD's, so a busy disk is not taken for a frozen
 * node. */
#define DISK_MIN_BYTES_PER_MS (64u << 10)

/* How long a read waits for a byte from the node: the engine's stall time,
 * plus the disk's time for the largest object waited for; never more than
 * the transfer timeout. */
static unsigned tier_wait_ms(const cr_store_t *s, uint64_t largest)
{
    uint64_t ms = (s->stall_ms ? s->stall_ms : 1000) + largest / DISK_MIN_BYTES_PER_MS;
    return ms < s->xfer_timeout_ms ? (unsigned)ms : s->xfer_timeout_ms;
}

/* An idle connection to segment's server (*pooled = 1; only if use_pool),
 * or a new one.
 * *timeout_ms: the connection's SO_RCVTIMEO/SO_SNDTIMEO. Returns the fd or
 * -errno. */
static int tier_connect(cr_store_t *s, const char *segment, int use_pool, int *pooled,
                        unsigned *timeout_ms)
{
    pthread_mutex_lock(&s->tier_mu);
    for (int i = use_pool ? s->n_tier - 1 : -1; i >= 0; i--)
        if (!strcmp(s->tier_conns[i].name, segment)) {
            int fd = s->tier_conns[i].fd;
            *timeout_ms = s->tier_conns[i].timeout_ms;
            s->tier_conns[i] = s->tier_conns[--s->n_tier];
            pthread_mutex_unlock(&s->tier_mu);
            /* an idle connection the node closed reads as EOF/POLLHUP now */
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, 0) == 0) {
                *pooled = 1;
                return fd;
            }
            close(fd);
            pthread_mutex_lock(&s->tier_mu);
            i = s->n_tier;
        }
    pthread_mutex_unlock(&s->tier_mu);
    *pooled = 0;
    char host[CR__HOST_MAX];
    uint16_t port;
    if (cr__net_split_hostport(segment + CR__TIER_SSD_PREFIX_LEN, host, &port, 0))
        return -EINVAL;
    /* a frozen node's kernel still completes the TCP handshake; what it
     * cannot do is answer: the key's handshake is bounded like a read */
    unsigned wait = tier_wait_ms(s, 0);
    int fd = cr__net_connect(host, port, NULL, (int)(wait < s->rpc_timeout_ms ? wait
                                                                           : s->rpc_timeout_ms));
    if (fd < 0)
        return fd;
    if (s->auth && cr__auth_client_fd(s->auth, fd, "tier", (int)wait)) {
        close(fd); /* not a member (or we are not, or it is frozen): never read its bytes */
        return -ETIMEDOUT;
    }
    /* replies are received with one blocking recv each (MSG_WAITALL, no
     * poll per chunk), bounded by SO_RCVTIMEO: a recv that times out with
     * part of the bytes returns them, so the bound is on silence, not on
     * the whole transfer */
    int rc = cr__net_set_timeouts(fd, (int)wait);
    if (rc) {
        close(fd);
        return rc;
    }
    *timeout_ms = wait;
    return fd;
}

/* len bytes into buf: blocking, SO_RCVTIMEO bounds the wait. */
static int recv_all(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;
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

/* Keeps a connection that completed every exchange for the next read. */
static void tier_release(cr_store_t *s, const char *segment, int fd, unsigned timeout_ms)
{
    pthread_mutex_lock(&s->tier_mu);
    if (s->n_tier < CR__SC_TIER_CONNS) {
        snprintf(s->tier_conns[s->n_tier].name, sizeof s->tier_conns[0].name, "%s", segment);
        s->tier_conns[s->n_tier].timeout_ms = timeout_ms;
        s->tier_conns[s->n_tier++].fd = fd;
        fd = -1;
    }
    pthread_mutex_unlock(&s->tier_mu);
    if (fd >= 0)
        close(fd);
}

void cr__sc_tier_close_all(cr_store_t *s)
{
    pthread_mutex_lock(&s->tier_mu);
    for (int i = 0; i < s->n_tier; i++)
        close(s->tier_conns[i].fd);
    s->n_tier = 0;
    pthread_mutex_unlock(&s->tier_mu);
    cr__sc_tier_local_close_all(s);
}

#define TIER_STALE 1

/* Sends every request of rd[first..n) to segment seg still to do (result 1)
 * at once (one write: the node sees the whole batch and reads it from
 * disk in parallel), then receives the replies in the order the node sends
 * them (each names its request) and sets each one's result. Returns 0 when every reply came (the connection is kept),
 * TIER_STALE when a pooled connection (use_pool) failed before any byte of
 * a reply came (the node had closed it while idle: the requests are left
 * to do, to send again on a new connection), else the connection's first
 * error (-errno; the requests not answered failed). */
static int tier_exchange(cr_store_t *s, const char *seg, cr__sc_tier_rd_t *rd, size_t first,
                         size_t n, int use_pool)
{
    int pooled = 0;
    unsigned tmo = 0;
    int fd = tier_connect(s, seg, use_pool, &pooled, &tmo);
    int rc = fd < 0 ? fd : 0;
    size_t need = 0, sent = 0;
    uint64_t largest = 0;
    for (size_t j = first; j < n; j++)
        if (rd[j].result == 1 && !strcmp(rd[j].segment, seg)) {
            need += CR__TIER_RD_REQ_FIXED + rd[j].key_len;
            if (rd[j].size > largest)
                largest = rd[j].size;
        }
    /* the wait for a reply covers the disk's time for the largest object */
    unsigned wait = tier_wait_ms(s, largest);
    if (!rc && wait != tmo) {
        rc = cr__net_set_timeouts(fd, (int)wait);
        tmo = wait;
    }
    uint8_t *wb = rc ? NULL : malloc(need);
    if (!rc && !wb)
        rc = -ENOMEM;
    size_t wl = 0;
    for (size_t j = first; j < n; j++) {
        cr__sc_tier_rd_t *q = &rd[j];
        if (q->result != 1 || strcmp(q->segment, seg))
            continue;
        q->result = 2; /* sent */
        if (rc)
            continue;
        uint8_t *h = wb + wl;
        uint32_t magic = CR__TIER_RD_MAGIC, kl = q->key_len;
        memcpy(h, &magic, 4);
        memcpy(h + 4, &kl, 4);
        memcpy(h + 8, &q->version, 8);
        memcpy(h + 16, &q->disk_off, 8);
        memcpy(h + 24, &q->size, 8);
        memcpy(h + 32, &q->roff, 8);
        memcpy(h + 40, &q->rlen, 8);
        uint32_t tag = (uint32_t)j, zero = 0;
        memcpy(h + 48, &tag, 4);
        memcpy(h + 52, &zero, 4);
        memcpy(h + CR__TIER_RD_REQ_FIXED, q->key, kl);
        wl += CR__TIER_RD_REQ_FIXED + kl;
        sent++;
    }
    if (!rc)
        rc = cr__net_write_full(fd, wb, wl, (int)wait);
    free(wb);
    int answered = 0;
    for (size_t r = 0; r < sent && !rc; r++) {
        uint8_t h[CR__TIER_RD_REP];
        rc = recv_all(fd, h, sizeof h);
        if (rc)
            break;
        answered = 1;
        int32_t st;
        uint32_t tag;
        uint64_t len;
        memcpy(&st, h, 4);
        memcpy(&tag, h + 4, 4);
        memcpy(&len, h + 8, 8);
        /* a tag of this exchange not answered yet, and the length asked for */
        cr__sc_tier_rd_t *q = tag >= first && tag < n ? &rd[tag] : NULL;
        if (!q || q->result != 2 || strcmp(q->segment, seg) || (st == 0 && len != q->rlen)) {
            rc = -EPROTO;
            break;
        }
        if (st == 0 && len && (rc = recv_all(fd, q->dst, len)) != 0)
            break;
        q->result = st;
        if (s->crc_on && !st && q->roff == 0 && q->rlen == q->size) {
            /* the end-to-end crc of what landed in the caller's buffer,
             * while it is still in cache and the node reads and sends the
             * next replies (the get compares it with the put's) */
            q->crc = cr__crc32c(0, q->dst, q->size);
            q->crc_known = 1;
        }
    }
    if (rc && pooled && !answered && (rc == -ECONNRESET || rc == -EPIPE)) {
        for (size_t k = first; k < n; k++)
            if (rd[k].result == 2 && !strcmp(rd[k].segment, seg))
                rd[k].result = 1;
        close(fd);
        return TIER_STALE;
    }
    for (size_t k = first; k < n; k++) /* requests the connection's error left unanswered */
        if (rd[k].result == 2 && !strcmp(rd[k].segment, seg))
            rd[k].result = CR_E_TRANSFER_FAIL;
    if (fd >= 0 && !rc)
        tier_release(s, seg, fd, tmo);
    else if (fd >= 0)
        close(fd);
    return rc;
}

int cr__sc_tier_read_batch(cr_store_t *s, cr__sc_tier_rd_t *rd, size_t n)
{
    size_t *idx = malloc(n * sizeof *idx); /* NULL: no same-host reads */
    for (size_t i = 0; i < n; i++) {
        rd[i].result = 1;
        rd[i].crc_known = 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (rd[i].result != 1)
            continue;
        const char *seg = rd[i].segment;
        if (cr__tier_is_fs(seg)) {
            /* the shared-FS tier: this process reads the files (tier_fs.c) */
            size_t m = 0;
            for (size_t j = i; idx && j < n; j++)
                if (rd[j].result == 1 && cr__tier_is_fs(rd[j].segment))
                    idx[m++] = j;
            if (idx)
                cr__sc_fs_read(s, rd, idx, m);
            else
                rd[i].result = -ENOMEM;
            continue;
        }
        if (idx) {
            /* a node on this host: read its file here (tier_local.c);
             * what that does not settle goes to the node's read server */
            size_t m = 0;
            for (size_t j = i; j < n; j++)
                if (rd[j].result == 1 && !strcmp(rd[j].segment, seg))
                    idx[m++] = j;
            cr__sc_tier_local_read(s, seg, rd, idx, m);
            size_t j = 0;
            while (j < m && rd[idx[j]].result != 1)
                j++;
            if (j == m)
                continue;
            i = idx[j];
        }
        int rc = tier_exchange(s, seg, rd, i, n, 1);
        if (rc == TIER_STALE) /* a pooled connection the node had closed: once more */
            rc = tier_exchange(s, seg, rd, i, n, 0);
        if (rc < 0 && rc != -ENOMEM)
            cr__sc_suspect_mark_name(s, seg, rc);
    }
    free(idx);
    int first = 0;
    for (size_t i = 0; i < n && !first; i++)
        first = rd[i].result;
    return first;
}
