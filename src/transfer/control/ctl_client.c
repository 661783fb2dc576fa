/* Control channel, client side: descriptor fetch (a fresh connection each
 * time) and notifications (the peer's cached connection). Every connection
 * passes the engine's connection-setup hook before its first request. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/net.h"
#include "transfer/control/control.h"
#include "transfer/control/ctl_wire.h"
#include "transfer/xfer_internal.h"

/* Connects to host:port (from local address src, may be NULL) and runs the
 * connection-setup hook. Returns the fd or -errno. */
static int dial(cr_xfer_engine_t *e, const char *host, uint16_t port, const char *src,
                int timeout_ms)
{
    int fd = cr__net_connect(host, port, src, timeout_ms);
    if (fd < 0)
        return fd;
    int rc = cr__xfer_conn_connected(e, fd, timeout_ms);
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

/* Sends one request and reads the response header; checks it answers op
 * with at most max_len payload bytes. Returns 0 (then h holds the decoded
 * response and its payload is next on fd) or -errno. */
static int round_trip(int fd, uint8_t op, const void *payload, uint32_t len, uint32_t max_len,
                      int timeout_ms, cr__ctl_hdr_t *h)
{
    cr__ctl_hdr_enc(h, op, 0, len);
    int rc = cr__net_write_full(fd, h, sizeof *h, timeout_ms);
    if (!rc && len)
        rc = cr__net_write_full(fd, payload, len, timeout_ms);
    if (!rc)
        rc = cr__net_read_full(fd, h, sizeof *h, timeout_ms);
    if (!rc && (cr__ctl_hdr_dec(h) || h->opcode != (op | CR__CTL_RESP) || h->len > max_len ||
                h->status > 0 || (h->status && h->len)))
        rc = -EPROTO;
    return rc;
}

int cr__xfer_ctl_fetch_desc(cr_xfer_engine_t *e, const char *host, uint16_t port, int timeout_ms,
                            char **json, size_t *len)
{
    int fd = dial(e, host, port, NULL, timeout_ms);
    if (fd < 0)
        return fd;
    cr__ctl_hdr_t h;
    int rc = round_trip(fd, CR__CTL_GET_DESC, NULL, 0, CR__SEG_DESC_MAX_JSON, timeout_ms, &h);
    if (!rc)
        rc = h.status;
    char *buf = NULL;
    if (!rc && !(buf = malloc((size_t)h.len + 1)))
        rc = -ENOMEM;
    if (!rc)
        rc = cr__net_read_full(fd, buf, h.len, timeout_ms);
    close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[h.len] = 0;
    *json = buf;
    *len = h.len;
    return 0;
}

/* Connects to the first of the peer's NICs that answers. */
static int peer_connect(cr_xfer_engine_t *e, cr__xfer_peer_t *xp, int timeout_ms)
{
    cr__seg_nic_t nics[CR_XFER_MAX_NICS];
    pthread_mutex_lock(&e->peer_lock);
    uint16_t port = xp->desc.rpc_port;
    uint32_t n = xp->desc.n_nics < CR_XFER_MAX_NICS ? xp->desc.n_nics : CR_XFER_MAX_NICS;
    memcpy(nics, xp->desc.nics, n * sizeof nics[0]);
    pthread_mutex_unlock(&e->peer_lock);
    int rc = -EHOSTUNREACH;
    for (uint32_t i = 0; port && i < n; i++) {
        const char *src = e->cfg.nics[i % e->cfg.n_nics];
        rc = dial(e, nics[i].addr, port, src, timeout_ms);
        if (rc >= 0)
            return rc;
    }
    return rc;
}

int cr__xfer_ctl_notify(cr_xfer_engine_t *e, cr__xfer_peer_t *xp, const void *payload, size_t len)
{
    if (len > CR__CTL_MAX_NOTIFY)
        return -EINVAL;
    if (atomic_load(&e->destroying))
        return -ECANCELED;
    int to = (int)(e->cfg.timeout_ms < CR__XFER_CTL_NOTIFY_TIMEOUT_MS
                       ? e->cfg.timeout_ms
                       : CR__XFER_CTL_NOTIFY_TIMEOUT_MS);
    int rc = -EHOSTUNREACH;
    pthread_mutex_lock(&xp->ctl_mu);
    for (int attempt = 0; attempt < 2; attempt++) {
        if (xp->ctl_fd < 0) {
            int fd = peer_connect(e, xp, to);
            if (fd < 0) {
                rc = fd;
                break;
            }
            xp->ctl_fd = fd;
        }
        cr__ctl_hdr_t h;
        rc = round_trip(xp->ctl_fd, CR__CTL_NOTIFY, payload, (uint32_t)len, 0, to, &h);
        if (!rc) {
            rc = h.status;
            break;
        }
        close(xp->ctl_fd); /* broken (or idle-closed) connection: reconnect once */
        xp->ctl_fd = -1;
    }
    pthread_mutex_unlock(&xp->ctl_mu);
    return rc;
}

void cr__xfer_ctl_peer_init(cr__xfer_peer_t *xp)
{
    pthread_mutex_init(&xp->ctl_mu, NULL);
    xp->ctl_fd = -1;
}

void cr__xfer_ctl_peer_fini(cr__xfer_peer_t *xp)
{
    if (xp->ctl_fd >= 0)
        close(xp->ctl_fd);
    xp->ctl_fd = -1;
    pthread_mutex_destroy(&xp->ctl_mu);
}
