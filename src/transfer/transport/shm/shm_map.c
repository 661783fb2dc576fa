/* The shm transport's mapped path (shm_map.h) and the shared memory it maps
 * (cr_xfer_mem_alloc_shared). */
#include "transfer/transport/shm/shm_map.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/log.h"
#include "common/mem_avail.h"
#include "common/tsan.h"
#include "crescent/transfer.h"

#define MAP_LOG "shm"
#define MAPS_MAX (64u << 20) /* /proc/<pid>/maps larger than this is not read */
#define PAGE 4096u
#define REGION (2u << 20) /* populated in steps of this */
#define FAULT_AROUND (64u << 10) /* the kernel's default fault_around_bytes */

/* mmap(NULL, len, rw, MAP_SHARED, fd, off), but at an address congruent to
 * off modulo 2 MiB: the only placement where the kernel can map the file's
 * huge pages with one page-table entry per 2 MiB (PMD). Elsewhere every
 * 4 KiB page gets its own entry, and on a guest whose hypervisor shadows
 * page tables each of them costs a trap on first access: 6 us per page on
 * the Zen 5 guest of 2026-11-29, against 0.2-0.6 us aligned over a
 * collapsed file (docs/architecture/shm.md). Returns MAP_FAILED with errno
 * set on failure. */
static void *map_shared_aligned(int fd, size_t len, uint64_t off)
{
    if (len > SIZE_MAX - CR__SHM_HUGE) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    unsigned char *r = mmap(NULL, len + CR__SHM_HUGE, PROT_NONE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        return MAP_FAILED;
    uintptr_t want = (uintptr_t)(off & (CR__SHM_HUGE - 1));
    uintptr_t a = ((uintptr_t)r & ~(uintptr_t)(CR__SHM_HUGE - 1)) + want;
    if (a < (uintptr_t)r)
        a += CR__SHM_HUGE;
    void *p = mmap((void *)a, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)off);
    if (p == MAP_FAILED) {
        int e = errno;
        munmap(r, len + CR__SHM_HUGE);
        errno = e;
        return MAP_FAILED;
    }
    /* the reservation's slack on either side */
    if (a > (uintptr_t)r)
        munmap(r, a - (uintptr_t)r);
    size_t tail = (size_t)((uintptr_t)r + len + CR__SHM_HUGE - (a + len));
    if (tail)
        munmap((void *)(a + len), tail);
    return p;
}

void cr__shm_map_ref(cr__shm_map_t *m)
{
    atomic_fetch_add(&m->refs, 1);
}

void cr__shm_map_unref(cr__shm_map_t *m)
{
    if (m && atomic_fetch_sub(&m->refs, 1) == 1) {
        munmap(m->base, m->maplen);
        free(m->populated);
        free(m);
    }
}

void cr__shm_map_prepare(cr__shm_map_t *m, const unsigned char *p, size_t len)
{
    if (!len)
        return;
    size_t first = (size_t)(p - (unsigned char *)m->base) / REGION;
    size_t last = (size_t)(p + len - 1 - (unsigned char *)m->base) / REGION;
    for (size_t k = first; k <= last; k++) {
        uint64_t bit = 1ull << (k % 64);
        if (atomic_load_explicit(&m->populated[k / 64], memory_order_relaxed) & bit)
            continue;
        size_t off = k * REGION, n = m->maplen - off < REGION ? m->maplen - off : REGION;
        /* one read per FAULT_AROUND bytes: the kernel maps the file's pages
         * around each read fault (fault_around_bytes, 64 KiB by default),
         * writable since a shared file needs no write notification, so the
         * copy takes no fault at all (17 ms per 512 MiB here, against 23-42
         * ms for MADV_POPULATE_READ, whose page pinning also contends on the
         * LRU lock, and ~125 ms of write faults page by page) */
        const volatile unsigned char *q = (const unsigned char *)m->base + off;
        /* the bytes read do not matter, only the faults: another worker may
         * be copying into this region already (it found the bit unset as
         * well), which TSan would report as a race with these reads */
        CR_TSAN_IGNORE_BEGIN();
        for (size_t o = 0; o < n; o += FAULT_AROUND)
            (void)q[o];
        CR_TSAN_IGNORE_END();
        atomic_fetch_or(&m->populated[k / 64], bit);
    }
}

