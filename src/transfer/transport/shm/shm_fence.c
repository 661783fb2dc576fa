/* The shm fence: revocation table (shm_fence.h). */
#include "transfer/transport/shm/shm_fence.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"

#define FENCE_LOG "shm"
#define FENCE_POLL_NS 50000 /* between looks at a revoked slot's count */

enum { SLOT_FREE, SLOT_LIVE, SLOT_DRAINING, SLOT_QUARANTINED };

/* The one table of this process (shm_fence.h says why it is global). */
static pthread_mutex_t f_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    pid_t pid; /* the process that made the table (a fork child makes its own) */
    int fd;
    cr__shm_fence_slot_t *slots; /* shared with initiators */
    struct fence_entry {         /* private: whose range a slot is */
        const void *owner;
        uint64_t addr, len;
        int state;
    } *ent;
    uint32_t used; /* slots [0, used) were ever handed out */
} f = {.fd = -1};

static int fence_ready_locked(void)
{
    return f.slots && f.pid == getpid();
}

int cr__shm_fence_init(void)
{
    pthread_mutex_lock(&f_mu);
    int rc = 0;
    if (fence_ready_locked())
        goto out;
    if (f.slots) {
        /* inherited over fork: the mapping was not (MADV_DONTFORK), and
         * this process's ranges are its own */
        if (f.fd >= 0)
            close(f.fd);
        free(f.ent);
        f.slots = NULL;
        f.ent = NULL;
        f.fd = -1;
        f.used = 0;
    }
    int fd = memfd_create("crescent-shm-fence", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        rc = CR__ERRNO();
        goto out;
    }
    struct fence_entry *ent = calloc(CR__SHM_FENCE_SLOTS, sizeof *ent);
    void *p = MAP_FAILED;
    if (!ent)
        rc = -ENOMEM;
    else if (ftruncate(fd, (off_t)CR__SHM_FENCE_BYTES) != 0 ||
             fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
             (p = mmap(NULL, CR__SHM_FENCE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
                 MAP_FAILED)
        rc = CR__ERRNO();
    if (rc) {
        free(ent);
        close(fd);
        goto out;
    }
    madvise(p, CR__SHM_FENCE_BYTES, MADV_DONTFORK); /* see fence_ready_locked */
    f.pid = getpid();
    f.fd = fd;
    f.slots = p;
    f.ent = ent;
    f.used = 0;
out:
    pthread_mutex_unlock(&f_mu);
    if (rc)
        CR_LOG_WARN(FENCE_LOG, "revocation table: %s", strerror(-rc));
    return rc;
}

int cr__shm_fence_fd(void)
{
    pthread_mutex_lock(&f_mu);
    int fd = fence_ready_locked() ? f.fd : -1;
    pthread_mutex_unlock(&f_mu);
    return fd;
}

int cr__shm_fence_add(const void *owner, uint64_t addr, uint64_t len)
{
    pthread_mutex_lock(&f_mu);
    int rc = -ENODEV;
    if (fence_ready_locked()) {
        rc = -ENOSPC;
        /* the lowest free slot: keeps [0, used) dense, which bounds scans */
        for (uint32_t i = 0; i < CR__SHM_FENCE_SLOTS; i++)
            if (f.ent[i].state == SLOT_FREE) {
                f.ent[i] = (struct fence_entry){owner, addr, len, SLOT_LIVE};
                /* even (free) -> odd: a new generation nobody has seen */
                atomic_fetch_add(&f.slots[i].word, CR__SHM_FENCE_GEN1);
                if (i >= f.used)
                    f.used = i + 1;
                rc = 0;
                break;
            }
    }
    pthread_mutex_unlock(&f_mu);
    if (rc == -ENOSPC)
        CR_LOG_RL(CR__LOG_WARN, FENCE_LOG,
                  "revocation table full (%u ranges): %p+%llu not offered over shm",
                  CR__SHM_FENCE_SLOTS, (void *)(uintptr_t)addr, (unsigned long long)len);
    return rc;
}

/* Waits (bounded) until revoked slot i has no copy in flight, then frees
 * it, or keeps it out of use for good if a copy never left. */
static void fence_drain(uint32_t i)
{
    uint64_t deadline = cr__now_ns() + (uint64_t)CR__SHM_FENCE_WAIT_MS * 1000000ull;
    uint32_t busy;
    while ((busy = (uint32_t)atomic_load_explicit(&f.slots[i].word, memory_order_acquire)) &&
           cr__now_ns() < deadline) {
        struct timespec ts = {0, FENCE_POLL_NS};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&f_mu);
    struct fence_entry e = f.ent[i];
    f.ent[i].state = busy ? SLOT_QUARANTINED : SLOT_FREE;
    pthread_mutex_unlock(&f_mu);
    if (busy)
        CR_LOG_ERROR(FENCE_LOG,
                     "unregister of %p+%llu: %u shm copies still in flight after %d ms (an "
                     "initiator killed or stopped mid-copy); returning anyway",
                     (void *)(uintptr_t)e.addr, (unsigned long long)e.len, busy,
                     CR__SHM_FENCE_WAIT_MS);
}

/* Revokes the first live slot of owner from index *from on (the one of
 * [addr, addr + len) unless all) and waits for it. Returns 1 if there was
 * one (*from: the index after it), else 0. */
static int fence_revoke_next(const void *owner, int all, uint64_t addr, uint64_t len,
                             uint32_t *from)
{
    pthread_mutex_lock(&f_mu);
    uint32_t i = *from;
    for (; fence_ready_locked() && i < f.used; i++) {
        struct fence_entry *e = &f.ent[i];
        if (e->state == SLOT_LIVE && e->owner == owner &&
            (all || (e->addr == addr && e->len == len)))
            break;
    }
    int found = fence_ready_locked() && i < f.used;
    if (found) {
        f.ent[i].state = SLOT_DRAINING;
        /* odd -> even: copies that enter from now on back out */
        atomic_fetch_add(&f.slots[i].word, CR__SHM_FENCE_GEN1);
    }
    pthread_mutex_unlock(&f_mu);
    if (found) {
        fence_drain(i);
        *from = i + 1;
    }
    return found;
}

void cr__shm_fence_revoke(const void *owner, uint64_t addr, uint64_t len)
{
    uint32_t from = 0;
    fence_revoke_next(owner, 0, addr, len, &from);
}

void cr__shm_fence_revoke_owner(const void *owner)
{
    uint32_t from = 0;
    while (fence_revoke_next(owner, 1, 0, 0, &from))
        ;
}

int cr__shm_fence_live(cr__shm_range_t **out, uint32_t *n)
{
    pthread_mutex_lock(&f_mu);
    uint32_t k = 0;
    cr__shm_range_t *r = NULL;
    if (fence_ready_locked() && f.used && !(r = malloc(f.used * sizeof *r))) {
        pthread_mutex_unlock(&f_mu);
        return -ENOMEM;
    }
    for (uint32_t i = 0; r && i < f.used; i++)
        if (f.ent[i].state == SLOT_LIVE)
            r[k++] = (cr__shm_range_t){
                .addr = f.ent[i].addr,
                .len = f.ent[i].len,
                .slot = i,
                .gen = (uint32_t)(atomic_load(&f.slots[i].word) >> 32)};
    pthread_mutex_unlock(&f_mu);
    *out = r;
    *n = k;
    return 0;
}

cr__shm_fence_slot_t *cr__shm_fence_map(int fd, uint64_t *dev, uint64_t *ino)
{
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size != CR__SHM_FENCE_BYTES)
        return NULL;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK))
        return NULL;
    void *p = mmap(NULL, CR__SHM_FENCE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return NULL;
    *dev = (uint64_t)st.st_dev;
    *ino = (uint64_t)st.st_ino;
    return p;
}

void cr__shm_fence_unmap(cr__shm_fence_slot_t *slots)
{
    if (slots)
        munmap(slots, CR__SHM_FENCE_BYTES);
}
