/* Shared-file-system tier, client side (docs/architecture/store-tiers.md):
 * the master names the directory (FS_INFO); after each put the client
 * writes the object's file under tmp/ in the disk tier's format (header
 * with key, version and the value's crc32c; value) and the master checks
 * it and gives it its final name (FS_SYNC attach), recording it in its
 * index. A get whose replica list leads to the file (DRAM evicted, the
 * cluster restarted) opens the files itself and reads them all at once
 * through io_uring straight into the callers' buffers, checking each one:
 * no master round trip per byte, no node in the path. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "store/client/client.h"
#include "store/tier/ssd/ssd.h"
#include "store/tier/tier.h"

#define COMP "store-client"
#define FS_RETRY_MS 1000 /* a failed FS_INFO is not asked again before this */

/* The tier's state: 1 on (dfd/tfd open), -1 off, 0 unknown (ask later). */
static int fs_ready(cr_store_t *s)
{
    int st = atomic_load(&s->fs_state);
    if (st)
        return st;
    pthread_mutex_lock(&s->fs_mu);
    st = atomic_load(&s->fs_state);
    if (st || cr__now_ms() < s->fs_retry_ms) {
        pthread_mutex_unlock(&s->fs_mu);
        return st;
    }
    cr__rpc_msg_t req = {.type = CR__RPC_FS_INFO}, rep = {0};
    int rc = cr__sc_call(s, &req, &rep);
    if (rc == 0 && rep.status == 0 && rep.n_items == 1 && rep.items[0].key) {
        const char *dir = rep.items[0].key;
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int tfd = dfd >= 0 ? openat(dfd, CR__TIER_FS_TMP, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (tfd < 0) {
            /* the master sees it, this host does not: loud, and off */
            CR_LOG_ERROR(COMP, "shared-FS tier: the master's directory %s is not usable here "
                               "(%s): puts are not persisted, gets use memory only",
                         dir, strerror(errno));
            if (dfd >= 0)
                close(dfd);
            st = -1;
        } else {
            s->fs_dfd = dfd;
            s->fs_tfd = tfd;
            st = 1;
        }
    } else if (rc == 0 && rep.status == 0) {
        st = -1; /* no items: the master has no --root_fs_dir */
    } else {
        s->fs_retry_ms = cr__now_ms() + FS_RETRY_MS;
    }
    if (rc == 0)
        cr__rpc_msg_free(&rep);
    atomic_store(&s->fs_state, st);
    pthread_mutex_unlock(&s->fs_mu);
    return st;
}

void cr__sc_fs_close(cr_store_t *s)
{
    if (atomic_load(&s->fs_state) == 1) {
        close(s->fs_dfd);
        close(s->fs_tfd);
    }
    atomic_store(&s->fs_state, -1);
}

/* O_DIRECT where the file system has it (not tmpfs), buffered otherwise. */
static int open_direct(int dirfd, const char *name, int flags)
{
    int fd = openat(dirfd, name, flags | O_DIRECT | O_CLOEXEC, 0640);
    if (fd < 0 && errno == EINVAL)
        fd = openat(dirfd, name, flags | O_CLOEXEC, 0640);
    return fd;
}

/* Writes tmp/<name>.tmp of one object from buf (dl bytes, aligned). */
static int write_tmp(cr_store_t *s, const char *key, size_t kl, uint64_t version,
                     const void *buf, uint64_t dl)
{
    char name[CR__TIER_FS_NAME_MAX], tmp[CR__TIER_FS_NAME_MAX + 8];
    cr__tier_fs_name(name, key, kl, version);
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    int fd = open_direct(s->fs_tfd, tmp, O_WRONLY | O_CREAT | O_TRUNC);
    if (fd < 0)
        return CR__ERRNO();
    int rc = 0;
    for (uint64_t off = 0; off < dl && !rc;) {
        ssize_t w = pwrite(fd, (const uint8_t *)buf + off, dl - off, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            rc = w < 0 ? CR__ERRNO() : -EIO;
        else
            off += (uint64_t)w;
    }
    if (close(fd) && !rc)
        rc = CR__ERRNO();
    if (rc)
        unlinkat(s->fs_tfd, tmp, 0);
    return rc;
}

void cr__sc_fs_persist(cr_store_t *s, const char *const *keys, const void *const *srcs,
                       const size_t *lens, const cr__rpc_item_t *items, const uint8_t *ok,
                       const int *results, size_t n)
{
    size_t m = 0;
    uint64_t big = 0;
    for (size_t i = 0; i < n; i++)
        if (ok[i] && !results[i] && lens[i]) {
            m++;
            uint64_t dl = cr__tier_disk_len(strlen(keys[i]), lens[i]);
            big = dl > big ? dl : big;
        }
    if (!m || fs_ready(s) != 1)
        return;
    /* one aligned buffer for the largest object, reused for each */
    void *buf = NULL;
    cr__rpc_msg_t req = {.type = CR__RPC_FS_SYNC}, rep = {0};
    req.items = cr__rpc_msg_alloc(&req, m * sizeof *req.items);
    if (posix_memalign(&buf, CR__TIER_BLOCK, big) || !req.items) {
        atomic_fetch_add(&s->fs_errors, m);
        CR_LOG_RL(CR__LOG_ERROR, COMP, "shared-FS tier: out of memory: %zu puts not persisted",
                  m);
        free(buf);
        cr__rpc_msg_free(&req);
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!ok[i] || results[i] || !lens[i])
            continue;
        size_t kl = strlen(keys[i]);
        uint64_t version = items[i].version;
        uint64_t dl = cr__ssd_encode(buf, keys[i], (uint32_t)kl, version, srcs[i], lens[i]);
        int rc = write_tmp(s, keys[i], kl, version, buf, dl);
        if (rc) {
            atomic_fetch_add(&s->fs_errors, 1);
            CR_LOG_RL(CR__LOG_ERROR, COMP, "shared-FS tier: cannot write %s: %s (kept in memory "
                                           "only)", keys[i], cr_strerror(rc));
            continue;
        }
        cr__rpc_item_t *it = &req.items[k++];
        it->key = keys[i];
        it->key_len = (uint32_t)kl;
        it->version = version;
        it->size = lens[i];
        it->flags = CR__TIER_FS_OP_ATTACH;
        memcpy(&it->crc, (uint8_t *)buf + 24, 4); /* the header's value crc */
    }
    free(buf);
    req.n_items = (uint32_t)k;
    if (!k) {
        cr__rpc_msg_free(&req);
        return;
    }
    int rc = cr__sc_call(s, &req, &rep);
    if (rc == 0) {
        rc = rep.status;
        for (uint32_t j = 0; !rc && j < rep.n_items && j < k; j++)
            if (rep.items[j].status && rep.items[j].status != CR_E_OBJECT_NOT_FOUND) {
                atomic_fetch_add(&s->fs_errors, 1);
                CR_LOG_RL(CR__LOG_WARN, COMP, "shared-FS tier: attach of %s refused: %s",
                          req.items[j].key, cr_strerror(rep.items[j].status));
            }
        cr__rpc_msg_free(&rep);
    }
    if (rc) {
        /* the master never saw them: their tmp files are orphans a master
         * scan deletes; the objects stay in memory */
        atomic_fetch_add(&s->fs_errors, k);
        CR_LOG_RL(CR__LOG_WARN, COMP, "shared-FS tier: attach of %zu files failed: %s", k,
                  cr_strerror(rc));
    }
    cr__rpc_msg_free(&req);
}

/* Tells the master which files were bad (it re-checks and drops them). */
static void report_bad(cr_store_t *s, cr__sc_tier_rd_t *rd, const size_t *idx, const int *bad,
                       size_t m, size_t nbad)
{
    cr__rpc_msg_t req = {.type = CR__RPC_FS_SYNC}, rep = {0};
    req.items = cr__rpc_msg_alloc(&req, nbad * sizeof *req.items);
    if (!req.items) {
        cr__rpc_msg_free(&req);
        return;
    }
    size_t k = 0;
    for (size_t j = 0; j < m; j++) {
        if (!bad[j])
            continue;
        cr__sc_tier_rd_t *q = &rd[idx[j]];
        req.items[k++] = (cr__rpc_item_t){.key = q->key, .key_len = q->key_len,
                                          .version = q->version, .size = q->size,
                                          .flags = CR__TIER_FS_OP_CORRUPT};
    }
    req.n_items = (uint32_t)k;
    if (cr__sc_call(s, &req, &rep) == 0)
        cr__rpc_msg_free(&rep);
    cr__rpc_msg_free(&req);
}

void cr__sc_fs_read(cr_store_t *s, cr__sc_tier_rd_t *rd, const size_t *idx, size_t m)
{
    int *fds = malloc(m * sizeof *fds);
    int *bad = calloc(m, sizeof *bad);
    uint64_t *caps = malloc(m * sizeof *caps);
    if (!fds || !caps || !bad || fs_ready(s) != 1) {
        for (size_t j = 0; j < m; j++)
            rd[idx[j]].result = fds && caps && bad ? CR_E_OBJECT_NOT_FOUND : -ENOMEM;
        goto out;
    }
    for (size_t j = 0; j < m; j++) {
        cr__sc_tier_rd_t *q = &rd[idx[j]];
        char name[CR__TIER_FS_NAME_MAX];
        cr__tier_fs_name(name, q->key, q->key_len, q->version);
        struct stat st;
        fds[j] = q->disk_off ? -1 : open_direct(s->fs_dfd, name, O_RDONLY);
        if (fds[j] >= 0 && fstat(fds[j], &st)) {
            close(fds[j]);
            fds[j] = -1;
        }
        caps[j] = fds[j] >= 0 ? (uint64_t)st.st_size : 0;
        /* no file: removed or replaced meanwhile (a miss, not an error);
         * a short one is truncated (checked by the reader: left unsettled) */
        if (fds[j] < 0)
            q->result = CR_E_OBJECT_NOT_FOUND;
    }
    int urc = cr__sc_tier_uring_read(s, rd, idx, m, fds, caps, 0);
    size_t nbad = 0;
    for (size_t j = 0; j < m; j++) {
        if (fds[j] >= 0)
            close(fds[j]);
        cr__sc_tier_rd_t *q = &rd[idx[j]];
        if (q->result == 1 && urc) {
            q->result = CR_E_TRANSFER_FAIL; /* not read at all: not the file's fault */
        } else if (q->result == 1) {
            /* torn, truncated, corrupted or another object's file: a miss,
             * counted here and reported to the master */
            q->result = CR_E_OBJECT_NOT_FOUND;
            bad[j] = 1;
            nbad++;
        }
    }
    if (nbad) {
        atomic_fetch_add(&s->fs_errors, nbad);
        CR_LOG_RL(CR__LOG_WARN, COMP, "shared-FS tier: %zu files failed their checks (a miss)",
                  nbad);
        report_bad(s, rd, idx, bad, m, nbad);
    }
out:
    free(fds);
    free(caps);
    free(bad);
}
