/* Two engines in two processes (fork), p2p metadata over loopback:
 * READ/WRITE correctness across processes, a batch notification the target
 * checks the landed bytes against, and a target SIGKILLed in the middle of
 * a large batch (its requests fail with an error, nothing hangs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "xfer_test_util.h"

#define CHILD_BUF (64u << 20)
#define CHILD_SEED 11

/* ---- the target process ------------------------------------------------------ */

static void reply(cr_xfer_engine_t *e, const char *to, const char *msg)
{
    cr_xfer_segment_t s;
    if (cr_xfer_segment_open(e, to, &s) == 0) {
        cr_xfer_notify_send(e, s, msg, strlen(msg));
        cr_xfer_segment_close(e, s);
    }
}

/* Serves its buffer; on "check <seed> <off> <len>" verifies the bytes and
 * answers "ok" or "bad <offset>"; on "exit" leaves. */
static int child_main(int wfd)
{
    cr_xfer_engine_t *e;
    if (xt_engine(&e, NULL, "tcp", 10000))
        return 2;
    char *buf = xt_alloc(CHILD_BUF);
    xt_fill(buf, CHILD_BUF, 0, CHILD_SEED);
    if (!buf || cr_xfer_mem_register(e, buf, CHILD_BUF, "cpu:0"))
        return 3;
    char name[CR_XFER_NAME_MAX];
    snprintf(name, sizeof name, "%s\n", cr_xfer_engine_name(e));
    if (write(wfd, name, strlen(name)) < 0)
        return 4;
    close(wfd);
    static cr_xfer_notify_t n[8];
    uint64_t end = xt_now_ms() + 120000;
    while (xt_now_ms() < end) {
        size_t k = 0;
        cr_xfer_notify_poll(e, n, 8, &k);
        for (size_t i = 0; i < k; i++) {
            char m[128];
            size_t l = n[i].len < sizeof m - 1 ? n[i].len : sizeof m - 1;
            memcpy(m, n[i].msg, l);
            m[l] = 0;
            unsigned seed;
            unsigned long off, len;
            if (!strcmp(m, "exit")) {
                cr_xfer_engine_destroy(e);
                return 0;
            }
            if (sscanf(m, "check %u %lu %lu", &seed, &off, &len) == 3) {
                long bad = off + len <= CHILD_BUF ? xt_check(buf + off, len, 0, seed, "child")
                                                   : 0;
                char r[64];
                if (bad < 0)
                    snprintf(r, sizeof r, "ok");
                else
                    snprintf(r, sizeof r, "bad %ld", bad);
                reply(e, n[i].from, r);
            }
        }
        usleep(1000);
    }
    return 5;
}

static pid_t spawn_target(char *name, size_t cap)
{
    int p[2];
    if (pipe(p))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        _exit(child_main(p[1]));
    }
    close(p[1]);
    size_t got = 0;
    while (got < cap - 1) {
        ssize_t k = read(p[0], name + got, 1);
        if (k <= 0 || name[got] == '\n')
            break;
        got++;
    }
    name[got] = 0;
    close(p[0]);
    return got ? pid : -1;
}

static int wait_reply(cr_xfer_engine_t *e, char *out, size_t cap, int timeout_ms)
{
    static cr_xfer_notify_t n[4];
    uint64_t end = xt_now_ms() + (uint64_t)timeout_ms;
    while (xt_now_ms() < end) {
        size_t k = 0;
        cr_xfer_notify_poll(e, n, 1, &k);
        if (k) {
            size_t l = n[0].len < cap - 1 ? n[0].len : cap - 1;
            memcpy(out, n[0].msg, l);
            out[l] = 0;
            return 0;
        }
        usleep(1000);
    }
    return -ETIMEDOUT;
}

/* ---- tests --------------------------------------------------------------------- */

