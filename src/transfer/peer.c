/* Remote segments: open/close by name, descriptor cache and refresh,
 * transport choice. A peer struct lives until the engine is destroyed (its
 * handle stays valid for in-flight tasks even after the last close, and a
 * reopen of the same name reuses it). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/net.h"
#include "transfer/xfer_internal.h"

static int fetch_desc(cr_xfer_engine_t *e, const char *name, cr__seg_desc_t *d, int timeout_ms)
{
    char *json = NULL;
    size_t len = 0;
    int rc;
    if (e->cfg.p2p) {
        char host[CR__HOST_MAX];
        uint16_t port;
        if (cr__net_split_hostport(name, host, &port, 0))
            return -ENOENT; /* p2p names are host:port */
        rc = cr__xfer_ctl_fetch_desc(e, host, port, timeout_ms, &json, &len);
        if (rc == -ECONNREFUSED || rc == -ECONNRESET || rc == -ENETUNREACH)
            rc = -EHOSTUNREACH;
    } else {
        if (!e->meta)
            return -EHOSTUNREACH;
        char key[CR__META_KEY_MAX];
        if ((size_t)snprintf(key, sizeof key, "%s%s", CR__SEG_KEY_PREFIX, name) >= sizeof key)
            return -EINVAL;
        rc = cr__meta_get(e->meta, key, &json, &len);
    }
    if (rc)
        return rc;
    rc = cr__seg_desc_decode(json, len, d);
    free(json);
    if (rc) {
        CR_LOG_WARN("xfer", "segment %s: malformed descriptor", name);
        return -EPROTO;
    }
    return 0;
}

cr__xfer_peer_t *cr__xfer_peer_get(cr_xfer_engine_t *e, cr_xfer_segment_t h)
{
    if (h < 0 || h >= CR__XFER_MAX_PEERS)
        return NULL;
    pthread_mutex_lock(&e->peer_lock);
    cr__xfer_peer_t *p = (size_t)h < e->n_peers ? e->peers[h] : NULL;
    if (p && atomic_load(&p->refs) <= 0)
        p = NULL;
    pthread_mutex_unlock(&e->peer_lock);
    return p;
}

const struct cr_xfer_transport_ops *cr__xfer_transport_of(cr_xfer_engine_t *e, void **state,
                                                          cr__xfer_peer_t *p)
{
    for (size_t i = 0; i < e->n_transports; i++)
        if (e->transports[i].ops == p->transport) {
            *state = e->transports[i].state;
            return p->transport;
        }
    *state = NULL;
    return NULL;
}

/* the first transport, in registry order, that reaches the peer */
static const struct cr_xfer_transport_ops *choose_transport(cr_xfer_engine_t *e,
                                                            const cr__seg_desc_t *d)
{
    for (size_t i = 0; i < e->n_transports; i++)
        if (e->transports[i].ops->can_reach(e->transports[i].state, d))
            return e->transports[i].ops;
    return NULL;
}

int cr_xfer_segment_open(cr_xfer_engine_t *e, const char *name, cr_xfer_segment_t *out)
{
    if (!e || !name || !out || !name[0] || strlen(name) >= CR_XFER_NAME_MAX)
        return -EINVAL;
    /* fast path: already open */
    pthread_mutex_lock(&e->peer_lock);
    for (size_t i = 0; i < e->n_peers; i++) {
        cr__xfer_peer_t *p = e->peers[i];
        if (!strcmp(p->name, name) && atomic_load(&p->refs) > 0) {
            atomic_fetch_add(&p->refs, 1);
            *out = p->handle;
            pthread_mutex_unlock(&e->peer_lock);
            return 0;
        }
    }
    pthread_mutex_unlock(&e->peer_lock);

    cr__seg_desc_t d;
    memset(&d, 0, sizeof d);
    int rc = fetch_desc(e, name, &d, (int)e->cfg.timeout_ms);
    if (rc)
        return rc;
    const struct cr_xfer_transport_ops *t = choose_transport(e, &d);
    if (!t) {
        cr__seg_desc_clear(&d);
        return -EHOSTUNREACH;
    }

    pthread_mutex_lock(&e->peer_lock);
    cr__xfer_peer_t *p = NULL;
    for (size_t i = 0; i < e->n_peers; i++)
        if (!strcmp(e->peers[i]->name, name)) {
            p = e->peers[i];
            break;
        }
    if (p) {
        if (atomic_load(&p->refs) <= 0) { /* reopen: adopt the fresh descriptor */
            cr__seg_desc_clear(&p->desc);
            p->desc = d;
            memset(&d, 0, sizeof d);
            if (p->transport != t)
                CR_LOG_INFO("xfer", "segment %s: keeps transport %s", name, p->transport->name);
            atomic_store(&p->stale, 0);
        }
        atomic_fetch_add(&p->refs, 1);
    } else if (e->n_peers >= CR__XFER_MAX_PEERS) {
        rc = -ENOSPC;
    } else if (!(p = calloc(1, sizeof *p))) {
        rc = -ENOMEM;
    } else {
        p->desc = d;
        memset(&d, 0, sizeof d);
        p->transport = t;
        p->handle = (int64_t)e->n_peers;
        p->engine = e;
        cr__xfer_ctl_peer_init(p);
        strcpy(p->name, name);
        atomic_store(&p->refs, 1);
        e->peers[e->n_peers++] = p;
    }
    if (!rc)
        *out = p->handle;
    pthread_mutex_unlock(&e->peer_lock);
    cr__seg_desc_clear(&d);
    return rc;
}

