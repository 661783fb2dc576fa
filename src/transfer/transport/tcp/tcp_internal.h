/* tcp transport internals (docs/architecture/transfer-core.md, "tcp").
 *
 * Client side, per peer: paths (local NIC, remote NIC), each with
 * conns_per_path connections. Each connection has one sender thread (carves
 * slices from the peer's work queue and writes header+payload with one
 * writev) and one receiver thread (reads responses in order and lands READ
 * payloads straight into the destination; while only READs are in flight
 * it also sends the next READ requests itself, so a streaming READ wakes no
 * sender). A connection's in-flight slices live in its ring between head
 * (receiver) and sent (sender or refilling receiver).
 *
 * Server side: one acceptor thread polls the listeners; each accepted
 * connection is served by one thread.
 *
 * Locks: peer->mu guards the peer's work queue, retry list, connection fds
 * and ring ownership changes; c->tx_mu whoever carves+publishes+sends on
 * connection c (sender, or receiver refilling READs with trylock);
 * st->peers_mu the peer list; st->srv_mu the
 * accepted-connection list. Order: st->peers_mu -> peer->mu -> (engine batch
 * locks inside task completion); c->tx_mu -> peer->mu.
 */
#ifndef CR_TRANSFER_TCP_INTERNAL_H
#define CR_TRANSFER_TCP_INTERNAL_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "transfer/transport/tcp/tcp_wire.h"
#include "transfer/transport/transport.h"

#define TCP_RING 1024u /* in-flight slices per connection (power of 2) */
#define TCP_MAX_PATHS CR_XFER_MAX_NICS
#define TCP_REPROBE_NS 1000000000ull /* a failed path is retried after 1 s */
#define TCP_MAX_SRV_CONNS 1024
#define TCP_SYNC_SLOTS 32                /* caller-run connections per peer */
#define TCP_SYNC_MAX (1ull << 20)        /* largest request a caller runs itself */
#define TCP_DEFAULT_SPIN_US 50           /* busy-poll budget (tcp.c, CRESCENT_TCP_SPIN_US) */
#define TCP_CONNECT_TIMEOUT_MS 5000      /* bound on one connect (and its setup hook) */
#define TCP_WATCHDOG_MS 100              /* period of the watchdog's scan */
#define TCP_STALL_MIN_MS 200             /* stall cut-off: timeout / 4, clamped to these */
#define TCP_STALL_MAX_MS 3000
#define TCP_DEFAULT_WINDOW (4u << 20)    /* in-flight bytes per connection (READ slices) */
/* a receiver expecting at least twice this many reply bytes sleeps until
 * this many are queued (SO_RCVLOWAT; tcp_client.c, receiver_main) */
#define TCP_DEFAULT_RCVLOWAT (1u << 20)
#define TCP_ACK_FLUSH_BYTES (1u << 20)   /* the server acks WRITEs at least every this many bytes */
/* WRITE slices in flight per connection: more than the server's ack
 * batching, or the connection would stop and wait for every ack (its whole
 * window acked at once, nothing left in flight while the ack travels) */
#define TCP_DEFAULT_WRITE_WINDOW (2 * TCP_ACK_FLUSH_BYTES)
#define TCP_BACKLOG 512                  /* listen() backlog per NIC */
#define TCP_THREAD_STACK (256u << 10)    /* sender and server-connection threads */
#define TCP_SCAN_MAX 256                 /* queued tasks one carve looks at */
#define TCP_ACK_SENT (-1)                /* tcp_conn.ack: the carrying send returned */

typedef struct tcp_slice {
    cr__xfer_task_t *task;
    uint64_t off;
    uint32_t len;
    uint8_t op; /* CR__TCP_WRITE / CR__TCP_READ */
} tcp_slice_t;

struct tcp_peer;

typedef struct tcp_conn {
    struct tcp_peer *peer;
    int path;
    int idx; /* in peer->conns (thread names) */
    int fd; /* changed under peer->mu by the sender only */
    pthread_t sender, receiver;
    int sender_started, receiver_running;
    atomic_uint head, sent; /* free-running ring indices */
    atomic_uint_fast64_t inflight_bytes;
    atomic_uint inflight_writes; /* WRITE slices among [head, sent) */
    /* held by whoever carves, publishes and sends on this connection: the
     * sender, or the receiver refilling the window itself (trylock only) */
    pthread_mutex_t tx_mu;
    atomic_int dead;
    atomic_int waiting; /* the sender sleeps on `wake` and wants a post */
    sem_t wake;
    atomic_uint_fast64_t last_progress_ns;
    int aborted; /* the watchdog gave up on the peer: fail in-flight slices (guarded by peer->mu) */
    tcp_slice_t ring[TCP_RING];
    /* per WRITE slot, who settles it (tcp_client.c, "ack hand-off"): 0 while
     * the send that carries it runs, TCP_ACK_SENT once that send returned,
     * 1 - status once the reply came first; whoever swaps second settles */
    atomic_int ack[TCP_RING];
} tcp_conn_t;

typedef struct tcp_path {
    int lnic, rnic;
    atomic_uint_fast64_t down_until_ns; /* 0 = up */
    cr__seg_nic_t failed;               /* remote address that failed (guarded by peer->mu) */
} tcp_path_t;

