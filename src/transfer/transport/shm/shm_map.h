/* The mapped path of the shm transport: a peer's registered buffer that is
 * backed by a sealed shared-memory file (cr_xfer_mem_alloc_shared) is
 * mapped into the initiator once, and its transfers are then user-space
 * copies that hash what they copy (cr__crc32c_copy_raw) and store around
 * the cache, instead of process_vm_readv/writev.
 *
 * Why: the kernel's cross-process copy pins every remote page and copies
 * with ordinary stores; out of cache it moved a 64 KiB block in ~13.5 us
 * here where the streamed user-space copy takes ~10 us *with* its checksum
 * (bench/te/shm_copy_cost.c, docs/architecture/shm.md).
 *
 * Finding the file needs no new protocol and no trust in metadata: the
 * initiator reads /proc/<pid>/maps for the VMA that backs the proven range
 * (the kernel's word on which file and offset lie at that address), finds
 * the descriptor of that file among /proc/<pid>/fd, takes a copy with
 * pidfd_getfd through the pidfd that pins the peer, and checks it is the
 * same file, opened read-write and sealed against shrinking (so a mapping
 * can never SIGBUS). Every step needs the same ptrace access that
 * process_vm_* needs. Anything else (anonymous memory, a private or
 * unsealed mapping, an older kernel) keeps the process_vm path. */
#ifndef CR_TRANSFER_SHM_MAP_H
#define CR_TRANSFER_SHM_MAP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>

#define CR__SHM_HUGE (2ull << 20) /* x86-64 transparent huge page (one PMD entry) */
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1; older kernels answer EINVAL, which is fine */
#endif

/* One mapped peer range; refs: one per shm range that holds it, one per
 * copy in flight. */
typedef struct cr__shm_map {
    atomic_int refs;
    void *base;       /* the mmap */
    size_t maplen;
    unsigned char *at; /* where the range's first byte (addr) is mapped here */
    uint64_t addr, len;
    _Atomic uint64_t *populated; /* bit k: the k-th 2 MiB of the mmap has page-table entries */
} cr__shm_map_t;

/* For each i < n, maps [addr[i], addr[i] + len[i]) of process pid (pinned
 * by pidfd) if a sealed shared file backs it: out[i] = map (refs 1) or
 * NULL. Returns how many were mapped. Never fails harder than that. */
size_t cr__shm_map_ranges(pid_t pid, int pidfd, const uint64_t *addr, const uint64_t *len,
                          size_t n, cr__shm_map_t **out);

/* Before a copy touches [p, p+len) of m's mapping: enters the page-table
 * entries of the 2 MiB regions it spans that were never touched, one read
 * fault per 64 KiB (the kernel maps the pages around it), instead of one
 * write fault per 4 KiB page during the copy (~7x cheaper here; the file's
 * pages exist already). */
void cr__shm_map_prepare(cr__shm_map_t *m, const unsigned char *p, size_t len);

void cr__shm_map_ref(cr__shm_map_t *m);
/* Drops one reference; the last one unmaps. NULL is a no-op. */
void cr__shm_map_unref(cr__shm_map_t *m);

#endif
