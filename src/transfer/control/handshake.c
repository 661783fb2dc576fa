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
 * close the connection. Security off: every connection is admitted. */
#include <errno.h>

#include "common/auth/auth.h"
#include "common/log.h"
#include "transfer/transport/transport.h"

int cr__xfer_conn_accepted(cr_xfer_engine_t *engine, int fd, int timeout_ms)
{
    const cr__auth_t *a = engine ? cr__xfer_engine_auth(engine) : NULL;
    if (!a)
        return 0;
    /* a stranger may hold a server thread only briefly (first-frame deadline) */
    int rc = cr__auth_server_fd(a, fd, "te", timeout_ms > 5000 ? 5000 : timeout_ms);
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
