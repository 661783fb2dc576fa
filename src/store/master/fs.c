/* Shared-file-system tier (--root_fs_dir; docs/architecture/store-tiers.md):
 * the master's side. An object whose file a client wrote and the master
 * attached carries OF_FS: its record survives the loss of every memory
 * replica (eviction demotes it to the file), GetReplicaList lists the file
 * as one more replica (segment CR__TIER_FS_SEGMENT), a remove or a newer
 * version deletes the file, and a master started on the directory adopts
 * the files it finds (a whole-cluster restart). The master is the only
 * process that gives a file its final name or deletes one, so a removed key
 * never comes back from its file. */
#include "store/master/master_priv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/status.h"
#include "store/tier/ssd/ssd.h"
#include "store/tier/tier.h"

#define COMP "master"
#define FS_VERIFY_MAX (256ull << 20) /* a reported file is re-checked up to this size */
#define FS_TMP_AGE_S 120             /* tmp/ files older than this at a scan are abandoned */

struct cr__mfs {
    int dfd, tfd;       /* the tier's directory and its tmp/ */
    char dir[PATH_MAX]; /* <root>/<cluster_id>, as clients open it */
    uint64_t n_files;   /* objects with OF_FS */
};

void cr__m_fs_destroy(cr__master_t *m)
{
    if (!m->fs)
        return;
    close(m->fs->dfd);
    close(m->fs->tfd);
    free(m->fs);
    m->fs = NULL;
}

