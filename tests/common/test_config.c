/* Config table: defaults, flags, env, config file, sizes, errors. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/config.h"

typedef struct {
    int64_t rpc_port;
    uint64_t size;
    double ratio;
    int enable;
    char name[CR__CFG_STR_MAX];
} cfg_t;

static const cr__cfg_opt_t table[] = {
    {"rpc_port", "50051", "port", CR__CFG_INT, offsetof(cfg_t, rpc_port)},
    {"global_segment_size", "512MB", "size", CR__CFG_SIZE, offsetof(cfg_t, size)},
    {"eviction_ratio", "0.05", "ratio", CR__CFG_DOUBLE, offsetof(cfg_t, ratio)},
    {"enable_http", "false", "flag", CR__CFG_BOOL, offsetof(cfg_t, enable)},
    {"name", "x", "str", CR__CFG_STR, offsetof(cfg_t, name)},
};
#define N (sizeof table / sizeof table[0])

static int parse(cfg_t *c, int argc, char **argv, char *err)
{
    return cr__cfg_parse(table, N, c, argc, argv, 1, "CRTEST_", NULL, 0, NULL, err, 256);
}

static void test_defaults(void **s)
{
    (void)s;
    cfg_t c;
    char err[256];
    char *argv[] = {"prog"};
    assert_int_equal(parse(&c, 1, argv, err), 0);
    assert_int_equal(c.rpc_port, 50051);
    assert_int_equal(c.size, 512ull << 20);
    assert_true(c.ratio > 0.049 && c.ratio < 0.051);
    assert_int_equal(c.enable, 0);
    assert_string_equal(c.name, "x");
}

static void test_flags_forms(void **s)
{
    (void)s;
    cfg_t c;
    char err[256];
    char *argv[] = {"prog", "--rpc_port=1234", "--global-segment-size", "1.5GiB", "--enable_http",
                    "-name=abc"};
    assert_int_equal(parse(&c, 6, argv, err), 0);
    assert_int_equal(c.rpc_port, 1234);
    assert_int_equal(c.size, 1536ull << 20);
    assert_int_equal(c.enable, 1);
    assert_string_equal(c.name, "abc");
}

static void test_env_and_file_priority(void **s)
{
    (void)s;
    char path[] = "/tmp/crcfgXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *txt = "# comment\nrpc_port = 7\nname = fromfile\n";
    assert_int_equal(write(fd, txt, strlen(txt)), (int)strlen(txt));
    close(fd);
    setenv("CRTEST_RPC_PORT", "8", 1);
    cfg_t c;
    char err[256];
    char *argv[] = {"prog", "--config", path};
    assert_int_equal(parse(&c, 3, argv, err), 0);
    assert_int_equal(c.rpc_port, 8); /* env beats file */
    assert_string_equal(c.name, "fromfile");
    char *argv2[] = {"prog", "--config", path, "--rpc_port", "9"};
    assert_int_equal(parse(&c, 5, argv2, err), 0);
    assert_int_equal(c.rpc_port, 9); /* flag beats env */
    unsetenv("CRTEST_RPC_PORT");
    unlink(path);
}

static void test_errors(void **s)
{
    (void)s;
    cfg_t c;
    char err[256];
    char *a1[] = {"prog", "--nope=1"};
    assert_int_equal(parse(&c, 2, a1, err), -EINVAL);
    assert_non_null(strstr(err, "nope"));
    char *a2[] = {"prog", "--rpc_port=12x"};
    assert_int_equal(parse(&c, 2, a2, err), -EINVAL);
    char *a3[] = {"prog", "--global_segment_size=-5MB"};
    assert_int_equal(parse(&c, 2, a3, err), -EINVAL);
    char *a4[] = {"prog", "--rpc_port"};
    assert_int_equal(parse(&c, 2, a4, err), -EINVAL);
    char *a5[] = {"prog", "stray"};
    assert_int_equal(parse(&c, 2, a5, err), -EINVAL);
    char *a6[] = {"prog", "--help"};
    assert_int_equal(parse(&c, 2, a6, err), 1);
    char longname[400];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    char arg[420];
    snprintf(arg, sizeof arg, "--name=%s", longname);
    char *a7[] = {"prog", arg};
    assert_int_equal(parse(&c, 2, a7, err), -EINVAL);
}

static void test_sizes(void **s)
{
    (void)s;
    uint64_t v;
    assert_int_equal(cr__cfg_parse_size("4096", &v), 0);
    assert_int_equal(v, 4096);
    assert_int_equal(cr__cfg_parse_size("64KB", &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(cr__cfg_parse_size("512mb", &v), 0);
    assert_int_equal(v, 512ull << 20);
    assert_int_equal(cr__cfg_parse_size("2G", &v), 0);
    assert_int_equal(v, 2ull << 30);
    assert_int_equal(cr__cfg_parse_size("", &v), -EINVAL);
    assert_int_equal(cr__cfg_parse_size("12XB", &v), -EINVAL);
    assert_int_equal(cr__cfg_parse_size("99999999999T", &v), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),   cmocka_unit_test(test_flags_forms),
        cmocka_unit_test(test_env_and_file_priority), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
