/* Small socket helpers shared by the transports, the master RPC and tools. */
#ifndef CR_COMMON_NET_H
#define CR_COMMON_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#define CR__HOST_MAX 256

/* Splits "host:port" or "[v6]:port" into host (NUL-terminated, < CR__HOST_MAX)
 * and port. Returns 0, or -EINVAL if malformed or port not in 1..65535
 * (port 0 is allowed only when allow_zero). */
int cr__net_split_hostport(const char *s, char *host, uint16_t *port, int allow_zero);

/* Resolves host (numeric or name) + port to a sockaddr. Returns 0 or -EHOSTUNREACH/-EINVAL. */
int cr__net_resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len);

/* Listening TCP socket bound to host:port (port 0 = ephemeral; host NULL or
 * "" = any). On success returns the fd and writes the bound port. Returns
 * -errno on failure. */
int cr__net_listen(const char *host, uint16_t port, int backlog, uint16_t *bound_port);

/* Listening sockets on every one of hosts[0..n) at one common port: port,
 * or (port 0) an ephemeral port free on all of them (retried a few times
 * when another process takes it on one host meanwhile). Writes n fds and the
 * port on success; on failure nothing stays open. Returns 0 or -errno. */
#define CR__NET_LISTEN_RETRIES 16
int cr__net_listen_all(const char (*hosts)[64], uint32_t n, uint16_t port, int backlog, int *fds,
                       uint16_t *bound_port);

/* Connects with a timeout (ms). Optional local bind address src_host (for
 * choosing a NIC), may be NULL. Returns the connected, blocking fd with
 * TCP_NODELAY set, or -errno (-ETIMEDOUT on timeout). */
int cr__net_connect(const char *host, uint16_t port, const char *src_host, int timeout_ms);

/* Reads/writes exactly len bytes on a blocking fd, retrying on EINTR and
 * short transfers. poll()s with timeout_ms between partial transfers
 * (timeout_ms < 0: no timeout). Returns 0, -ECONNRESET on EOF, -ETIMEDOUT,
 * or -errno. */
int cr__net_read_full(int fd, void *buf, size_t len, int timeout_ms);
int cr__net_write_full(int fd, const void *buf, size_t len, int timeout_ms);

/* Turns Nagle off (TCP_NODELAY), best effort: every request/reply socket
 * of crescent writes whole messages, often a header and a body in two
 * writes, which Nagle would hold for the peer's delayed ACK (~40 ms). */
void cr__net_set_nodelay(int fd);

/* Sets SO_RCVTIMEO/SO_SNDTIMEO (ms, 0 = none). Returns 0 or -errno. */
int cr__net_set_timeouts(int fd, int timeout_ms);

/* Passing a file descriptor over a Unix stream socket (SCM_RIGHTS).
 * cr__net_send_fd sends buf in one sendmsg (EINTR retried) with pass_fd
 * attached to its first byte; returns the bytes sent (possibly fewer than
 * len: the caller writes the rest) or a negative status.
 * cr__net_recv_fd is one recvmsg(flags | MSG_CMSG_CLOEXEC) into buf; an fd
 * that came with the bytes goes to *passed while *passed < 0, any other is
 * closed. Returns the bytes read (0 at EOF) or a negative status: -EPROTO
 * when the control data was cut short (a peer that sent too many fds),
 * -EINTR/-EAGAIN as recvmsg reported them. */
ssize_t cr__net_send_fd(int fd, const void *buf, size_t len, int pass_fd);
ssize_t cr__net_recv_fd(int fd, void *buf, size_t len, int flags, int *passed);

/* 1 if a and b are the same source for per-source connection caps: the
 * same IPv4/IPv6 address (ports ignored); any two Unix-socket peers are one
 * source; different families are not. */
int cr__net_same_source(const struct sockaddr_storage *a, const struct sockaddr_storage *b);

/* Fair share of a full listener's connection slots (the HTTP servers, their
 * TLS front, the disk tier's read server; docs/security.md). When the
 * listener is at its total limit, a newcomer from src takes the place of
 * the connection idle the longest among those of the busiest source(s)
 * (the source address holding the most connections), provided src holds
 * fewer connections than that source: one address, or a few, holding
 * every slot cannot lock out anyone else, while a source already among
 * the busiest cannot push others out. peers[i] is live connection i: its
 * address and since when it is idle (accepted, handshake or first request
 * pending, or its last reply sent), or CR__NET_BUSY while it has a request
 * in progress (never chosen). Returns the index in peers of the connection
 * to close, or -1: refuse the newcomer (src is among the busiest, the
 * busiest have nothing idle, or no memory). O(n log n), n bounded by the
 * listener's limit; runs only when the listener is full. */
#define CR__NET_BUSY UINT64_MAX
typedef struct cr__net_peer {
    const struct sockaddr_storage *addr;
    uint64_t idle_ms; /* since when it is idle (any clock), or CR__NET_BUSY */
} cr__net_peer_t;
int cr__net_fair_victim(const cr__net_peer_t *peers, int n, const struct sockaddr_storage *src);

/* For daemons, at start: raises the soft limit on open files to the hard one
 * (the usual soft 1024 is below what the connection caps can use: the master
 * RPC alone admits 1024 connections, a TLS-fed HTTP connection takes 4 fds).
 * If the limit in force is still below CR__NET_NOFILE_WANT, says so on stderr
 * under prog's name. Returns the soft limit in force, or a negative CR_E_* status. */
#define CR__NET_NOFILE_WANT 4096
long cr__net_raise_nofile(const char *prog);

#endif
