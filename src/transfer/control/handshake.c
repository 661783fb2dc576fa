/* The connection-setup hook (transport.h): every connection of the engine
 * passes here once, right after connect()/accept() and before its first
 * protocol byte, on the control channel and on every transport's data
 * connections, on both ends.
 *
 * Security on (the engine has a cluster key, docs/security.md): both ends
 * run the mutual cluster-key handshake of common/auth (context "te") here,
 * bounded by timeout_ms, so no GET_DESC, READ, WRITE or NOTIFY is served to
 * a peer that has not proven membership, and no initiator sends data to a
 * peer that has not proven it either. A non-zero return makes the caller
 * close the connection. Security off: a connection must still send its
 * first byte within the first-frame deadline, so idle connections cannot
 * pile up and hold server threads.
 *
 * Both modes: cr__xfer_conn_admit() bounds the connections one source
 * address may hold on a listener (half of its total), so one
 * host cannot lock the others out. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>

#include "common/auth/auth.h"
#include "common/log.h"
#include "transfer/transport/transport.h"

int cr__xfer_conn_accepted(cr_xfer_engine_t *engine, int fd, int timeout_ms)
{
    const cr__auth_t *a = engine ? cr__xfer_engine_auth(engine) : NULL;
    int deadline = timeout_ms > CR__XFER_FIRST_FRAME_MS ? CR__XFER_FIRST_FRAME_MS : timeout_ms;
    if (!a) {
        /* security off: the first byte must come within the deadline (every
         * initiator sends its request right after connecting) */
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n;
        do
            n = poll(&p, 1, deadline);
        while (n < 0 && errno == EINTR);
        if (n == 0) {
            CR_LOG_RL(CR__LOG_WARN, "xfer",
                      "closed a connection that sent nothing within %d ms", deadline);
            return -ETIMEDOUT;
        }
        return 0; /* readable, or an error the server's first read reports */
    }
    /* a stranger may hold a server thread only briefly (first-frame deadline) */
    int rc = cr__auth_server_fd(a, fd, "te", deadline);
    if (rc)
        CR_LOG_RL(CR__LOG_WARN, "xfer", "refused a peer that did not prove the cluster key: %s",
                  cr_strerror(rc));
    return rc;
}

int cr__xfer_conn_connected(cr_xfer_engine_t *engine, int fd, int timeout_ms)
{
    const cr__auth_t *a = engine ? cr__xfer_engine_auth(engine) : NULL;
    if (!a)
        return 0;
    int rc = cr__auth_client_fd(a, fd, "te", timeout_ms);
    if (rc)
        CR_LOG_RL(CR__LOG_WARN, "xfer", "peer failed the cluster-key handshake: %s",
                  cr_strerror(rc));
    return rc == -ETIMEDOUT ? rc : rc ? -EACCES : 0;
}
