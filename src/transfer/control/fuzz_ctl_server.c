/* libFuzzer target for the engine's control channel, serving side: the
 * input is sent as the byte stream of one client connection to a real
 * engine's control listener (loopback). Whatever it holds (garbage,
 * truncated headers, unknown opcodes, oversized or malformed notifications,
 * GET_DESC with a payload), the server must answer or close that
 * connection and keep serving: after each input a descriptor fetch on a
 * fresh connection must succeed. */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/net.h"
#include "transfer/xfer_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static cr_xfer_engine_t *engine;
static uint16_t port;

static void init(void)
{
    cr_xfer_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_XFER_PARAM_TIMEOUT_MS;
    p.timeout_ms = 500;
    if (cr_xfer_engine_create(&p, &engine))
        abort();
    port = cr_xfer_engine_port(engine);
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

    /* the server still serves */
    char *json = NULL;
    size_t len = 0;
    if (cr__xfer_ctl_fetch_desc(engine, "127.0.0.1", port, 2000, &json, &len))
        abort();
    free(json);
    return 0;
}
