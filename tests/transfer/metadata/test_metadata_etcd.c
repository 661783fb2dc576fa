/* etcd backend against a REAL etcd started by this test on private loopback
 * ports (Debian etcd-server). The etcd process is killed and its data
 * directory removed on every exit path (atexit + PR_SET_PDEATHSIG, so also
 * when CTest kills this test). Skips with 77 when the etcd binary is absent. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/net.h"
#include "transfer/metadata/metadata.h"

static pid_t etcd_pid = -1;
static char data_dir[256];
static uint16_t client_port, peer_port, dead_port;

static void stop_etcd(void)
{
    if (etcd_pid > 0) {
        kill(etcd_pid, SIGKILL);
        waitpid(etcd_pid, NULL, 0);
        etcd_pid = -1;
    }
}

static void cleanup(void)
{
    stop_etcd();
    if (data_dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", data_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", data_dir);
        data_dir[0] = '\0';
    }
}

static void on_signal(int sig)
{
    (void)sig;
    cleanup();
    _exit(1);
}

static const char *find_etcd(void)
{
    static char path[512];
    const char *env = getenv("CRESCENT_ETCD");
    if (env && access(env, X_OK) == 0)
        return env;
    const char *p = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s:/usr/bin:/usr/local/bin", p ? p : "");
    for (char *save, *dir = strtok_r(buf, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        snprintf(path, sizeof path, "%s/etcd", dir);
        if (access(path, X_OK) == 0)
            return path;
    }
    return NULL;
}

static uint16_t free_port(void)
{
    uint16_t port = 0;
    int fd = cr__net_listen("127.0.0.1", 0, 1, &port);
    if (fd >= 0)
        close(fd);
    return port;
}

static int start_etcd(const char *bin)
{
    snprintf(data_dir, sizeof data_dir, "/tmp/crescent-etcd-XXXXXX");
    if (!mkdtemp(data_dir)) {
        data_dir[0] = '\0';
        return -1;
    }
    client_port = free_port();
    peer_port = free_port();
    dead_port = free_port();
    char curl[64], purl[64], cluster[96], dd[300], log[300];
    snprintf(curl, sizeof curl, "http://127.0.0.1:%u", client_port);
    snprintf(purl, sizeof purl, "http://127.0.0.1:%u", peer_port);
    snprintf(cluster, sizeof cluster, "crescent-test=%s", purl);
    snprintf(dd, sizeof dd, "%s/data", data_dir);
    snprintf(log, sizeof log, "%s/etcd.log", data_dir);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execl(bin, "etcd", "--name", "crescent-test", "--data-dir", dd, "--listen-client-urls", curl,
              "--advertise-client-urls", curl, "--listen-peer-urls", purl,
              "--initial-advertise-peer-urls", purl, "--initial-cluster", cluster,
              "--initial-cluster-state", "new", (char *)NULL);
        _exit(127);
    }
    etcd_pid = pid;
    /* wait until it answers (bounded) */
    char uri[96];
    snprintf(uri, sizeof uri, "etcd://127.0.0.1:%u", client_port);
    cr__meta_t *m;
    if (cr__meta_open(uri, 1000, &m))
        return -1;
    uint64_t deadline = cr__now_ms() + 30000;
    int rc = -1;
    while (cr__now_ms() < deadline) {
        if (cr__meta_put(m, "crescent-test/ready", "1", 1) == 0) {
            rc = 0;
            break;
        }
        if (waitpid(etcd_pid, NULL, WNOHANG) == etcd_pid) {
            etcd_pid = -1;
            break;
        }
        usleep(100 * 1000);
    }
    cr__meta_close(m);
    if (rc) {
        fprintf(stderr, "etcd did not come up; log %s:\n", log);
        char cmd[400];
        snprintf(cmd, sizeof cmd, "tail -20 '%s' >&2", log);
        if (system(cmd) != 0)
            fprintf(stderr, "(no log)\n");
    }
    return rc;
}

