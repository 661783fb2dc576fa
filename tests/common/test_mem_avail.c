/* cr__mem_*: a segment or buffer larger than the host can back is refused
 * with a line that names the size, MemAvailable and the setting to lower,
 * instead of the process being OOM-killed while it pre-faults. Nothing here
 * allocates the sizes it checks. */
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

#include "common/mem_avail.h"
#include "crescent/common.h"

#define GiB (1ull << 30)

/* A meminfo file with body; the path goes to path (removed by the caller). */
static void fake_meminfo(char *path, size_t cap, const char *body)
{
    snprintf(path, cap, "/tmp/crescent-meminfo-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, body, strlen(body)), (ssize_t)strlen(body));
    close(fd);
}

static void test_read_takes_mem_available_and_swap_free(void **state)
{
    (void)state;
    char path[64];
    fake_meminfo(path, sizeof path,
                 "MemTotal:       24683568 kB\n"
                 "MemFree:          512000 kB\n"
                 "MemAvailable:   20000000 kB\n"
                 "Buffers:            1024 kB\n"
                 "SwapTotal:       4194304 kB\n"
                 "SwapFree:        2097152 kB\n");
    cr__mem_avail_t m = {0};
    assert_int_equal(cr__mem_avail_read(path, &m), 0);
    unlink(path);
    assert_int_equal(m.avail, 20000000ull * 1024);
    assert_int_equal(m.swap_free, 2097152ull * 1024);
}

static void test_read_without_swap_line_is_no_swap(void **state)
{
    (void)state;
    char path[64];
    fake_meminfo(path, sizeof path, "MemAvailable:   1048576 kB\n");
    cr__mem_avail_t m = {.swap_free = 7};
    assert_int_equal(cr__mem_avail_read(path, &m), 0);
    unlink(path);
    assert_int_equal(m.avail, GiB);
    assert_int_equal(m.swap_free, 0);
}

/* kernels before 3.14 have no MemAvailable: the caller cannot tell */
static void test_read_without_mem_available_fails(void **state)
{
    (void)state;
    char path[64];
    fake_meminfo(path, sizeof path, "MemTotal: 1024 kB\nMemFree: 512 kB\n");
    cr__mem_avail_t m = {.avail = 7, .swap_free = 7};
    assert_int_equal(cr__mem_avail_read(path, &m), -EIO);
    unlink(path);
    assert_int_equal(m.avail, 7); /* untouched on failure */
    assert_int_equal(cr__mem_avail_read("/nonexistent/meminfo", &m), -ENOENT);
}

static void test_fits_counts_swap_and_refuses_beyond(void **state)
{
    (void)state;
    cr__mem_avail_t m = {.avail = 20 * GiB, .swap_free = 2 * GiB};
    assert_int_equal(cr__mem_avail_fits(GiB, &m), 0);
    assert_int_equal(cr__mem_avail_fits(22 * GiB, &m), 0); /* partly in swap: allowed */
    assert_int_equal(cr__mem_avail_fits(22 * GiB + 1, &m), -ENOMEM);
    assert_int_equal(cr__mem_avail_fits(64 * GiB, &m), -ENOMEM);
    cr__mem_avail_t none = {0};
    assert_int_equal(cr__mem_avail_fits(0, &none), 0);
    assert_int_equal(cr__mem_avail_fits(1, &none), -ENOMEM);
    cr__mem_avail_t huge = {.avail = UINT64_MAX, .swap_free = UINT64_MAX}; /* no wrap */
    assert_int_equal(cr__mem_avail_fits(UINT64_MAX, &huge), 0);
}

typedef struct seen {
    int n, level;
    char msg[512];
} seen_t;

static void handler(void *user, int level, const char *component, const char *msg)
{
    (void)component;
    seen_t *s = user;
    s->n++;
    s->level = level;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
}

/* More than this host's MemAvailable + SwapFree: the numbers are read, not
 * allocated. */
static uint64_t more_than_host(void)
{
    cr__mem_avail_t m;
    assert_int_equal(cr__mem_avail_read(NULL, &m), 0);
    return m.avail + m.swap_free + 4 * GiB;
}

static void test_check_refuses_with_a_line_naming_size_avail_and_option(void **state)
{
    (void)state;
    seen_t s = {0};
    cr_log_set_handler(handler, &s);
    uint64_t len = more_than_host();
    int rc = cr__mem_prefault_check(len, "global_segment_size", "--global_segment_size");
    cr_log_set_handler(NULL, NULL);
    assert_int_equal(rc, -ENOMEM);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.level, CR_LOG_LEVEL_ERROR);
    char want[32];
    snprintf(want, sizeof want, "(%llu bytes)", (unsigned long long)len);
    if (!strstr(s.msg, want) || !strstr(s.msg, "MemAvailable") ||
        !strstr(s.msg, "lower --global_segment_size") || !strstr(s.msg, "CRESCENT_MEM_CHECK=0"))
        fail_msg("line %s does not name the size (%s), MemAvailable, the option and the "
                 "override", s.msg, want);
}

static void test_check_passes_what_fits_and_when_disabled(void **state)
{
    (void)state;
    seen_t s = {0};
    cr_log_set_handler(handler, &s);
    assert_int_equal(cr__mem_prefault_check(4096, "a page", "nothing"), 0);
    setenv("CRESCENT_MEM_CHECK", "0", 1);
    int rc = cr__mem_prefault_check(more_than_host(), "too much", "it");
    unsetenv("CRESCENT_MEM_CHECK");
    cr_log_set_handler(NULL, NULL);
    assert_int_equal(rc, 0);
    assert_int_equal(s.n, 0);
}

int main(void)
{
    unsetenv("CRESCENT_LOG");
    unsetenv("CRESCENT_MEM_CHECK");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_takes_mem_available_and_swap_free),
        cmocka_unit_test(test_read_without_swap_line_is_no_swap),
        cmocka_unit_test(test_read_without_mem_available_fails),
        cmocka_unit_test(test_fits_counts_swap_and_refuses_beyond),
        cmocka_unit_test(test_check_refuses_with_a_line_naming_size_avail_and_option),
        cmocka_unit_test(test_check_passes_what_fits_and_when_disabled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
