/* cr_log_set_handler: an application receives the library's log lines
 * instead of the library writing to stderr. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/log.h"
#include "crescent/common.h"

typedef struct seen {
    int n, level;
    char comp[32], msg[128];
} seen_t;

static void handler(void *user, int level, const char *component, const char *msg)
{
    seen_t *s = user;
    s->n++;
    s->level = level;
    snprintf(s->comp, sizeof s->comp, "%s", component);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
}

/* stderr goes to a pipe so the test sees what the library writes there */
static size_t stderr_bytes_during(void (*fn)(void *), void *arg)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(p[1], 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(p[1]);
    char buf[4096];
    ssize_t n = read(p[0], buf, sizeof buf);
    close(p[0]);
    return n > 0 ? (size_t)n : 0;
}

static void warn_once(void *arg)
{
    CR_LOG_WARN("test", "value %d", *(int *)arg);
}

static void test_handler_gets_lines_and_stderr_stays_quiet(void **state)
{
    (void)state;
    seen_t s = {0};
    int v = 42;
    cr_log_set_handler(handler, &s);
    assert_int_equal(stderr_bytes_during(warn_once, &v), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.level, CR_LOG_LEVEL_WARN);
    assert_string_equal(s.comp, "test");
    assert_string_equal(s.msg, "value 42");
    /* below the level (default warn): not produced at all */
    CR_LOG_INFO("test", "hidden");
    assert_int_equal(s.n, 1);
    /* NULL: back to stderr */
    cr_log_set_handler(NULL, NULL);
    assert_true(stderr_bytes_during(warn_once, &v) > 0);
    assert_int_equal(s.n, 1);
}

int main(void)
{
    unsetenv("CRESCENT_LOG");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handler_gets_lines_and_stderr_stays_quiet),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
