/* Multi-NIC over loopback addresses (127.0.0.1 and 127.0.0.2 are two
 * "NICs"): slices spread over both paths, a path failing mid-transfer (the
 * target's NIC goes down: listener closed, connections cut) has its slices
 * retried on the other path and every request still completes with the
 * right bytes; the repaired path is re-probed and used again; the topology
 * matrix picks preferred vs secondary NICs per memory location. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "transfer/transport/tcp/tcp_internal.h"
#include "transfer/xfer_internal.h"
#include "xfer_test_util.h"

#define NICS "127.0.0.1,127.0.0.2"
#define BUF (64u << 20)

static cr_xfer_engine_t *engine_with(const char *topology)
{
    cr_xfer_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_XFER_PARAM_TRANSPORTS | CR_XFER_PARAM_NICS | CR_XFER_PARAM_TIMEOUT_MS |
                   CR_XFER_PARAM_SLICE_SIZE | (topology ? CR_XFER_PARAM_TOPOLOGY_FILE : 0);
    p.transports = "tcp";
    p.nics = NICS;
    p.timeout_ms = 15000;
    p.slice_size = 256u << 10;
    p.topology_file = topology;
    cr_xfer_engine_t *e = NULL;
    int rc = cr_xfer_engine_create(&p, &e);
    if (rc)
        fprintf(stderr, "engine create: %s\n", cr_strerror(rc));
    return e;
}

static void nic_bytes(cr_xfer_engine_t *e, uint64_t out[CR_XFER_MAX_NICS])
{
    cr__xfer_tcp_debug_nic_bytes(cr__xfer_transport_state(e, "tcp"), out);
}

/* n WRITEs of 4 MiB from a's buffer into b's, the same offsets */
static int write_all(cr_xfer_engine_t *a, cr_xfer_segment_t s, char *abuf, uint64_t bbase,
                     size_t total, cr_xfer_batch_t **out_batch)
{
    size_t blk = 4u << 20, n = total / blk;
    cr_xfer_request_t *r = calloc(n, sizeof *r);
    for (size_t i = 0; i < n; i++) {
        size_t off = (i * blk) % BUF;
        r[i] = (cr_xfer_request_t){CR_XFER_WRITE, abuf + off, s, bbase + off, blk};
    }
    cr_xfer_batch_t *b;
    int rc = cr_xfer_batch_alloc(a, n, &b);
    if (!rc)
        rc = cr_xfer_batch_submit(b, r, n);
    free(r);
    if (rc)
        return rc;
    if (out_batch) {
        *out_batch = b;
        return 0;
    }
    rc = cr_xfer_batch_wait(b, 60000);
    cr_xfer_batch_free(b);
    return rc;
}

typedef struct fix {
    cr_xfer_engine_t *a, *b;
    char *abuf, *bbuf;
    cr_xfer_segment_t s;
} fix_t;

static int setup(void **state)
{
    fix_t *f = calloc(1, sizeof *f);
    f->a = engine_with(NULL);
    f->b = engine_with(NULL);
    f->abuf = xt_alloc(BUF);
    f->bbuf = xt_alloc(BUF);
    if (!f->a || !f->b || !f->abuf || !f->bbuf)
        return -1;
    xt_fill(f->abuf, BUF, 0, 21);
    if (cr_xfer_mem_register(f->a, f->abuf, BUF, "cpu:0") ||
        cr_xfer_mem_register(f->b, f->bbuf, BUF, "cpu:0") ||
        cr_xfer_segment_open(f->a, cr_xfer_engine_name(f->b), &f->s))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;
    cr_xfer_engine_destroy(f->a);
    cr_xfer_engine_destroy(f->b);
    xt_free(f->abuf, BUF);
    xt_free(f->bbuf, BUF);
    free(f);
    return 0;
}

