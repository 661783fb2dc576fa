/* A fake tcp peer for tests: answers GET_DESC with a descriptor that has one
 * large buffer, swallows every other request and never answers it (a peer
 * that hangs). Header-only; one thread with poll(). */
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
#include "transfer/segment_desc.h"
#include "transfer/transport/tcp/tcp_wire.h"

#define FAKE_BUF_ADDR 0x100000000ull
#define FAKE_BUF_LEN (1ull << 30)

typedef struct fake_peer {
    int lfd;
    uint16_t port;
    int wake[2];
    pthread_t th;
    char name[64];
    int n_conns; /* connections accepted so far */
} fake_peer_t;

static int fake_send_desc(fake_peer_t *f, int fd, uint32_t seq)
{
    cr__seg_desc_t d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "%s", f->name);
    snprintf(d.host_id, sizeof d.host_id, "fake-host");
    d.pid = 1;
    d.version = 1;
    d.n_nics = 1;
    snprintf(d.nics[0].addr, sizeof d.nics[0].addr, "127.0.0.1");
    d.nics[0].port = f->port;
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
    cr__tcp_hdr_t h;
    cr__tcp_hdr_enc(&h, CR__TCP_GET_DESC | CR__TCP_RESP, 0, seq, 0, len);
    int rc = cr__net_write_full(fd, &h, sizeof h, 1000);
    if (!rc)
        rc = cr__net_write_full(fd, json, len, 1000);
    free(json);
    return rc;
}

static void *fake_main(void *arg)
{
    fake_peer_t *f = arg;
    struct pollfd p[66];
    int n = 2;
    p[0].fd = f->wake[0];
    p[0].events = POLLIN;
    p[1].fd = f->lfd;
    p[1].events = POLLIN;
    static char sink[1 << 16];
    for (;;) {
        if (poll(p, (nfds_t)n, -1) < 0)
            continue;
        if (p[0].revents)
            break;
        if ((p[1].revents & POLLIN) && n < 66) {
            int fd = accept(f->lfd, NULL, NULL);
            if (fd >= 0) {
                p[n].fd = fd;
                p[n].events = POLLIN;
                p[n].revents = 0;
                n++;
                __atomic_add_fetch(&f->n_conns, 1, __ATOMIC_SEQ_CST);
            }
        }
        for (int i = 2; i < n; i++) {
            if (!p[i].revents)
                continue;
            cr__tcp_hdr_t h;
            ssize_t r = recv(p[i].fd, &h, sizeof h, MSG_WAITALL);
            if (r != (ssize_t)sizeof h || cr__tcp_hdr_dec(&h)) {
                close(p[i].fd);
                p[i] = p[--n];
                i--;
                continue;
            }
            if (h.opcode == CR__TCP_GET_DESC) {
                fake_send_desc(f, p[i].fd, h.seq);
            } else if (h.opcode == CR__TCP_WRITE || h.opcode == CR__TCP_NOTIFY) {
                uint64_t left = h.len; /* swallow the payload, never answer */
                while (left) {
                    ssize_t k = recv(p[i].fd, sink, left < sizeof sink ? left : sizeof sink, 0);
                    if (k <= 0)
                        break;
                    left -= (uint64_t)k;
                }
            }
        }
    }
    for (int i = 2; i < n; i++)
        close(p[i].fd);
    return NULL;
}

static inline int fake_peer_start(fake_peer_t *f)
{
    memset(f, 0, sizeof *f);
    f->lfd = cr__net_listen("127.0.0.1", 0, 64, &f->port);
    if (f->lfd < 0 || pipe(f->wake))
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
    close(f->wake[0]);
    close(f->wake[1]);
}

#endif