int cr_xfer_segment_close(cr_xfer_engine_t *e, cr_xfer_segment_t h)
{
    if (!e)
        return -EINVAL;
    pthread_mutex_lock(&e->peer_lock);
    cr__xfer_peer_t *p =
        h >= 0 && (size_t)h < e->n_peers && atomic_load(&e->peers[h]->refs) > 0 ? e->peers[h] : NULL;
    int last = p && atomic_fetch_sub(&p->refs, 1) == 1;
    pthread_mutex_unlock(&e->peer_lock);
    if (!p)
        return -ENOENT;
    if (last) {
        void *st;
        const struct cr_xfer_transport_ops *t = cr__xfer_transport_of(e, &st, p);
        if (t && t->peer_forget)
            t->peer_forget(st, p);
    }
    return 0;
}

int cr__xfer_peer_refresh(cr_xfer_engine_t *e, cr__xfer_peer_t *p)
{
    cr__seg_desc_t d;
    memset(&d, 0, sizeof d);
    /* called from submit: keep it short, a hung peer must not stall submits
     * (and no longer than the stall time a transfer to it would wait) */
    unsigned ms = e->cfg.timeout_ms < CR__XFER_REFRESH_TIMEOUT_MS ? e->cfg.timeout_ms
                                                                 : CR__XFER_REFRESH_TIMEOUT_MS;
    if (e->cfg.stall_ms && e->cfg.stall_ms < ms)
        ms = e->cfg.stall_ms;
    int rc = fetch_desc(e, p->name, &d, (int)ms);
    if (rc) {
        if (rc == -ETIMEDOUT)
            atomic_fetch_add(&e->timeouts_waited, 1);
        CR_LOG_INFO("xfer", "segment %s: refresh failed: %s", p->name, cr_strerror(rc));
        return rc;
    }
    pthread_mutex_lock(&e->peer_lock);
    cr__seg_desc_t old = p->desc;
    p->desc = d;
    atomic_store(&p->stale, 0);
    pthread_mutex_unlock(&e->peer_lock);
    /* let the transport drop per-peer state built from the old descriptor
     * (e.g. a snapshot of its buffers) */
    void *st;
    const struct cr_xfer_transport_ops *t = cr__xfer_transport_of(e, &st, p);
    if (t && t->peer_forget && st &&
        (old.version != d.version || old.pid != d.pid || strcmp(old.host_id, d.host_id)))
        t->peer_forget(st, p);
    cr__seg_desc_clear(&old);
    return 0;
}

uint32_t cr__xfer_peer_nics(cr__xfer_peer_t *p, cr__seg_nic_t *out, uint32_t cap)
{
    cr_xfer_engine_t *e = p->engine;
    pthread_mutex_lock(&e->peer_lock);
    uint32_t n = p->desc.n_nics < cap ? p->desc.n_nics : cap;
    memcpy(out, p->desc.nics, n * sizeof *out);
    pthread_mutex_unlock(&e->peer_lock);
    return n;
}

int cr_xfer_segment_buffers(cr_xfer_engine_t *e, cr_xfer_segment_t h, cr_xfer_buffer_info_t *out,
                            size_t cap, size_t *n)
{
    if (!e || !n || (cap && !out))
        return -EINVAL;
    cr__xfer_peer_t *p = cr__xfer_peer_get(e, h);
    if (!p)
        return -ENOENT;
    pthread_mutex_lock(&e->peer_lock);
    size_t k = p->desc.n_buffers < cap ? p->desc.n_buffers : cap;
    if (k) /* out may be NULL when cap is 0 (count query): memcpy(NULL, ..., 0) is UB */
        memcpy(out, p->desc.buffers, k * sizeof *out);
    *n = p->desc.n_buffers;
    pthread_mutex_unlock(&e->peer_lock);
    return 0;
}

const char *cr_xfer_segment_transport(cr_xfer_engine_t *e, cr_xfer_segment_t h)
{
    if (!e)
        return NULL;
    cr__xfer_peer_t *p = cr__xfer_peer_get(e, h);
    return p ? p->transport->name : NULL;
}

void cr__xfer_peers_fini(cr_xfer_engine_t *e)
{
    for (size_t i = 0; i < e->n_peers; i++) {
        cr__seg_desc_clear(&e->peers[i]->desc);
        cr__xfer_ctl_peer_fini(e->peers[i]);
        free(e->peers[i]);
    }
    e->n_peers = 0;
}
