/* Store RPC server loop: accepts TCP connections, reads frames
 * (protocol.h), calls one handler per request and writes its reply.
 *
 * Threads: n_threads event loops (epoll), each owning the connections it
 * accepted; the handler is called from those threads, concurrently, and
 * must be thread-safe. Each connection processes one request at a time and
 * stops reading until its reply is written (bounded memory per connection).
 *
 * Bad input: a frame with a bad magic/version/oversized length closes that
 * connection; a payload that does not decode gets an error reply
 * (CR_E_INVALID_PARAMS) and the connection stays open. A partial frame
 * older than frame_timeout_ms and a connection idle longer than
 * idle_timeout_ms are closed. Connections over max_conns are accepted and
 * closed at once. None of this affects other connections.
 *
 * Floods: a connection must complete its first frame (with security on:
 * its authentication) within first_frame_timeout_ms. Such "pending"
 * connections are bounded by max_pending: when a new one would pass the
 * bound, the oldest pending connection is closed (a legitimate client sends
 * its first frame at once, so idle floods displace only each other). One
 * source address may hold at most max_conns_per_source connections and at
 * most max_buffered_bytes_per_source bytes of partial requests.
 *
 * TLS (tls != NULL): the handshake runs in the event loop (non-blocking);
 * a peer without a certificate of the CA, or speaking plain TCP, is closed
 * before any frame is read (counted in auth_refused).
 *
 * Security (auth != NULL): the first frames must be CR__RPC_AUTH_HELLO and
 * CR__RPC_AUTH_PROOF (src/common/auth); any other frame on an
 * unauthenticated connection is answered with CR_E_ILLEGAL_CLIENT and the
 * connection is closed; the handler never sees it. That is decided at the
 * frame header: until the handshake completes only a HELLO or PROOF of its
 * exact size (CR__AUTH_HELLO_LEN, CR__AUTH_PROOF_LEN) is read, so a stranger
 * announcing a big payload is closed before a byte of it is buffered.
 */
#ifndef CR_STORE_RPC_SERVER_H
#define CR_STORE_RPC_SERVER_H

#include <stdint.h>

#include "common/auth/auth.h"
#include "store/rpc/protocol.h"

typedef struct cr__rpc_server cr__rpc_server_t;

/* Fills reply for req. reply arrives zeroed with type = req->type |
 * CR__RPC_REPLY and req_id set; the handler sets status, fields and items,
 * allocating with cr__rpc_msg_alloc(reply, ...). The server encodes, sends
 * and frees it. If the reply does not encode, an error reply with
 * CR_E_INTERNAL_ERROR is sent instead. */
typedef void (*cr__rpc_handler_fn)(void *user, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply);

typedef struct cr__rpc_server_params {
    const char *host;     /* bind address; NULL/"" = any */
    uint16_t port;        /* 0 = ephemeral */
    int n_threads;        /* event loops, default 2 when <= 0 */
    int max_conns;        /* default 1024 when <= 0 */
    int idle_timeout_ms;  /* default 10 min when <= 0 */
    int frame_timeout_ms; /* default 10 s when <= 0 */
    /* Bound on request bytes buffered over all connections (default 1 GiB
     * when 0): a connection whose partial frame would pass it is closed. */
    uint64_t max_buffered_bytes;
    /* The same bound for the connections of one source address (default
     * max_buffered_bytes / 4 when 0): one source cannot hold the whole
     * budget and lock everyone else's big requests out. */
    uint64_t max_buffered_bytes_per_source;
    int first_frame_timeout_ms; /* default 5 s when <= 0 */
    int max_pending;            /* default 128 when <= 0 */
    int max_conns_per_source;   /* default max_conns / 4 (at least 16) when <= 0 */
    const cr__auth_t *auth;     /* NULL = security off; must outlive the server */
    /* TLS on (common/tls/tls.h): each connection first completes a TLS
     * handshake with a certificate of the CA (bounded like a first frame:
     * first_frame_timeout_ms); combines with auth. NULL = plain TCP. */
    const struct cr__tls *tls;
    /* Busy-poll: a loop that served something polls on without sleeping
     * until spin_us microseconds pass without another event (one loop at
     * a time; up to one core while requests keep coming within spin_us).
     * 0 or less = off: the loops sleep in epoll_wait. */
    int spin_us;
    cr__rpc_handler_fn fn;
    void *user;
} cr__rpc_server_params_t;

typedef struct cr__rpc_server_stats {
    uint64_t conns_accepted, conns_rejected, conns_open;
    uint64_t frames, bad_frames, closed_bad_header, closed_timeout, closed_over_budget;
    uint64_t auth_ok, auth_refused;       /* handshakes completed / refused or skipped */
    uint64_t closed_pending, rejected_per_source; /* flood defences */
    /* security on: frames refused at their header on an unauthenticated
     * connection (not a handshake message of its size); also in auth_refused */
    uint64_t closed_unauth_frame;
    uint64_t buffered_bytes; /* request bytes buffered right now */
} cr__rpc_server_stats_t;

/* Binds, listens and starts the loops. Returns 0 and *out, -EINVAL,
 * -EADDRINUSE or another -errno. Stop with cr__rpc_server_stop(). */
int cr__rpc_server_start(const cr__rpc_server_params_t *p, cr__rpc_server_t **out);

/* The bound TCP port. */
uint16_t cr__rpc_server_port(const cr__rpc_server_t *s);

/* Snapshot of the counters (relaxed atomics). */
void cr__rpc_server_stats(const cr__rpc_server_t *s, cr__rpc_server_stats_t *out);

/* Stops the loops (waits for running handlers), closes every connection
 * and frees. NULL is a no-op. */
void cr__rpc_server_stop(cr__rpc_server_t *s);

#endif
