/* Engine lifecycle: parameters -> configuration, transports, publication of
 * the local segment descriptor, teardown. See docs/architecture/transfer-core.md. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/auth/auth.h"
#include "common/tls/tls.h"
#include "common/log.h"
#include "common/net.h"
#include "transfer/engine_info.h"
#include "transfer/xfer_internal.h"


#define LOGC "xfer"

static int copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        return -EINVAL;
    memcpy(dst, src, n + 1);
    return 0;
}

/* "a,b": names of registered transports; bit i of c->transports enables
 * registry entry i. NULL: every registered transport. */
static int parse_transports(const char *s, cr__xfer_config_t *c)
{
    c->transports = 0;
    if (!s) {
        c->transports = (1u << cr__xfer_transport_registry_len) - 1;
        return 0;
    }
    char buf[128];
    if (copy_str(buf, sizeof buf, s))
        return -EINVAL;
    char *save = NULL;
    for (char *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        size_t i = 0;
        while (i < cr__xfer_transport_registry_len &&
               strcasecmp(t, cr__xfer_transport_registry[i]->name))
            i++;
        if (i == cr__xfer_transport_registry_len)
            return -EINVAL;
        c->transports |= 1u << i;
    }
    return c->transports ? 0 : -EINVAL;
}

static int parse_nics(const char *s, cr__xfer_config_t *c)
{
    char buf[CR_XFER_MAX_NICS * sizeof c->nics[0] + 64];
    if (copy_str(buf, sizeof buf, s))
        return -EINVAL;
    c->n_nics = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        unsigned char tmp[16];
        if (c->n_nics >= CR_XFER_MAX_NICS || strlen(t) >= sizeof c->nics[0])
            return -EINVAL;
        if (inet_pton(AF_INET, t, tmp) != 1 && inet_pton(AF_INET6, t, tmp) != 1)
            return -EINVAL;
        for (uint32_t i = 0; i < c->n_nics; i++)
            if (!strcmp(c->nics[i], t))
                return -EINVAL;
        strcpy(c->nics[c->n_nics++], t);
    }
    return c->n_nics ? 0 : -EINVAL;
}

static int build_config(const cr_xfer_params_t *p, cr__xfer_config_t *c)
{
    uint64_t m = p ? p->field_mask : 0;
    memset(c, 0, sizeof *c);
    const char *uri = (m & CR_XFER_PARAM_METADATA_URI) && p->metadata_uri ? p->metadata_uri : "p2p";
    if (copy_str(c->metadata_uri, sizeof c->metadata_uri, uri))
        return -EINVAL;
    c->p2p = !strcasecmp(uri, "p2p") || !strcasecmp(uri, "P2PHANDSHAKE");
    if (parse_transports((m & CR_XFER_PARAM_TRANSPORTS) ? p->transports : NULL, c))
        return -EINVAL;
    if (parse_nics((m & CR_XFER_PARAM_NICS) && p->nics ? p->nics : "127.0.0.1", c))
        return -EINVAL;
    if ((m & CR_XFER_PARAM_TOPOLOGY_FILE) && p->topology_file &&
        copy_str(c->topology_file, sizeof c->topology_file, p->topology_file))
        return -EINVAL;
    c->port = (m & CR_XFER_PARAM_PORT) ? p->port : 0;
    c->slice_size = (m & CR_XFER_PARAM_SLICE_SIZE) ? p->slice_size : CR__XFER_DEFAULT_SLICE;
    if (c->slice_size < CR__XFER_MIN_SLICE || c->slice_size > CR__XFER_MAX_SLICE)
        return -EINVAL;
    c->io_threads =
        (m & CR_XFER_PARAM_IO_THREADS) ? p->io_threads : CR__XFER_DEFAULT_IO_THREADS;
    if (c->io_threads < 1 || c->io_threads > CR__XFER_MAX_IO_THREADS)
        return -EINVAL;
    c->conns_per_path =
        (m & CR_XFER_PARAM_CONNS_PER_PATH) ? p->conns_per_path : CR__XFER_DEFAULT_CONNS_PER_PATH;
    if (c->conns_per_path < 1 || c->conns_per_path > CR__XFER_MAX_CONNS_PER_PATH)
        return -EINVAL;
    c->timeout_ms = (m & CR_XFER_PARAM_TIMEOUT_MS) ? p->timeout_ms : CR__XFER_DEFAULT_TIMEOUT_MS;
    if (c->timeout_ms < 1 || c->timeout_ms > CR__XFER_MAX_TIMEOUT_MS)
        return -EINVAL;
    if (m & CR_XFER_PARAM_STALL_TIMEOUT_MS) {
        c->stall_ms = p->stall_timeout_ms;
        if (c->stall_ms < CR__XFER_MIN_STALL_MS || c->stall_ms > c->timeout_ms)
            return -EINVAL;
    } else {
        const char *ev = getenv("CRESCENT_XFER_STALL_MS");
        unsigned long v = ev && *ev ? strtoul(ev, NULL, 10) : CR__XFER_DEFAULT_STALL_MS;
        c->stall_ms = v < CR__XFER_MIN_STALL_MS ? CR__XFER_MIN_STALL_MS
                      : v > CR__XFER_MAX_TIMEOUT_MS ? CR__XFER_MAX_TIMEOUT_MS : (unsigned)v;
        if (c->stall_ms > c->timeout_ms)
            c->stall_ms = c->timeout_ms;
    }
    if ((m & CR_XFER_PARAM_LOCAL_NAME) && p->local_name) {
        if (!p->local_name[0] || copy_str(c->local_name, sizeof c->local_name, p->local_name))
            return -EINVAL;
        if (c->p2p) {
            /* p2p: the name is how peers reach us, so it must be host:port */
            char host[CR__HOST_MAX];
            uint16_t port;
            if (cr__net_split_hostport(c->local_name, host, &port, 0))
                return -EINVAL;
            if (!(m & CR_XFER_PARAM_PORT) || c->port == 0)
                c->port = port;
            else if (c->port != port)
                return -EINVAL;
        }
    }
    return 0;
}

