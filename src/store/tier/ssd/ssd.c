/* Node-local disk tier storage (ssd.h). */
#include "store/tier/ssd/ssd.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/file.h"
#include "common/status.h"
#include "store/tier/tier.h"

#define LOCK_NAME "crescent-ssd.lock"
#define DATA_NAME "crescent-ssd.data"
#define SCAN_CHUNK (4u << 20)

struct cr__ssd {
    int lock_fd;
    int fd; /* O_DIRECT data file */
    char path[4096]; /* of the data file */
    uint64_t capacity;
    uint64_t file_size; /* size found at open (before preallocation) */
    _Atomic uint64_t written_end; /* end of the furthest write since open */
};

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

int cr__ssd_open(const char *dir, uint64_t capacity, cr__ssd_t **out, char *err, size_t errlen)
{
    struct stat st;
    char path[4096];
    capacity &= ~(uint64_t)(CR__TIER_BLOCK - 1);
    if (!dir || !dir[0]) {
        snprintf(err, errlen, "--ssd_path is empty");
        return -EINVAL;
    }
    if (capacity < (1u << 20)) {
        snprintf(err, errlen, "--ssd_capacity must be at least 1 MiB");
        return -EINVAL;
    }
    if (stat(dir, &st) != 0) {
        int e = errno;
        snprintf(err, errlen, "--ssd_path %s: %s", dir, strerror(e));
        return -e;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--ssd_path %s is not a directory", dir);
        return -ENOTDIR;
    }
    cr__ssd_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    s->fd = -1;
    snprintf(path, sizeof path, "%s/" LOCK_NAME, dir);
    /* never through a symlink, only a regular file of ours, mode 0600
     * (common/file.h): a root node must not truncate a file an attacker
     * pointed the name at */
    char why[4352];
    s->lock_fd = cr__file_open_private(path, O_RDWR, "tier", why, sizeof why);
    if (s->lock_fd < 0) {
        int e = -s->lock_fd;
        snprintf(err, errlen, "--ssd_path %s: %s%s", dir, why,
                 e == EROFS || e == EACCES ? " (the directory must be writable by this user)" : "");
        free(s);
        return -e;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "?";
        ssize_t n = pread(s->lock_fd, pid, sizeof pid - 1, 0);
        if (n > 0) {
            pid[n] = 0;
            pid[strcspn(pid, "\n")] = 0;
        }
        snprintf(err, errlen,
                 "--ssd_path %s is in use by another process (pid %s holds %s): two nodes "
                 "cannot share one disk tier directory",
                 dir, pid, LOCK_NAME);
        close(s->lock_fd);
        free(s);
        return e == EWOULDBLOCK ? -EBUSY : -e;
    }
    char pid[32];
    int pl = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(s->lock_fd, 0) != 0 || pwrite(s->lock_fd, pid, (size_t)pl, 0) != pl) {
        int e = errno;
        snprintf(err, errlen, "--ssd_path %s: cannot write %s: %s", dir, LOCK_NAME, strerror(e));
        goto fail;
    }
    snprintf(path, sizeof path, "%s/" DATA_NAME, dir);
    snprintf(s->path, sizeof s->path, "%s", path);
    /* mode 0600: the same-host read socket checks the peer's uid, so the
     * file must not be readable by other users either */
    s->fd = cr__file_open_private(path, O_RDWR | O_DIRECT, "tier", why, sizeof why);
    if (s->fd < 0) {
        errno = -s->fd;
        snprintf(err, errlen, "--ssd_path %s: %s%s", dir, why,
                 errno == EINVAL && !strstr(why, "regular file") ? " (O_DIRECT needs a file system that supports it)" : "");
        goto fail_e;
    }
    if (fstat(s->fd, &st) != 0) {
        snprintf(err, errlen, "fstat %s: %s", path, strerror(errno));
        goto fail;
    }
    s->file_size = (uint64_t)st.st_size;
    uint64_t have = (uint64_t)st.st_blocks * 512;
    struct statvfs vfs;
    if (fstatvfs(s->fd, &vfs) == 0) {
        uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
        uint64_t need = capacity > have ? capacity - have : 0;
        if (need > avail) {
            snprintf(err, errlen,
                     "--ssd_capacity %" PRIu64 " bytes does not fit: %s has %" PRIu64
                     " bytes free (plus %" PRIu64 " already in %s)",
                     capacity, dir, avail, have, DATA_NAME);
            errno = ENOSPC;
            goto fail_e;
        }
    }
    if (s->file_size < capacity) {
        int rc = posix_fallocate(s->fd, 0, (off_t)capacity);
        if (rc) {
            snprintf(err, errlen, "--ssd_path %s: cannot preallocate %" PRIu64 " bytes: %s", dir,
                     capacity, strerror(rc));
            /* give back what we grew: leave the file as it was */
            if (ftruncate(s->fd, (off_t)s->file_size) != 0) {
            }
            errno = rc;
            goto fail_e;
        }
    }
    s->capacity = capacity;
    *out = s;
    return 0;
