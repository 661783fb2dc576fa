/* Control channel, serving side: one listener per NIC on one port, an
 * acceptor thread, one thread per accepted connection (at most
 * CR__XFER_CTL_MAX_CONNS). Each connection first passes the engine's
 * connection-setup hook, then is answered request by request; a bad header
 * closes that connection only, an idle one is closed after
 * CR__XFER_CTL_IDLE_MS. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/net.h"
#include "common/status.h"
#include "transfer/control/control.h"
#include "transfer/control/ctl_wire.h"
#include "transfer/xfer_internal.h"

#define LOGC "xfer-ctl"
#define CTL_BACKLOG 128
#define CTL_STACK (128u << 10)

typedef struct ctl_conn {
    struct cr__xfer_ctl *ctl;
    struct ctl_conn *prev, *next; /* ctl->conns, guarded by ctl->mu */
    int fd;
    struct sockaddr_storage src; /* the client's address (per-source cap) */
} ctl_conn_t;

struct cr__xfer_ctl {
    cr_xfer_engine_t *engine;
    int timeout_ms;
    atomic_int stopping;
    int n_listen;
    int listen_fd[CR_XFER_MAX_NICS];
    int wake[2]; /* interrupts the acceptor's poll */
    pthread_t acceptor;
    int acceptor_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;  /* n_conns dropped */
    ctl_conn_t *conns;  /* guarded by mu */
    int n_conns;        /* guarded by mu */
};

/* Answers one request. Returns 0 to go on, <0 to close the connection. */
static int serve_one(ctl_conn_t *cc, const cr__ctl_hdr_t *h)
{
    cr_xfer_engine_t *e = cc->ctl->engine;
    int to = cc->ctl->timeout_ms;
    cr__ctl_hdr_t r;
    int rc;
    switch (h->opcode) {
    case CR__CTL_GET_DESC: {
        if (h->len != 0)
            return -EPROTO;
        char *json = NULL;
        size_t len = 0;
        int status = cr__xfer_local_desc_json(e, &json, &len);
        if (!status && len > CR__SEG_DESC_MAX_JSON)
            status = -EMSGSIZE;
        cr__ctl_hdr_enc(&r, CR__CTL_GET_DESC | CR__CTL_RESP, status, status ? 0 : (uint32_t)len);
        rc = cr__net_write_full(cc->fd, &r, sizeof r, to);
        if (!rc && !status)
            rc = cr__net_write_full(cc->fd, json, len, to);
        free(json);
        return rc;
    }
    case CR__CTL_NOTIFY: {
        if (h->len > CR__CTL_MAX_NOTIFY)
            return -EPROTO;
        char buf[CR__CTL_MAX_NOTIFY];
        if ((rc = cr__net_read_full(cc->fd, buf, h->len, to)) != 0)
            return rc;
        int status = cr__xfer_notify_payload_deliver(e, buf, h->len);
        cr__ctl_hdr_enc(&r, CR__CTL_NOTIFY | CR__CTL_RESP, status, 0);
        return cr__net_write_full(cc->fd, &r, sizeof r, to);
    }
    default:
        return -EPROTO;
    }
}

static void *conn_main(void *arg)
{
    ctl_conn_t *cc = arg;
    cr__xfer_ctl_t *ctl = cc->ctl;
    int rc = cr__xfer_conn_accepted(ctl->engine, cc->fd, ctl->timeout_ms);
    while (!rc) {
        struct pollfd p = {.fd = cc->fd, .events = POLLIN};
        int n = poll(&p, 1, CR__XFER_CTL_IDLE_MS);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || atomic_load(&ctl->stopping)) {
            rc = n < 0 ? CR__ERRNO() : -ECANCELED; /* idle, or the engine stops */
            break;
        }
        cr__ctl_hdr_t h;
        if ((rc = cr__net_read_full(cc->fd, &h, sizeof h, ctl->timeout_ms)) != 0)
            break;
        if (cr__ctl_hdr_dec(&h)) {
            CR_LOG_RL(CR__LOG_WARN, LOGC,
                      "bad header (magic/version) from a client: closing its connection");
            rc = -EPROTO;
            break;
        }
        if ((rc = serve_one(cc, &h)) == -EPROTO)
            CR_LOG_RL(CR__LOG_WARN, LOGC,
                      "bad request (opcode %u, len %u): closing the connection", h.opcode,
                      h.len);
    }
    CR_LOG_DEBUG(LOGC, "control connection closed: %s", cr_strerror(rc));
    pthread_mutex_lock(&ctl->mu);
    if (cc->prev)
        cc->prev->next = cc->next;
    else
        ctl->conns = cc->next;
    if (cc->next)
        cc->next->prev = cc->prev;
    ctl->n_conns--;
    close(cc->fd);
    free(cc);
    pthread_cond_broadcast(&ctl->cv);
    pthread_mutex_unlock(&ctl->mu);
    return NULL;
}

