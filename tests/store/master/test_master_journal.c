/* The master's journal files (src/store/master/ha/journal.c) in the
 * directory an operator names with --journal_dir: created private (0700
 * directory, 0600 files) and never opened through a planted name.
 *
 * What broke: the directory was created 0755 and the files 0644 (every
 * local user could read every key and where its bytes live), and
 * journal.tmp was opened with O_CREAT|O_TRUNC through whatever the name
 * was: a symlink planted there made the master truncate its target and
 * then rename the symlink over the journal. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "store/master/ha/journal.h"

static char base[256], jdir[300], victim[300], jpath[320], jtmp[320];

static int setup(void **s)
{
    (void)s;
    snprintf(base, sizeof base, "/tmp/crescent-test-journal-XXXXXX");
    assert_non_null(mkdtemp(base));
    snprintf(jdir, sizeof jdir, "%s/j", base);
    snprintf(victim, sizeof victim, "%s/victim", base);
    snprintf(jpath, sizeof jpath, "%s/journal", jdir);
    snprintf(jtmp, sizeof jtmp, "%s/journal.tmp", jdir);
    FILE *f = fopen(victim, "w");
    assert_non_null(f);
    fputs("victim contents\n", f);
    fclose(f);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static void assert_victim_unchanged(void)
{
    char buf[64] = "";
    FILE *f = fopen(victim, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    assert_string_equal(buf, "victim contents\n");
}

static unsigned mode_of(const char *p)
{
    struct stat st;
    assert_int_equal(lstat(p, &st), 0);
    return (unsigned)(st.st_mode & 07777);
}

static int is_regular(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static void test_journal_created_private(void **s)
{
    (void)s;
    cr__ha_shadow_t *sh = NULL;
    cr__ha_journal_t *j = NULL;
    umask(022);
    assert_int_equal(cr__ha_journal_open(jdir, 0, &sh, &j), 0);
    assert_int_equal(mode_of(jdir), 0700);
    assert_int_equal(mode_of(jpath), 0600);
    /* a rewrite (compaction writes the same way) keeps it private */
    assert_int_equal(cr__ha_journal_rewrite(j, (const uint8_t *)"", 0), 0);
    assert_int_equal(mode_of(jpath), 0600);
    cr__ha_journal_close(j);
    cr__ha_shadow_destroy(sh);
    /* one left readable by an older version is narrowed at open */
    assert_int_equal(chmod(jpath, 0644), 0);
    assert_int_equal(cr__ha_journal_open(jdir, 0, &sh, &j), 0);
    assert_int_equal(mode_of(jpath), 0600);
    cr__ha_journal_close(j);
    cr__ha_shadow_destroy(sh);
}

static void test_journal_symlink_refused(void **s)
{
    (void)s;
    cr__ha_shadow_t *sh = NULL;
    cr__ha_journal_t *j = NULL;
    assert_int_equal(mkdir(jdir, 0700), 0);
    assert_int_equal(symlink(victim, jpath), 0);
    assert_int_equal(cr__ha_journal_open(jdir, 0, &sh, &j), -ELOOP);
    assert_null(j);
    assert_victim_unchanged();
}

static void test_journal_tmp_symlink_not_followed(void **s)
{
    (void)s;
    cr__ha_shadow_t *sh = NULL;
    cr__ha_journal_t *j = NULL;
    assert_int_equal(cr__ha_journal_open(jdir, 0, &sh, &j), 0);
    /* planted between two compactions */
    assert_int_equal(symlink(victim, jtmp), 0);
    assert_int_equal(cr__ha_journal_rewrite(j, (const uint8_t *)"", 0), 0);
    assert_victim_unchanged();
    assert_true(is_regular(jpath)); /* the journal, not the symlink renamed over it */
    assert_int_equal(mode_of(jpath), 0600);
    cr__ha_journal_close(j);
    cr__ha_shadow_destroy(sh);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_journal_created_private, setup, teardown),
        cmocka_unit_test_setup_teardown(test_journal_symlink_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_journal_tmp_symlink_not_followed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
