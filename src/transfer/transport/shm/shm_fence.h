/* Revocation of shm access (docs/architecture/shm.md, "Unregister").
 *
 * shm is one-sided: initiators copy into and out of a target's memory
 * without the target's engine seeing the request, so the serving side's pins
 * (cr__xfer_mem_pin) cannot stop them. The fence is what the target revokes
 * instead: a table in a sealed shared-memory file, one 64-byte slot per
 * registered range, that every initiator maps and consults on every copy.
 *
 * A slot is one 64-bit word: the range's generation in the high 32 bits
 * (odd while registered, even once revoked or free) and the number of copies
 * in flight into or out of the range in the low 32 bits. An initiator that
 * learned (slot, gen) of a range from the ownership proof (shm_proof.h)
 * brackets each copy with
 *
 *     enter: old = fetch_add(word, 1); if (old >> 32 != gen) undo, -EFAULT
 *     exit:  fetch_sub(word, 1)
 *
 * and the target's cr_xfer_mem_unregister revokes with fetch_add(word,
 * 1 << 32) and then waits until the count is 0. Both are one atomic
 * read-modify-write of the same word, so either the copy entered first (the
 * revocation sees it counted and waits for its exit) or the revocation came
 * first (the copy sees the new generation and backs out): once unregister
 * returns, no copy of any initiator touches the range.
 *
 * The wait is bounded by CR__SHM_FENCE_WAIT_MS: an initiator killed between
 * enter and exit never exits (its copy is over; the slot is then never
 * reused) and one stopped there (SIGSTOP, a debugger) would finish its
 * copy, at most one chunk (4 MiB), when it resumes. Both are logged.
 *
 * The table belongs to the process, like the proof listener that hands it
 * out (one table for all engines of a process): target-side calls are
 * process-wide and thread-safe. It is created by the first shm engine and
 * kept until the process exits (initiators may still hold it mapped;
 * a forked child that starts an engine makes its own). */
#ifndef CR_TRANSFER_SHM_FENCE_H
#define CR_TRANSFER_SHM_FENCE_H

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>

#define CR__SHM_FENCE_SLOTS 65536u /* ranges registered at once, all engines of a process */
#define CR__SHM_FENCE_BYTES ((uint64_t)CR__SHM_FENCE_SLOTS * 64u) /* the file's size */
#define CR__SHM_FENCE_WAIT_MS 5000 /* unregister's bound on waiting for copies in flight */
#define CR__SHM_FENCE_GEN1 (1ull << 32) /* one generation step of a slot word */

typedef struct cr__shm_fence_slot {
    _Atomic uint64_t word; /* gen << 32 | copies in flight */
    uint8_t pad[56];       /* one cache line per slot: copies to other ranges do not share it */
} cr__shm_fence_slot_t;
_Static_assert(sizeof(cr__shm_fence_slot_t) == 64, "fence slot is one cache line");

/* A registered range as the proof hands it out: its fence slot and the
 * generation it has while registered. */
typedef struct cr__shm_range {
    uint64_t addr, len;
    uint32_t slot, gen;
} cr__shm_range_t;

/* ---- target side (process-wide) ------------------------------------------ */

/* Creates the table if this process has none. Returns 0 or -errno. */
int cr__shm_fence_init(void);
/* The table's fd (for the proof to pass to initiators), or -1. */
int cr__shm_fence_fd(void);
/* [addr, addr + len) was registered by owner (an engine): gives it a slot
 * with a new odd generation. Returns 0, -ENOSPC (table full: initiators
 * will not reach the range over shm) or -ENODEV (no table). */
int cr__shm_fence_add(const void *owner, uint64_t addr, uint64_t len);
/* owner unregistered [addr, addr + len): revokes its slot and waits until
 * no copy is in flight in it (bounded, see above). Unknown ranges: no-op. */
void cr__shm_fence_revoke(const void *owner, uint64_t addr, uint64_t len);
/* The same for every range of owner (an engine being destroyed). */
void cr__shm_fence_revoke_owner(const void *owner);
/* The ranges registered now, with slots and generations (*out malloc'd,
 * caller frees, unsorted; *n may be 0). Returns 0 or -ENOMEM. */
int cr__shm_fence_live(cr__shm_range_t **out, uint32_t *n);

/* ---- initiator side ------------------------------------------------------ */

/* Maps a peer's table from fd (received with its proof; the caller keeps
 * and closes fd) after checking it is one: the right size and sealed
 * against shrinking (so the mapping can never SIGBUS). Returns the slots
 * (unmap with cr__shm_fence_unmap) and the file's identity, or NULL. */
cr__shm_fence_slot_t *cr__shm_fence_map(int fd, uint64_t *dev, uint64_t *ino);
void cr__shm_fence_unmap(cr__shm_fence_slot_t *slots);

/* 1 if the range of (slot, gen) is still registered (a hint: it may be
 * revoked right after; only enter decides). */
static inline int cr__shm_fence_current(cr__shm_fence_slot_t *s, uint32_t slot, uint32_t gen)
{
    return (uint32_t)(atomic_load_explicit(&s[slot].word, memory_order_relaxed) >> 32) == gen;
}

/* Before a copy into or out of the range of (slot, gen): 0 (the copy may
 * run; call cr__shm_fence_exit after it) or -EFAULT (it was unregistered). */
static inline int cr__shm_fence_enter(cr__shm_fence_slot_t *s, uint32_t slot, uint32_t gen)
{
    uint64_t old = atomic_fetch_add_explicit(&s[slot].word, 1, memory_order_seq_cst);
    if ((uint32_t)(old >> 32) == gen)
        return 0;
    atomic_fetch_sub_explicit(&s[slot].word, 1, memory_order_release);
    return -EFAULT;
}

/* After the copy that cr__shm_fence_enter admitted has finished. */
static inline void cr__shm_fence_exit(cr__shm_fence_slot_t *s, uint32_t slot)
{
    atomic_fetch_sub_explicit(&s[slot].word, 1, memory_order_release);
}

#endif