fail_e:;
    int e = errno ? errno : EIO;
    if (s->fd >= 0)
        close(s->fd);
    close(s->lock_fd);
    free(s);
    return -e;
fail:
    if (s->fd >= 0)
        close(s->fd);
    close(s->lock_fd);
    free(s);
    return -EIO;
}

void cr__ssd_close(cr__ssd_t *s)
{
    if (!s)
        return;
    if (s->fd >= 0)
        close(s->fd);
    close(s->lock_fd); /* releases the flock */
    free(s);
}

uint64_t cr__ssd_capacity(const cr__ssd_t *s) { return s->capacity; }

int cr__ssd_linked(const cr__ssd_t *s, const char **path)
{
    struct stat a, b;
    *path = s->path;
    if (fstat(s->fd, &a) || a.st_nlink == 0 || stat(s->path, &b))
        return 0;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}
int cr__ssd_fd(const cr__ssd_t *s) { return s->fd; }

int cr__ssd_open_readonly(const cr__ssd_t *s)
{
    /* by name, so: no symlink, and the very file this node opened */
    int fd = open(s->path, O_RDONLY | O_DIRECT | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return CR__ERRNO();
    struct stat a, b;
    if (fstat(fd, &a) || fstat(s->fd, &b) || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
        close(fd);
        return -ESTALE;
    }
    return fd;
}

uint64_t cr__ssd_encode(void *buf, const char *key, uint32_t key_len, uint64_t version,
                        const void *val, uint64_t size)
{
    uint8_t *h = buf;
    uint64_t hl = cr__tier_hdr_len(key_len);
    uint64_t dl = cr__tier_round(size);
    memset(h, 0, hl);
    memcpy(h + hl, val, size);
    if (dl > size)
        memset(h + hl + size, 0, dl - size);
    uint32_t vcrc = cr__crc32c(0, h + hl, size);
    put32(h + 0, CR__TIER_MAGIC);
    put64(h + 8, version);
    put64(h + 16, size);
    put32(h + 24, vcrc);
    put32(h + 28, key_len);
    memcpy(h + CR__TIER_HDR_FIXED, key, key_len);
    put32(h + 4, cr__crc32c(0, h + 8, CR__TIER_HDR_FIXED - 8 + key_len));
    return hl + dl;
}

/* Header fields of a block; 0 if the header is well formed. */
static int hdr_parse(const uint8_t *h, size_t avail, uint64_t *version, uint64_t *size,
                     uint32_t *vcrc, uint32_t *key_len)
{
    if (avail < CR__TIER_HDR_FIXED || get32(h) != CR__TIER_MAGIC)
        return -EBADMSG;
    uint32_t kl = get32(h + 28);
    if (kl == 0 || kl > 4096 || CR__TIER_HDR_FIXED + kl > avail)
        return -EBADMSG;
    if (cr__crc32c(0, h + 8, CR__TIER_HDR_FIXED - 8 + kl) != get32(h + 4))
        return -EBADMSG;
    *version = get64(h + 8);
    *size = get64(h + 16);
    *vcrc = get32(h + 24);
    *key_len = kl;
    return 0;
}

int cr__ssd_hdr_parse(const void *h, size_t avail, uint64_t *version, uint64_t *size,
                      uint32_t *vcrc, uint32_t *key_len)
{
    return hdr_parse(h, avail, version, size, vcrc, key_len);
}

int cr__ssd_check_hdr(const void *hdr, const char *key, uint32_t key_len, uint64_t version,
                      uint64_t size, uint32_t *value_crc)
{
    const uint8_t *h = hdr;
    uint64_t v, sz;
    uint32_t vcrc, kl;
    if (hdr_parse(h, cr__tier_hdr_len(key_len), &v, &sz, &vcrc, &kl))
        return -EBADMSG;
    if (kl != key_len || memcmp(h + CR__TIER_HDR_FIXED, key, key_len) || v != version ||
        sz != size)
        return -ESTALE;
    *value_crc = vcrc;
    return 0;
}

int cr__ssd_check(const void *buf, const char *key, uint32_t key_len, uint64_t version,
                  uint64_t size)
{
    uint32_t vcrc;
    int rc = cr__ssd_check_hdr(buf, key, key_len, version, size, &vcrc);
    if (rc)
        return rc;
    if (cr__crc32c(0, (const uint8_t *)buf + cr__tier_hdr_len(key_len), size) != vcrc)
        return -EBADMSG;
    return 0;
}

long cr__ssd_scan(cr__ssd_t *s, cr__ssd_scan_cb cb, void *arg, uint64_t *truncated)
{
    /* what the file held at open, or the end of what this process wrote
     * since (a rescan after a master restart), whichever is further: the
     * preallocated zeros past both are not read */
    uint64_t limit = s->file_size, hw = atomic_load(&s->written_end);
    if (hw > limit)
        limit = hw;
    if (limit > s->capacity)
        limit = s->capacity;
    limit &= ~(uint64_t)(CR__TIER_BLOCK - 1);
    uint8_t *buf = NULL;
    if (posix_memalign((void **)&buf, CR__TIER_BLOCK, SCAN_CHUNK))
        return -ENOMEM;
    long found = 0;
    uint64_t trunc = 0, cstart = 0, clen = 0, pos = 0;
    while (pos < limit) {
        /* the header (up to 8 KiB for a 4 KiB key) must be in the chunk */
        if (pos < cstart || pos + 2 * CR__TIER_BLOCK > cstart + clen) {
            uint64_t want = limit - pos < SCAN_CHUNK ? limit - pos : SCAN_CHUNK;
            ssize_t n = pread(s->fd, buf, want, (off_t)pos);
            if (n < 0) {
                found = CR__ERRNO();
                break;
            }
            if (n == 0)
                break;
            cstart = pos;
            clen = (uint64_t)n & ~(uint64_t)(CR__TIER_BLOCK - 1);
            if (clen == 0)
                break;
        }
        const uint8_t *h = buf + (pos - cstart);
        uint64_t v, sz;
        uint32_t vcrc, kl;
        if (hdr_parse(h, cstart + clen - pos, &v, &sz, &vcrc, &kl) == 0 && sz > 0 &&
            sz <= (1ull << 36)) {
            uint64_t dl = cr__tier_disk_len(kl, sz);
            if (pos + dl > limit) {
                trunc++;
                pos += CR__TIER_BLOCK;
                continue;
            }
            found++;
            if (cb && cb(arg, (const char *)h + CR__TIER_HDR_FIXED, kl, v, sz, pos, dl))
                break;
            pos += dl;
        } else {
            pos += CR__TIER_BLOCK;
        }
    }
    free(buf);
    if (truncated)
        *truncated = trunc;
    return found;
}

int cr__ssd_ring_init(cr__ssd_ring_t *r, unsigned qd)
{
    memset(r, 0, sizeof *r);
    if (qd < 1)
        qd = 1;
    if (qd > 256)
        qd = 256;
    int rc = io_uring_queue_init(qd, &r->ring, 0);
    if (rc < 0)
        return rc;
    r->qd = qd;
    r->ok = 1;
    return 0;
}

void cr__ssd_ring_fini(cr__ssd_ring_t *r)
{
    if (r->ok)
        io_uring_queue_exit(&r->ring);
    r->ok = 0;
}

int cr__ssd_run(cr__ssd_t *s, cr__ssd_ring_t *r, cr__ssd_io_t *ios, size_t n)
{
    return cr__ssd_run_hooked(s, r, ios, n, NULL);
}

int cr__ssd_run_hooked(cr__ssd_t *s, cr__ssd_ring_t *r, cr__ssd_io_t *ios, size_t n,
                       const cr__ssd_hooks_t *h)
{
    size_t next = 0, inflight = 0;
    /* progress of each io: bytes done so far (short transfers continue) */
    uint64_t stack_done[64];
    uint64_t *done = n <= 64 ? stack_done : calloc(n, sizeof *done);
    if (!done)
        return -ENOMEM;
    if (done == stack_done)
        memset(stack_done, 0, sizeof stack_done);
    for (size_t i = 0; i < n; i++)
        ios[i].result = 1; /* pending */
    int first = 0, ringerr = 0;
    /* pending continuations are resubmitted through this small queue */
    size_t redo[64], n_redo = 0;
    /* done callbacks run after the replacements of their ios are
     * submitted, so the disk stays busy while the caller sends a reply */
    size_t cbq[64], n_cb = 0;
    while (next < n || inflight || n_redo) {
        unsigned queued = 0;
        while (inflight < r->qd && (n_redo || next < n) && io_uring_sq_space_left(&r->ring)) {
            int fresh = !n_redo;
            size_t i = n_redo ? redo[--n_redo] : next++;
            cr__ssd_io_t *io = &ios[i];
            if (fresh && h && h->prep && h->prep(h->arg, i)) {
                /* the caller could not fill it: not submitted */
                io->result = -ECANCELED;
                if (h->done)
                    h->done(h->arg, i);
                continue;
            }
            struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
            uint8_t *b = (uint8_t *)io->buf + done[i];
            unsigned len = (unsigned)(io->len - done[i] > (1u << 30) ? (1u << 30)
                                                                     : io->len - done[i]);
            if (io->write)
                io_uring_prep_write(sqe, s->fd, b, len, io->off + done[i]);
            else
                io_uring_prep_read(sqe, s->fd, b, len, io->off + done[i]);
            io_uring_sqe_set_data64(sqe, i);
            inflight++;
            queued++;
            if (h && h->prep) {
                /* the disk starts on this one while the next is prepared */
                int rc = io_uring_submit(&r->ring);
                if (rc < 0) {
                    first = ringerr = rc;
                    break;
                }
                queued = 0;
            }
        }
        if (ringerr)
            break;
        if (queued) {
            int rc = io_uring_submit(&r->ring);
            if (rc < 0) {
                first = rc;
                break;
            }
        }
        for (size_t j = 0; j < n_cb; j++)
            h->done(h->arg, cbq[j]);
        n_cb = 0;
        if (!inflight)
            continue;
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&r->ring, &cqe);
        if (rc < 0) {
            if (rc == -EINTR)
                continue;
            first = rc;
            break;
        }
        do {
            size_t i = (size_t)io_uring_cqe_get_data64(cqe);
            int res = cqe->res;
            io_uring_cqe_seen(&r->ring, cqe);
            inflight--;
            cr__ssd_io_t *io = &ios[i];
            if (res < 0) {
                io->result = res;
            } else if (res == 0) {
                io->result = -EIO; /* end of file: short */
            } else {
                done[i] += (uint64_t)res;
                if (done[i] >= io->len) {
                    io->result = 0;
                    uint64_t end = io->off + io->len, cur = atomic_load(&s->written_end);
                    while (io->write && end > cur &&
                           !atomic_compare_exchange_weak(&s->written_end, &cur, end))
                        ;
                } else if (n_redo < 64) {
                    redo[n_redo++] = i;
                } else {
                    io->result = -EIO;
                }
            }
            if (io->result < 0 && !first)
                first = io->result;
            if (io->result != 1 && h && h->done)
                cbq[n_cb++] = i;
        } while (n_cb < 64 && io_uring_peek_cqe(&r->ring, &cqe) == 0);
    }
    for (size_t j = 0; j < n_cb; j++)
        h->done(h->arg, cbq[j]);
    if (first && inflight) {
        /* ring failure: drain what is in flight before returning */
        while (inflight) {
            struct io_uring_cqe *cqe;
            if (io_uring_wait_cqe(&r->ring, &cqe) < 0)
                break;
            io_uring_cqe_seen(&r->ring, cqe);
            inflight--;
        }
    }
    for (size_t i = 0; i < n; i++)
        if (ios[i].result == 1) {
            ios[i].result = first ? first : -EIO;
            if (h && h->done)
                h->done(h->arg, i);
        }
    if (done != stack_done)
        free(done);
    return first;
}

void *cr__ssd_buf_alloc(uint64_t len, uint64_t *cap)
{
    const uint64_t huge = 2u << 20;
    uint64_t align = len >= (1u << 20) ? huge : CR__TIER_BLOCK;
    uint64_t size = (len + align - 1) & ~(align - 1);
    void *p = NULL;
    if (!len || size < len || size > SIZE_MAX || posix_memalign(&p, (size_t)align, (size_t)size))
        return NULL;
    if (align == huge)
        madvise(p, (size_t)size, MADV_HUGEPAGE); /* best effort, before the first touch */
    *cap = size;
    return p;
}
