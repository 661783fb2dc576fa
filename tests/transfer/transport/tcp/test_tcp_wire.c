/* tcp transport wire protocol, spoken raw against a real engine:
 * header layout, the serving side's range checks (refused
 * WRITE/READ answered with -EFAULT, memory outside untouched, the stream
 * stays in sync), garbage / bad magic / bad version / unknown opcode /
 * oversized lengths closing only that connection, unregister waiting for
 * an in-flight remote access. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../core/xfer_test_util.h"
#include "common/net.h"
#include "transfer/segment_desc.h"
#include "transfer/transport/tcp/tcp_wire.h"
#include "transfer/xfer_internal.h"

#define REG_LEN (1u << 20)
#define GUARD 4096

typedef struct fix {
    cr_xfer_engine_t *e;
    char *mem; /* GUARD | registered REG_LEN | GUARD */
    char *reg;
} fix_t;

static int setup(void **state)
{
    fix_t *f = calloc(1, sizeof *f);
    if (xt_engine(&f->e, NULL, "tcp", 5000))
        return -1;
    f->mem = xt_alloc(REG_LEN + 2 * GUARD);
    memset(f->mem, 0xee, REG_LEN + 2 * GUARD);
    f->reg = f->mem + GUARD;
    if (cr_xfer_mem_register(f->e, f->reg, REG_LEN, NULL))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;
    cr_xfer_engine_destroy(f->e);
    xt_free(f->mem, REG_LEN + 2 * GUARD);
    free(f);
    return 0;
}

static int raw_connect(fix_t *f)
{
    int fd = cr__net_connect("127.0.0.1", f->e->local.nics[0].port, NULL, 2000);
    assert_true(fd >= 0);
    return fd;
}

static void send_hdr(int fd, uint8_t op, uint32_t seq, uint64_t addr, uint64_t len)
{
    cr__tcp_hdr_t h;
    cr__tcp_hdr_enc(&h, op, 0, seq, addr, len);
    assert_int_equal(cr__net_write_full(fd, &h, sizeof h, 2000), 0);
}

static cr__tcp_hdr_t recv_hdr(int fd)
{
    cr__tcp_hdr_t h;
    int rc = cr__net_read_full(fd, &h, sizeof h, 5000);
    if (rc)
        fprintf(stderr, "reading a reply header: %s\n", cr_strerror(rc));
    assert_int_equal(rc, 0);
    assert_int_equal(cr__tcp_hdr_dec(&h), 0);
    return h;
}

/* the server closed the connection: EOF (or reset) within 5 s */
static void assert_closed(int fd)
{
    char b[256];
    uint64_t end = xt_now_ms() + 5000;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        assert_true(poll(&p, 1, 5000) == 1);
        ssize_t n = recv(fd, b, sizeof b, 0);
        if (n <= 0)
            break; /* EOF or reset */
        assert_true(xt_now_ms() < end);
    }
    close(fd);
}

static void test_header_layout(void **state)
{
    (void)state;
    cr__tcp_hdr_t h;
    cr__tcp_hdr_enc(&h, CR__TCP_READ | CR__TCP_RESP, -14, 0x01020304u, 0x1122334455667788ull,
                    0x0a0b0c0d0e0f1011ull);
    const uint8_t *b = (const uint8_t *)&h;
    const uint8_t want[32] = {'C', 'R', 'T', 'E', 1, 0x82, 0, 0, 0xf2, 0xff, 0xff, 0xff,
                              4, 3, 2, 1, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
                              0x11, 0x10, 0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a};
    assert_memory_equal(b, want, 32);
    assert_int_equal(cr__tcp_hdr_dec(&h), 0);
    assert_int_equal(h.status, -14);
    assert_int_equal(h.seq, 0x01020304u);
    assert_int_equal(h.addr, 0x1122334455667788ull);
    assert_int_equal(h.len, 0x0a0b0c0d0e0f1011ull);
    h.magic = 0x12345678;
    assert_int_not_equal(cr__tcp_hdr_dec(&h), 0);
    /* request flags accumulate, little-endian at offset 6 */
    cr__tcp_hdr_enc(&h, CR__TCP_WRITE, 0, 1, 2, 3);
    cr__tcp_hdr_add_flags(&h, CR__TCP_F_WAITS);
    cr__tcp_hdr_set_cap(&h);
    assert_int_equal(b[6], CR__TCP_F_CAP | CR__TCP_F_WAITS);
    assert_int_equal(b[7], 0);
    assert_int_equal(cr__tcp_hdr_dec(&h), 0);
    assert_int_equal(h.flags, CR__TCP_F_CAP | CR__TCP_F_WAITS);
}

