/* The connection-setup hook (transport.h): every connection of the engine
 * passes here once, right after connect()/accept() and before its first
 * protocol byte, on the control channel and on every transport's data
 * connections, on both ends.
 *
 * Today it admits every connection: the engine has no credentials yet.
 * Peer authentication (a handshake both ends run here, bounded by
 * timeout_ms) plugs in at this one place; a non-zero return makes the
 * caller close the connection. */
#include "transfer/transport/transport.h"

int cr__xfer_conn_accepted(cr_xfer_engine_t *engine, int fd, int timeout_ms)
{
    (void)engine;
    (void)fd;
    (void)timeout_ms;
    return 0;
}

int cr__xfer_conn_connected(cr_xfer_engine_t *engine, int fd, int timeout_ms)
{
    (void)engine;
    (void)fd;
    (void)timeout_ms;
    return 0;
}
