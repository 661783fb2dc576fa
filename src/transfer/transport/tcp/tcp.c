/* tcp transport: the ops table, create/destroy and the watchdog thread.
 * Data path: tcp_client.c (initiator) and tcp_server.c (target). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "transfer/transport/tcp/tcp_internal.h"

#define LOGC "tcp"

static uint64_t env_u64(const char *name, uint64_t def, uint64_t lo, uint64_t hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    unsigned long long x = strtoull(v, &end, 0);
    if (*end == 'k' || *end == 'K')
        x <<= 10;
    else if (*end == 'm' || *end == 'M')
        x <<= 20;
    return x < lo ? lo : x > hi ? hi : x;
}

static void *watchdog_main(void *arg)
{
    tcp_state_t *st = arg;
    pthread_mutex_lock(&st->wd_mu);
    while (!atomic_load(&st->stopping)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += TCP_WATCHDOG_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&st->wd_cv, &st->wd_mu, &ts);
        if (atomic_load(&st->stopping))
            break;
        pthread_mutex_unlock(&st->wd_mu);
        cr__tcp_watchdog_scan(st);
        pthread_mutex_lock(&st->wd_mu);
    }
    pthread_mutex_unlock(&st->wd_mu);
    return NULL;
}

static void tcp_destroy(void *state)
{
    tcp_state_t *st = state;
    if (!st)
        return;
    atomic_store(&st->stopping, 1);
    if (st->watchdog_started) {
        pthread_mutex_lock(&st->wd_mu);
        pthread_cond_broadcast(&st->wd_cv);
        pthread_mutex_unlock(&st->wd_mu);
        pthread_join(st->watchdog, NULL);
    }
    cr__tcp_peers_stop(st); /* in-flight requests fail with -ECANCELED */
    cr__tcp_server_stop(st);
    pthread_mutex_destroy(&st->srv_mu);
    pthread_cond_destroy(&st->srv_cv);
    pthread_mutex_destroy(&st->peers_mu);
    pthread_mutex_destroy(&st->wd_mu);
    pthread_cond_destroy(&st->wd_cv);
    free(st);
}

static int tcp_create(cr_xfer_engine_t *engine, const cr__xfer_config_t *cfg, cr__seg_desc_t *local,
                      void **state)
{
    tcp_state_t *st = calloc(1, sizeof *st);
    if (!st)
        return -ENOMEM;
    st->engine = engine;
    st->cfg = *cfg;
    uint64_t stall = (uint64_t)cfg->timeout_ms / 4;
    stall = stall < TCP_STALL_MIN_MS ? TCP_STALL_MIN_MS : stall > TCP_STALL_MAX_MS ? TCP_STALL_MAX_MS : stall;
    /* a stalled connection is cut (its slices retried on another path)
     * well before the peer as a whole is given up on (abort_ns below):
     * losing one NIC must not fail work another path can carry */
    if (cfg->stall_ms && stall > cfg->stall_ms / 2)
        stall = cfg->stall_ms / 2 < 50 ? 50 : cfg->stall_ms / 2;
    st->stall_ns = env_u64("CRESCENT_TCP_STALL_MS", stall, 50, 600000) * 1000000ull;
    st->abort_ns = (uint64_t)cfg->stall_ms * 1000000ull;
    st->window_bytes = env_u64("CRESCENT_TCP_WINDOW", TCP_DEFAULT_WINDOW, 64u << 10, 1u << 30);
    if (st->window_bytes < cfg->slice_size)
        st->window_bytes = cfg->slice_size;
    st->write_window_bytes =
        env_u64("CRESCENT_TCP_WRITE_WINDOW", TCP_DEFAULT_WRITE_WINDOW, 64u << 10, 1u << 30);
    if (st->write_window_bytes < cfg->slice_size)
        st->write_window_bytes = cfg->slice_size;
    st->sockbuf = (int)env_u64("CRESCENT_TCP_SOCKBUF", 0, 0, 1u << 30);
    st->rcvlowat = (int)env_u64("CRESCENT_TCP_RCVLOWAT", TCP_DEFAULT_RCVLOWAT, 0, 64u << 20);
    /* a fixed receive buffer does not grow to hold the low-water mark (an
     * autotuned one does: the kernel raises it to twice the mark) */
    if (st->sockbuf > 0 && st->rcvlowat > st->sockbuf / 4)
        st->rcvlowat = st->sockbuf / 4;
    st->sync_path = (int)env_u64("CRESCENT_TCP_SYNC", 1, 0, 1);
    st->crc_read = (int)env_u64("CRESCENT_TCP_CRC", 1, 0, 1);
    st->spin_ns = env_u64("CRESCENT_TCP_SPIN_US", TCP_DEFAULT_SPIN_US, 0, 10000) * 1000u;
    /* congestion control of the data sockets: cubic unless told otherwise
     * ("default" keeps the system's). BBR, the default of some systems,
     * paces every packet with a timer when the qdisc is not fq: measured on
     * veth it halved throughput at twice the CPU per byte
     * (docs/architecture/transfer-core.md) */
    const char *cc = getenv("CRESCENT_TCP_CC");
    if (!cc || !*cc)
        cc = "cubic";
    snprintf(st->cc, sizeof st->cc, "%s", strcmp(cc, "default") ? cc : "");
    for (int i = 0; i < CR_XFER_MAX_NICS; i++)
        st->listen_fd[i] = -1;
    pthread_mutex_init(&st->srv_mu, NULL);
    pthread_cond_init(&st->srv_cv, NULL);
    pthread_mutex_init(&st->peers_mu, NULL);
    pthread_mutex_init(&st->wd_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->wd_cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = cr__tcp_server_start(st, local);
    if (rc) {
        tcp_destroy(st);
        return rc;
    }
    if (pthread_create(&st->watchdog, NULL, watchdog_main, st)) {
        tcp_destroy(st);
        return -ENOMEM;
    }
    st->watchdog_started = 1;
    *state = st;
    return 0;
}

/* the peer runs tcp too: it published a data port */
static int tcp_can_reach(void *state, const cr__seg_desc_t *d)
{
    (void)state;
    return d->n_nics > 0 && d->nics[0].port != 0;
}

const struct cr_xfer_transport_ops cr__xfer_tcp_ops = {
    .name = "tcp",
    .create = tcp_create,
    .destroy = tcp_destroy,
    .can_reach = tcp_can_reach,
    .submit = cr__tcp_submit,
    .notify = NULL, /* notifications travel on the engine's control channel */
    .peer_forget = NULL, /* connections are kept for a reopen; freed at destroy */
    /* READs only: the receiver hashes each slice right after it landed,
     * from cache. Not WRITEs: a hash in a connection's one sender thread
     * delays every slice behind it (measured: the store's tcp saves got
     * slower, docs/benchmarks.md "checksums in the Transfer Engine") */
    .crc_pieces = 1u << CR_XFER_READ,
};
