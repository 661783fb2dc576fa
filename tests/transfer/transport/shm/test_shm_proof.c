/* shm without trust in metadata (issue 11, attack 3): a descriptor that
 * names an unrelated process of the same user — here a forked copy of the
 * victim engine, which has the very same buffer at the very same address —
 * must never get written by process_vm_writev. The metadata service is open
 * (security off), so rewriting the descriptor is the attacker's one step;
 * the shm ownership proof (SO_PEERCRED over the proof socket) is what stops
 * it, in both security modes. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "crescent/transfer.h"
#include "transfer/metadata/metadata.h"
#include "transfer/segment_desc.h"

#define BUF (1u << 20)

static cr_xfer_engine_t *engine(const char *uri)
{
    cr_xfer_params_t p = {.field_mask = CR_XFER_PARAM_METADATA_URI | CR_XFER_PARAM_NICS |
                                        CR_XFER_PARAM_TRANSPORTS | CR_XFER_PARAM_TIMEOUT_MS,
                          .metadata_uri = uri,
                          .nics = "127.0.0.1",
                          .transports = "tcp,shm",
                          .timeout_ms = 5000};
    cr_xfer_engine_t *e = NULL;
    assert_int_equal(cr_xfer_engine_create(&p, &e), 0);
    return e;
}

static void test_forged_pid_never_written(void **st)
{
    (void)st;
    cr__meta_server_t *ms;
    assert_int_equal(cr__meta_server_start("127.0.0.1", 0, "/metadata", 16u << 20, &ms), 0);
    char uri[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%u/metadata", cr__meta_server_port(ms));
    cr_xfer_engine_t *victim = engine(uri), *client = engine(uri);
    uint8_t *vbuf = mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *cbuf = mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(vbuf != MAP_FAILED && cbuf != MAP_FAILED);
    memset(vbuf, 'V', BUF);
    memset(cbuf, 'A', BUF);
    assert_int_equal(cr_xfer_mem_register(victim, vbuf, BUF, "cpu:0"), 0);
    assert_int_equal(cr_xfer_mem_register(client, cbuf, BUF, "cpu:0"), 0);

    /* the "unrelated process": same uid, same address space layout */
    pid_t bystander = fork();
    assert_true(bystander >= 0);
    if (bystander == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed test */
        for (;;)
            pause();
    }

    /* the attacker rewrites the victim's descriptor to name the bystander */
    cr__meta_t *m;
    assert_int_equal(cr__meta_open(uri, 5000, &m), 0);
    char key[512];
    snprintf(key, sizeof key, "%s%s", CR__SEG_KEY_PREFIX, cr_xfer_engine_name(victim));
    char *json;
    size_t len;
    assert_int_equal(cr__meta_get(m, key, &json, &len), 0);
    cr__seg_desc_t d;
    assert_int_equal(cr__seg_desc_decode(json, len, &d), 0);
    free(json);
    d.pid = (int32_t)bystander;
    assert_int_equal(cr__seg_desc_encode(&d, &json, &len), 0);
    cr__seg_desc_clear(&d);
    assert_int_equal(cr__meta_put(m, key, json, len), 0);
    free(json);
    cr__meta_close(m);

    cr_xfer_segment_t seg;
    assert_int_equal(cr_xfer_segment_open(client, cr_xfer_engine_name(victim), &seg), 0);
    const char *tr = cr_xfer_segment_transport(client, seg);
    print_message("transport chosen for the forged descriptor: %s\n", tr ? tr : "(none)");
    assert_false(tr && strcmp(tr, "shm") == 0);
    cr_xfer_request_t r = {.opcode = CR_XFER_WRITE,
                           .local_addr = cbuf,
                           .target = seg,
                           .target_addr = (uint64_t)(uintptr_t)vbuf,
                           .length = 4096};
    int res = 0;
    int rc = cr_xfer_transfer_sync(client, &r, 1, &res);
    print_message("write through the forged descriptor: %s / %s\n", cr_strerror(rc),
                  cr_strerror(res));

    /* the bystander's copy of the buffer is untouched, whatever happened */
    uint8_t got[4096];
    struct iovec l = {.iov_base = got, .iov_len = sizeof got};
    struct iovec rv = {.iov_base = vbuf, .iov_len = sizeof got};
    assert_int_equal(process_vm_readv(bystander, &l, 1, &rv, 1, 0), (ssize_t)sizeof got);
    for (size_t i = 0; i < sizeof got; i++)
        if (got[i] != 'V')
            fail_msg("byte %zu of the bystander's memory was overwritten", i);
    kill(bystander, SIGKILL);
    waitpid(bystander, NULL, 0);

    cr_xfer_segment_close(client, seg);
    cr_xfer_engine_destroy(client);
    cr_xfer_engine_destroy(victim);
    munmap(vbuf, BUF);
    munmap(cbuf, BUF);
    cr__meta_server_stop(ms);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forged_pid_never_written),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
