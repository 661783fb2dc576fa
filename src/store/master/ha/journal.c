/* Master journal (journal.h). */
#include "store/master/ha/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/log.h"
#include "common/status.h"

#define COMP "journal"
#define MIN_COMPACT_BYTES (64ull << 20)
#define READ_CHUNK (4u << 20)

struct cr__ha_journal {
    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv;  /* switching ended */
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    int fd;
    int fsync_each;
    int switching; /* a compaction is writing the new file: syncs wait */
    cr__ha_buf_t pend;
    uint64_t seq, written_seq;
    cr__ha_journal_stats_t st;
};

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return CR__ERRNO();
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A new journal.tmp: a stale one (or anything planted under the name) is
 * removed, then created with O_EXCL, never opened through a symlink. */
static int open_tmp(cr__ha_journal_t *j)
{
    char why[PATH_MAX + 256];
    if (unlink(j->tmp) && errno != ENOENT) {
        int rc = CR__ERRNO();
        CR_LOG_ERROR(COMP, "cannot remove %s: %s", j->tmp, strerror(errno));
        return rc;
    }
    int fd = cr__file_open_private(j->tmp, O_WRONLY | O_EXCL, COMP, why, sizeof why);
    if (fd < 0)
        CR_LOG_ERROR(COMP, "%s", why);
    return fd;
}

/* Reads the file into a shadow; returns the length of the good prefix. */
static int load(int fd, cr__ha_shadow_t *sh, uint64_t *good)
{
    uint8_t *buf = malloc(READ_CHUNK + CR__HA_REC_MAX + CR__HA_FRAME_HDR);
    if (!buf)
        return -ENOMEM;
    size_t have = 0;
    uint64_t off = 0;
    int rc = 0;
    for (;;) {
        ssize_t r = read(fd, buf + have, READ_CHUNK);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            rc = CR__ERRNO();
            break;
        }
        have += (size_t)r;
        long used = cr__ha_shadow_load(sh, buf, have);
        if (used < 0) {
            if (used == -ENOMEM)
                rc = -ENOMEM;
            break; /* corrupt record: the good prefix ends at off */
        }
        off += (uint64_t)used;
        memmove(buf, buf + used, have - (size_t)used);
        have -= (size_t)used;
        if (r == 0)
            break;
    }
    free(buf);
    *good = off;
    return rc;
}

int cr__ha_journal_open(const char *dir, int fsync_each, cr__ha_shadow_t **loaded,
                        cr__ha_journal_t **out)
{
    if (!dir || !*dir || strlen(dir) > PATH_MAX - 32)
        return -EINVAL;
    /* the journal holds every key and where its bytes live: the master's
     * user alone (0700 directory, 0600 files) */
    if (mkdir(dir, 0700) && errno != EEXIST)
        return CR__ERRNO();
    struct stat dst;
    if (stat(dir, &dst) != 0)
        return CR__ERRNO();
    if (!S_ISDIR(dst.st_mode)) {
        CR_LOG_ERROR(COMP, "%s is not a directory", dir);
        return -ENOTDIR;
    }
    if ((dst.st_mode & 022) && !(dst.st_mode & S_ISVTX))
        CR_LOG_WARN(COMP, "%s is writable by other users (mode %03o): they can replace the "
                          "journal; make it 0700",
                    dir, (unsigned)(dst.st_mode & 0777));
    cr__ha_journal_t *j = calloc(1, sizeof *j);
    if (!j)
        return -ENOMEM;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->fsync_each = fsync_each;
    snprintf(j->path, sizeof j->path, "%s/journal", dir);
    snprintf(j->tmp, sizeof j->tmp, "%s/journal.tmp", dir);
    cr__ha_shadow_t *sh = NULL;
    int rc = cr__ha_shadow_create(&sh);
    if (rc)
        goto fail;
    char why[PATH_MAX + 256];
    j->fd = cr__file_open_private(j->path, O_RDWR, COMP, why, sizeof why);
    if (j->fd < 0) {
        rc = j->fd;
        CR_LOG_ERROR(COMP, "%s", why);
        goto fail;
    }
    uint64_t good = 0;
    rc = load(j->fd, sh, &good);
    if (rc)
        goto fail;
    struct stat stt;
    if (fstat(j->fd, &stt) == 0 && (uint64_t)stt.st_size > good) {
        CR_LOG_WARN(COMP, "%s: %" PRIu64 " bytes after the last whole record cut off",
                    j->path, (uint64_t)stt.st_size - good);
        if (ftruncate(j->fd, (off_t)good)) {
            rc = CR__ERRNO();
            goto fail;
        }
    }
    if (lseek(j->fd, 0, SEEK_END) < 0) {
        rc = CR__ERRNO();
        goto fail;
    }
    j->st.file_bytes = good;
    CR_LOG_INFO(COMP, "%s: %" PRIu64 " bytes, %" PRIu64 " objects", j->path, good,
                cr__ha_shadow_objects(sh));
    *loaded = sh;
    *out = j;
    return 0;
fail:
    cr__ha_shadow_destroy(sh);
    if (j->fd > 0)
        close(j->fd);
    free(j);
    return rc;
}