/* /proc/<pid>/maps, NUL-terminated (malloc'd), or NULL. */
static char *read_maps(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 64u << 10, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (cap - n < 2) {
            char *nb = cap < MAPS_MAX ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r < 0) {
                free(buf);
                buf = NULL;
            }
            break;
        }
        n += (size_t)r;
    }
    close(fd);
    if (buf)
        buf[n] = 0;
    return buf;
}

typedef struct vma {
    uint64_t start, end, off;
    dev_t dev;
    ino_t ino;
} vma_t;

/* The shared, read-write, file-backed VMA that holds all of [addr, addr+len)
 * in maps, or 0. */
static int find_vma(const char *maps, uint64_t addr, uint64_t len, vma_t *out)
{
    for (const char *l = maps; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        uint64_t s, e, off;
        unsigned maj, min;
        unsigned long long ino;
        char perms[5];
        if (sscanf(l, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %llu", &s, &e, perms, &off,
                   &maj, &min, &ino) != 7)
            continue;
        if (addr < s || addr >= e)
            continue;
        if (len > e - addr || perms[0] != 'r' || perms[1] != 'w' || perms[3] != 's' || !ino)
            return 0;
        *out = (vma_t){.start = s, .end = e, .off = off, .dev = makedev(maj, min),
                       .ino = (ino_t)ino};
        return 1;
    }
    return 0;
}

/* The number of a descriptor of pid open on (dev, ino), or -1. */
static int find_fd(pid_t pid, dev_t dev, ino_t ino)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int found = -1;
    struct dirent *de;
    while (found < 0 && (de = readdir(d))) {
        char *end;
        long n = strtol(de->d_name, &end, 10);
        struct stat st;
        if (*end || n < 0 || n > INT32_MAX)
            continue;
        if (fstatat(dirfd(d), de->d_name, &st, 0) == 0 && S_ISREG(st.st_mode) &&
            st.st_ino == ino && st.st_dev == dev)
            found = (int)n;
    }
    closedir(d);
    return found;
}