void *cr__xfer_transport_state(cr_xfer_engine_t *e, const char *name)
{
    for (size_t i = 0; i < e->n_transports; i++)
        if (!strcmp(e->transports[i].ops->name, name))
            return e->transports[i].state;
    return NULL;
}

/* Creates every enabled transport, in registry order. One that cannot run
 * here is left out with a warning; with none left, setup fails with the
 * last error. */
static int transports_create(cr_xfer_engine_t *e, cr__seg_desc_t *d)
{
    int rc = -EINVAL;
    for (size_t i = 0; i < cr__xfer_transport_registry_len; i++) {
        if (!(e->cfg.transports & (1u << i)))
            continue;
        const struct cr_xfer_transport_ops *ops = cr__xfer_transport_registry[i];
        void *st = NULL;
        int trc = ops->create(e, &e->cfg, d, &st);
        if (trc) {
            CR_LOG_WARN(LOGC, "%s transport unavailable: %s", ops->name, cr_strerror(trc));
            rc = trc;
            continue;
        }
        e->transports[e->n_transports].ops = ops;
        e->transports[e->n_transports++].state = st;
    }
    return e->n_transports ? 0 : rc;
}

static void transports_destroy(cr_xfer_engine_t *e)
{
    for (size_t i = e->n_transports; i-- > 0;) {
        if (e->transports[i].state)
            e->transports[i].ops->destroy(e->transports[i].state);
        e->transports[i].state = NULL;
    }
}

const struct cr__auth *cr__xfer_engine_auth(const cr_xfer_engine_t *e) { return e->auth; }

static void teardown(cr_xfer_engine_t *e, int published)
{
    atomic_store(&e->destroying, 1);
    if (published && e->meta) {
        char key[CR__META_KEY_MAX];
        snprintf(key, sizeof key, "%s%s", CR__SEG_KEY_PREFIX, e->local.name);
        if (e->cfg.timeout_ms > CR__XFER_UNPUBLISH_TIMEOUT_MS)
            cr__meta_set_timeout(e->meta, CR__XFER_UNPUBLISH_TIMEOUT_MS);
        int rc = cr__meta_del(e->meta, key);
        if (rc) {
            char why[CR__META_WHY_TEXT];
            cr__meta_last_error(e->meta, why, sizeof why);
            CR_LOG_WARN(LOGC, "unpublishing %s failed: %s", e->local.name,
                        why[0] ? why : cr_strerror(rc));
        }
    }
    /* the notifier thread sends through the transports: stop it first */
    cr__xfer_notify_fini(e);
    /* no more descriptor fetches or notifications from peers */
    cr__xfer_ctl_destroy(e->ctl);
    e->ctl = NULL;
    /* transports fail whatever is in flight with -ECANCELED and stop serving */
    transports_destroy(e);
    cr__xfer_batches_fini(e);
    cr__xfer_peers_fini(e);
    cr__xfer_mem_fini(e);
    if (e->meta)
        cr__meta_close(e->meta);
    cr__xfer_topology_free(&e->topo);
    free(e->local.buffers);
    pthread_mutex_destroy(&e->peer_lock);
    pthread_mutex_destroy(&e->publish_lock);
    pthread_mutex_destroy(&e->batch_list_lock);
    pthread_mutex_destroy(&e->cap_mu);
    cr__auth_free(e->auth);
    cr__tls_free(e->tls);
    free(e);
}

