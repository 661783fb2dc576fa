/* TLS front for the HTTP servers (httpd_tls.h). */
#include "common/httpd_tls.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "crescent/common.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "common/status.h"

#define RELAY_BUF 16384
#define RELAY_IO_MS 30000    /* bound on one blocked write either way */
#define RELAY_IDLE_MS 120000 /* safety net: MHD's own idle timeout is shorter */
#define CONN_STACK (256u << 10)

typedef struct slot {
    struct cr__httpd_tls *f;
    int fd; /* -1 = free; guarded by f->mu */
    int evicted; /* closing for a newcomer: not counted; guarded by f->mu */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    uint64_t accepted_ms;
    /* written by the connection's thread, read by the acceptor */
    _Atomic int handshaking;
    _Atomic uint64_t in_ms, out_ms; /* last bytes relayed client->MHD, MHD->client */
} slot_t;

struct cr__httpd_tls {
    const cr__tls_t *tls;
    struct MHD_Daemon *mhd;
    int lfd, wake;
    pthread_t acceptor;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stopping;   /* guarded by mu */
    unsigned alive; /* connection threads; guarded by mu */
    unsigned n, per_source; /* live connections: all, from one address */
    unsigned cap;           /* slots: n live + room for evicted ones closing */
    slot_t *slots;
    atomic_ulong refused, evicted;
    cr__net_peer_t *peers; /* the acceptor's scratch for slot_take_locked */
    unsigned *peer_idx;
};

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void slot_release(slot_t *s)
{
    cr__httpd_tls_t *f = s->f;
    pthread_mutex_lock(&f->mu);
    close(s->fd);
    s->fd = -1;
    f->alive--;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* Relays between the TLS stream and MHD's socketpair end until one side
 * closes or stalls past RELAY_IO_MS. */
static void relay(slot_t *s, cr__tls_conn_t *tc, int tcp, int pair)
{
    char buf[RELAY_BUF];
    int tls_eof = 0;
    for (;;) {
        /* TLS -> MHD: everything decrypted so far */
        while (!tls_eof) {
            ssize_t k = cr__tls_conn_read(tc, buf, sizeof buf);
            if (k > 0) {
                atomic_store_explicit(&s->in_ms, cr__now_ms(), memory_order_relaxed);
                if (cr__net_write_full(pair, buf, (size_t)k, RELAY_IO_MS))
                    return;
                continue;
            }
            if (k == 0) {
                tls_eof = 1; /* the client is done sending; MHD may still answer */
                shutdown(pair, SHUT_WR);
                break;
            }
            if (k == -EAGAIN)
                break;
            return;
        }
        /* MHD -> TLS */
        for (;;) {
            ssize_t k = recv(pair, buf, sizeof buf, MSG_DONTWAIT);
            if (k > 0) {
                atomic_store_explicit(&s->out_ms, cr__now_ms(), memory_order_relaxed);
                if (cr__tls_conn_write_full(tc, buf, (size_t)k, RELAY_IO_MS))
                    return;
                continue;
            }
            if (k == 0)
                return; /* MHD closed the connection */
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return;
        }
        struct pollfd p[2] = {
            {.fd = tcp, .events = tls_eof ? 0 : cr__tls_conn_want(tc)},
            {.fd = pair, .events = POLLIN},
        };
        int pr = poll(p, 2, RELAY_IDLE_MS);
        if (pr == 0)
            return;
        if (pr < 0 && errno != EINTR)
            return;
        if ((p[0].revents & (POLLERR | POLLNVAL)) || (tls_eof && (p[0].revents & POLLHUP)))
            return;
    }
}

static void *conn_main(void *arg)
{
    slot_t *s = arg;
    cr__httpd_tls_t *f = s->f;
    int fd = s->fd;
    cr__tls_conn_t *tc = NULL;
    set_nonblock(fd);
    int rc = cr__tls_conn_new(f->tls, fd, 1, &tc);
    if (!rc)
        rc = cr__tls_conn_handshake(tc, CR__TLS_HANDSHAKE_MS);
    if (rc) {
        atomic_fetch_add(&f->refused, 1);
        CR_LOG_RL(CR__LOG_WARN, "httpd", "refused a TLS connection: %s",
                  rc == -EACCES   ? "no certificate of the cluster CA"
                  : rc == -EPROTO ? "not TLS"
                                  : cr_strerror(rc));
        goto out;
    }
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp))
        goto out;
    set_nonblock(sp[0]);
    pthread_mutex_lock(&f->mu);
    int stopping = f->stopping;
    pthread_mutex_unlock(&f->mu);
    /* MHD owns (and closes) sp[1] from here on, also when this fails; the
     * daemon stays alive until this thread is gone (stop waits for it) */
    if (stopping ||
        MHD_add_connection(f->mhd, sp[1], (const struct sockaddr *)&s->addr, s->addrlen) !=
            MHD_YES) {
        if (stopping)
            close(sp[1]);
        close(sp[0]);
        goto out;
    }
    atomic_store(&s->handshaking, 0);
    relay(s, tc, fd, sp[0]);
    close(sp[0]);
out:
    cr__tls_conn_free(tc);
    slot_release(s);
    return NULL;
}

/* Since when slot s is idle for cr__net_fair_victim: handshaking counts
 * from the accept; relaying, a request in progress is bytes in after the
 * last bytes out (the front sees no HTTP), else idle since the last reply. */
static uint64_t slot_idle_ms(slot_t *s)
{
    if (atomic_load(&s->handshaking))
        return s->accepted_ms;
    uint64_t in = atomic_load_explicit(&s->in_ms, memory_order_relaxed);
    uint64_t out = atomic_load_explicit(&s->out_ms, memory_order_relaxed);
    if (in > out)
        return CR__NET_BUSY;
    return out > s->accepted_ms ? out : s->accepted_ms;
}