static int pidfd_getfd_(int pidfd, int fd)
{
#ifdef SYS_pidfd_getfd
    return (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
#else
    (void)pidfd;
    (void)fd;
    errno = ENOSYS;
    return -1;
#endif
}

/* Maps [addr, addr+len) of pid through its VMA v, or NULL. */
static cr__shm_map_t *map_one(pid_t pid, int pidfd, const vma_t *v, uint64_t addr, uint64_t len)
{
    int pfd = find_fd(pid, v->dev, v->ino);
    if (pfd < 0)
        return NULL;
    int fd = pidfd_getfd_(pidfd, pfd);
    if (fd < 0) {
        CR_LOG_DEBUG(MAP_LOG, "pid %d: pidfd_getfd: %s (process_vm path)", (int)pid,
                     strerror(errno));
        return NULL;
    }
    cr__shm_map_t *m = NULL;
    struct stat st;
    uint64_t foff = v->off + (addr - v->start); /* file offset of addr */
    uint64_t pg = foff & ~(uint64_t)(PAGE - 1);
    int seals = fcntl(fd, F_GET_SEALS);
    int acc = fcntl(fd, F_GETFL);
    /* the descriptor may have been replaced between find_fd and the copy:
     * it must still be the file that backs the range */
    if (fstat(fd, &st) != 0 || st.st_ino != v->ino || st.st_dev != v->dev || seals < 0 ||
        !(seals & F_SEAL_SHRINK) || acc < 0 || (acc & O_ACCMODE) != O_RDWR ||
        (uint64_t)st.st_size < foff || (uint64_t)st.st_size - foff < len)
        goto out;
    size_t maplen = (size_t)(foff - pg + len);
    void *base = map_shared_aligned(fd, maplen, pg);
    if (base == MAP_FAILED) {
        CR_LOG_DEBUG(MAP_LOG, "pid %d: mmap %zu bytes: %s (process_vm path)", (int)pid, maplen,
                     strerror(errno));
        goto out;
    }
    madvise(base, maplen, MADV_DONTFORK); /* a child must not write peers' memory */
    size_t words = (maplen + 64ull * REGION - 1) / (64ull * REGION);
    if (!(m = malloc(sizeof *m)) || !(m->populated = calloc(words, sizeof *m->populated))) {
        free(m);
        m = NULL;
        munmap(base, maplen);
        goto out;
    }
    atomic_init(&m->refs, 1);
    m->base = base;
    m->maplen = maplen;
    m->at = (unsigned char *)base + (foff - pg);
    m->addr = addr;
    m->len = len;
out:
    close(fd);
    return m;
}

size_t cr__shm_map_ranges(pid_t pid, int pidfd, const uint64_t *addr, const uint64_t *len,
                          size_t n, cr__shm_map_t **out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    if (pidfd < 0 || !n)
        return 0;
    char *maps = read_maps(pid);
    if (!maps)
        return 0;
    size_t mapped = 0;
    for (size_t i = 0; i < n; i++) {
        vma_t v;
        if (len[i] && find_vma(maps, addr[i], len[i], &v) &&
            (out[i] = map_one(pid, pidfd, &v, addr[i], len[i])))
            mapped++;
    }
    free(maps);
    return mapped;
}

/* ---- the memory peers can map ------------------------------------------- */

typedef struct shared_alloc {
    struct shared_alloc *next;
    void *addr;
    size_t len;
    int fd;
} shared_alloc_t;

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static shared_alloc_t *shared_list; /* guarded by shared_lock */

void *cr_xfer_mem_alloc_shared(size_t len)
{
    if (!len || len > SIZE_MAX - 2 * PAGE) {
        errno = EINVAL;
        return NULL;
    }
    len = (len + PAGE - 1) & ~(size_t)(PAGE - 1);
    /* every page is touched below: a size the host cannot back is refused
     * now, not by the OOM killer halfway through */
    if (cr__mem_prefault_check(len, "cr_xfer_mem_alloc_shared", "the size asked")) {
        errno = ENOMEM;
        return NULL;
    }
    shared_alloc_t *a = malloc(sizeof *a);
    if (!a)
        return NULL;
    int fd = memfd_create("crescent-shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        goto fail;
    if (ftruncate(fd, (off_t)len) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        goto fail_fd;
    void *p = map_shared_aligned(fd, len, 0);
    if (p == MAP_FAILED)
        goto fail_fd;
    madvise(p, len, MADV_DONTFORK);
    madvise(p, len, MADV_HUGEPAGE); /* honoured where shmem huge pages are enabled */
    /* The file's pages made huge wherever 2 MiB of it can be (Linux >= 6.1,
     * whatever shmem_enabled says): a peer that maps it aligned (map_one)
     * then takes one page-table entry per 2 MiB, not 512. MADV_COLLAPSE
     * refuses a range with no page at all, and fills the holes of one with
     * a page, so one byte per 2 MiB is written first: 1.1 s per 512 MiB
     * on the Zen 5 guest of 2026-11-29, against 1.6 s to write every 4 KiB
     * page and 0.8-1.5 s more to collapse them. CRESCENT_SHM_THP=0 leaves
     * the pages small. Failure only costs speed. */
    const char *thp = getenv("CRESCENT_SHM_THP");
    if (len >= CR__SHM_HUGE && !(thp && !strcmp(thp, "0"))) {
        size_t hl = len & ~(size_t)(CR__SHM_HUGE - 1);
        for (size_t off = 0; off < hl; off += CR__SHM_HUGE)
            ((volatile unsigned char *)p)[off] = 0;
        if (madvise(p, hl, MADV_COLLAPSE) != 0)
            CR_LOG_DEBUG(MAP_LOG, "madvise(COLLAPSE, %zu MiB): %s", hl >> 20, strerror(errno));
    }
    /* every page allocated now (those the collapse made already are), so
     * no transfer faults in fresh memory and a shortage shows here rather
     * than in a peer's copy */
    for (size_t off = 0; off < len; off += PAGE)
        ((volatile unsigned char *)p)[off] = 0;
    a->addr = p;
    a->len = len;
    a->fd = fd; /* stays open: peers find the file among our descriptors */
    pthread_mutex_lock(&shared_lock);
    a->next = shared_list;
    shared_list = a;
    pthread_mutex_unlock(&shared_lock);
    return p;
fail_fd: {
    int e = errno;
    close(fd);
    errno = e;
}
fail: {
    int e = errno;
    free(a);
    errno = e;
}
    return NULL;
}

int cr_xfer_mem_free_shared(void *addr)
{
    pthread_mutex_lock(&shared_lock);
    shared_alloc_t **pp = &shared_list;
    while (*pp && (*pp)->addr != addr)
        pp = &(*pp)->next;
    shared_alloc_t *a = *pp;
    if (a)
        *pp = a->next;
    pthread_mutex_unlock(&shared_lock);
    if (!a)
        return addr ? -ENOENT : 0;
    munmap(a->addr, a->len);
    close(a->fd);
    free(a);
    return 0;
}
