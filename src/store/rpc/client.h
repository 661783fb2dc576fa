/* Blocking RPC client for the store control plane (protocol.h).
 *
 * One cr__rpc_client_t = one TCP connection to the master, opened lazily
 * and reopened after a failure. Calls are serialised by an internal mutex
 * (thread-safe, one request in flight per client); a caller wanting
 * parallel calls uses several clients.
 *
 * Retry rule: when a call fails because the connection broke (EOF/reset,
 * write error) or could not be opened, the client closes the socket, and
 * for idempotent types (PING, MOUNT, UNMOUNT, GET_REPLICA_LIST, EXIST,
 * GET_SIZE, VALIDATE and their batch forms) reconnects and resends once.
 * Non-idempotent calls (PUT_*, REMOVE*) are not resent (they could have
 * been applied): they fail with CR_E_RPC_FAIL and the next call reconnects.
 * A timeout always closes the connection (a late reply must never be
 * matched to a later request).
 */
#ifndef CR_STORE_RPC_CLIENT_H
#define CR_STORE_RPC_CLIENT_H

#include <stdatomic.h>
#include <stdint.h>

#include "common/auth/auth.h"
#include "store/rpc/protocol.h"

typedef struct cr__rpc_client cr__rpc_client_t;

/* Creates a client for the master at addr ("host:port"; copied). No
 * connection is made yet. connect_timeout_ms bounds connecting,
 * call_timeout_ms bounds one whole call (send + wait for the reply).
 * Returns 0 and *out, -EINVAL (malformed addr, timeouts <= 0) or -ENOMEM.
 * Free with cr__rpc_client_destroy(). */
int cr__rpc_client_create(const char *addr, int connect_timeout_ms, int call_timeout_ms,
                          cr__rpc_client_t **out);

/* Security on: every connection this client opens proves membership with
 * auth (the master must prove it too) before its first request; a refusal
 * makes calls fail with CR_E_ILLEGAL_CLIENT. auth must outlive the client;
 * NULL = security off. Call before the first call (closes any connection). */
void cr__rpc_client_set_auth(cr__rpc_client_t *c, const cr__auth_t *auth);

/* TLS on (common/tls/tls.h): every connection completes a TLS handshake
 * with mutual certificates (bounded by connect_timeout_ms) before anything
 * else; a master whose certificate is not of the CA, or that refuses ours,
 * makes calls fail with CR_E_ILLEGAL_CLIENT. Combines with set_auth. tls
 * must outlive the client; NULL = plain TCP. Call before the first call. */
struct cr__tls;
void cr__rpc_client_set_tls(cr__rpc_client_t *c, const struct cr__tls *tls);

/* Sends req (its req_id is ignored: the client assigns one) and waits for
 * the matching reply, decoded into *reply (caller frees with
 * cr__rpc_msg_free; untouched on failure). Returns 0 when a reply was
 * received — the master's verdict is then in reply->status and in each
 * item's status — or: -EINVAL (req does not encode: bad type, a bound
 * exceeded), -ENOMEM, CR_E_RPC_FAIL (cannot connect, connection lost,
 * timeout, malformed reply or a reply of the wrong type/id),
 * CR_E_ILLEGAL_CLIENT (security on: authentication refused either way). */
int cr__rpc_client_call(cr__rpc_client_t *c, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply);

/* cr__rpc_client_call that runs during(arg) exactly once in the calling
 * thread: right after the request went out, while the master works on it
 * (or before returning, when it never went out). For work that overlaps
 * the round trip without a thread handoff; it must not call this client. */
int cr__rpc_client_call_during(cr__rpc_client_t *c, const cr__rpc_msg_t *req,
                               cr__rpc_msg_t *reply, void (*during)(void *), void *arg);

/* cr__rpc_client_call_during with flags: CR__RPC_CALL_NOSPIN sleeps on the
 * reply at once whatever set_spin says (the caller has work of its own in
 * flight that needs the CPU the spin would take). */