static void test_descriptor_lists_both_nics(void **state)
{
    fix_t *f = *state;
    cr__xfer_peer_t *p = cr__xfer_peer_get(f->a, f->s);
    assert_non_null(p);
    cr__seg_nic_t nics[CR_XFER_MAX_NICS];
    assert_int_equal(cr__xfer_peer_nics(p, nics, CR_XFER_MAX_NICS), 2);
    assert_string_equal(nics[0].addr, "127.0.0.1");
    assert_string_equal(nics[1].addr, "127.0.0.2");
    /* the data port is the same on both NICs; the control channel has its own */
    assert_int_equal(nics[0].port, f->b->local.nics[0].port);
    assert_int_equal(nics[1].port, nics[0].port);
    assert_int_not_equal(nics[0].port, 0);
    assert_int_equal(p->desc.rpc_port, cr_xfer_engine_port(f->b));
    assert_int_not_equal(p->desc.rpc_port, nics[0].port);
}

static void test_aggregation(void **state)
{
    fix_t *f = *state;
    uint64_t before[CR_XFER_MAX_NICS], after[CR_XFER_MAX_NICS];
    nic_bytes(f->a, before);
    size_t total = xt_sanitized() ? (64u << 20) : (256u << 20);
    assert_int_equal(write_all(f->a, f->s, f->abuf, (uint64_t)(uintptr_t)f->bbuf, total, NULL), 0);
    nic_bytes(f->a, after);
    uint64_t d0 = after[0] - before[0], d1 = after[1] - before[1];
    fprintf(stderr, "bytes per local NIC: 127.0.0.1 %llu, 127.0.0.2 %llu\n",
            (unsigned long long)d0, (unsigned long long)d1);
    assert_int_equal(d0 + d1, total);
    assert_true(d0 > 0);
    assert_true(d1 > 0);
    assert_int_equal(xt_check(f->bbuf, total < BUF ? total : BUF, 0, 21, "aggregated"), -1);
}

static void test_failover_and_reprobe(void **state)
{
    fix_t *f = *state;
    size_t total = xt_sanitized() ? (256u << 20) : (2048u << 20);
    uint64_t before[CR_XFER_MAX_NICS], mid[CR_XFER_MAX_NICS], after[CR_XFER_MAX_NICS];
    nic_bytes(f->a, before);
    cr_xfer_batch_t *b;
    assert_int_equal(write_all(f->a, f->s, f->abuf, (uint64_t)(uintptr_t)f->bbuf, total, &b), 0);
    /* once bytes flow, the target's first NIC fails */
    cr_xfer_status_t st;
    uint64_t end = xt_now_ms() + 20000;
    do {
        cr_xfer_batch_status_all(b, &st);
        if (st.bytes_transferred > 0)
            break;
        usleep(200);
    } while (xt_now_ms() < end);
    assert_int_equal(st.state, CR_XFER_STATE_WAITING);
    assert_int_equal(cr__xfer_tcp_debug_nic(cr__xfer_transport_state(f->b, "tcp"), 0, 1), 0);
    nic_bytes(f->a, mid);
    int rc = cr_xfer_batch_wait(b, 120000);
    if (rc)
        fprintf(stderr, "batch across the failure: %s\n", cr_strerror(rc));
    assert_int_equal(rc, 0); /* every request completed */
    assert_int_equal(cr_xfer_batch_status_all(b, &st), 0);
    assert_int_equal(st.bytes_transferred, total);
    assert_int_equal(cr_xfer_batch_free(b), 0);
    nic_bytes(f->a, after);
    fprintf(stderr, "NIC0 %llu -> %llu -> %llu, NIC1 %llu -> %llu -> %llu\n",
            (unsigned long long)before[0], (unsigned long long)mid[0],
            (unsigned long long)after[0], (unsigned long long)before[1],
            (unsigned long long)mid[1], (unsigned long long)after[1]);
    assert_true(after[1] > mid[1]); /* the surviving path carried the rest */
    assert_int_equal(xt_check(f->bbuf, BUF, 0, 21, "after failover"), -1);

    /* while the NIC is down, new transfers go through the other path */
    memset(f->bbuf, 0, BUF);
    assert_int_equal(write_all(f->a, f->s, f->abuf, (uint64_t)(uintptr_t)f->bbuf, 64u << 20, NULL), 0);
    assert_int_equal(xt_check(f->bbuf, BUF, 0, 21, "while down"), -1);

    /* repair: after the re-probe interval the path carries data again */
    assert_int_equal(cr__xfer_tcp_debug_nic(cr__xfer_transport_state(f->b, "tcp"), 0, 0), 0);
    usleep(1500000);
    nic_bytes(f->a, before);
    uint64_t t_end = xt_now_ms() + 30000;
    do {
        assert_int_equal(write_all(f->a, f->s, f->abuf, (uint64_t)(uintptr_t)f->bbuf, 64u << 20, NULL), 0);
        nic_bytes(f->a, after);
    } while (after[0] == before[0] && xt_now_ms() < t_end);
    fprintf(stderr, "after repair NIC0 carried %llu bytes\n",
            (unsigned long long)(after[0] - before[0]));
    assert_true(after[0] > before[0]);
}

