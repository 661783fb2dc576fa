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
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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

/* One object waiting to be persisted. */
struct cr__sc_fs_job {
    struct cr__sc_fs_job *next;
    uint64_t version, size, dl;
    uint32_t crc, key_len;
    void *buf; /* encoded object, CR__TIER_BLOCK-aligned, dl bytes */
    char key[];
};

static void job_free(struct cr__sc_fs_job *j)
{
    free(j->buf);
    free(j);
}

/* O_DIRECT where the file system has it (not tmpfs), buffered otherwise.
 * A refused O_DIRECT may have created the file already: with O_EXCL it is
 * removed before the buffered try. */
static int open_direct(int dirfd, const char *name, int flags)
{
    int fd = openat(dirfd, name, flags | O_DIRECT | O_CLOEXEC, 0640);
    if (fd < 0 && errno == EINVAL) {
        if (flags & O_EXCL)
            unlinkat(dirfd, name, 0);
        fd = openat(dirfd, name, flags | O_CLOEXEC, 0640);
    }
    return fd;
}

/* Writes tmp/<name>.tmp of one object from buf (dl bytes, aligned). */
static int write_tmp(cr_store_t *s, const char *key, size_t kl, uint64_t version,
                     const void *buf, uint64_t dl)
{
    char name[CR__TIER_FS_NAME_MAX], tmp[CR__TIER_FS_NAME_MAX + 8];
    cr__tier_fs_name(name, key, kl, version);
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    /* the name is predictable and tmp/ is shared with the group: whatever
     * is there (a stale file of a retry, a planted symlink) goes, and
     * O_EXCL creates a new file, never opening what is there */
    if (unlinkat(s->fs_tfd, tmp, 0) && errno != ENOENT)
        return CR__ERRNO();
    int fd = open_direct(s->fs_tfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW);
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

/* Writes the files of a list of jobs and attaches them in one FS_SYNC. */
static void persist_batch(cr_store_t *s, struct cr__sc_fs_job *head, size_t n)
{
    cr__rpc_msg_t req = {.type = CR__RPC_FS_SYNC}, rep = {0};
    req.items = cr__rpc_msg_alloc(&req, n * sizeof *req.items);
    if (!req.items) {
        atomic_fetch_add(&s->fs_errors, n);
        cr__rpc_msg_free(&req);
        return;
    }
    size_t k = 0;
    for (struct cr__sc_fs_job *j = head; j; j = j->next) {
        int rc = write_tmp(s, j->key, j->key_len, j->version, j->buf, j->dl);
        if (rc) {
            atomic_fetch_add(&s->fs_errors, 1);
            CR_LOG_RL(CR__LOG_ERROR, COMP, "shared-FS tier: cannot write %s: %s (kept in memory "
                                           "only)", j->key, cr_strerror(rc));
            continue;
        }
        req.items[k++] = (cr__rpc_item_t){.key = j->key, .key_len = j->key_len,
                                          .version = j->version, .size = j->size,
                                          .flags = CR__TIER_FS_OP_ATTACH, .crc = j->crc};
    }
    req.n_items = (uint32_t)k;
    int rc = k ? cr__sc_call(s, &req, &rep) : 0;
    if (k && rc == 0) {
        rc = rep.status;
        for (uint32_t i = 0; !rc && i < rep.n_items && i < k; i++)
            if (rep.items[i].status && rep.items[i].status != CR_E_OBJECT_NOT_FOUND) {
                atomic_fetch_add(&s->fs_errors, 1);
                CR_LOG_RL(CR__LOG_WARN, COMP, "shared-FS tier: attach of %s refused: %s",
                          req.items[i].key, cr_strerror(rep.items[i].status));
            }
        cr__rpc_msg_free(&rep);
    }
    if (k && rc) {
        /* the master never saw them: their tmp files are orphans a master
         * scan deletes; the objects stay in memory */
        atomic_fetch_add(&s->fs_errors, k);
        CR_LOG_RL(CR__LOG_WARN, COMP, "shared-FS tier: attach of %zu files failed: %s", k,
                  cr_strerror(rc));
    }
    cr__rpc_msg_free(&req);
}

#define FS_BATCH 64 /* files written and attached per FS_SYNC */

static void *persist_thread(void *arg)
{
    cr_store_t *s = arg;
    pthread_mutex_lock(&s->fs_mu);
    for (;;) {
        while (!s->fs_head && !s->fs_stop)
            pthread_cond_wait(&s->fs_cv, &s->fs_mu);
        if (!s->fs_head)
            break; /* stopped and drained */
        struct cr__sc_fs_job *head = s->fs_head, *last = head;
        size_t n = 1;
        uint64_t bytes = head->dl;
        while (last->next && n < FS_BATCH) {
            last = last->next;
            bytes += last->dl;
            n++;
        }
        s->fs_head = last->next;
        if (!s->fs_head)
            s->fs_tail = NULL;
        last->next = NULL;
        pthread_mutex_unlock(&s->fs_mu);
        persist_batch(s, head, n);
        while (head) {
            struct cr__sc_fs_job *nx = head->next;
            job_free(head);
            head = nx;
        }
        pthread_mutex_lock(&s->fs_mu);
        s->fs_q_bytes -= bytes;
        pthread_cond_broadcast(&s->fs_cv); /* room for waiting writers */
    }
    pthread_mutex_unlock(&s->fs_mu);
    return NULL;
}

void cr__sc_fs_close(cr_store_t *s)
{
    pthread_mutex_lock(&s->fs_mu);
    int on = s->fs_thread_on;
    s->fs_stop = 1;
    pthread_cond_broadcast(&s->fs_cv);
    pthread_mutex_unlock(&s->fs_mu);
    if (on)
        pthread_join(s->fs_thread, NULL); /* it drains the queue first */
    if (atomic_load(&s->fs_state) == 1) {
        close(s->fs_dfd);
        close(s->fs_tfd);
    }
    atomic_store(&s->fs_state, -1);
}

void cr__sc_fs_persist(cr_store_t *s, const char *const *keys, const void *const *srcs,
                       const size_t *lens, const cr__rpc_item_t *items, const uint8_t *ok,
                       const int *results, size_t n)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += ok[i] && !results[i] && lens[i];
    if (!m || fs_ready(s) != 1)
        return;
    for (size_t i = 0; i < n; i++) {
        if (!ok[i] || results[i] || !lens[i])
            continue;
        size_t kl = strlen(keys[i]);
        uint64_t dl = cr__tier_disk_len(kl, lens[i]);
        struct cr__sc_fs_job *j = malloc(sizeof *j + kl + 1);
        void *buf = NULL;
        if (!j || posix_memalign(&buf, CR__TIER_BLOCK, dl)) {
            free(j);
            atomic_fetch_add(&s->fs_errors, 1);
            CR_LOG_RL(CR__LOG_ERROR, COMP, "shared-FS tier: out of memory: %s not persisted",
                      keys[i]);
            continue;
        }
        /* the value is copied (with its crc computed on the way): the
         * caller may reuse its buffer as soon as the put returns */
        *j = (struct cr__sc_fs_job){.version = items[i].version, .size = lens[i], .dl = dl,
                                    .key_len = (uint32_t)kl, .buf = buf};
        memcpy(j->key, keys[i], kl + 1);
        cr__ssd_encode(buf, keys[i], (uint32_t)kl, j->version, srcs[i], lens[i]);
        memcpy(&j->crc, (uint8_t *)buf + 24, 4); /* the header's value crc */
        pthread_mutex_lock(&s->fs_mu);
        if (!s->fs_thread_on && !s->fs_stop) {
            if (pthread_create(&s->fs_thread, NULL, persist_thread, s) == 0)
                s->fs_thread_on = 1;
        }
        /* back pressure: wait for room, bounded by the transfer timeout */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)(s->xfer_timeout_ms / 1000) + 1;
        int rc = 0;
        while (s->fs_thread_on && !s->fs_stop && s->fs_q_bytes &&
               s->fs_q_bytes + dl > CR__SC_FS_QUEUE_BYTES && rc == 0)
            rc = pthread_cond_timedwait(&s->fs_cv, &s->fs_mu, &until);
        int queued = s->fs_thread_on && !s->fs_stop && rc == 0;
        if (queued) {
            if (s->fs_tail)
                s->fs_tail->next = j;
            else
                s->fs_head = j;
            s->fs_tail = j;
            s->fs_q_bytes += dl;
            pthread_cond_broadcast(&s->fs_cv);
        }
        pthread_mutex_unlock(&s->fs_mu);
        if (!queued) {
            job_free(j);
            atomic_fetch_add(&s->fs_errors, 1);
            CR_LOG_RL(CR__LOG_WARN, COMP, "shared-FS tier: persist queue full or stopped: %s "
                                          "kept in memory only", keys[i]);
        }
    }
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
        /* no file: a miss. Removed or replaced meanwhile, or deleted
         * behind the store's back: reported like a bad file, the master
         * checks for itself and drops a listing whose file is gone (else
         * the key would stay listed, never readable nor writable again).
         * A short file is truncated (checked by the reader: left unsettled) */
        if (fds[j] < 0) {
            q->result = CR_E_OBJECT_NOT_FOUND;
            bad[j] = !q->disk_off && errno == ENOENT;
        }
    }
    int urc = cr__sc_tier_uring_read(s, rd, idx, m, fds, caps, 0);
    size_t nbad = 0, nmissing = 0;
    for (size_t j = 0; j < m; j++) {
        nmissing += bad[j];
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
    }
    if (nbad + nmissing)
        report_bad(s, rd, idx, bad, m, nbad + nmissing);
out:
    free(fds);
    free(caps);
    free(bad);
}
