/* shm transport: same-host transfers with one kernel copy.
 *
 * The initiator copies straight between its registered buffer and the peer's
 * registered buffer with process_vm_readv (READ) / process_vm_writev (WRITE)
 * against the peer's pid from its descriptor. No memory is remapped, nothing
 * runs on the peer, and the bytes cross exactly once (see
 * docs/architecture/shm.md for why this and not memfd mappings).
 *
 * Threads: a small pool of workers (cfg->io_threads, clamped to 1..4) takes
 * work from one FIFO. A task longer than SHM_CHUNK is claimed chunk by chunk,
 * so one large task is split over all workers; consecutive small tasks to the
 * same peer with the same opcode are merged into one syscall (up to
 * SHM_MAX_IOV iovecs), so small requests cost a fraction of a syscall each.
 * A submit of one task of at most SHM_INLINE bytes is copied by the
 * submitting thread instead: its copy takes less time than the two thread
 * wakeups (to the worker and back to the waiter) that queueing costs. So is
 * a lone task of up to SHM_CHUNK whose submitter waits for it anyway
 * (task->caller_waits, from cr_xfer_transfer_sync): one worker would copy
 * it in one piece, so handing it over only adds the two wakeups. And a
 * thread that waits for a batch copies that batch's queued work itself
 * before it sleeps (shm_help), next to the workers.
 *
 * Safety: every task's target range is checked against the snapshot of the
 * peer's registered buffers taken when the per-peer state was created (the
 * engine drops that state via peer_forget when it refreshes the descriptor).
 * The descriptor is not trusted for this (issue 11): the snapshot keeps only
 * buffers that the process behind the pid confirmed itself over its proof
 * socket, whose owner the kernel names (shm_proof.h); a pid whose process
 * cannot prove it is never reached over shm.
 * The peer process is pinned by a pidfd: before each copy the worker checks
 * the pidfd, so a pid reused after the peer exited is never written to.
 * A vanished peer (ESRCH or pidfd readable) fails its tasks with
 * -ECONNRESET, a range the peer no longer maps with -EFAULT, a denied access
 * with -EACCES; never a crash.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/copy.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "transfer/transport/shm/shm_fence.h"
#include "transfer/transport/shm/shm_map.h"
#include "transfer/transport/shm/shm_proof.h"
#include "transfer/transport/transport.h"

#define SHM_LOG "shm"
#define SHM_CHUNK (4ull << 20)       /* bytes one worker claims of a large task */
#define SHM_SMALL (256ull << 10)     /* tasks up to this size may be merged */
#define SHM_MAX_IOV 64               /* iovecs merged into one syscall */
#define SHM_INLINE (64ull << 10)     /* a lone task up to this size is copied by its submitter */
#define SHM_MAX_THREADS 4
/* a worker's claim when the submitter wants checksums: small enough that
 * the bytes just copied are still in the core's cache (L2 is 512 KiB per
 * core here) when a process_vm_* copy hashes them; a mapped copy hashes as
 * it copies, but there too the smaller claim spreads a batch of small tasks
 * over the workers and the helping waiter better (SHM_CHUNK claims for
 * mapped peers measured no faster: docs/benchmarks.md, 2026-12-02) */
#define SHM_CRC_CLAIM (256ull << 10)
#define SHM_FREE_ITEMS_MAX 4096      /* cached work items kept for reuse */
#define SHM_PROBE_BUFFERS 4          /* registered buffers tried by can_reach */

/* Per-peer state, shared by the peer's queued items (one reference each)
 * and by peer->transport_peer (one reference, dropped by peer_forget or when
 * the descriptor names another pid). */
typedef struct shm_peer {
    atomic_int refs;
    pid_t pid;
    int pidfd;       /* -1 when pidfd_open is unavailable */
    atomic_int dead; /* the process is gone: fail fast */
    pthread_mutex_t ranges_lock; /* guards n_ranges, ranges, fence, fence_dev, fence_ino */
    uint32_t n_ranges;
    struct shm_range {
        uint64_t addr, len;
        cr__shm_map_t *map; /* the mapped path (shm_map.h), or NULL */
        uint32_t slot, gen; /* its fence slot and generation (shm_fence.h) */
    } *ranges; /* sorted by addr: snapshot of the descriptor's buffers */
    /* the peer's revocation table, mapped here (shm_fence.h); set once by
     * the first snapshot with a proof, unmapped with the last reference.
     * NULL without an engine (unit tests: no proof, no checks). */
    cr__shm_fence_slot_t *fence;
    uint64_t fence_dev, fence_ino;
    struct shm_peer *reg_prev, *reg_next; /* registry, guarded by shm_state.peers_lock */
} shm_peer_t;

/* One queued task. next/next_off are guarded by the queue lock. */
typedef struct shm_item {
    struct shm_item *next;
    cr__xfer_task_t *task;
    shm_peer_t *peer;
    /* the target range's fence (NULL: none to check) and its slot and
     * generation when the submit checked it; every copy enters it */
    cr__shm_fence_slot_t *fence;
    uint32_t slot, gen;
    uint64_t next_off;           /* first byte not yet claimed by a worker */
    atomic_uint_fast64_t pending; /* bytes not yet finished (claimed or not) */
    atomic_int err;              /* first error, 0 if none */
} shm_item_t;

typedef struct shm_state {
    cr_xfer_engine_t *engine;
    char host_id[CR__HOST_ID_MAX];
    unsigned long long net_ino;

    pthread_mutex_t lock; /* guards head, tail, free_items, n_free, stop */
    pthread_cond_t cond;
    shm_item_t *head, *tail;
    /* cached items as a stack: taking n of them reads only this array,
     * not a linked list whose nodes other CPUs wrote last */
    shm_item_t *free_items[SHM_FREE_ITEMS_MAX];
    size_t n_free;
    int stop;

    int thp; /* back registered memory with huge pages (CRESCENT_SHM_THP, default 1) */
    int map; /* map peers' shared buffers (CRESCENT_SHM_MAP, default 1; shm_map.h) */

    unsigned n_threads;
    pthread_t threads[SHM_MAX_THREADS];

    pthread_mutex_t peers_lock; /* guards the registry and peer->transport_peer writes */
    shm_peer_t *peers;
    int proof_attached; /* this engine answers ownership proofs (shm_proof.h) */
} shm_state_t;

