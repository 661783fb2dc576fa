/* A fake peer for tests: its control listener answers GET_DESC with a
 * descriptor that has one large buffer and a tcp data port; every other
 * request, on either listener, is swallowed and never answered (a peer that
 * hangs). Header-only; one thread with poll(). */
#ifndef CR_TESTS_FAKE_PEER_H
#define CR_TESTS_FAKE_PEER_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/net.h"
#include "transfer/control/ctl_wire.h"
#include "transfer/segment_desc.h"
#include "transfer/transport/tcp/tcp_wire.h"

#define FAKE_BUF_ADDR 0x100000000ull
#define FAKE_BUF_LEN (1ull << 30)

typedef struct fake_peer {
    int lfd;       /* control listener (the name's port) */
    uint16_t port;
    int dfd;       /* tcp data listener */
    uint16_t dport;
    int wake[2];
    pthread_t th;
    char name[64];
    int n_conns; /* connections accepted so far */
    uint16_t desc_dport; /* if set, the descriptor names this data port (a test's own server) */
} fake_peer_t;

static int fake_send_desc(fake_peer_t *f, int fd)
{
    cr__seg_desc_t d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "%s", f->name);
    snprintf(d.host_id, sizeof d.host_id, "fake-host");
    d.pid = 1;
    d.version = 1;
    d.rpc_port = f->port;
    d.n_nics = 1;
    snprintf(d.nics[0].addr, sizeof d.nics[0].addr, "127.0.0.1");
    d.nics[0].port = f->desc_dport ? f->desc_dport : f->dport;
    cr_xfer_buffer_info_t b;
    memset(&b, 0, sizeof b);
    b.addr = FAKE_BUF_ADDR;
    b.len = FAKE_BUF_LEN;
    snprintf(b.location, sizeof b.location, "cpu:0");
    d.n_buffers = 1;
    d.buffers = &b;
    char *json;
    size_t len;
    if (cr__seg_desc_encode(&d, &json, &len))
        return -1;
    cr__ctl_hdr_t h;
    cr__ctl_hdr_enc(&h, CR__CTL_GET_DESC | CR__CTL_RESP, 0, (uint32_t)len);
    int rc = cr__net_write_full(fd, &h, sizeof h, 1000);
    if (!rc)
        rc = cr__net_write_full(fd, json, len, 1000);
    free(json);
    return rc;
}

static void fake_swallow(int fd, uint64_t left)
{
    static char sink[1 << 16];
    while (left) {
        ssize_t k = recv(fd, sink, left < sizeof sink ? left : sizeof sink, 0);
        if (k <= 0)
            break;
        left -= (uint64_t)k;
    }
}

/* one request on a control (ctl) or data connection; 0 to keep it */
static int fake_serve(fake_peer_t *f, int fd, int ctl)
{
    if (ctl) {
        cr__ctl_hdr_t h;
        if (recv(fd, &h, sizeof h, MSG_WAITALL) != (ssize_t)sizeof h || cr__ctl_hdr_dec(&h))
            return -1;
        if (h.opcode == CR__CTL_GET_DESC)
            fake_send_desc(f, fd);
        else
            fake_swallow(fd, h.len); /* NOTIFY: never answered */
        return 0;
    }
    cr__tcp_hdr_t h;
    if (recv(fd, &h, sizeof h, MSG_WAITALL) != (ssize_t)sizeof h || cr__tcp_hdr_dec(&h))
        return -1;
    if (h.opcode == CR__TCP_WRITE)
        fake_swallow(fd, h.len); /* never answered */
    return 0;
}

#define FAKE_MAX_FDS 67

static void *fake_main(void *arg)
{
    fake_peer_t *f = arg;
    struct pollfd p[FAKE_MAX_FDS];
    int is_ctl[FAKE_MAX_FDS];
    int n = 3;
    p[0].fd = f->wake[0];
    p[0].events = POLLIN;
    p[1].fd = f->lfd;
    p[1].events = POLLIN;
    p[2].fd = f->dfd;
    p[2].events = POLLIN;
    for (;;) {
        if (poll(p, (nfds_t)n, -1) < 0)
            continue;
        if (p[0].revents)
            break;
        for (int l = 1; l <= 2; l++) {
            if (!(p[l].revents & POLLIN) || n >= FAKE_MAX_FDS)
                continue;
            int fd = accept(p[l].fd, NULL, NULL);
            if (fd >= 0) {
                p[n].fd = fd;
                p[n].events = POLLIN;
                p[n].revents = 0;
                is_ctl[n] = l == 1;
                n++;
                __atomic_add_fetch(&f->n_conns, 1, __ATOMIC_SEQ_CST);
            }
        }
        for (int i = 3; i < n; i++) {
            if (!p[i].revents)
                continue;
            if (fake_serve(f, p[i].fd, is_ctl[i])) {
                close(p[i].fd);
                is_ctl[i] = is_ctl[n - 1];
                p[i] = p[--n];
                i--;
            }
        }
    }
    for (int i = 3; i < n; i++)
        close(p[i].fd);
    return NULL;
}

static inline int fake_peer_start(fake_peer_t *f)
{
    memset(f, 0, sizeof *f);
    f->lfd = cr__net_listen("127.0.0.1", 0, 64, &f->port);
    f->dfd = cr__net_listen("127.0.0.1", 0, 64, &f->dport);
    if (f->lfd < 0 || f->dfd < 0 || pipe(f->wake))
        return -1;
    snprintf(f->name, sizeof f->name, "127.0.0.1:%u", f->port);
    return pthread_create(&f->th, NULL, fake_main, f) ? -1 : 0;
}

static inline void fake_peer_stop(fake_peer_t *f)
{
    char c = 1;
    if (write(f->wake[1], &c, 1) != 1)
        return;
    pthread_join(f->th, NULL);
    close(f->lfd);
    close(f->dfd);
    close(f->wake[0]);
    close(f->wake[1]);
}

#endif