/* the data port is the transport's own: not the engine's (control) port */
static void test_data_port(void **state)
{
    fix_t *f = *state;
    assert_int_not_equal(f->e->local.nics[0].port, 0);
    assert_int_not_equal(f->e->local.nics[0].port, cr_xfer_engine_port(f->e));
}

static void check_guards(fix_t *f)
{
    for (size_t i = 0; i < GUARD; i++) {
        if ((unsigned char)f->mem[i] != 0xee || (unsigned char)f->reg[REG_LEN + i] != 0xee) {
            fprintf(stderr, "guard byte %zu changed\n", i);
            fail();
        }
    }
}

static void test_server_range_checks(void **state)
{
    fix_t *f = *state;
    uint64_t base = (uint64_t)(uintptr_t)f->reg;
    int fd = raw_connect(f);
    static char payload[8192];
    memset(payload, 0x42, sizeof payload);

    /* WRITE crossing the end of the registration: refused, payload drained */
    send_hdr(fd, CR__TCP_WRITE, 1, base + REG_LEN - 100, sizeof payload);
    assert_int_equal(cr__net_write_full(fd, payload, sizeof payload, 2000), 0);
    /* WRITE before the registration */
    send_hdr(fd, CR__TCP_WRITE, 2, base - 64, 128);
    assert_int_equal(cr__net_write_full(fd, payload, 128, 2000), 0);
    /* WRITE with an address that wraps around */
    send_hdr(fd, CR__TCP_WRITE, 3, UINT64_MAX - 10, 100);
    assert_int_equal(cr__net_write_full(fd, payload, 100, 2000), 0);
    /* valid WRITE on the same connection */
    xt_fill(payload, 4096, 0, 3);
    send_hdr(fd, CR__TCP_WRITE, 4, base + 10, 4096);
    assert_int_equal(cr__net_write_full(fd, payload, 4096, 2000), 0);
    const int want[] = {-EFAULT, -EFAULT, -EFAULT, 0};
    for (uint32_t i = 0; i < 4; i++) {
        cr__tcp_hdr_t h = recv_hdr(fd);
        assert_int_equal(h.opcode, CR__TCP_WRITE | CR__TCP_RESP);
        assert_int_equal(h.seq, i + 1);
        assert_int_equal(h.status, want[i]);
        assert_int_equal(h.len, 0);
    }
    assert_int_equal(xt_check(f->reg + 10, 4096, 0, 3, "valid raw WRITE"), -1);
    check_guards(f);

    /* READ out of range: error + zero padding; READ in range: the bytes */
    send_hdr(fd, CR__TCP_READ, 5, base + REG_LEN - 1, 2);
    send_hdr(fd, CR__TCP_READ, 6, base + 10, 4096);
    cr__tcp_hdr_t h = recv_hdr(fd);
    assert_int_equal(h.seq, 5);
    assert_int_equal(h.status, -EFAULT);
    assert_int_equal(h.len, 2); /* refused: zero padding of the requested length */
    char pad[2] = {1, 1};
    assert_int_equal(cr__net_read_full(fd, pad, 2, 2000), 0);
    assert_int_equal(pad[0] | pad[1], 0);
    h = recv_hdr(fd);
    assert_int_equal(h.seq, 6);
    assert_int_equal(h.status, 0);
    assert_int_equal(h.len, 4096);
    static char back[4096];
    assert_int_equal(cr__net_read_full(fd, back, 4096, 2000), 0);
    assert_int_equal(xt_check(back, 4096, 0, 3, "valid raw READ"), -1);
    close(fd);
}