/* ---- peers --------------------------------------------------------------- */

static int shm_pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* 1 if the process behind pidfd has exited. */
static int shm_pidfd_exited(int pidfd)
{
    if (pidfd < 0)
        return 0;
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}

static unsigned long long shm_ns_inode(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

static void shm_peer_unref(shm_peer_t *sp)
{
    if (sp && atomic_fetch_sub(&sp->refs, 1) == 1) {
        if (sp->pidfd >= 0)
            close(sp->pidfd);
        for (uint32_t i = 0; i < sp->n_ranges; i++)
            cr__shm_map_unref(sp->ranges[i].map);
        cr__shm_fence_unmap(sp->fence);
        pthread_mutex_destroy(&sp->ranges_lock);
        free(sp->ranges);
        free(sp);
    }
}

static int shm_range_cmp(const void *a, const void *b)
{
    const struct shm_range *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* The range of sp that holds all of [addr, addr+len), or NULL (caller holds
 * ranges_lock). */
static const struct shm_range *shm_peer_find_locked(const shm_peer_t *sp, uint64_t addr,
                                                    uint64_t len)
{
    if (len == 0 || addr + len < addr)
        return NULL;
    size_t lo = 0, hi = sp->n_ranges;
    while (lo < hi) { /* last range with start <= addr */
        size_t mid = lo + (hi - lo) / 2;
        if (sp->ranges[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const struct shm_range *r = &sp->ranges[lo - 1];
    return addr - r->addr <= r->len && len <= r->len - (addr - r->addr) ? r : NULL;
}

/* The range of sp that holds all of [addr, addr+len) if the peer has not
 * unregistered it since the snapshot, or NULL (caller holds ranges_lock). */
static const struct shm_range *shm_peer_live_locked(const shm_peer_t *sp, uint64_t addr,
                                                    uint64_t len)
{
    const struct shm_range *r = shm_peer_find_locked(sp, addr, len);
    return r && (!sp->fence || cr__shm_fence_current(sp->fence, r->slot, r->gen)) ? r : NULL;
}

/* Gives the new ranges r[0..n) their mappings: those the old snapshot
 * already had for the same range are kept, the others are made now. */
static void shm_peer_map(shm_state_t *st, shm_peer_t *sp, struct shm_range *r, size_t n)
{
    if (!n)
        return;
    pthread_mutex_lock(&sp->ranges_lock);
    for (size_t i = 0; i < n; i++) {
        /* the same registration, not only the same addresses: memory
         * unregistered and registered again may be another file */
        const struct shm_range *o = shm_peer_find_locked(sp, r[i].addr, r[i].len);
        r[i].map = o && o->map && o->addr == r[i].addr && o->len == r[i].len &&
                           o->slot == r[i].slot && o->gen == r[i].gen
                       ? o->map
                       : NULL;
        if (r[i].map)
            cr__shm_map_ref(r[i].map);
    }
    pthread_mutex_unlock(&sp->ranges_lock);
    if (!st->map || sp->pidfd < 0)
        return;
    uint64_t *addr = malloc(n * sizeof *addr), *len = malloc(n * sizeof *len);
    cr__shm_map_t **maps = malloc(n * sizeof *maps);
    size_t *idx = malloc(n * sizeof *idx);
    size_t k = 0;
    for (size_t i = 0; addr && len && maps && idx && i < n; i++)
        if (!r[i].map) {
            addr[k] = r[i].addr;
            len[k] = r[i].len;
            idx[k++] = i;
        }
    if (k && cr__shm_map_ranges(sp->pid, sp->pidfd, addr, len, k, maps))
        for (size_t j = 0; j < k; j++)
            r[idx[j]].map = maps[j];
    free(addr);
    free(len);
    free(maps);
    free(idx);
}

/* Maps the peer's fence table from fd (from its proof) on the first
 * snapshot; later ones must name the same table (a process keeps its
 * table for life). Returns 0 or -1. */
static int shm_peer_fence_set(shm_peer_t *sp, int fd)
{
    struct stat fs;
    if (fd < 0 || fstat(fd, &fs) != 0)
        return -1;
    pthread_mutex_lock(&sp->ranges_lock);
    int have = sp->fence != NULL;
    int same = have && sp->fence_dev == (uint64_t)fs.st_dev && sp->fence_ino == (uint64_t)fs.st_ino;
    pthread_mutex_unlock(&sp->ranges_lock);
    if (have)
        return same ? 0 : -1;
    uint64_t dev, ino;
    cr__shm_fence_slot_t *f = cr__shm_fence_map(fd, &dev, &ino);
    if (!f)
        return -1;
    pthread_mutex_lock(&sp->ranges_lock);
    if (!sp->fence) { /* snapshots of one peer may race: the first one wins */
        sp->fence = f;
        sp->fence_dev = dev;
        sp->fence_ino = ino;
        f = NULL;
    }
    same = sp->fence_dev == dev && sp->fence_ino == ino;
    pthread_mutex_unlock(&sp->ranges_lock);
    cr__shm_fence_unmap(f);
    return same ? 0 : -1;
}

/* Replaces sp's ranges with the peer's current buffers. With a real engine
 * they are copied through cr_xfer_segment_buffers (under the engine's peer
 * lock, so a concurrent descriptor refresh is safe); without one (unit tests
 * drive the transport directly) from peer->desc. Returns 0 or -ENOMEM. */
static int shm_peer_snapshot(shm_state_t *st, shm_peer_t *sp, cr__xfer_peer_t *peer)
{
    cr_xfer_buffer_info_t *b = NULL;
    size_t n = 0;
    if (st->engine) {
        size_t cap = 16;
        if (!(b = malloc(cap * sizeof *b)))
            return -ENOMEM;
        size_t filled = 0;
        for (int tries = 0; tries < 4; tries++) {
            if (cr_xfer_segment_buffers(st->engine, peer->handle, b, cap, &n) != 0) {
                filled = 0;
                break;
            }
            filled = n < cap ? n : cap;
            if (n <= cap || tries == 3)
                break;
            cap = n + 16; /* it may grow between the calls */
            cr_xfer_buffer_info_t *nb = realloc(b, cap * sizeof *b);
            if (!nb) {
                free(b);
                return -ENOMEM;
            }
            b = nb;
        }
        n = filled;
    } else {
        b = peer->desc.buffers;
        n = peer->desc.n_buffers;
    }
    /* with an engine, only what the peer process proves it owns, each
     * range with its fence slot in the peer's table (mapped once) */
    cr__shm_range_t *proven = NULL;
    uint32_t n_proven = 0;
    if (st->engine && n) {
        int table = -1;
        int prc = cr__shm_proof_fetch(sp->pid, cr__xfer_engine_auth(st->engine), &proven,
                                      &n_proven, &table);
        if (!prc && shm_peer_fence_set(sp, table))
            prc = -EACCES;
        if (table >= 0)
            close(table);
        if (prc) {
            CR_LOG_INFO(SHM_LOG, "pid %d: ownership not proven (%s): no shm access", (int)sp->pid,
                        strerror(-prc));
            n = 0;
        }
    }
    struct shm_range *r = NULL;
    if (n && !(r = malloc(n * sizeof *r))) {
        if (st->engine)
            free(b);
        free(proven);
        return -ENOMEM;
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        int ok = !st->engine;
        uint32_t k = 0;
        for (; k < n_proven && !ok; k++)
            ok = b[i].addr >= proven[k].addr && b[i].len <= proven[k].len &&
                 b[i].addr - proven[k].addr <= proven[k].len - b[i].len;
        if (!ok)
            continue;
        r[kept].addr = b[i].addr;
        r[kept].len = b[i].len;
        r[kept].map = NULL;
        r[kept].slot = st->engine ? proven[k - 1].slot : 0;
        r[kept].gen = st->engine ? proven[k - 1].gen : 0;
        kept++;
    }
    n = kept;
    free(proven);
    if (st->engine)
        free(b);
    if (n)
        qsort(r, n, sizeof *r, shm_range_cmp);
    shm_peer_map(st, sp, r, n);
    pthread_mutex_lock(&sp->ranges_lock);
    struct shm_range *old = sp->ranges;
    uint32_t n_old = sp->n_ranges;
    sp->ranges = r;
    sp->n_ranges = (uint32_t)n;
    pthread_mutex_unlock(&sp->ranges_lock);
    for (uint32_t i = 0; i < n_old; i++)
        cr__shm_map_unref(old[i].map); /* copies in flight hold their own reference */
    free(old);
    return 0;
}

static shm_peer_t *shm_peer_new(shm_state_t *st, cr__xfer_peer_t *peer, pid_t pid)
{
    shm_peer_t *sp = calloc(1, sizeof *sp);
    if (!sp)
        return NULL;
    atomic_init(&sp->refs, 1);
    atomic_init(&sp->dead, 0);
    pthread_mutex_init(&sp->ranges_lock, NULL);
    sp->pid = pid;
    /* pinned before its ranges are proven and mapped */
    sp->pidfd = shm_pidfd_open(sp->pid);
    if (sp->pidfd < 0 && errno == ESRCH)
        atomic_store(&sp->dead, 1);
    if (shm_peer_snapshot(st, sp, peer) != 0) {
        shm_peer_unref(sp);
        return NULL;
    }
    return sp;
}

static void shm_peer_unlink_locked(shm_state_t *st, shm_peer_t *sp);

/* Returns the peer's state with one extra reference for the caller, creating
 * it on first use or when the descriptor now names another process (the
 * peer restarted under the same name). NULL on -ENOMEM. */
static shm_peer_t *shm_peer_get(shm_state_t *st, cr__xfer_peer_t *peer)
{
    /* the pid is one aligned word; the engine may swap the descriptor
     * concurrently, a torn read is impossible and a stale one harmless */
    pid_t pid = __atomic_load_n(&peer->desc.pid, __ATOMIC_RELAXED);
    shm_peer_t *old = NULL;
    pthread_mutex_lock(&st->peers_lock);
    shm_peer_t *sp = peer->transport_peer;
    if (sp && sp->pid != pid) {
        shm_peer_unlink_locked(st, sp);
        peer->transport_peer = NULL;
        old = sp;
        sp = NULL;
    }
    if (!sp) {
        sp = shm_peer_new(st, peer, pid);
        if (sp) {
            sp->reg_next = st->peers;
            if (st->peers)
                st->peers->reg_prev = sp;
            st->peers = sp;
            peer->transport_peer = sp;
        }
    }
    if (sp)
        atomic_fetch_add(&sp->refs, 1);
    pthread_mutex_unlock(&st->peers_lock);
    shm_peer_unref(old);
    return sp;
}

static void shm_peer_unlink_locked(shm_state_t *st, shm_peer_t *sp)
{
    if (sp->reg_prev)
        sp->reg_prev->reg_next = sp->reg_next;
    else
        st->peers = sp->reg_next;
    if (sp->reg_next)
        sp->reg_next->reg_prev = sp->reg_prev;
    sp->reg_prev = sp->reg_next = NULL;
}

static void shm_peer_forget(void *state, cr__xfer_peer_t *peer)
{
    shm_state_t *st = state;
    pthread_mutex_lock(&st->peers_lock);
    shm_peer_t *sp = peer->transport_peer;
    peer->transport_peer = NULL;
    if (sp)
        shm_peer_unlink_locked(st, sp);
    pthread_mutex_unlock(&st->peers_lock);
    shm_peer_unref(sp);
}

/* ---- copying ------------------------------------------------------------- */

static int shm_errno_status(int e)
{
    switch (e) {
    case ESRCH:
        return -ECONNRESET; /* peer exited */
    case EPERM:
    case EACCES:
        return -EACCES; /* crescent never returns -EPERM (common.h) */
    case ENOMEM:
        return -ENOMEM;
    case EFAULT:
        return -EFAULT;
    default:
        return e > 0 ? -e : -EIO;
    }
}

/* Moves the bytes described by n (local, remote) iovec pairs of equal
 * lengths. Returns the number of leading bytes moved (== total on success)
 * and sets *err on a short transfer. */
static uint64_t shm_copy(pid_t pid, int pidfd, cr_xfer_opcode_t op, struct iovec *liov,
                         struct iovec *riov, int n, int *err)
{
    uint64_t done = 0;
    int i = 0;
    *err = 0;
    while (i < n) {
        if (shm_pidfd_exited(pidfd)) {
            *err = -ECONNRESET;
            return done;
        }
        ssize_t r = op == CR_XFER_READ ? process_vm_readv(pid, liov + i, (unsigned long)(n - i),
                                                          riov + i, (unsigned long)(n - i), 0)
                                       : process_vm_writev(pid, liov + i, (unsigned long)(n - i),
                                                           riov + i, (unsigned long)(n - i), 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            *err = shm_errno_status(errno);
            return done;
        }
        if (r == 0) { /* nothing moved although bytes remain: the first iov faults */
            *err = -EFAULT;
            return done;
        }
        done += (uint64_t)r;
        /* advance over what was moved; a partial element is resumed */
        size_t left = (size_t)r;
        while (i < n && left >= liov[i].iov_len) {
            left -= liov[i].iov_len;
            i++;
        }
        if (i < n && left) {
            liov[i].iov_base = (char *)liov[i].iov_base + left;
            liov[i].iov_len -= left;
            riov[i].iov_base = (char *)riov[i].iov_base + left;
            riov[i].iov_len -= left;
        }
    }
    return done;
}

/* A reference on the mapping of the remote range of item it, or NULL: the
 * process_vm path. Only a mapping of the registration the item was checked
 * against: the snapshot may hold a newer one by now. */
static cr__shm_map_t *shm_map_take_locked(shm_peer_t *sp, const shm_item_t *it)
{
    const cr__xfer_task_t *t = it->task;
    const struct shm_range *r = shm_peer_find_locked(sp, t->remote_addr, t->length);
    cr__shm_map_t *m = r && r->slot == it->slot && r->gen == it->gen ? r->map : NULL;
    if (m)
        cr__shm_map_ref(m);
    return m;
}

static cr__shm_map_t *shm_map_take(shm_peer_t *sp, const shm_item_t *it)
{
    pthread_mutex_lock(&sp->ranges_lock);
    cr__shm_map_t *m = shm_map_take_locked(sp, it);
    pthread_mutex_unlock(&sp->ranges_lock);
    return m;
}

/* Admits a copy for item it into its target range: 0 (call shm_item_exit
 * after the copy) or -EFAULT (the peer unregistered the range since the
 * submit checked it; shm_fence.h). */
static int shm_item_enter(const shm_item_t *it)
{
    return it->fence ? cr__shm_fence_enter(it->fence, it->slot, it->gen) : 0;
}

static void shm_item_exit(cr__shm_fence_slot_t *fence, uint32_t slot)
{
    if (fence)
        cr__shm_fence_exit(fence, slot);
}

/* Moves bytes [off, off+len) of t through the mapping m of its remote range
 * (a user-space copy that cannot fault: the file is sealed against
 * shrinking) and records their crc when t wants one. */
static void shm_copy_mapped(cr__shm_map_t *m, cr__xfer_task_t *t, uint64_t off,
                            uint64_t len)
{
    unsigned char *remote = m->at + (t->remote_addr - m->addr) + off;
    unsigned char *local = (unsigned char *)t->local + off;
    void *dst = t->opcode == CR_XFER_READ ? (void *)local : (void *)remote;
    const void *src = t->opcode == CR_XFER_READ ? (const void *)remote : (const void *)local;
    cr__shm_map_prepare(m, remote, (size_t)len);
    if (t->want_crc)
        cr__xfer_task_crc_add(t, off, len, cr__crc32c_copy_raw(0, dst, src, (size_t)len));
    else
        cr__copy_stream(dst, src, (size_t)len);
}

/* ---- queue --------------------------------------------------------------- */

static void shm_item_release_locked(shm_state_t *st, shm_item_t *it)
{
    if (st->n_free < SHM_FREE_ITEMS_MAX)
        st->free_items[st->n_free++] = it;
    else
        free(it);
}

/* Records that len bytes of it finished (err 0 or -errno). Returns 1 when
 * this call finished its last byte: the caller then owes the item to
 * shm_items_complete. */
static int shm_item_account(shm_item_t *it, uint64_t len, int err)
{
    if (err) {
        int zero = 0;
        atomic_compare_exchange_strong(&it->err, &zero, err);
        if (err == -ECONNRESET)
            atomic_store(&it->peer->dead, 1);
    } else if (len) {
        cr__xfer_task_progress(it->task, len);
    }
    return atomic_fetch_sub(&it->pending, len) == len;
}

/* Completes the tasks of n finished items and recycles the items under one
 * hold of the queue lock (a claim's items finish together). */
static void shm_items_complete(shm_state_t *st, shm_item_t **its, int n)
{
    if (!n)
        return;
    cr__xfer_task_t *tasks[SHM_MAX_IOV];
    int errs[SHM_MAX_IOV];
    for (int i = 0; i < n; i++) {
        tasks[i] = its[i]->task;
        errs[i] = atomic_load(&its[i]->err);
        shm_peer_unref(its[i]->peer);
    }
    pthread_mutex_lock(&st->lock);
    for (int i = 0; i < n; i++)
        shm_item_release_locked(st, its[i]);
    pthread_mutex_unlock(&st->lock);
    for (int i = 0; i < n; i++)
        cr__xfer_task_done(tasks[i], errs[i]);
}

/* Records that len bytes of it finished (err 0 or -errno); the call that
 * finishes the last byte completes the task and recycles the item. */
static void shm_item_finish(shm_state_t *st, shm_item_t *it, uint64_t len, int err)
{
    if (shm_item_account(it, len, err))
        shm_items_complete(st, &it, 1);
}

/* A status that fails the item before any copy, or 0. */
static int shm_item_precheck(const shm_item_t *it)
{
    int e = atomic_load(&it->err);
    if (e)
        return e;
    if (atomic_load(&it->peer->dead))
        return -ECONNRESET;
    if (it->task->deadline_ns && cr__now_ns() > it->task->deadline_ns)
        return -ETIMEDOUT;
    return 0;
}

static void shm_iov_set(struct iovec *liov, struct iovec *riov, const cr__xfer_task_t *t,
                        uint64_t off, uint64_t len)
{
    liov->iov_base = t->local + off;
    liov->iov_len = (size_t)len;
    riov->iov_base = (void *)(uintptr_t)(t->remote_addr + off);
    riov->iov_len = (size_t)len;
}

/* One claim from the queue, copied: a whole small task with the small
 * tasks after it (same peer and opcode, up to SHM_MAX_IOV), or one chunk
 * of a large one. A worker (only == NULL) sleeps until there is work and
 * returns -1 once the transport stops; a waiter that helps (shm_help) takes
 * only work of the batch it waits for (at the head of the queue, and only
 * that batch's tasks merged after it) and returns 0 when there is none.
 * Returns 1 after a claim. */
static int shm_work_one(shm_state_t *st, const struct cr_xfer_batch *only)
{
    shm_item_t *group[SHM_MAX_IOV];
    struct iovec liov[SHM_MAX_IOV], riov[SHM_MAX_IOV];

    {
        pthread_mutex_lock(&st->lock);
        if (only && (st->stop || !st->head || st->head->task->batch != only)) {
            pthread_mutex_unlock(&st->lock);
            return 0;
        }
        while (!st->stop && !st->head)
            pthread_cond_wait(&st->cond, &st->lock);
        if (st->stop) {
            pthread_mutex_unlock(&st->lock);
            return -1;
        }
        shm_item_t *it = st->head;
        uint64_t tlen = it->task->length;
        uint64_t off = it->next_off;
        int ng = 1;
        group[0] = it;
        uint64_t len;
        uint64_t claim = it->task->want_crc ? SHM_CRC_CLAIM : SHM_CHUNK;
        if (off == 0 && tlen <= SHM_SMALL) {
            /* whole small task: merge followers of the same peer and opcode */
            len = tlen;
            uint64_t sum = tlen;
            shm_item_t *nx = it->next;
            while (nx && ng < SHM_MAX_IOV && nx->peer == it->peer &&
                   nx->task->opcode == it->task->opcode && nx->task->length <= SHM_SMALL &&
                   sum + nx->task->length <= claim && (!only || nx->task->batch == only)) {
                sum += nx->task->length;
                nx->next_off = nx->task->length;
                group[ng++] = nx;
                nx = nx->next;
            }
            it->next_off = tlen;
            st->head = nx;
        } else {
            /* a chunk; a task that already failed is drained in one claim */
            len = claim;
            if (atomic_load(&it->err) || tlen - off < claim)
                len = tlen - off;
            it->next_off = off + len;
            if (it->next_off == tlen)
                st->head = it->next;
        }
        if (!st->head)
            st->tail = NULL;
        pthread_mutex_unlock(&st->lock);

        /* items that fail before copying are finished right away; the
         * others enter their range's fence (once per run of items in the
         * same range) and exit it after the whole claim was copied */
        int nc = 0, nfx = 0;
        uint64_t offs[SHM_MAX_IOV];
        cr__shm_fence_slot_t *fx[SHM_MAX_IOV];
        uint32_t fxslot[SHM_MAX_IOV];
        for (int g = 0; g < ng; g++) {
            shm_item_t *x = group[g];
            uint64_t xoff = g == 0 ? off : 0;
            uint64_t xlen = g == 0 ? len : x->task->length;
            int e = shm_item_precheck(x);
            if (!e && x->fence &&
                !(nc && group[nc - 1]->fence == x->fence && group[nc - 1]->slot == x->slot &&
                  group[nc - 1]->gen == x->gen)) {
                e = shm_item_enter(x);
                if (!e) {
                    fx[nfx] = x->fence;
                    fxslot[nfx++] = x->slot;
                }
            }
            if (e) {
                shm_item_finish(st, x, xlen, e);
                continue;
            }
            group[nc] = x;
            offs[nc] = xoff;
            shm_iov_set(&liov[nc], &riov[nc], x->task, xoff, xlen);
            nc++;
        }
        if (!nc)
            return 1;
        shm_peer_t *gsp = group[0]->peer;
        cr__shm_map_t *maps[SHM_MAX_IOV];
        int mapped = 1;
        pthread_mutex_lock(&gsp->ranges_lock);
        for (int g = 0; g < nc; g++)
            mapped &= (maps[g] = shm_map_take_locked(gsp, group[g])) != NULL;
        pthread_mutex_unlock(&gsp->ranges_lock);
        if (mapped) {
            int e = shm_pidfd_exited(gsp->pidfd) ? -ECONNRESET : 0;
            shm_item_t *done[SHM_MAX_IOV];
            int nd = 0;
            for (int g = 0; e == 0 && g < nc; g++)
                shm_copy_mapped(maps[g], group[g]->task, offs[g], liov[g].iov_len);
            /* out of the fences before accounting: once the items are
             * accounted, another claim may finish them, and the last one
             * may drop the peer state with its table mapping */
            for (int k = 0; k < nfx; k++)
                shm_item_exit(fx[k], fxslot[k]);
            for (int g = 0; g < nc; g++) {
                if (shm_item_account(group[g], liov[g].iov_len, e))
                    done[nd++] = group[g];
                cr__shm_map_unref(maps[g]);
            }
            shm_items_complete(st, done, nd);
            return 1;
        }
        for (int g = 0; g < nc; g++)
            cr__shm_map_unref(maps[g]);
        {
            /* lengths before the copy advances the iovecs */
            uint64_t lens[SHM_MAX_IOV];
            for (int g = 0; g < nc; g++)
                lens[g] = liov[g].iov_len;
            /* a WRITE's sources are hashed before the copy, which then
             * reads them from cache (a READ's bytes after they landed) */
            uint32_t raws[SHM_MAX_IOV];
            int errs[SHM_MAX_IOV];
            int pre = group[0]->task->opcode == CR_XFER_WRITE;
            for (int g = 0; pre && g < nc; g++)
                if (group[g]->task->want_crc)
                    raws[g] = cr__crc32c_raw(0, liov[g].iov_base, lens[g]);
            int err;
            shm_peer_t *sp = group[0]->peer;
            uint64_t moved = shm_copy(sp->pid, sp->pidfd, group[0]->task->opcode, liov, riov,
                                      nc, &err);
            for (int g = 0; g < nc; g++) {
                if (moved >= lens[g]) {
                    moved -= lens[g];
                    if (pre)
                        cr__xfer_task_crc_add(group[g]->task, offs[g], lens[g], raws[g]);
                    else
                        cr__xfer_task_crc_range(group[g]->task, offs[g], lens[g]);
                    errs[g] = 0;
                } else if (nc == 1 || err == -ECONNRESET || err == -EACCES) {
                    /* the remainder fails too (or there is nothing to isolate) */
                    errs[g] = err ? err : -EFAULT;
                    moved = 0;
                } else {
                    /* a merged syscall stopped in this item: retry it (and the
                     * rest) one by one so only the faulty item fails */
                    moved = 0;
                    struct iovec l1, r1;
                    int e1;
                    shm_iov_set(&l1, &r1, group[g]->task, 0, lens[g]);
                    uint64_t m1 = shm_copy(sp->pid, sp->pidfd, group[g]->task->opcode, &l1,
                                           &r1, 1, &e1);
                    if (m1 == lens[g])
                        cr__xfer_task_crc_range(group[g]->task, 0, lens[g]);
                    errs[g] = m1 == lens[g] ? 0 : (e1 ? e1 : -EFAULT);
                }
            }
            /* out of the fences before the items finish (see above) */
            for (int k = 0; k < nfx; k++)
                shm_item_exit(fx[k], fxslot[k]);
            for (int g = 0; g < nc; g++)
                shm_item_finish(st, group[g], lens[g], errs[g]);
        }
    }
    return 1;
}

static void *shm_worker(void *arg)
{
    shm_state_t *st = arg;
    while (shm_work_one(st, NULL) >= 0)
        ;
    return NULL;
}

/* The help op (transport.h): copies queued work of batch b in the waiting
 * thread while it is at the head of the queue, so a waiter starts on its
 * batch at once instead of sleeping until the workers wake and then being
 * woken back: for small requests those two wakeups cost more than the
 * copies (16 KiB WRITEs through cr_xfer_batch_wait, docs/benchmarks.md).
 * The workers take the rest as they come. */
static void shm_help(void *state, struct cr_xfer_batch *b)
{
    shm_state_t *st = state;
    while (shm_work_one(st, b) > 0)
        ;
}

/* ---- ops ----------------------------------------------------------------- */

static int shm_submit(void *state, cr__xfer_peer_t *peer, cr__xfer_task_t **tasks, size_t n)
{
    shm_state_t *st = state;
    if (!n)
        return 0;
    shm_peer_t *sp = shm_peer_get(st, peer);
    if (!sp)
        return -ENOMEM;

    /* items: from the cache, the rest malloc'd before anything is queued */
    shm_item_t *list = NULL;
    size_t got = 0;
    pthread_mutex_lock(&st->lock);
    while (got < n && st->n_free) {
        shm_item_t *it = st->free_items[--st->n_free];
        it->next = list;
        list = it;
        got++;
    }
    pthread_mutex_unlock(&st->lock);
    for (; got < n; got++) {
        shm_item_t *it = malloc(sizeof *it);
        if (!it) {
            pthread_mutex_lock(&st->lock);
            while (list) {
                shm_item_t *nx = list->next;
                shm_item_release_locked(st, list);
                list = nx;
            }
            pthread_mutex_unlock(&st->lock);
            shm_peer_unref(sp);
            return -ENOMEM;
        }
        it->next = list;
        list = it;
    }

    shm_item_t *first = NULL, *last = NULL;
    int resnapped = 0;
    /* held across the range checks, released only around a resnapshot */
    pthread_mutex_lock(&sp->ranges_lock);
    for (size_t i = 0; i < n; i++) {
        shm_item_t *it = list;
        list = it->next;
        cr__xfer_task_t *t = tasks[i];
        it->next = NULL;
        it->task = t;
        it->peer = sp;
        it->next_off = 0;
        atomic_init(&it->pending, t->length);
        /* the engine validated too; this guards against engine bugs: never
         * touch the peer outside what it registered, nor a range it
         * unregistered since the snapshot (its fence generation moved on).
         * A miss re-reads the peer's buffers once per submit (it may have
         * registered more, or registered a range again). */
        const struct shm_range *r = shm_peer_live_locked(sp, t->remote_addr, t->length);
        if (!r && !resnapped) {
            resnapped = 1;
            pthread_mutex_unlock(&sp->ranges_lock);
            shm_peer_snapshot(st, sp, peer);
            pthread_mutex_lock(&sp->ranges_lock);
            r = shm_peer_live_locked(sp, t->remote_addr, t->length);
        }
        it->fence = r ? sp->fence : NULL;
        it->slot = r ? r->slot : 0;
        it->gen = r ? r->gen : 0;
        atomic_init(&it->err, r ? 0 : -EFAULT);
        if (i)
            atomic_fetch_add(&sp->refs, 1); /* one reference per item */
        if (last)
            last->next = it;
        else
            first = it;
        last = it;
    }
    pthread_mutex_unlock(&sp->ranges_lock);

    if (n == 1 && (first->task->length <= SHM_INLINE ||
                   (first->task->caller_waits && first->task->length <= SHM_CHUNK))) {
        /* copied here, like the worker's single-item path; never queued */
        shm_item_t *it = first;
        uint64_t len = it->task->length;
        it->next_off = len;
        int e = shm_item_precheck(it);
        if (!e)
            e = shm_item_enter(it);
        cr__shm_fence_slot_t *fence = e ? NULL : it->fence; /* it is recycled by finish */
        uint32_t slot = it->slot;
        cr__shm_map_t *m = e ? NULL : shm_map_take(sp, it);
        if (m) {
            if (shm_pidfd_exited(sp->pidfd))
                e = -ECONNRESET;
            else
                shm_copy_mapped(m, it->task, 0, len);
            cr__shm_map_unref(m);
        } else if (!e) {
            struct iovec l1, r1;
            shm_iov_set(&l1, &r1, it->task, 0, len);
            uint64_t moved = shm_copy(sp->pid, sp->pidfd, it->task->opcode, &l1, &r1, 1, &e);
            if (moved == len) {
                e = 0;
                cr__xfer_task_crc_range(it->task, 0, len);
            } else if (!e) {
                e = -EFAULT;
            }
        }
        shm_item_exit(fence, slot);
        shm_item_finish(st, it, len, e);
        return 0;
    }

    pthread_mutex_lock(&st->lock);
    if (st->tail)
        st->tail->next = first;
    else
        st->head = first;
    st->tail = last;
    if (n > 1 || last->task->length > SHM_CHUNK)
        pthread_cond_broadcast(&st->cond);
    else
        pthread_cond_signal(&st->cond);
    pthread_mutex_unlock(&st->lock);
    return 0;
}

/* Registered memory gets transparent huge pages on its 2 MiB-aligned
 * interior: MADV_HUGEPAGE makes later faults allocate huge pages, and
 * MADV_COLLAPSE (synchronous, copies ~1 GB/s) converts what is already
 * populated; it never populates untouched memory. process_vm_readv/writev
 * pin the remote pages one by one and copy page by page, which with 4 KiB
 * pages runs at ~0.4x memcpy on this class of machine and with 2 MiB pages
 * at ~0.9x (docs/architecture/shm.md). Failures only cost speed.
 * With an engine the range also gets its fence slot (shm_fence.h), which is
 * what the ownership proof offers peers: a range without one (table full)
 * is not reached over shm. */
static void shm_mem_registered(void *state, void *addr, size_t len)
{
    shm_state_t *st = state;
    if (st && st->proof_attached)
        cr__shm_fence_add(st, (uint64_t)(uintptr_t)addr, len);
    if (!st || !st->thp)
        return;
    uintptr_t a = ((uintptr_t)addr + CR__SHM_HUGE - 1) & ~(uintptr_t)(CR__SHM_HUGE - 1);
    uintptr_t end = ((uintptr_t)addr + len) & ~(uintptr_t)(CR__SHM_HUGE - 1);
    if ((uintptr_t)addr + len < (uintptr_t)addr || end <= a)
        return;
    if (madvise((void *)a, end - a, MADV_HUGEPAGE) != 0) {
        CR_LOG_DEBUG(SHM_LOG, "madvise(HUGEPAGE, %zu MiB): %s", (size_t)((end - a) >> 20),
                     strerror(errno));
        return;
    }
    /* partial success is normal (holes that were never touched stay small) */
    if (madvise((void *)a, end - a, MADV_COLLAPSE) != 0)
        CR_LOG_DEBUG(SHM_LOG, "madvise(COLLAPSE, %zu MiB): %s", (size_t)((end - a) >> 20),
                     strerror(errno));
}

/* The engine unregistered [addr, addr+len): revoke peers' access and wait
 * for their copies in flight (shm_fence.h), so that once
 * cr_xfer_mem_unregister returns no initiator touches the range. */
static void shm_mem_unregistered(void *state, void *addr, size_t len)
{
    shm_state_t *st = state;
    if (st && st->proof_attached)
        cr__shm_fence_revoke(st, (uint64_t)(uintptr_t)addr, len);
}

static int shm_can_reach(void *state, const cr__seg_desc_t *d)
{
    shm_state_t *st = state;
    if (!d || d->pid <= 0 || strncmp(d->host_id, st->host_id, CR__HOST_ID_MAX) != 0)
        return 0;
    /* without our own namespace identity two containers could look alike */
    if (st->net_ino == 0)
        return 0;
    /* the pid must name a process in our network namespace (a recycled pid
     * or a /proc of another pid namespace would not) */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int)d->pid);
    if (shm_ns_inode(path) != st->net_ino) {
        CR_LOG_INFO(SHM_LOG, "peer %s pid %d: not in our network namespace, no shm", d->name,
                    (int)d->pid);
        return 0;
    }
    if (st->engine) {
        /* the process behind the pid must prove it is a crescent engine
         * (and a member) before anything touches its memory */
        cr__shm_range_t *proven = NULL;
        uint32_t n_proven = 0;
        int table = -1;
        int prc = cr__shm_proof_fetch(d->pid, cr__xfer_engine_auth(st->engine), &proven,
                                      &n_proven, &table);
        free(proven);
        if (table >= 0)
            close(table);
        if (prc) {
            CR_LOG_INFO(SHM_LOG, "peer %s pid %d: ownership not proven (%s), no shm", d->name,
                        (int)d->pid, strerror(-prc));
            return 0;
        }
    }
    if (d->n_buffers == 0) {
        /* nothing to probe yet: opening /proc/pid/mem runs the same ptrace
         * access check that process_vm_readv does */
        snprintf(path, sizeof path, "/proc/%d/mem", (int)d->pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            CR_LOG_INFO(SHM_LOG, "peer %s pid %d: %s, no shm", d->name, (int)d->pid,
                        strerror(errno));
            return 0;
        }
        close(fd);
        return 1;
    }
    int e = 0;
    for (uint32_t i = 0; i < d->n_buffers && i < SHM_PROBE_BUFFERS; i++) {
        char byte;
        struct iovec l = {.iov_base = &byte, .iov_len = 1};
        struct iovec r = {.iov_base = (void *)(uintptr_t)d->buffers[i].addr, .iov_len = 1};
        if (d->buffers[i].len && process_vm_readv(d->pid, &l, 1, &r, 1, 0) == 1)
            return 1;
        e = errno;
    }
    CR_LOG_INFO(SHM_LOG, "peer %s pid %d: probe read failed (%s), no shm", d->name, (int)d->pid,
                strerror(e));
    return 0;
}

static void shm_destroy(void *state)
{
    shm_state_t *st = state;
    if (!st)
        return;
    pthread_mutex_lock(&st->lock);
    st->stop = 1;
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
    for (unsigned i = 0; i < st->n_threads; i++)
        pthread_join(st->threads[i], NULL);

    /* workers finished their claimed chunks: every queued item now owes
     * exactly its unclaimed bytes */
    pthread_mutex_lock(&st->lock);
    shm_item_t *it = st->head;
    st->head = st->tail = NULL;
    pthread_mutex_unlock(&st->lock);
    while (it) {
        shm_item_t *nx = it->next;
        uint64_t rest = it->task->length - it->next_off;
        /* a merged follower was claimed as a whole; it is never left here */
        shm_item_finish(st, it, rest, -ECANCELED);
        it = nx;
    }
    while (st->n_free)
        free(st->free_items[--st->n_free]);
    pthread_mutex_lock(&st->peers_lock);
    while (st->peers) {
        shm_peer_t *sp = st->peers;
        shm_peer_unlink_locked(st, sp);
        shm_peer_unref(sp); /* the registry's (peer->transport_peer) reference */
    }
    pthread_mutex_unlock(&st->peers_lock);
    pthread_mutex_destroy(&st->peers_lock);
    pthread_cond_destroy(&st->cond);
    pthread_mutex_destroy(&st->lock);
    if (st->proof_attached) {
        /* what is still registered is unregistered with the engine */
        cr__shm_fence_revoke_owner(st);
        cr__shm_proof_detach(st->engine);
    }
    free(st);
}

static int shm_create(cr_xfer_engine_t *engine, const cr__xfer_config_t *cfg,
                      cr__seg_desc_t *local, void **state)
{
    shm_state_t *st = calloc(1, sizeof *st);
    if (!st)
        return -ENOMEM;
    st->engine = engine;
    const char *thp = getenv("CRESCENT_SHM_THP");
    st->thp = !(thp && !strcmp(thp, "0"));
    const char *map = getenv("CRESCENT_SHM_MAP");
    st->map = !(map && !strcmp(map, "0"));
    /* Yama ptrace_scope 1 (Ubuntu's default) lets only ancestors read a
     * process's memory, so peers fall back to the network. Opt-in: declare any
     * process of ours a permitted "tracer" (same uid is still required). */
    const char *any = getenv("CRESCENT_SHM_PTRACER_ANY");
    if (any && !strcmp(any, "1") && prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0)
        CR_LOG_DEBUG(SHM_LOG, "prctl(PR_SET_PTRACER): %s", strerror(errno)); /* no Yama */
    cr__seg_host_id(st->host_id);
    st->net_ino = shm_ns_inode("/proc/self/ns/net");
    if (local && !local->host_id[0]) {
        memcpy(local->host_id, st->host_id, sizeof st->host_id);
        local->pid = (int32_t)getpid();
    }
    pthread_mutex_init(&st->lock, NULL);
    pthread_cond_init(&st->cond, NULL);
    pthread_mutex_init(&st->peers_lock, NULL);
    if (engine) {
        int prc = cr__shm_proof_attach(engine, cr__xfer_engine_auth(engine));
        if (prc) {
            CR_LOG_WARN(SHM_LOG, "ownership proof listener: %s", strerror(-prc));
            shm_destroy(st);
            return prc;
        }
        st->proof_attached = 1;
    }
    unsigned nt = cfg && cfg->io_threads ? cfg->io_threads : 2;
    if (nt > SHM_MAX_THREADS)
        nt = SHM_MAX_THREADS;
    for (unsigned i = 0; i < nt; i++) {
        int rc = pthread_create(&st->threads[i], NULL, shm_worker, st);
        if (rc) {
            CR_LOG_ERROR(SHM_LOG, "pthread_create: %s", strerror(rc));
            shm_destroy(st);
            return -rc;
        }
        char tname[16];
        snprintf(tname, sizeof tname, "cr-shm-%u", i % 1000u); /* provably fits: -Wformat-truncation */
        pthread_setname_np(st->threads[i], tname);
        st->n_threads++;
    }
    *state = st;
    return 0;
}

const struct cr_xfer_transport_ops cr__xfer_shm_ops = {
    .name = "shm",
    .create = shm_create,
    .destroy = shm_destroy,
    .can_reach = shm_can_reach,
    .submit = shm_submit,
    .notify = NULL, /* notifications travel on the engine's control channel */
    .peer_forget = shm_peer_forget,
    .mem_registered = shm_mem_registered,
    .mem_unregistered = shm_mem_unregistered,
    .help = shm_help,
    .crc_pieces = (1u << CR_XFER_READ) | (1u << CR_XFER_WRITE),
};