static cr__meta_t *open_uri(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static cr__meta_t *open_uri(const char *fmt, ...)
{
    char uri[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(uri, sizeof uri, fmt, ap);
    va_end(ap);
    cr__meta_t *m = NULL;
    int rc = cr__meta_open(uri, 3000, &m);
    if (rc)
        fail_msg("open %s: %d", uri, rc);
    return m;
}

static void check_value(cr__meta_t *m, const char *key, const void *want, size_t wlen)
{
    char *v = NULL;
    size_t len = 0;
    int rc = cr__meta_get(m, key, &v, &len);
    if (rc != 0)
        fail_msg("get %s: expected 0, got %d", key, rc);
    if (len != wlen)
        fail_msg("get %s: expected %zu bytes, got %zu", key, wlen, len);
    assert_memory_equal(v, want, wlen);
    free(v);
}

static void test_put_get_del_missing(void **state)
{
    (void)state;
    cr__meta_t *m = open_uri("etcd://127.0.0.1:%u", client_port);
    char *v = NULL;
    assert_int_equal(cr__meta_get(m, "crescent/segment/none", &v, NULL), -ENOENT);
    assert_int_equal(cr__meta_put(m, "crescent/segment/s1", "{\"name\":\"s1\"}", 13), 0);
    check_value(m, "crescent/segment/s1", "{\"name\":\"s1\"}", 13);
    assert_int_equal(cr__meta_put(m, "crescent/segment/s1", "v2", 2), 0);
    check_value(m, "crescent/segment/s1", "v2", 2);
    assert_int_equal(cr__meta_del(m, "crescent/segment/s1"), 0);
    assert_int_equal(cr__meta_get(m, "crescent/segment/s1", &v, NULL), -ENOENT);
    assert_int_equal(cr__meta_del(m, "crescent/segment/s1"), 0); /* missing: still 0 */
    cr__meta_close(m);
}

static void test_binary_keys_and_values(void **state)
{
    (void)state;
    cr__meta_t *m = open_uri("etcd://127.0.0.1:%u", client_port);
    const char bin[] = {'a', 0, 'b', (char)0xff, '"', '\\', '\n'};
    assert_int_equal(cr__meta_put(m, "key with spaces/&=?\"", bin, sizeof bin), 0);
    check_value(m, "key with spaces/&=?\"", bin, sizeof bin);
    /* empty value: etcd omits "value" from the JSON */
    assert_int_equal(cr__meta_put(m, "empty", "", 0), 0);
    check_value(m, "empty", "", 0);
    /* 1 MiB value (etcd's default request limit is 1.5 MiB) */
    size_t n = 1u << 20;
    char *big = malloc(n);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)(i * 7 + 3);
    assert_int_equal(cr__meta_put(m, "big", big, n), 0);
    check_value(m, "big", big, n);
    free(big);
    cr__meta_close(m);
}

static void test_failover_to_second_endpoint(void **state)
{
    (void)state;
    /* first endpoint dead: calls go to the second one */
    cr__meta_t *m = open_uri("etcd://127.0.0.1:%u,127.0.0.1:%u", dead_port, client_port);
    assert_int_equal(cr__meta_put(m, "failover", "ok", 2), 0);
    check_value(m, "failover", "ok", 2);
    assert_int_equal(cr__meta_del(m, "failover"), 0);
    char *v;
    assert_int_equal(cr__meta_get(m, "failover", &v, NULL), -ENOENT);
    cr__meta_close(m);
    /* Mooncake's bare "host:port" form means etcd */
    m = open_uri("127.0.0.1:%u", client_port);
    check_value(m, "crescent-test/ready", "1", 1);
    cr__meta_close(m);
    /* live first, dead second */
    m = open_uri("etcd://127.0.0.1:%u,127.0.0.1:%u", client_port, dead_port);
    assert_int_equal(cr__meta_put(m, "failover2", "ok", 2), 0);
    check_value(m, "failover2", "ok", 2);
    cr__meta_close(m);
}

static void test_all_endpoints_down(void **state)
{
    (void)state;
    cr__meta_t *m = open_uri("etcd://127.0.0.1:%u,127.0.0.1:%u", dead_port, client_port);
    check_value(m, "failover2", "ok", 2);
    stop_etcd();
    char *v = NULL;
    int rc = cr__meta_get(m, "failover2", &v, NULL);
    if (rc != -EHOSTUNREACH && rc != -ETIMEDOUT)
        fail_msg("expected -EHOSTUNREACH or -ETIMEDOUT with etcd down, got %d", rc);
    rc = cr__meta_put(m, "x", "y", 1);
    if (rc != -EHOSTUNREACH && rc != -ETIMEDOUT)
        fail_msg("put with etcd down: expected -EHOSTUNREACH/-ETIMEDOUT, got %d", rc);
    cr__meta_close(m);
}

int main(void)
{
    const char *bin = find_etcd();
    if (!bin) {
        printf("SKIP: etcd binary not found (install Debian etcd-server)\n");
        return 77;
    }
    atexit(cleanup);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    /* the free ports are picked before etcd binds them: retry with new ones
     * if another process took one in between */
    int started = 0;
    for (int attempt = 0; attempt < 3 && !started; attempt++) {
        if (start_etcd(bin) == 0)
            started = 1;
        else
            cleanup();
    }
    if (!started) {
        fprintf(stderr, "FAIL: could not start etcd (%s)\n", bin);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_del_missing),
        cmocka_unit_test(test_binary_keys_and_values),
        cmocka_unit_test(test_failover_to_second_endpoint),
        cmocka_unit_test(test_all_endpoints_down), /* last: stops etcd */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
