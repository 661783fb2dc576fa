/* shm without trust in metadata (issue 11, attack 3; docs/security.md).
 *
 * A descriptor's pid and buffers are only claims: anyone who can write the
 * metadata could point them at an unrelated process of the same user. Before
 * the shm transport makes any process_vm_* call against a pid, the process
 * behind that pid must prove it is a crescent engine and say itself which
 * ranges it registered:
 *
 *   - each process with shm engines listens on the abstract Unix socket
 *     "\0crescent-shm-v2-<pid>" (its own pid; one listener per process,
 *     shared by its engines: a per-process resource, hence the one
 *     process-wide registry in shm_proof.c);
 *   - the initiator connects and reads SO_PEERCRED: the kernel's word for
 *     which process listens there; it must be exactly the descriptor's pid
 *     and our uid (an impostor can bind the name, but not with the victim's
 *     pid);
 *   - with security on, both sides then run the cluster-key handshake
 *     (context "shm");
 *   - the peer sends the ranges its engines registered (u32 LE count, then
 *     count x {u64 addr, u64 len, u32 fence slot, u32 generation} LE) and,
 *     attached to the first bytes (SCM_RIGHTS), the fd of its revocation
 *     table (shm_fence.h); the initiator confines every copy to descriptor
 *     buffers that lie inside those ranges and checks the range's slot
 *     around every copy. v1 (no slot, no table) is not spoken: a peer of
 *     an older build is not reached over shm (its copies could not be
 *     revoked), it is reached over another transport.
 *
 * The listener serves one connection at a time, each bounded by
 * CR__SHM_PROOF_TIMEOUT_MS, and refuses other uids. */
#ifndef CR_TRANSFER_SHM_PROOF_H
#define CR_TRANSFER_SHM_PROOF_H

#include <stdint.h>
#include <sys/types.h>

#include "common/auth/auth.h"
#include "transfer/transport/shm/shm_fence.h" /* cr__shm_range_t */
#include "transfer/transport/transport.h"

#define CR__SHM_PROOF_TIMEOUT_MS 1000

/* Adds engine e to this process's listener (started with the first
 * engine, after the fence table, shm_fence.h). auth: the key peers must
 * prove (the first engine's; engines of one process share one cluster).
 * Returns 0 or -errno. */
int cr__shm_proof_attach(cr_xfer_engine_t *e, const cr__auth_t *auth);
/* Removes e (the listener stops with the last engine; the fence table
 * stays, shm_fence.h). */
void cr__shm_proof_detach(cr_xfer_engine_t *e);

/* Parses a ranges reply (count + entries; exactly len bytes; slots inside
 * the table, generations odd). Returns 0 with *out (malloc'd, sorted by
 * addr) and *n, -EBADMSG, -ENOMEM. Fuzzed by fuzz_shm_proof.c. */
int cr__shm_proof_parse(const uint8_t *buf, size_t len, cr__shm_range_t **out, uint32_t *n);

/* Proves that process pid is a crescent engine (and a member, with auth)
 * and returns the ranges it registered, sorted by addr (*out malloc'd,
 * caller frees; *n may be 0), and the fd of its fence table (*fence_fd,
 * caller closes; map it with cr__shm_fence_map). Returns 0, -EACCES (no
 * engine behind pid, it failed the proof, or sent no table),
 * -ECONNREFUSED/-ENOENT (nothing listens), -ETIMEDOUT, -ENOMEM. */
int cr__shm_proof_fetch(pid_t pid, const cr__auth_t *auth, cr__shm_range_t **out, uint32_t *n,
                        int *fence_fd);

#endif
