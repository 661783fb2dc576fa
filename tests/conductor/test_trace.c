/* Trace parser: good lines, and every kind of bad input names its line and
 * field. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "conductor/internal.h"

static int parse(const char *s, cr__cond_trace_req_t *r, uint64_t *buf, char *err)
{
    return cr__cond_trace_parse_line(s, strlen(s), 7, 512, r, buf, CR__COND_TRACE_MAX_BLOCKS, err,
                                     256);
}

static void test_good_line(void **st)
{
    (void)st;
    static uint64_t buf[CR__COND_TRACE_MAX_BLOCKS];
    cr__cond_trace_req_t r;
    char err[256] = "";
    assert_int_equal(parse("{\"timestamp\": 27482, \"input_length\": 1100, \"output_length\": 52, "
                           "\"hash_ids\": [46, 47, 9]}",
                           &r, buf, err),
                     0);
    assert_float_equal(r.ts_ms, 27482, 0);
    assert_int_equal(r.input_len, 1100);
    assert_int_equal(r.output_len, 52);
    assert_int_equal(r.n_blocks, 3);
    assert_int_equal(buf[2], 9);
}

static void expect_err(const char *line, const char *needle)
{
    static uint64_t buf[CR__COND_TRACE_MAX_BLOCKS];
    cr__cond_trace_req_t r;
    char err[256] = "";
    int rc = parse(line, &r, buf, err);
    if (rc != -EINVAL || !strstr(err, needle) || !strstr(err, "line 7"))
        fail_msg("input %.80s: expected -EINVAL with \"%s\", got %d \"%s\"", line, needle, rc,
                 err);
}

static void test_bad_lines(void **st)
{
    (void)st;
    expect_err("{\"timestamp\": 1, \"input_length\": 10", "malformed JSON");
    expect_err("[1,2]", "not a JSON object");
    expect_err("{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [], "
               "\"x\": 1}",
               "unknown field \"x\"");
    expect_err("{\"input_length\": 10, \"output_length\": 1, \"hash_ids\": []}",
               "missing field \"timestamp\"");
    expect_err("{\"timestamp\": -5, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": []}",
               "\"timestamp\"");
    expect_err("{\"timestamp\": 1, \"input_length\": -10, \"output_length\": 1, \"hash_ids\": []}",
               "field \"input_length\" is negative");
    expect_err("{\"timestamp\": 1, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": []}",
               "\"input_length\" must be > 0");
    expect_err("{\"timestamp\": 1, \"input_length\": 10.5, \"output_length\": 1, \"hash_ids\": []}",
               "\"input_length\" must be an integer");
    expect_err("{\"timestamp\": 1, \"input_length\": 99999999999, \"output_length\": 1, "
               "\"hash_ids\": []}",
               "\"input_length\" too large");
    expect_err("{\"timestamp\": 1, \"input_length\": 10, \"hash_ids\": []}",
               "missing field \"output_length\"");
    expect_err("{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": 3}",
               "\"hash_ids\" must be an array");
    expect_err("{\"timestamp\": 1, \"input_length\": 2000, \"output_length\": 1, \"hash_ids\": "
               "[1, \"a\"]}",
               "\"hash_ids\"[1]");
    expect_err("{\"timestamp\": 1, \"input_length\": 2000, \"output_length\": 1, \"hash_ids\": "
               "[1, -2]}",
               "\"hash_ids\"[1]");
    /* more hashes than blocks in the input */
    expect_err("{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": "
               "[1, 2, 3]}",
               "more than the 2 blocks");
    expect_err("{\"timestamp\": 1, \"timestamp\": 2, \"input_length\": 10, \"output_length\": 1, "
               "\"hash_ids\": []}",
               "malformed JSON");
    expect_err("{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": []} x",
               "malformed JSON");
}

static void test_huge_hash_list(void **st)
{
    (void)st;
    size_t n = CR__COND_TRACE_MAX_BLOCKS + 1;
    size_t cap = n * 3 + 200;
    char *s = malloc(cap);
    assert_non_null(s);
    size_t k = (size_t)snprintf(s, cap,
                                "{\"timestamp\": 1, \"input_length\": 16000000, \"output_length\": 1, "
                                "\"hash_ids\": [");
    for (size_t i = 0; i < n; i++) {
        memcpy(s + k, i ? ",1" : "1", i ? 2 : 1);
        k += i ? 2 : 1;
    }
    memcpy(s + k, "]}", 3);
    expect_err(s, "\"hash_ids\" has 65537 entries (max 65536)");
    free(s);
}

static void test_read_file(void **st)
{
    (void)st;
    char path[] = "/tmp/cr-cond-trace-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w+");
    fputs("{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 5, \"hash_ids\": [1, 2]}\n"
          "\n"
          "{\"timestamp\": 10, \"input_length\": 700, \"output_length\": 3, \"hash_ids\": [1, 3]}\n",
          f);
    fflush(f);
    rewind(f);
    cr__cond_trace_t t;
    char err[256] = "";
    assert_int_equal(cr__cond_trace_read(f, 512, &t, err, sizeof err), 0);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.n_hashes, 4);
    assert_int_equal(t.reqs[1].off, 2);
    assert_int_equal(t.hashes[3], 3);
    cr__cond_trace_free(&t);
    /* decreasing timestamp on line 4 */
    fseek(f, 0, SEEK_END);
    fputs("{\"timestamp\": 5, \"input_length\": 700, \"output_length\": 3, \"hash_ids\": [1]}\n", f);
    fflush(f);
    rewind(f);
    assert_int_equal(cr__cond_trace_read(f, 512, &t, err, sizeof err), -EINVAL);
    if (!strstr(err, "line 4") || !strstr(err, "timestamp"))
        fail_msg("expected line 4 timestamp error, got \"%s\"", err);
    /* an over-long line is refused without reading it whole */
    assert_int_equal(ftruncate(fileno(f), 0), 0);
    rewind(f);
    fputs("{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 5, \"hash_ids\": [1]}\n", f);
    for (unsigned i = 0; i < CR__COND_TRACE_MAX_LINE / 8 + 2; i++)
        fputs("xxxxxxxx", f);
    fputs("\n", f);
    fflush(f);
    rewind(f);
    assert_int_equal(cr__cond_trace_read(f, 512, &t, err, sizeof err), -EINVAL);
    if (!strstr(err, "line 2") || !strstr(err, "longer than"))
        fail_msg("expected line 2 too long, got \"%s\"", err);
    fclose(f);
    unlink(path);
    assert_true(cr__cond_trace_load("/nonexistent/trace.jsonl", 512, &t, err, sizeof err) < 0);
    assert_non_null(strstr(err, "/nonexistent/trace.jsonl"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_line),
        cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_huge_hash_list),
        cmocka_unit_test(test_read_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