int cr_xfer_engine_create(const cr_xfer_params_t *params, cr_xfer_engine_t **out)
{
    if (!out)
        return -EINVAL;
    cr_xfer_engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    pthread_mutex_init(&e->peer_lock, NULL);
    pthread_mutex_init(&e->publish_lock, NULL);
    pthread_mutex_init(&e->batch_list_lock, NULL);
    pthread_mutex_init(&e->cap_mu, NULL);
    int rc = build_config(params, &e->cfg);
    if (rc)
        goto fail_early;
    if (cr__auth_load_key_file(params && (params->field_mask & CR_XFER_PARAM_CLUSTER_KEY_FILE)
                                   ? params->cluster_key_file
                                   : NULL,
                               &e->auth)) {
        rc = -EINVAL;
        goto fail_early;
    }
    int tls_on = params && (params->field_mask & CR_XFER_PARAM_TLS);
    if (cr__tls_load(tls_on ? params->tls_cert : NULL, tls_on ? params->tls_key : NULL,
                     tls_on ? params->tls_ca : NULL, &e->tls)) {
        rc = -EINVAL;
        goto fail_early;
    }
    if ((rc = cr__xfer_mem_init(e)) != 0)
        goto fail_early;
    if ((rc = cr__xfer_notify_init(e)) != 0)
        goto fail;
    if (e->cfg.topology_file[0] &&
        (rc = cr__xfer_topology_load(e->cfg.topology_file, &e->cfg, &e->topo)) != 0)
        goto fail;

    cr__seg_desc_t *d = &e->local;
    cr__seg_host_id(d->host_id);
    d->pid = (int32_t)getpid();
    /* versions start at the wall clock's microseconds, not 0: an engine
     * re-created under the same name in the same process (same pid and
     * host) must not publish the versions its predecessor did, or peers
     * would keep per-peer transport state (a snapshot of its buffers) built
     * from the old descriptor */
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        atomic_store(&e->version, (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u);
    }
    d->n_nics = e->cfg.n_nics;
    for (uint32_t i = 0; i < e->cfg.n_nics; i++)
        strcpy(d->nics[i].addr, e->cfg.nics[i]);

    /* the control channel owns the port the engine is known by */
    if ((rc = cr__xfer_ctl_create(e, &e->cfg, &d->rpc_port, &e->ctl)) != 0) {
        if (rc == -EADDRNOTAVAIL) {
            CR_LOG_ERROR(LOGC, "a NIC address in \"%s...\" is not configured on this host",
                         e->cfg.nics[0]);
            rc = -EINVAL;
        }
        goto fail;
    }
    if ((rc = transports_create(e, d)) != 0)
        goto fail;
    if (!e->cfg.local_name[0])
        snprintf(e->cfg.local_name, sizeof e->cfg.local_name,
                 strchr(d->nics[0].addr, ':') ? "[%s]:%u" : "%s:%u", d->nics[0].addr,
                 d->rpc_port);
    strcpy(d->name, e->cfg.local_name);

    if (!e->cfg.p2p) {
        rc = cr__meta_open(e->cfg.metadata_uri, (int)e->cfg.timeout_ms, &e->meta);
        if (rc)
            goto fail;
        cr__meta_set_auth(e->meta, e->auth);
        cr__meta_set_tls(e->meta, e->tls);
        if ((rc = cr__xfer_publish(e)) != 0) {
            rc = rc == -EINVAL || rc == -ENOMEM || rc == -EACCES ? rc : -EHOSTUNREACH;
            goto fail;
        }
    }
    for (uint32_t i = 0; i < d->n_nics; i++)
        cr__auth_warn_open(e->auth, "Transfer Engine", d->nics[i].addr);
    char names[128] = "";
    for (size_t i = 0, o = 0; i < e->n_transports && o < sizeof names; i++)
        o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", i ? "+" : "",
                              e->transports[i].ops->name);
    CR_LOG_INFO(LOGC, "engine %s up (%s, %u NICs, slice %zu)", d->name, names, d->n_nics,
                e->cfg.slice_size);
    *out = e;
    return 0;
fail:
    teardown(e, 0);
    return rc;
fail_early:
    cr__auth_free(e->auth);
    cr__tls_free(e->tls);
    pthread_mutex_destroy(&e->peer_lock);
    pthread_mutex_destroy(&e->publish_lock);
    pthread_mutex_destroy(&e->batch_list_lock);
    pthread_mutex_destroy(&e->cap_mu);
    free(e);
    return rc;
}

void cr_xfer_engine_destroy(cr_xfer_engine_t *e)
{
    if (e)
        teardown(e, 1);
}

const char *cr_xfer_engine_name(const cr_xfer_engine_t *e) { return e ? e->local.name : NULL; }

uint16_t cr_xfer_engine_port(const cr_xfer_engine_t *e) { return e ? e->local.rpc_port : 0; }

unsigned cr__xfer_stall_ms(const cr_xfer_engine_t *e) { return e->cfg.stall_ms; }

uint64_t cr__xfer_timeouts_waited(const cr_xfer_engine_t *e)
{
    return atomic_load(&((cr_xfer_engine_t *)e)->timeouts_waited);
}