typedef struct tcp_peer {
    struct tcp_state *st;
    cr__xfer_peer_t *xp;
    struct tcp_peer *next; /* st->peers */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* work arrived / ring space / stop (CLOCK_MONOTONIC) */
    cr__xfer_task_t *q_head, *q_tail; /* tasks with uncarved bytes */
    tcp_slice_t *retry;               /* slices to resend (failed connection) */
    size_t n_retry, cap_retry;
    int stopping;
    atomic_size_t outstanding; /* tasks submitted, not finished */
    /* last reply from the peer, or when it went from idle to busy: the
     * watchdog fails the peer's work when this is older than st->abort_ns */
    atomic_uint_fast64_t progress_ns;
    int n_paths;
    tcp_path_t paths[TCP_MAX_PATHS];
    int n_conns;
    tcp_conn_t **conns;
    /* caller-run connections (tcp_client.c, "sync path"), guarded by mu:
     * a slot is busy while one caller uses its fd; idle slots keep their
     * connection for the next caller */
    struct tcp_sync_slot {
        int fd, path, busy;
    } sync[TCP_SYNC_SLOTS];
    int sync_busy;
    /* the sync path's last reply came within st->spin_ns of its request:
     * the next caller busy-polls for its reply (else it sleeps and measures) */
    atomic_int sync_fast;
} tcp_peer_t;

typedef struct srv_conn {
    struct tcp_state *st;
    struct srv_conn *prev, *next;
    int fd;
    struct sockaddr_storage src; /* the client's address (per-source cap) */
    int nic;
    char *scratch; /* lazily allocated drain buffer */
    cr__tcp_hdr_t nh; /* bytes of the next request header read ahead */
    size_t nh_have;
    cr__xfer_cap_cache_t capc; /* capabilities verified on this connection */
} srv_conn_t;

typedef struct tcp_state {
    cr_xfer_engine_t *engine;
    cr__xfer_config_t cfg;
    uint64_t stall_ns;      /* a connection with work in flight and no progress for this long is cut */
    uint64_t abort_ns;      /* a peer with work and no progress for this long: its work fails */
    atomic_uint_fast64_t aborts; /* peers given up on so far (tests) */
    uint64_t window_bytes;  /* in-flight bytes per connection (READ) */
    uint64_t write_window_bytes; /* the same for WRITE slices */
    int sync_path;          /* 0: never run a request in the caller's thread */
    int crc_read;           /* hash READ slices as they land (CRESCENT_TCP_CRC, default 1) */
    uint64_t spin_ns;       /* busy-poll budget of the sync path's replies and of a
                             * server serving a waiting caller (CRESCENT_TCP_SPIN_US) */
    atomic_int spinner;     /* 1 while one server connection busy-polls */
    atomic_uint_fast64_t spin_hits; /* requests a server's busy-poll found (tests) */
    char cc[16];            /* TCP congestion control for data sockets ("" = system default) */
    atomic_int cc_fallback; /* cc was refused: reno (allowed for everyone) is used */
    atomic_uint_fast64_t sync_done; /* requests the sync path completed (tests) */
    int sockbuf;            /* SO_SNDBUF/SO_RCVBUF, 0 = kernel autotuning */
    int rcvlowat;           /* the receivers' SO_RCVLOWAT while replies stream in (0 = off) */
    atomic_uint_fast64_t lowat_raised; /* times a receiver raised it (tests) */
    atomic_int stopping;
    /* server */
    int n_listen;
    int listen_fd[CR_XFER_MAX_NICS];
    uint16_t port;
    int wake[2];
    pthread_t acceptor;
    int acceptor_started;
    pthread_mutex_t srv_mu;
    pthread_cond_t srv_cv;
    srv_conn_t *srv_list;
    int n_srv;
    /* client */
    pthread_mutex_t peers_mu;
    tcp_peer_t *peers;
    pthread_t watchdog;
    int watchdog_started;
    pthread_mutex_t wd_mu;
    pthread_cond_t wd_cv;
    atomic_uint_fast64_t nic_bytes[CR_XFER_MAX_NICS]; /* bytes completed per local NIC */
} tcp_state_t;

/* the in-flight window of a connection for slices of op (CR__TCP_*) */
static inline uint64_t tcp_window_of(const struct tcp_state *st, uint8_t op)
{
    return op == CR__TCP_WRITE ? st->write_window_bytes : st->window_bytes;
}

/* tcp_server.c */
int cr__tcp_server_start(tcp_state_t *st, cr__seg_desc_t *local);
void cr__tcp_server_stop(tcp_state_t *st);
void cr__tcp_tune_socket(tcp_state_t *st, int fd);

/* tcp_client.c */
tcp_peer_t *cr__tcp_peer_get(tcp_state_t *st, cr__xfer_peer_t *xp);
int cr__tcp_submit(void *state, cr__xfer_peer_t *xp, cr__xfer_task_t **tasks, size_t n);
void cr__tcp_peers_stop(tcp_state_t *st);
void cr__tcp_watchdog_scan(tcp_state_t *st);

/* writes all iovecs (advancing them); returns 0 or -errno */
int cr__tcp_writev_full(int fd, struct iovec *iov, int cnt);
/* Receives exactly len bytes (blocking; SO_RCVTIMEO bounds each wait).
 * Returns 0, -ECONNRESET (EOF), -ETIMEDOUT or -errno. */
int cr__tcp_recv_full(int fd, void *buf, size_t len);

/* Test hook: simulate the failure (down=1) or repair (down=0) of local NIC
 * `nic` on the serving side: its listener is closed and connections
 * accepted on it are cut. Returns 0 or -errno. */
int cr__xfer_tcp_debug_nic(void *state, int nic, int down);

/* Test hook: peers whose work the watchdog failed for lack of progress. */
uint64_t cr__xfer_tcp_debug_aborts(void *state);

/* Test hook: bytes completed so far through each local NIC (initiator side). */
void cr__xfer_tcp_debug_nic_bytes(void *state, uint64_t out[CR_XFER_MAX_NICS]);

#endif