#define CR__RPC_CALL_NOSPIN 1u
int cr__rpc_client_call_flags(cr__rpc_client_t *c, const cr__rpc_msg_t *req,
                              cr__rpc_msg_t *reply, void (*during)(void *), void *arg,
                              unsigned flags);

/* Points the client at another master ("host:port"; HA: the new leader);
 * an open connection to the old one is closed. Returns 0 or -EINVAL. */
int cr__rpc_client_set_addr(cr__rpc_client_t *c, const char *addr);

/* HA fencing: epoch points at a floor shared by the caller's clients.
 * Requests carry it; a reply with a higher epoch raises it; a reply with a
 * lower non-zero epoch (a deposed leader still answering) is refused: the
 * call fails with CR_E_RPC_FAIL and the connection is closed. */
void cr__rpc_client_set_epoch(cr__rpc_client_t *c, _Atomic uint32_t *epoch);

/* Busy-polls up to us microseconds (from the send) for each reply before
 * sleeping on the socket, while the calls come back within that budget (a
 * call slower than it makes the next one sleep at once). Costs the
 * caller's CPU for up to us per call; saves the wakeup of a sleeping
 * thread on a short call. 0 = off (the default). Plain TCP only (TLS
 * replies are always slept on). */
void cr__rpc_client_set_spin(cr__rpc_client_t *c, unsigned us);

/* Pipelined calls: several requests in flight on one connection, their
 * replies received in the order the requests were sent (the master serves
 * a connection's requests in order, one at a time). For requests whose
 * order matters and whose round trips should overlap the caller's work
 * (a reserved put's commits, store/client/ops.c).
 *
 * cr__rpc_pipe_begin holds c (no other call of any thread runs on it)
 * until cr__rpc_pipe_end. A send goes out at once (nothing is retried:
 * the caller repeats what failed with cr__rpc_client_call if the request
 * allows it); at most CR__RPC_PIPE_MAX replies may be outstanding
 * (-ENOSPC beyond). Each reply has the call timeout from its send.
 * After any failure the connection is closed and every later send and
 * receive of the pipe fails with the same error (a request must not go
 * out on a new connection after ones whose fate is unknown). Unreceived
 * replies at cr__rpc_pipe_end close the connection. */
#define CR__RPC_PIPE_MAX 8
typedef struct cr__rpc_pipe {
    cr__rpc_client_t *c;
    int err;    /* sticky: the first failure */
    int opened; /* connected (or checked) for this pipe */
    size_t sent, got;
    uint64_t ids[CR__RPC_PIPE_MAX];
    uint16_t types[CR__RPC_PIPE_MAX];
    uint64_t deadlines[CR__RPC_PIPE_MAX];
} cr__rpc_pipe_t;

void cr__rpc_pipe_begin(cr__rpc_client_t *c, cr__rpc_pipe_t *p);
/* Sends req (its req_id is assigned here). Returns 0, -EINVAL (does not
 * encode), -ENOMEM, -ENOSPC (CR__RPC_PIPE_MAX replies outstanding; the
 * pipe stays usable), CR_E_RPC_FAIL or CR_E_ILLEGAL_CLIENT (cannot
 * connect, connection lost: sticky). */
int cr__rpc_pipe_send(cr__rpc_pipe_t *p, const cr__rpc_msg_t *req);
/* The reply to the oldest request not yet received, into *reply (caller
 * frees with cr__rpc_msg_free), busy-polled for as set_spin says unless
 * flags has CR__RPC_CALL_NOSPIN. Returns 0, -ENOENT (none outstanding),
 * CR_E_RPC_FAIL (lost, timed out, malformed, a deposed leader's: sticky)
 * or -ENOMEM. A failed receive still counts that request as received. */
int cr__rpc_pipe_recv(cr__rpc_pipe_t *p, cr__rpc_msg_t *reply, unsigned flags);
void cr__rpc_pipe_end(cr__rpc_pipe_t *p);

/* Closes and frees; NULL is a no-op. Must not race with a call. */
void cr__rpc_client_destroy(cr__rpc_client_t *c);

#endif