/* Takes a slot for a connection from ss (f->mu held): refuses past
 * per_source live connections from the address; at n live ones closes the
 * busiest source's longest-idle connection for it, or refuses it
 * (cr__net_fair_victim). Returns the slot or NULL; *why says why not. */
static slot_t *slot_take_locked(cr__httpd_tls_t *f, const struct sockaddr_storage *ss,
                                const char **why)
{
    cr__net_peer_t *peers = f->peers;
    unsigned *idx = f->peer_idx;
    slot_t *free_slot = NULL;
    unsigned live = 0, same = 0;
    for (unsigned i = 0; i < f->cap; i++) {
        slot_t *s = &f->slots[i];
        if (s->fd < 0) {
            if (!free_slot)
                free_slot = s;
            continue;
        }
        if (s->evicted)
            continue;
        same += cr__net_same_source(&s->addr, ss);
        peers[live] = (cr__net_peer_t){&s->addr, slot_idle_ms(s)};
        idx[live++] = i;
    }
    if (same >= f->per_source) {
        *why = "per-source TLS connection limit reached";
        return NULL;
    }
    if (!free_slot) {
        *why = "TLS connection limit reached (connections closing)";
        return NULL;
    }
    if (live >= f->n) {
        int v = cr__net_fair_victim(peers, (int)live, ss);
        if (v < 0) {
            *why = "TLS connection limit reached and this source is among the busiest";
            return NULL;
        }
        slot_t *victim = &f->slots[idx[v]];
        victim->evicted = 1;
        shutdown(victim->fd, SHUT_RDWR); /* ends its handshake or relay */
        atomic_fetch_add(&f->evicted, 1);
        CR_LOG_RL(CR__LOG_WARN, "httpd", "TLS connection limit (%u) reached: closed the "
                  "longest-idle connection of the busiest source for a new one", f->n);
    }
    return free_slot;
}

static void *acceptor_main(void *arg)
{
    cr__httpd_tls_t *f = arg;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, CONN_STACK);
    for (;;) {
        struct pollfd p[2] = {{.fd = f->lfd, .events = POLLIN}, {.fd = f->wake, .events = POLLIN}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(f->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        const char *why = NULL;
        pthread_mutex_lock(&f->mu);
        slot_t *s = slot_take_locked(f, &ss, &why);
        if (s) {
            s->fd = fd;
            s->evicted = 0;
            s->addr = ss;
            s->addrlen = sl;
            s->accepted_ms = cr__now_ms();
            atomic_store(&s->handshaking, 1);
            atomic_store(&s->in_ms, 0);
            atomic_store(&s->out_ms, 0);
            f->alive++;
        }
        pthread_mutex_unlock(&f->mu);
        if (!s) {
            CR_LOG_RL(CR__LOG_WARN, "httpd", "%s, refusing", why);
            close(fd);
            continue;
        }
        pthread_t t;
        if (pthread_create(&t, &at, conn_main, s)) {
            pthread_mutex_lock(&f->mu);
            s->fd = -1;
            f->alive--;
            pthread_mutex_unlock(&f->mu);
            close(fd);
        }
    }
    pthread_attr_destroy(&at);
    return NULL;
}

int cr__httpd_tls_start(const cr__tls_t *tls, int lfd, struct MHD_Daemon *mhd,
                        unsigned max_conns, unsigned per_source, cr__httpd_tls_t **out)
{
    cr__httpd_tls_t *f = calloc(1, sizeof *f);
    if (!f) {
        close(lfd);
        return -ENOMEM;
    }
    f->tls = tls;
    f->mhd = mhd;
    f->lfd = lfd;
    f->n = max_conns ? max_conns : 1;
    f->per_source = per_source ? per_source : f->n;
    f->cap = 2 * f->n;
    f->slots = calloc(f->cap, sizeof *f->slots);
    f->peers = calloc(f->cap, sizeof *f->peers);
    f->peer_idx = calloc(f->cap, sizeof *f->peer_idx);
    f->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int rc = 0;
    if (!f->slots || !f->peers || !f->peer_idx || f->wake < 0) {
        rc = f->wake < 0 ? CR__ERRNO() : -ENOMEM;
        goto fail;
    }
    for (unsigned i = 0; i < f->cap; i++) {
        f->slots[i].f = f;
        f->slots[i].fd = -1;
    }
    set_nonblock(lfd);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if ((rc = -pthread_create(&f->acceptor, NULL, acceptor_main, f))) {
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->mu);
        goto fail;
    }
    *out = f;
    return 0;
fail:
    if (f->wake >= 0)
        close(f->wake);
    close(lfd);
    free(f->peer_idx);
    free(f->peers);
    free(f->slots);
    free(f);
    return rc;
}

void cr__httpd_tls_stop(cr__httpd_tls_t *f)
{
    if (!f)
        return;
    uint64_t one = 1;
    if (write(f->wake, &one, sizeof one) < 0) {
        /* cannot fail for a fresh eventfd */
    }
    pthread_join(f->acceptor, NULL);
    pthread_mutex_lock(&f->mu);
    f->stopping = 1;
    for (unsigned i = 0; i < f->cap; i++)
        if (f->slots[i].fd >= 0)
            shutdown(f->slots[i].fd, SHUT_RDWR); /* ends handshakes and relays */
    while (f->alive)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    close(f->wake);
    close(f->lfd);
    free(f->peer_idx);
    free(f->peers);
    free(f->slots);
    free(f);
}

unsigned long cr__httpd_tls_refused(const cr__httpd_tls_t *f)
{
    return f ? atomic_load(&f->refused) : 0;
}
