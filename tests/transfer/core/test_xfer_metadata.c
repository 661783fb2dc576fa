/* The engine with a central metadata service (the embedded HTTP server,
 * Mooncake's contract): the descriptor is published under
 * crescent/segment/<name>, republished on every (un)registration, deleted
 * on destroy; peers open segments by name; a target restarted on another
 * port (same name) is found again after a failed request marks the cached
 * descriptor stale. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include "transfer/metadata/metadata.h"
#include "transfer/segment_desc.h"
#include "transfer/xfer_internal.h"
#include "xfer_test_util.h"

static cr__meta_server_t *srv;
static char uri[128];

static int group_setup(void **state)
{
    (void)state;
    if (cr__meta_server_start("127.0.0.1", 0, "/metadata", 64u << 20, &srv))
        return -1;
    snprintf(uri, sizeof uri, "http://127.0.0.1:%u/metadata", cr__meta_server_port(srv));
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    cr__meta_server_stop(srv);
    return 0;
}

static int engine(const char *name, cr_xfer_engine_t **e)
{
    cr_xfer_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_XFER_PARAM_TRANSPORTS | CR_XFER_PARAM_METADATA_URI |
                   CR_XFER_PARAM_LOCAL_NAME | CR_XFER_PARAM_TIMEOUT_MS;
    p.transports = "tcp";
    p.metadata_uri = uri;
    p.local_name = name;
    p.timeout_ms = 5000;
    return cr_xfer_engine_create(&p, e);
}

/* the descriptor as stored in the service, or -ENOENT */
static int stored(const char *name, cr__seg_desc_t *d)
{
    cr__meta_t *m;
    assert_int_equal(cr__meta_open(uri, 2000, &m), 0);
    char key[512], *val = NULL;
    size_t len;
    snprintf(key, sizeof key, "%s%s", CR__SEG_KEY_PREFIX, name);
    int rc = cr__meta_get(m, key, &val, &len);
    if (!rc) {
        rc = cr__seg_desc_decode(val, len, d);
        free(val);
    }
    cr__meta_close(m);
    return rc;
}

static void test_publish_lifecycle(void **state)
{
    (void)state;
    cr_xfer_engine_t *e;
    assert_int_equal(engine("node-a", &e), 0);
    assert_string_equal(cr_xfer_engine_name(e), "node-a");
    cr__seg_desc_t d;
    assert_int_equal(stored("node-a", &d), 0);
    assert_int_equal(d.n_buffers, 0);
    assert_int_equal(d.n_nics, 1);
    assert_int_equal(d.rpc_port, cr_xfer_engine_port(e));
    assert_int_equal(d.nics[0].port, e->local.nics[0].port);
    uint64_t v0 = d.version;
    cr__seg_desc_clear(&d);

    static char buf[1 << 16];
    assert_int_equal(cr_xfer_mem_register(e, buf, sizeof buf, "cpu:1"), 0);
    assert_int_equal(stored("node-a", &d), 0);
    assert_int_equal(d.n_buffers, 1);
    assert_int_equal(d.buffers[0].addr, (uint64_t)(uintptr_t)buf);
    assert_int_equal(d.buffers[0].len, sizeof buf);
    assert_string_equal(d.buffers[0].location, "cpu:1");
    assert_true(d.version > v0);
    cr__seg_desc_clear(&d);

    assert_int_equal(cr_xfer_mem_unregister(e, buf), 0);
    assert_int_equal(stored("node-a", &d), 0);
    assert_int_equal(d.n_buffers, 0);
    uint64_t last = d.version;
    cr__seg_desc_clear(&d);

    cr_xfer_engine_destroy(e);
    assert_int_equal(stored("node-a", &d), -ENOENT);

    /* re-created in the same process (same pid and host): its versions are
     * not its predecessor's, so peers see another descriptor */
    assert_int_equal(engine("node-a", &e), 0);
    assert_int_equal(stored("node-a", &d), 0);
    assert_true(d.version > last);
    cr__seg_desc_clear(&d);
    cr_xfer_engine_destroy(e);
}

static void test_open_by_name_and_restart(void **state)
{
    (void)state;
    cr_xfer_engine_t *a, *b;
    assert_int_equal(engine("initiator", &a), 0);
    assert_int_equal(engine("target", &b), 0);
    size_t len = 4u << 20;
    char *abuf = xt_alloc(len), *bbuf = xt_alloc(len);
    assert_int_equal(cr_xfer_mem_register(a, abuf, len, NULL), 0);
    assert_int_equal(cr_xfer_mem_register(b, bbuf, len, NULL), 0);
    cr_xfer_segment_t s;
    assert_int_equal(cr_xfer_segment_open(a, "no-such-segment", &s), -ENOENT);
    assert_int_equal(cr_xfer_segment_open(a, "target", &s), 0);
    xt_fill(abuf, len, 0, 3);
    cr_xfer_request_t r = {CR_XFER_WRITE, abuf, s, (uint64_t)(uintptr_t)bbuf, len};
    assert_int_equal(cr_xfer_transfer_sync(a, &r, 1, NULL), 0);
    assert_int_equal(xt_check(bbuf, len, 0, 3, "via metadata"), -1);

    /* the target restarts (new port, same name, buffer elsewhere) */
    uint16_t old_port = cr_xfer_engine_port(b);
    cr_xfer_engine_destroy(b);
    char *bbuf2 = xt_alloc(len);
    assert_int_equal(engine("target", &b), 0);
    assert_int_not_equal(cr_xfer_engine_port(b), old_port);
    assert_int_equal(cr_xfer_mem_register(b, bbuf2, len, NULL), 0);
    /* the old address first fails (the old port is gone) ... */
    int res = 0;
    int rc = cr_xfer_transfer_sync(a, &r, 1, &res);
    fprintf(stderr, "request to the restarted target with the old descriptor: %s\n",
            cr_strerror(rc));
    assert_true(rc < 0);
    /* ... which marks the descriptor stale: the new buffer is found */
    xt_fill(abuf, len, 0, 4);
    r.target_addr = (uint64_t)(uintptr_t)bbuf2;
    assert_int_equal(cr_xfer_transfer_sync(a, &r, 1, NULL), 0);
    assert_int_equal(xt_check(bbuf2, len, 0, 4, "after restart"), -1);

    cr_xfer_engine_destroy(a);
    cr_xfer_engine_destroy(b);
    xt_free(abuf, len);
    xt_free(bbuf, len);
    xt_free(bbuf2, len);
}

static void test_unreachable_service(void **state)
{
    (void)state;
    cr_xfer_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_XFER_PARAM_TRANSPORTS | CR_XFER_PARAM_METADATA_URI | CR_XFER_PARAM_TIMEOUT_MS;
    p.transports = "tcp";
    p.metadata_uri = "http://127.0.0.1:1/metadata"; /* nobody listens on port 1 */
    p.timeout_ms = 1000;
    cr_xfer_engine_t *e = NULL;
    assert_int_equal(cr_xfer_engine_create(&p, &e), -EHOSTUNREACH);
    p.metadata_uri = "ftp://nope";
    assert_int_equal(cr_xfer_engine_create(&p, &e), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_publish_lifecycle),
        cmocka_unit_test(test_open_by_name_and_restart),
        cmocka_unit_test(test_unreachable_service),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