static void test_topology(void **state)
{
    (void)state;
    char path[] = "/tmp/crescent-topo-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *json = "{\"cpu:0\": [[\"127.0.0.1\"], [\"127.0.0.2\"]],"
                       " \"cpu:1\": [[\"127.0.0.2\"], [\"127.0.0.1\"]],"
                       " \"gpu:0\": [[\"10.9.9.9\"], []]}";
    assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    cr_xfer_engine_t *a = engine_with(path), *b = engine_with(NULL);
    assert_non_null(a);
    assert_non_null(b);
    size_t len = 16u << 20;
    char *m0 = xt_alloc(len), *m1 = xt_alloc(len), *t = xt_alloc(len);
    assert_int_equal(cr_xfer_mem_register(a, m0, len, "cpu:0"), 0);
    assert_int_equal(cr_xfer_mem_register(a, m1, len, "cpu:1"), 0);
    assert_int_equal(cr_xfer_mem_register(b, t, len, "cpu:0"), 0);
    cr_xfer_segment_t s;
    assert_int_equal(cr_xfer_segment_open(a, cr_xfer_engine_name(b), &s), 0);
    uint64_t n0[CR_XFER_MAX_NICS], n1[CR_XFER_MAX_NICS], n2[CR_XFER_MAX_NICS];
    nic_bytes(a, n0);
    cr_xfer_request_t r = {CR_XFER_WRITE, m0, s, (uint64_t)(uintptr_t)t, len};
    assert_int_equal(cr_xfer_transfer_sync(a, &r, 1, NULL), 0);
    nic_bytes(a, n1);
    assert_int_equal(n1[0] - n0[0], len); /* cpu:0 -> preferred 127.0.0.1 only */
    assert_int_equal(n1[1] - n0[1], 0);
    r.local_addr = m1;
    r.opcode = CR_XFER_READ;
    assert_int_equal(cr_xfer_transfer_sync(a, &r, 1, NULL), 0);
    nic_bytes(a, n2);
    assert_int_equal(n2[1] - n1[1], len); /* cpu:1 -> 127.0.0.2 only */
    assert_int_equal(n2[0] - n1[0], 0);

    /* preferred NIC's path fails: the secondary one takes over */
    assert_int_equal(cr__xfer_tcp_debug_nic(cr__xfer_transport_state(b, "tcp"), 0, 1), 0);
    xt_fill(m0, len, 0, 44);
    r.local_addr = m0;
    r.opcode = CR_XFER_WRITE;
    assert_int_equal(cr_xfer_transfer_sync(a, &r, 1, NULL), 0);
    assert_int_equal(xt_check(t, len, 0, 44, "via secondary NIC"), -1);

    cr_xfer_engine_destroy(a);
    cr_xfer_engine_destroy(b);
    xt_free(m0, len);
    xt_free(m1, len);
    xt_free(t, len);

    /* a malformed topology file is rejected */
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, "{\"cpu:0\": 5}", 12), 12);
    close(fd);
    assert_null(engine_with(path));
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_descriptor_lists_both_nics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_aggregation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failover_and_reprobe, setup, teardown),
        cmocka_unit_test(test_topology),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
