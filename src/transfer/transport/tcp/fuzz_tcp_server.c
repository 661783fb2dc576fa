/* libFuzzer target for the tcp transport's serving side: the input is sent
 * as the byte stream of one client connection to a real engine (loopback).
 * The engine has one registered buffer between two PROT_NONE guard pages,
 * so any access outside registered memory crashes. Whatever the stream
 * holds (garbage, truncated headers, out-of-range WRITE/READ, oversized
 * lengths, notifications), the server must answer or close that connection
 * and keep serving: after each input a READ of registered memory on a fresh
 * connection must succeed. The engine checks per-object capabilities (a
 * key is installed), so requests with and without capability trailers,
 * forged or malformed, go through cr__xfer_cap_check; the health READ
 * carries a genuine grant. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <time.h>

#include "common/net.h"
#include "transfer/capability.h"
#include "transfer/transport/tcp/tcp_internal.h"
#include "transfer/xfer_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PAGE 4096
#define REG (16 * PAGE)

static cr_xfer_engine_t *engine;
static uint16_t port; /* the tcp transport's data port */
static char *reg;
static const uint8_t cap_key[CR__CAP_KEY_LEN] = "fuzz-tcp-capability-key-32bytes";

static void init(void)
{
    cr_xfer_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_XFER_PARAM_TRANSPORTS | CR_XFER_PARAM_TIMEOUT_MS;
    p.transports = "tcp";
    p.timeout_ms = 500;
    if (cr_xfer_engine_create(&p, &engine))
        abort();
    char *m = mmap(NULL, REG + 2 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m + PAGE, REG, PROT_READ | PROT_WRITE))
        abort();
    reg = m + PAGE;
    if (cr_xfer_mem_register(engine, reg, REG, NULL))
        abort();
    port = engine->local.nics[0].port;
    cr__xfer_cap_key_set(engine, cap_key, 1, 0);
}

/* reads until EOF or 100 ms without data */
static void drain(int fd)
{
    static char buf[1 << 16];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            return;
        if (recv(fd, buf, sizeof buf, 0) <= 0)
            return;
    }
}

static void wait_server_idle(void)
{
    tcp_state_t *st = cr__xfer_transport_state(engine, "tcp");
    for (int i = 0; i < 2000; i++) {
        pthread_mutex_lock(&st->srv_mu);
        int n = st->n_srv;
        pthread_mutex_unlock(&st->srv_mu);
        if (n == 0)
            return;
        usleep(500);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!engine)
        init();
    int fd = cr__net_connect("127.0.0.1", port, NULL, 2000);
    if (fd < 0)
        abort();
    if (size)
        cr__net_write_full(fd, data, size, 500); /* the server may close early */
    shutdown(fd, SHUT_WR);
    drain(fd);
    close(fd);
    wait_server_idle();

    /* the server still serves */
    fd = cr__net_connect("127.0.0.1", port, NULL, 2000);
    if (fd < 0)
        abort();
    struct {
        cr__tcp_hdr_t h;
        uint8_t cap[CR__CAP_LEN];
    } req;
    cr__tcp_hdr_t h;
    char got[64];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    cr__tcp_hdr_enc(&req.h, CR__TCP_READ, 0, 0, (uint64_t)(uintptr_t)reg, sizeof got);
    cr__tcp_hdr_set_cap(&req.h);
    if (cr__cap_mint(cap_key, CR__CAP_READ, 1, 0, (uint64_t)(uintptr_t)reg, sizeof got,
                     (uint64_t)ts.tv_sec * 1000 + 60000, req.cap))
        abort();
    if (cr__net_write_full(fd, &req, sizeof req, 2000) || cr__net_read_full(fd, &h, sizeof h, 2000) ||
        cr__tcp_hdr_dec(&h) || h.opcode != (CR__TCP_READ | CR__TCP_RESP) || h.status ||
        h.len != sizeof got || cr__net_read_full(fd, got, sizeof got, 2000))
        abort();
    close(fd);
    wait_server_idle();
    return 0;
}