static void accept_one(cr__xfer_ctl_t *ctl, int lfd)
{
    struct sockaddr_storage src;
    socklen_t sl = sizeof src;
    memset(&src, 0, sizeof src);
    int fd = accept4(lfd, (struct sockaddr *)&src, &sl, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    /* a reply is a header and a body in two writes: with Nagle the body
     * waits for the header's ACK, which a client that just ran the key
     * handshake delays by ~40 ms (its socket left quick-ack mode) */
    cr__net_set_nodelay(fd);
    ctl_conn_t *cc = calloc(1, sizeof *cc);
    if (!cc) {
        close(fd);
        return;
    }
    cc->ctl = ctl;
    cc->fd = fd;
    cc->src = src;
    pthread_mutex_lock(&ctl->mu);
    int same = 0;
    for (ctl_conn_t *o = ctl->conns; o; o = o->next)
        same += cr__net_same_source(&o->src, &src);
    if (ctl->n_conns >= CR__XFER_CTL_MAX_CONNS ||
        same >= CR__XFER_CTL_MAX_CONNS / CR__XFER_PER_SOURCE_DIV || atomic_load(&ctl->stopping)) {
        pthread_mutex_unlock(&ctl->mu);
        CR_LOG_RL(CR__LOG_WARN, LOGC, "too many control connections%s: refusing one",
                  ctl->n_conns >= CR__XFER_CTL_MAX_CONNS ? "" : " from one address");
        close(fd);
        free(cc);
        return;
    }
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, CTL_STACK);
    cc->next = ctl->conns;
    if (ctl->conns)
        ctl->conns->prev = cc;
    ctl->conns = cc;
    ctl->n_conns++;
    pthread_t th;
    if (pthread_create(&th, &at, conn_main, cc)) {
        ctl->conns = cc->next;
        if (cc->next)
            cc->next->prev = NULL;
        ctl->n_conns--;
        close(fd);
        free(cc);
    }
    pthread_mutex_unlock(&ctl->mu);
    pthread_attr_destroy(&at);
}

static void *acceptor_main(void *arg)
{
    cr__xfer_ctl_t *ctl = arg;
    struct pollfd p[CR_XFER_MAX_NICS + 1];
    p[0].fd = ctl->wake[0];
    p[0].events = POLLIN;
    for (int i = 0; i < ctl->n_listen; i++) {
        p[i + 1].fd = ctl->listen_fd[i];
        p[i + 1].events = POLLIN;
    }
    while (!atomic_load(&ctl->stopping)) {
        if (poll(p, (nfds_t)ctl->n_listen + 1, -1) < 0)
            continue;
        if (p[0].revents)
            break;
        for (int i = 1; i <= ctl->n_listen; i++)
            if (p[i].revents & POLLIN)
                accept_one(ctl, p[i].fd);
    }
    return NULL;
}

void cr__xfer_ctl_destroy(cr__xfer_ctl_t *ctl)
{
    if (!ctl)
        return;
    atomic_store(&ctl->stopping, 1);
    if (ctl->acceptor_started) {
        char c = 1;
        if (write(ctl->wake[1], &c, 1) < 0) {
            /* pipe full: the acceptor is already due to wake up */
        }
        pthread_join(ctl->acceptor, NULL);
    }
    for (int i = 0; i < ctl->n_listen; i++)
        close(ctl->listen_fd[i]);
    pthread_mutex_lock(&ctl->mu);
    for (ctl_conn_t *cc = ctl->conns; cc; cc = cc->next)
        shutdown(cc->fd, SHUT_RDWR);
    while (ctl->n_conns > 0)
        pthread_cond_wait(&ctl->cv, &ctl->mu);
    pthread_mutex_unlock(&ctl->mu);
    if (ctl->wake[0] >= 0) {
        close(ctl->wake[0]);
        close(ctl->wake[1]);
    }
    pthread_mutex_destroy(&ctl->mu);
    pthread_cond_destroy(&ctl->cv);
    free(ctl);
}

int cr__xfer_ctl_create(cr_xfer_engine_t *engine, const cr__xfer_config_t *cfg, uint16_t *port,
                        cr__xfer_ctl_t **out)
{
    cr__xfer_ctl_t *ctl = calloc(1, sizeof *ctl);
    if (!ctl)
        return -ENOMEM;
    ctl->engine = engine;
    ctl->timeout_ms = (int)cfg->timeout_ms;
    ctl->wake[0] = ctl->wake[1] = -1;
    pthread_mutex_init(&ctl->mu, NULL);
    pthread_cond_init(&ctl->cv, NULL);
    int rc = cr__net_listen_all((const char(*)[64])cfg->nics, cfg->n_nics, cfg->port, CTL_BACKLOG,
                                ctl->listen_fd, port);
    if (rc)
        goto fail;
    ctl->n_listen = (int)cfg->n_nics;
    if (pipe2(ctl->wake, O_CLOEXEC | O_NONBLOCK)) {
        rc = CR__ERRNO();
        ctl->wake[0] = ctl->wake[1] = -1;
        goto fail;
    }
    if (pthread_create(&ctl->acceptor, NULL, acceptor_main, ctl)) {
        rc = -ENOMEM;
        goto fail;
    }
    ctl->acceptor_started = 1;
    *out = ctl;
    return 0;
fail:
    cr__xfer_ctl_destroy(ctl);
    return rc;
}