void cr__ha_journal_record(void *user, const uint8_t *frame, size_t len)
{
    cr__ha_journal_t *j = user;
    pthread_mutex_lock(&j->mu);
    cr__ha_buf_append(&j->pend, frame, len);
    j->seq++;
    j->st.records++;
    pthread_mutex_unlock(&j->mu);
}

/* Writes the buffer; caller holds mu and is not switching. */
static int flush_locked(cr__ha_journal_t *j)
{
    if (j->pend.err) {
        CR_LOG_ERROR(COMP, "records lost (out of memory): the journal is incomplete");
        return -ENOMEM;
    }
    if (!j->pend.len)
        return 0;
    int rc = write_all(j->fd, j->pend.p, j->pend.len);
    if (!rc && j->fsync_each && fdatasync(j->fd))
        rc = CR__ERRNO();
    if (rc) {
        CR_LOG_ERROR(COMP, "%s: write failed: %s", j->path, strerror(-rc));
        return rc;
    }
    j->st.bytes_written += j->pend.len;
    j->st.file_bytes += j->pend.len;
    j->st.writes++;
    j->pend.len = 0;
    j->written_seq = j->seq;
    return 0;
}

int cr__ha_journal_sync(cr__ha_journal_t *j)
{
    pthread_mutex_lock(&j->mu);
    uint64_t want = j->seq;
    while (j->switching)
        pthread_cond_wait(&j->cv, &j->mu);
    int rc = 0;
    j->st.syncs++;
    if (j->written_seq < want)
        rc = flush_locked(j);
    pthread_mutex_unlock(&j->mu);
    return rc;
}

/* Called under the master's lock at the snapshot point: the old file gets
 * everything up to it (so it stays whole if the new one cannot be put in
 * place); syncs wait until the new file is in place. */
static void at_snapshot(void *user)
{
    cr__ha_journal_t *j = user;
    pthread_mutex_lock(&j->mu);
    flush_locked(j);
    j->switching = 1;
    pthread_mutex_unlock(&j->mu);
}

int cr__ha_journal_compact(cr__ha_journal_t *j, cr__master_t *m, int force)
{
    pthread_mutex_lock(&j->mu);
    uint64_t bound = j->st.snapshot_bytes * 4;
    int due = force || j->st.file_bytes > (bound > MIN_COMPACT_BYTES ? bound : MIN_COMPACT_BYTES);
    pthread_mutex_unlock(&j->mu);
    if (!due)
        return 0;
    cr__ha_buf_t snap = {0};
    int rc = cr__master_dump(m, &snap, at_snapshot, j);
    int fd = -1;
    if (!rc) {
        fd = open_tmp(j);
        rc = fd < 0 ? fd : write_all(fd, snap.p, snap.len);
        if (!rc && fsync(fd))
            rc = CR__ERRNO();
        if (!rc && rename(j->tmp, j->path))
            rc = CR__ERRNO();
    }
    pthread_mutex_lock(&j->mu);
    if (!rc) {
        close(j->fd);
        j->fd = fd;
        j->st.file_bytes = snap.len;
        j->st.snapshot_bytes = snap.len;
        j->st.compactions++;
        CR_LOG_INFO(COMP, "%s rewritten from a %zu-byte snapshot", j->path, snap.len);
    } else {
        if (fd >= 0)
            close(fd);
        CR_LOG_ERROR(COMP, "%s: compaction failed: %s", j->path, strerror(-rc));
    }
    if (j->switching) {
        j->switching = 0;
        pthread_cond_broadcast(&j->cv);
        int frc = flush_locked(j);
        if (!rc)
            rc = frc;
    }
    pthread_mutex_unlock(&j->mu);
    cr__ha_buf_free(&snap);
    return rc;
}

int cr__ha_journal_rewrite(cr__ha_journal_t *j, const uint8_t *buf, size_t len)
{
    int fd = open_tmp(j);
    int rc = fd < 0 ? fd : write_all(fd, buf, len);
    if (!rc && rename(j->tmp, j->path))
        rc = CR__ERRNO();
    pthread_mutex_lock(&j->mu);
    if (!rc) {
        close(j->fd);
        j->fd = fd;
        j->pend.len = 0;
        j->written_seq = j->seq;
        j->st.file_bytes = len;
        j->st.snapshot_bytes = len;
    } else if (fd >= 0) {
        close(fd);
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

void cr__ha_journal_stats(cr__ha_journal_t *j, cr__ha_journal_stats_t *st)
{
    pthread_mutex_lock(&j->mu);
    *st = j->st;
    pthread_mutex_unlock(&j->mu);
}

void cr__ha_journal_close(cr__ha_journal_t *j)
{
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    flush_locked(j);
    pthread_mutex_unlock(&j->mu);
    close(j->fd);
    cr__ha_buf_free(&j->pend);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}