static void test_garbage_closes_connection(void **state)
{
    fix_t *f = *state;
    /* a connection the server must keep serving while others misbehave */
    int good = raw_connect(f);

    int fd = raw_connect(f);
    char junk[64];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)(i * 37 + 11);
    assert_int_equal(cr__net_write_full(fd, junk, sizeof junk, 2000), 0);
    assert_closed(fd);

    cr__tcp_hdr_t h;
    fd = raw_connect(f); /* right magic, wrong version */
    cr__tcp_hdr_enc(&h, CR__TCP_READ, 0, 0, 0, 8);
    h.version = 99;
    assert_int_equal(cr__net_write_full(fd, &h, sizeof h, 2000), 0);
    assert_closed(fd);

    fd = raw_connect(f); /* unknown opcode */
    send_hdr(fd, 0x33, 0, 0, 0);
    assert_closed(fd);

    fd = raw_connect(f); /* oversized WRITE: closed before reading the payload */
    send_hdr(fd, CR__TCP_WRITE, 0, (uint64_t)(uintptr_t)f->reg, 1ull << 40);
    assert_closed(fd);

    fd = raw_connect(f); /* oversized READ */
    send_hdr(fd, CR__TCP_READ, 0, (uint64_t)(uintptr_t)f->reg, CR__TCP_MAX_SLICE + 1);
    assert_closed(fd);

    fd = raw_connect(f); /* retired opcodes: GET_DESC and NOTIFY are control messages now */
    send_hdr(fd, 3, 0, 0, 0);
    assert_closed(fd);
    fd = raw_connect(f);
    send_hdr(fd, 4, 0, 0, 3);
    assert_closed(fd);

    fd = raw_connect(f); /* half a header, then hang up */
    assert_int_equal(cr__net_write_full(fd, junk, 10, 2000), 0);
    close(fd);

    /* the untouched connection still works */
    send_hdr(good, CR__TCP_READ, 1, (uint64_t)(uintptr_t)f->reg, 8);
    h = recv_hdr(good);
    assert_int_equal(h.seq, 1);
    assert_int_equal(h.status, 0);
    char eight[8];
    assert_int_equal(cr__net_read_full(good, eight, sizeof eight, 2000), 0);
    close(good);

    /* and so does a real engine-to-engine transfer */
    cr_xfer_engine_t *a;
    assert_int_equal(xt_engine(&a, NULL, "tcp", 5000), 0);
    char *buf = xt_alloc(1u << 20);
    assert_int_equal(cr_xfer_mem_register(a, buf, 1u << 20, NULL), 0);
    cr_xfer_segment_t s;
    assert_int_equal(cr_xfer_segment_open(a, cr_xfer_engine_name(f->e), &s), 0);
    xt_fill(buf, 1u << 20, 0, 8);
    cr_xfer_request_t r = {CR_XFER_WRITE, buf, s, (uint64_t)(uintptr_t)f->reg, 1u << 20};
    assert_int_equal(cr_xfer_transfer_sync(a, &r, 1, NULL), 0);
    assert_int_equal(xt_check(f->reg, 1u << 20, 0, 8, "transfer after garbage"), -1);
    cr_xfer_engine_destroy(a);
    xt_free(buf, 1u << 20);
}

typedef struct unreg_arg {
    fix_t *f;
    int rc;
    volatile int done;
} unreg_arg_t;

static void *unreg_thread(void *p)
{
    unreg_arg_t *u = p;
    u->rc = cr_xfer_mem_unregister(u->f->e, u->f->reg);
    u->done = 1;
    return NULL;
}

static void test_unregister_waits_for_pins(void **state)
{
    fix_t *f = *state;
    int fd = raw_connect(f);
    static char half[REG_LEN / 2];
    memset(half, 0x17, sizeof half);
    /* a WRITE whose payload arrives in two halves: the server holds a pin */
    send_hdr(fd, CR__TCP_WRITE, 1, (uint64_t)(uintptr_t)f->reg, REG_LEN);
    assert_int_equal(cr__net_write_full(fd, half, sizeof half, 2000), 0);
    /* wait until the server holds the pin (it is receiving into the buffer) */
    uint64_t end = xt_now_ms() + 10000;
    int pins = 0;
    while (!pins && xt_now_ms() < end) {
        pthread_rwlock_rdlock(&f->e->mem_lock);
        pins = f->e->n_regs ? atomic_load(&f->e->regs[0]->pins) : 0;
        pthread_rwlock_unlock(&f->e->mem_lock);
        if (!pins)
            usleep(1000);
    }
    assert_int_equal(pins, 1);
    unreg_arg_t u = {.f = f};
    pthread_t th;
    pthread_create(&th, NULL, unreg_thread, &u);
    usleep(300000);
    assert_int_equal(u.done, 0); /* still pinned: unregister waits */
    assert_int_equal(cr__net_write_full(fd, half, sizeof half, 2000), 0);
    cr__tcp_hdr_t h = recv_hdr(fd);
    assert_int_equal(h.status, 0);
    pthread_join(th, NULL);
    assert_int_equal(u.rc, 0);
    /* now unregistered: the same WRITE is refused */
    send_hdr(fd, CR__TCP_WRITE, 2, (uint64_t)(uintptr_t)f->reg, 16);
    assert_int_equal(cr__net_write_full(fd, half, 16, 2000), 0);
    h = recv_hdr(fd);
    assert_int_equal(h.status, -EFAULT);
    close(fd);
    /* re-register so teardown stays symmetric */
    assert_int_equal(cr_xfer_mem_register(f->e, f->reg, REG_LEN, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_layout),
        cmocka_unit_test_setup_teardown(test_data_port, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_range_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_closes_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unregister_waits_for_pins, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