static void test_two_processes(void **state)
{
    (void)state;
    char name[CR_XFER_NAME_MAX];
    pid_t pid = spawn_target(name, sizeof name);
    assert_true(pid > 0);
    cr_xfer_engine_t *e;
    assert_int_equal(xt_engine(&e, NULL, "tcp", 10000), 0);
    size_t len = 16u << 20;
    char *buf = xt_alloc(len);
    assert_int_equal(cr_xfer_mem_register(e, buf, len, "cpu:0"), 0);
    cr_xfer_segment_t s;
    assert_int_equal(cr_xfer_segment_open(e, name, &s), 0);
    cr_xfer_buffer_info_t bi;
    size_t nb = 0;
    assert_int_equal(cr_xfer_segment_buffers(e, s, &bi, 1, &nb), 0);
    assert_int_equal(nb, 1);
    assert_int_equal(bi.len, CHILD_BUF);

    /* READ the child's pattern at an unaligned offset */
    cr_xfer_request_t r = {CR_XFER_READ, buf + 3, s, bi.addr + 1001, len - 3};
    assert_int_equal(cr_xfer_transfer_sync(e, &r, 1, NULL), 0);
    assert_int_equal(xt_check(buf + 3, len - 3, 1001, CHILD_SEED, "READ from child"), -1);

    /* WRITE a new pattern, notify after it landed; the child checks it */
    xt_fill(buf, len, 0, 12);
    cr_xfer_request_t w[4];
    for (int i = 0; i < 4; i++) {
        w[i].opcode = CR_XFER_WRITE;
        w[i].local_addr = buf + (size_t)i * (len / 4);
        w[i].target = s;
        w[i].target_addr = bi.addr + 4096 + (uint64_t)i * (len / 4);
        w[i].length = len / 4;
    }
    cr_xfer_batch_t *b;
    assert_int_equal(cr_xfer_batch_alloc(e, 4, &b), 0);
    assert_int_equal(cr_xfer_batch_submit(b, w, 4), 0);
    char msg[64];
    snprintf(msg, sizeof msg, "check 12 4096 %zu", len);
    assert_int_equal(cr_xfer_batch_notify(b, s, msg, strlen(msg)), 0);
    char rep[64];
    assert_int_equal(wait_reply(e, rep, sizeof rep, 20000), 0);
    assert_string_equal(rep, "ok");
    assert_int_equal(cr_xfer_batch_wait(b, 10000), 0);
    assert_int_equal(cr_xfer_batch_free(b), 0);

    assert_int_equal(cr_xfer_notify_send(e, s, "exit", 4), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    cr_xfer_engine_destroy(e);
    xt_free(buf, len);
}

static void test_peer_killed(void **state)
{
    (void)state;
    char name[CR_XFER_NAME_MAX];
    pid_t pid = spawn_target(name, sizeof name);
    assert_true(pid > 0);
    cr_xfer_engine_t *e;
    const unsigned timeout_ms = 3000;
    assert_int_equal(xt_engine(&e, NULL, "tcp", timeout_ms), 0);
    /* a lot of work: 512 READs of 1 MiB (128 sanitized), each into its own
     * local region so the completed ones can be checked byte by byte */
    size_t n = xt_sanitized() ? 128 : 512, len = 1u << 20;
    char *buf = xt_alloc(n * len);
    assert_non_null(buf);
    assert_int_equal(cr_xfer_mem_register(e, buf, n * len, NULL), 0);
    cr_xfer_segment_t s;
    assert_int_equal(cr_xfer_segment_open(e, name, &s), 0);
    cr_xfer_buffer_info_t bi;
    size_t nb;
    assert_int_equal(cr_xfer_segment_buffers(e, s, &bi, 1, &nb), 0);
    cr_xfer_request_t *r = calloc(n, sizeof *r);
    for (size_t i = 0; i < n; i++) {
        r[i].opcode = CR_XFER_READ;
        r[i].local_addr = buf + i * len;
        r[i].target = s;
        r[i].target_addr = bi.addr + (i % 64) * len;
        r[i].length = len;
    }
    cr_xfer_batch_t *b;
    assert_int_equal(cr_xfer_batch_alloc(e, n, &b), 0);
    assert_int_equal(cr_xfer_batch_submit(b, r, n), 0);
    /* kill the target once data is flowing */
    cr_xfer_status_t st;
    uint64_t end = xt_now_ms() + 20000;
    do {
        assert_int_equal(cr_xfer_batch_status_all(b, &st), 0);
        if (st.bytes_transferred > 0)
            break;
        usleep(200);
    } while (xt_now_ms() < end);
    assert_int_equal(st.state, CR_XFER_STATE_WAITING); /* still mid-transfer */
    kill(pid, SIGKILL);
    uint64_t t0 = xt_now_ms();
    int rc = cr_xfer_batch_wait(b, (int)(4 * timeout_ms));
    uint64_t took = xt_now_ms() - t0;
    fprintf(stderr, "after SIGKILL: wait returned %d (%s) after %llu ms (timeout %u ms)\n", rc,
            cr_strerror(rc), (unsigned long long)took, timeout_ms);
    assert_int_equal(cr_xfer_batch_status_all(b, &st), 0);
    assert_int_equal(st.state, CR_XFER_STATE_FAILED);
    assert_true(rc < 0);
    size_t ok = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(cr_xfer_batch_status(b, i, &st), 0);
        assert_int_not_equal(st.state, CR_XFER_STATE_WAITING);
        if (st.state == CR_XFER_STATE_COMPLETED) {
            ok++;
            assert_int_equal(xt_check(buf + i * len, len, (i % 64) * len, CHILD_SEED,
                                      "completed before the kill"), -1);
        } else
            failed++;
    }
    fprintf(stderr, "%zu requests completed before the kill, %zu failed\n", ok, failed);
    assert_true(failed > 0);
    assert_int_equal(cr_xfer_batch_free(b), 0);
    int status;
    waitpid(pid, &status, 0);

    /* the engine stays usable: the dead segment fails fast, nothing hangs */
    cr_xfer_request_t one = r[0];
    int res;
    rc = cr_xfer_transfer_sync(e, &one, 1, &res);
    assert_true(rc < 0);
    fprintf(stderr, "request to the dead segment: %s\n", cr_strerror(rc));
    rc = cr_xfer_notify_send(e, s, "anyone?", 7);
    fprintf(stderr, "notification to the dead segment: %s\n", cr_strerror(rc));
    assert_true(rc < 0);
    free(r);
    cr_xfer_engine_destroy(e);
    xt_free(buf, n * len);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_processes),
        cmocka_unit_test(test_peer_killed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
