/* The engine's control channel: small messages between engines that are
 * not data, whatever transport carries a segment's data.
 *
 *   - p2p descriptor fetch (GET_DESC): in p2p mode a segment's name is
 *     host:port of its control listener, which serves its descriptor;
 *   - notifications (NOTIFY): cr_xfer_notify_send and batch notifications;
 *   - (next) peer authentication: every connection passes the engine's
 *     connection-setup hook (handshake.c) before its first message.
 *
 * One listener per local NIC, all on one port: the port the engine is known
 * by (CR_XFER_PARAM_PORT, cr_xfer_engine_port, the descriptor's rpc_port).
 * One thread serves each accepted connection (bounded; idle ones closed).
 * The client side keeps one connection per peer for notifications (in the
 * peer, guarded by its ctl_mu) and opens a fresh one per descriptor fetch.
 * Wire format: ctl_wire.h. */
#ifndef CR_TRANSFER_CONTROL_H
#define CR_TRANSFER_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "crescent/transfer.h"
#include "transfer/transport/transport.h"

#define CR__XFER_CTL_MAX_CONNS 256         /* accepted control connections served at once */
#define CR__XFER_CTL_IDLE_MS 60000         /* an idle accepted connection is closed after */
#define CR__XFER_CTL_NOTIFY_TIMEOUT_MS 10000 /* cap on one notification round trip */

typedef struct cr__xfer_ctl cr__xfer_ctl_t;

/* ---- serving side (ctl_server.c) ---- */

/* Starts the listeners on every NIC of cfg at cfg->port (0: an ephemeral
 * port, the same on all NICs) and the acceptor thread. Writes the bound
 * port. Returns 0 or -errno (-EADDRINUSE, -EADDRNOTAVAIL, -ENOMEM...). */
int cr__xfer_ctl_create(cr_xfer_engine_t *engine, const cr__xfer_config_t *cfg, uint16_t *port,
                        cr__xfer_ctl_t **out);

/* Stops accepting, cuts every served connection and waits for their
 * threads. NULL is a no-op. */
void cr__xfer_ctl_destroy(cr__xfer_ctl_t *ctl);

/* ---- client side (ctl_client.c): the engine's outgoing control messages */

/* Fetches the descriptor JSON served by host:port (malloc'd, NUL
 * terminated, caller frees). Returns 0, or -ECONNREFUSED, -ETIMEDOUT,
 * -EPROTO (bad answer), the server's status... */
int cr__xfer_ctl_fetch_desc(cr_xfer_engine_t *engine, const char *host, uint16_t port, int timeout_ms,
                            char **json, size_t *len);

/* Sends an engine notification payload (<= CR__CTL_MAX_NOTIFY bytes) to the
 * peer's control listener, trying its NICs in order, on the peer's cached
 * connection (reconnected once if broken). Returns 0 once the peer accepted
 * it, its refusal (-EINVAL), or -EHOSTUNREACH/-ETIMEDOUT/-ECANCELED... */
int cr__xfer_ctl_notify(cr_xfer_engine_t *engine, cr__xfer_peer_t *peer, const void *payload,
                        size_t len);

/* The per-peer client state in cr__xfer_peer_t (ctl_mu, ctl_fd). */
void cr__xfer_ctl_peer_init(cr__xfer_peer_t *peer);
void cr__xfer_ctl_peer_fini(cr__xfer_peer_t *peer);

#endif
