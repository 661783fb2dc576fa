/* TLS front for the HTTP servers (private to httpd.c).
 *
 * libmicrohttpd only speaks TLS through GnuTLS; crescent keeps one TLS
 * library (OpenSSL, common/tls), so the front terminates TLS itself: an
 * acceptor thread takes connections on the listening socket, a connection
 * thread runs the handshake (bounded by CR__TLS_HANDSHAKE_MS; a peer
 * without a certificate of the CA never reaches MHD), then hands MHD one
 * end of a socketpair (MHD_add_connection, with the peer's real address so
 * MHD's per-source limit still applies) and relays bytes between it and the
 * TLS stream until either side closes. MHD's own idle timeout ends idle
 * connections (it closes its end, the relay then ends).
 *
 * At most max_conns TLS connections are live at once (handshaking or
 * relaying), at most per_source of them from one address; past per_source
 * a newcomer is closed at accept, past max_conns it takes the place of the
 * busiest source's longest-idle connection (handshaking, or no bytes from
 * the client since the last to it) if its source holds fewer, else it is
 * closed (cr__net_fair_victim): sources stalling handshakes cannot lock
 * others out. Connections so shut down close by themselves (up to
 * max_conns more slots hold them meanwhile). */
#ifndef CR_COMMON_HTTPD_TLS_H
#define CR_COMMON_HTTPD_TLS_H

#include "common/tls/tls.h"

struct MHD_Daemon;
typedef struct cr__httpd_tls cr__httpd_tls_t;

/* Takes ownership of the listening fd lfd (closed by stop, also on
 * failure). mhd must have been started with MHD_USE_NO_LISTEN_SOCKET |
 * MHD_USE_ITC and must outlive the front. Returns 0 and *out, -ENOMEM or
 * -errno. */
int cr__httpd_tls_start(const cr__tls_t *tls, int lfd, struct MHD_Daemon *mhd,
                        unsigned max_conns, unsigned per_source, cr__httpd_tls_t **out);
/* Stops accepting, cuts every TLS connection and waits for their threads.
 * Call before MHD_stop_daemon(). NULL is a no-op. */
void cr__httpd_tls_stop(cr__httpd_tls_t *f);
/* Handshakes refused so far (bad/missing certificate, not TLS, timeout). */
unsigned long cr__httpd_tls_refused(const cr__httpd_tls_t *f);

#endif