int cr__master_fs_open(cr__master_t *m, const char *root, const char *cluster_id, char *err,
                       size_t errlen)
{
    struct stat st;
    int rc = 0, dfd = -1, tfd = -1;
    size_t cl = cluster_id ? strlen(cluster_id) : 0;
    if (!root || !root[0] || !cl || cl > 128 || strchr(cluster_id, '/') ||
        !strcmp(cluster_id, ".") || !strcmp(cluster_id, "..")) {
        snprintf(err, errlen, "--root_fs_dir needs a directory and a --cluster_id of 1..128 "
                              "characters without '/'");
        return -EINVAL;
    }
    if (stat(root, &st)) {
        rc = CR__ERRNO();
        snprintf(err, errlen, "--root_fs_dir %s: %s", root, strerror(errno));
        return rc;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--root_fs_dir %s is not a directory", root);
        return -ENOTDIR;
    }
    struct cr__mfs *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int n = snprintf(f->dir, sizeof f->dir, "%s/%s", root, cluster_id);
    if (n < 0 || (size_t)n >= sizeof f->dir || (size_t)n >= CR__RPC_KEY_MAX) {
        snprintf(err, errlen, "--root_fs_dir %s: path too long", root);
        free(f);
        return -ENAMETOOLONG;
    }
    /* group members share the tier (docs/security.md): rwx for the owner,
     * read for the group, nothing for others */
    if ((mkdir(f->dir, 0750) && errno != EEXIST) ||
        (dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
        (mkdirat(dfd, CR__TIER_FS_TMP, 0750) && errno != EEXIST) ||
        (tfd = openat(dfd, CR__TIER_FS_TMP, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        rc = CR__ERRNO();
        snprintf(err, errlen, "--root_fs_dir %s: cannot use %s: %s", root, f->dir,
                 strerror(errno));
        goto fail;
    }
    /* a read-only file system or directory is found now, not at the first put */
    unlinkat(tfd, ".probe", 0); /* a stale one, or a symlink planted there */
    int p = openat(tfd, ".probe", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
    if (p < 0) {
        rc = CR__ERRNO();
        snprintf(err, errlen, "--root_fs_dir %s is not writable: %s", root, strerror(errno));
        goto fail;
    }
    close(p);
    unlinkat(tfd, ".probe", 0);
    f->dfd = dfd;
    f->tfd = tfd;
    pthread_mutex_lock(&m->mu);
    cr__m_fs_destroy(m);
    m->fs = f;
    pthread_mutex_unlock(&m->mu);
    return 0;
fail:
    if (dfd >= 0)
        close(dfd);
    if (tfd >= 0)
        close(tfd);
    free(f);
    return rc;
}

/* ---- one file ----------------------------------------------------------- */

/* Reads the header block(s) of the file at fd: 0 and its fields, or
 * -EBADMSG (not one of ours, torn, truncated). */
static int file_header(int fd, uint8_t *h, size_t cap, uint64_t *version, uint64_t *size,
                       uint32_t *vcrc, uint32_t *key_len)
{
    ssize_t n = pread(fd, h, cap, 0);
    if (n < (ssize_t)CR__TIER_HDR_FIXED)
        return -EBADMSG;
    if (cr__ssd_hdr_parse(h, (size_t)n, version, size, vcrc, key_len))
        return -EBADMSG;
    struct stat st;
    if (fstat(fd, &st) || (uint64_t)st.st_size < cr__tier_disk_len(*key_len, *size))
        return -EBADMSG; /* truncated */
    return 0;
}

/* 0 if the file at fd holds (key, version, size) whole and its value
 * passes its crc (files up to FS_VERIFY_MAX; larger ones: the header). */
static int file_verify(int fd, const char *key, uint32_t key_len, uint64_t version,
                       uint64_t size)
{
    uint64_t dl = cr__tier_disk_len(key_len, size);
    uint8_t h[2 * CR__TIER_BLOCK + CR__TIER_HDR_FIXED];
    uint64_t v, sz;
    uint32_t vc, kl;
    if (file_header(fd, h, sizeof h, &v, &sz, &vc, &kl))
        return -EBADMSG;
    if (kl != key_len || v != version || sz != size ||
        memcmp(h + CR__TIER_HDR_FIXED, key, key_len))
        return -ESTALE;
    if (dl > FS_VERIFY_MAX)
        return 0;
    uint8_t *b = malloc(dl);
    if (!b)
        return 0; /* cannot tell: keep it */
    int rc = pread(fd, b, dl, 0) == (ssize_t)dl ? cr__ssd_check(b, key, key_len, version, size)
                                                : -EBADMSG;
    free(b);
    return rc;
}

static void name_of(obj_t *o, char name[CR__TIER_FS_NAME_MAX])
{
    cr__tier_fs_name(name, obj_key(o), o->key_len, o->version);
}

static int live_replicas(obj_t *o)
{
    int live = 0;
    for (uint32_t r = 0; r < o->n_rep; r++)
        live += !(obj_nsh(o)[r] & REP_DEAD);
    return live;
}

/* Deletes o's file and clears OF_FS. 1 if o had one. */
static int file_drop(cr__master_t *m, obj_t *o)
{
    if (!(o->flags & OF_FS))
        return 0;
    o->flags &= (uint8_t)~OF_FS;
    if (!m->fs)
        return 0;
    char name[CR__TIER_FS_NAME_MAX];
    name_of(o, name);
    if (unlinkat(m->fs->dfd, name, 0) && errno != ENOENT)
        CR_LOG_ERROR(COMP, "shared-FS tier: cannot delete %s/%s: %s", m->fs->dir, name,
                     strerror(errno));
    m->fs->n_files--;
    return 1;
}

void cr__m_fs_obj_gone(cr__master_t *m, obj_t *o)
{
    if (file_drop(m, o))
        CNT(m, tier_fs_removed_total)++;
}

uint64_t cr__m_fs_drop(cr__master_t *m, obj_t *o, uint32_t only_seg, uint64_t now)
{
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    uint64_t b = 0, rel = cr__m_obj_release_ms(m, o, now);
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD) &&
            (only_seg == NONE32 ? !m->segs[sh[0].seg].tier : sh[0].seg == only_seg)) {
            for (uint32_t k = 0; k < n; k++) {
                b += cr__oalloc_block_size(m->segs[sh[k].seg].alloc, sh[k].blk);
                cr__m_block_release(m, sh[k].seg, sh[k].blk, rel, now);
            }
            nsh[r] |= REP_DEAD;
        }
        sh += n;
    }
    if (o->prev) {
        list_unlink(o);
        list_push_front(cr__m_obj_list(m, o), o);
    }
    if (only_seg == NONE32)
        CNT(m, tier_fs_demotions_total)++;
    m->state_seq++;
    cr__m_jr_obj(m, o); /* HA/journal: the replicas are gone, the file stays */
    return b;
}

int cr__m_fs_fill(cr__master_t *m, obj_t *o, cr__rpc_msg_t *msg, cr__rpc_item_t *it)
{
    if (!(o->flags & OF_FS) || !m->fs || o->n_rep > FS_REPLICA_IDX ||
        it->n_replicas >= CR__RPC_REPLICA_MAX)
        return 0;
    cr__rpc_replica_t *rp = &it->replicas[it->n_replicas];
    rp->replica_id = REPLICA_ID(o->version, FS_REPLICA_IDX);
    rp->n_shards = 1;
    rp->shards = cr__rpc_msg_alloc(msg, sizeof *rp->shards);
    if (!rp->shards)
        return -ENOMEM;
    rp->shards[0].segment =
        cr__rpc_msg_strdup(msg, CR__TIER_FS_SEGMENT, sizeof CR__TIER_FS_SEGMENT - 1);
    if (!rp->shards[0].segment)
        return -ENOMEM;
    rp->shards[0].addr = 0;
    rp->shards[0].len = o->size;
    it->n_replicas++;
    return 0;
}

/* ---- FS_SYNC --------------------------------------------------------------- */
/* File I/O (reading a header, renaming, re-checking a reported file) runs
 * outside m->mu, so a slow file system (NFS) never stalls the master's
 * other requests; the record is checked before and again after. The tier's
 * directory descriptors are set once before serving and never change. */

/* 1 if (key, version, size) is a complete object without a file yet
 * (attach) / with one (corrupt). Caller holds m->mu. */
static obj_t *sync_target_locked(cr__master_t *m, const cr__rpc_item_t *in, int want_fs)
{
    obj_t *o = cr__m_lookup_complete(m, in->key, in->key_len);
    if (!o || o->version != in->version || o->size != in->size ||
        ((o->flags & OF_FS) != 0) != want_fs)
        return NULL;
    return o;
}

/* A client wrote tmp/<name>.tmp for (key, version): check it against the
 * record and give it its name. The tmp file is gone afterwards either way. */
static int attach(cr__master_t *m, const cr__rpc_item_t *in)
{
    char name[CR__TIER_FS_NAME_MAX], tmp[CR__TIER_FS_NAME_MAX + 8];
    cr__tier_fs_name(name, in->key, in->key_len, in->version);
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    struct cr__mfs *f = m->fs;
    pthread_mutex_lock(&m->mu);
    obj_t *o = cr__m_lookup_complete(m, in->key, in->key_len);
    int rc = 0, already = 0;
    uint32_t crc = 0;
    int has_crc = 0;
    if (!o || o->version != in->version || o->size != in->size)
        rc = CR_E_OBJECT_NOT_FOUND; /* removed or replaced meanwhile */
    else if (o->n_rep > FS_REPLICA_IDX)
        rc = CR_E_INVALID_PARAMS; /* 8 replicas: no index left to list the file under */
    else if (o->flags & OF_FS)
        already = 1;
    else if (o->flags & OF_CRC)
        has_crc = 1, crc = o->crc;
    pthread_mutex_unlock(&m->mu);
    if (!rc && !already) {
        /* header: this key and version; value crc: the writer's end-to-end
         * checksum when it gave one at PutEnd */
        /* not through a symlink: it would be renamed into the tier */
        int fd = openat(f->tfd, tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        uint8_t h[2 * CR__TIER_BLOCK + CR__TIER_HDR_FIXED];
        uint64_t v, sz;
        uint32_t vc, kl;
        if (fd < 0) {
            rc = CR_E_FILE_NOT_FOUND;
        } else {
            if (file_header(fd, h, sizeof h, &v, &sz, &vc, &kl) || kl != in->key_len ||
                v != in->version || sz != in->size ||
                memcmp(h + CR__TIER_HDR_FIXED, in->key, kl) || (has_crc && vc != crc))
                rc = CR_E_INVALID_WRITE;
            close(fd);
        }
        if (!rc && renameat(f->tfd, tmp, f->dfd, name)) {
            CR_LOG_ERROR(COMP, "shared-FS tier: cannot rename %s/%s/%s: %s", f->dir,
                         CR__TIER_FS_TMP, tmp, strerror(errno));
            rc = CR_E_PERSISTENT_FAIL;
        }
        if (!rc) {
            pthread_mutex_lock(&m->mu);
            o = sync_target_locked(m, in, 0);
            if (o && o->n_rep <= FS_REPLICA_IDX) {
                o->flags |= OF_FS;
                o->fs_until_s = 0;
                f->n_files++;
                CNT(m, tier_fs_attached_total)++;
                cr__m_jr_obj(m, o);
            } else {
                /* removed or replaced while the file was renamed: it goes */
                unlinkat(f->dfd, name, 0);
                rc = CR_E_OBJECT_NOT_FOUND;
            }
            pthread_mutex_unlock(&m->mu);
            if (!rc)
                return 0;
        }
    }
    unlinkat(f->tfd, tmp, 0);
    if (rc) {
        pthread_mutex_lock(&m->mu);
        CNT(m, tier_fs_attach_failures_total)++;
        pthread_mutex_unlock(&m->mu);
    }
    return rc;
}

/* A reader found (key, version)'s file bad: re-check it (a reader's I/O
 * error must not cost a good file), then drop it. */
static int corrupt(cr__master_t *m, const cr__rpc_item_t *in, uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    int have = sync_target_locked(m, in, 1) != NULL;
    pthread_mutex_unlock(&m->mu);
    if (!have)
        return 0;
    char name[CR__TIER_FS_NAME_MAX];
    cr__tier_fs_name(name, in->key, in->key_len, in->version);
    int fd = openat(m->fs->dfd, name, O_RDONLY | O_CLOEXEC);
    int bad = fd < 0 || file_verify(fd, in->key, in->key_len, in->version, in->size) != 0;
    if (fd >= 0)
        close(fd);
    if (!bad)
        return 0;
    pthread_mutex_lock(&m->mu);
    obj_t *o = sync_target_locked(m, in, 1);
    if (o) {
        CNT(m, tier_fs_corrupt_total)++;
        CR_LOG_ERROR(COMP, "shared-FS tier: %s/%s ('%.*s') is missing, torn or corrupted: dropped",
                     m->fs->dir, name, o->key_len > 64 ? 64 : (int)o->key_len, obj_key(o));
        file_drop(m, o);
        if (!live_replicas(o)) {
            CNT(m, objects_lost_total)++;
            cr__m_obj_delete(m, o, cr__m_obj_release_ms(m, o, now), now);
        } else {
            list_unlink(o);
            list_push_front(cr__m_obj_list(m, o), o);
            cr__m_jr_obj(m, o);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return 0;
}

int cr__master_fs_handle(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                         uint64_t now)
{
    uint16_t type = req->type & (uint16_t)~CR__RPC_REPLY;
    if (type == CR__RPC_FS_INFO && !m->fs)
        return 0; /* no items: no --root_fs_dir (every client asks once) */
    if (!m->fs)
        return CR_E_UNAVAILABLE_IN_CURRENT_MODE;
    if (type == CR__RPC_FS_INFO) {
        reply->items = cr__rpc_msg_alloc(reply, sizeof *reply->items);
        if (!reply->items)
            return -ENOMEM;
        memset(reply->items, 0, sizeof *reply->items);
        reply->items[0].key_len = (uint32_t)strlen(m->fs->dir);
        reply->items[0].key = cr__rpc_msg_strdup(reply, m->fs->dir, reply->items[0].key_len);
        if (!reply->items[0].key)
            return -ENOMEM;
        reply->n_items = 1;
        return 0;
    }
    if (type != CR__RPC_FS_SYNC || !req->n_items)
        return CR_E_INVALID_PARAMS;
    reply->items = cr__rpc_msg_alloc(reply, req->n_items * sizeof *reply->items);
    if (!reply->items)
        return -ENOMEM;
    memset(reply->items, 0, req->n_items * sizeof *reply->items);
    reply->n_items = req->n_items;
    for (uint32_t i = 0; i < req->n_items; i++) {
        const cr__rpc_item_t *in = &req->items[i];
        int rc;
        if (!key_ok(in->key, in->key_len))
            rc = CR_E_INVALID_KEY;
        else if (in->flags == CR__TIER_FS_OP_ATTACH)
            rc = attach(m, in);
        else if (in->flags == CR__TIER_FS_OP_CORRUPT)
            rc = corrupt(m, in, now);
        else
            rc = CR_E_INVALID_PARAMS;
        reply->items[i].status = rc == -ENOMEM ? CR_E_INTERNAL_ERROR : rc;
    }
    return 0;
}

/* ---- start: adopt the files ----------------------------------------------- */

static int is_obj_name(const char *n)
{
    if (strlen(n) != 49 || n[32] != '-')
        return 0;
    for (int i = 0; i < 49; i++)
        if (i != 32 && !((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f')))
            return 0;
    return 1;
}

/* A record for a file: complete, no memory replica, OF_FS. */
static obj_t *record_new(cr__master_t *m, const char *key, uint32_t kl, uint64_t version,
                         uint64_t size, uint32_t vcrc)
{
    obj_t *o = calloc(1, sizeof *o + kl);
    if (!o)
        return NULL;
    o->version = version;
    o->size = size;
    o->key_len = (uint16_t)kl;
    o->flags = OF_COMPLETE | OF_FS | OF_CRC;
    o->crc = vcrc;
    memcpy(obj_key(o), key, kl);
    if (cr__m_map_insert(m, o, key_hash(key, kl))) {
        free(o);
        return NULL;
    }
    list_push_front(&m->fs_lru, o);
    m->n_complete++;
    return o;
}

long cr__master_fs_scan(cr__master_t *m, uint64_t now, uint64_t *bad)
{
    *bad = 0;
    pthread_mutex_lock(&m->mu);
    if (!m->fs) {
        pthread_mutex_unlock(&m->mu);
        return -EINVAL;
    }
    int dfd = m->fs->dfd;
    long adopted = 0;
    int rc = 0;
    int d2 = dup(dfd);
    DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
    if (!d) {
        rc = CR__ERRNO();
        if (d2 >= 0)
            close(d2);
        pthread_mutex_unlock(&m->mu);
        return rc;
    }
    rewinddir(d);
    struct dirent *e;
    uint8_t h[2 * CR__TIER_BLOCK + CR__TIER_HDR_FIXED];
    while ((e = readdir(d))) {
        if (!is_obj_name(e->d_name))
            continue; /* not one of ours (tmp/, foreign files): never touched */
        int fd = openat(dfd, e->d_name, O_RDONLY | O_CLOEXEC);
        uint64_t v, sz;
        uint32_t vc, kl;
        char want[CR__TIER_FS_NAME_MAX];
        int ok = fd >= 0 && file_header(fd, h, sizeof h, &v, &sz, &vc, &kl) == 0 && sz > 0 &&
                 sz <= CR__RPC_VALUE_MAX;
        if (fd >= 0)
            close(fd);
        if (ok) {
            cr__tier_fs_name(want, (const char *)h + CR__TIER_HDR_FIXED, kl, v);
            ok = !strcmp(want, e->d_name) && key_ok((const char *)h + CR__TIER_HDR_FIXED, kl);
        }
        if (!ok) {
            /* torn, truncated or renamed: a miss forever (nothing points
             * at it); left in place for an operator to look at */
            (*bad)++;
            CNT(m, tier_fs_corrupt_total)++;
            CR_LOG_ERROR(COMP, "shared-FS tier: %s/%s is not a whole object file: ignored",
                         m->fs->dir, e->d_name);
            continue;
        }
        const char *key = (const char *)h + CR__TIER_HDR_FIXED;
        obj_t *o = cr__m_lookup(m, key, kl);
        if (v + 1 > m->next_version)
            m->next_version = v + 1;
        if (o && (o->flags & OF_COMPLETE) && o->version == v) {
            if (!(o->flags & OF_FS)) {
                o->flags |= OF_FS;
                m->fs->n_files++;
                cr__m_jr_obj(m, o);
            }
            adopted++;
            CNT(m, tier_fs_adopted_total)++;
            continue;
        }
        if (o && (o->flags & OF_COMPLETE) && o->version < v && !live_replicas(o) &&
            (o->flags & OF_FS)) {
            /* two files of one key (a crash between a replacement and the
             * old file's deletion): the newer one wins */
            cr__m_obj_delete(m, o, 0, now);
            o = NULL;
        }
        if (o) { /* the index holds another version: this file is stale */
            unlinkat(dfd, e->d_name, 0);
            CNT(m, tier_fs_removed_total)++;
            continue;
        }
        if ((m->cfg.max_objects && m->count >= m->cfg.max_objects) ||
            !(o = record_new(m, key, kl, v, sz, vc))) {
            rc = -ENOMEM;
            break;
        }
        m->fs->n_files++;
        cr__m_jr_obj(m, o);
        adopted++;
        CNT(m, tier_fs_adopted_total)++;
    }
    closedir(d);
    /* writers that never attached (crashed, or their master went away) */
    d2 = dup(m->fs->tfd);
    d = d2 >= 0 ? fdopendir(d2) : NULL;
    if (d) {
        rewinddir(d);
        time_t old = time(NULL) - FS_TMP_AGE_S;
        struct stat st;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.' && !fstatat(m->fs->tfd, e->d_name, &st, 0) &&
                S_ISREG(st.st_mode) && st.st_mtime < old)
                unlinkat(m->fs->tfd, e->d_name, 0);
        closedir(d);
    } else if (d2 >= 0) {
        close(d2);
    }
    m->state_seq++;
    pthread_mutex_unlock(&m->mu);
    return rc ? rc : adopted;
}

void cr__m_fs_restored(cr__master_t *m)
{
    if (m->fs)
        m->fs->n_files++;
}

void cr__m_fs_stats_locked(cr__master_t *m, uint64_t *c)
{
    uint64_t only = 0;
    for (obj_t *o = m->fs_lru.next; o && o != &m->fs_lru; o = o->next)
        only++;
    c[CR__MM_tier_fs_objects] = m->fs ? m->fs->n_files : 0;
    c[CR__MM_tier_fs_only_objects] = only;
}
