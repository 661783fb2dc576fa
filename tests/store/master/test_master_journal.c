/* The master's journal files (src/store/master/ha/journal.c) in the
 * directory an operator names with --journal_dir: created private (0700
 * directory, 0600 files) and never opened through a planted name.
 *
 * What broke: the directory was created 0755 and the files 0644 (every
 * local user could read every key and where its bytes live), and
 * journal.tmp was opened with O_CREAT|O_TRUNC through whatever the name
 * was: a symlink planted there made the master truncate its target and
 * then rename the symlink over the journal. Also: a master restarted on
 * its journal keeps the held ranges of a dropped segment. */
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
#include "store/master/master.h"

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

static const cr__rpc_client_id_t OWNER = {1, 1}, FRESH = {2, 2};

/* Held bytes after mounting segA over [0x10000, +1 MiB) for id at now. */
static uint64_t held_at_mount(cr__master_t *m, cr__rpc_client_id_t id, uint64_t now)
{
    cr__master_stats_t st;
    assert_int_equal(cr__master_mount(m, id, "segA", 0x10000, 1 << 20, now), 0);
    cr__master_stats(m, &st);
    return st.quarantine_bytes;
}

/* A master restarted on its journal (once from the records as written,
 * once from the snapshot compaction rewrote) still holds the block a
 * stale reader of a dropped segment may read: another client's memory over
 * the same addresses, and the owner's, get it quarantined. Before, held
 * names were not journaled and the restarted master knew nothing of them. */
static void test_journal_restart_keeps_held_range(void **s)
{
    (void)s;
    cr__master_cfg_t c;
    cr__master_cfg_default(&c);
    c.lease_ttl_ms = 5000;
    for (int compact = 0; compact < 2; compact++) {
        cr__ha_shadow_t *sh = NULL;
        cr__ha_journal_t *j = NULL;
        cr__master_t *m, *m2;
        assert_int_equal(cr__ha_journal_open(jdir, 0, &sh, &j), 0);
        cr__ha_shadow_destroy(sh);
        assert_int_equal(cr__master_create(&c, &m), 0);
        cr__master_set_journal(m, cr__ha_journal_record, j);
        assert_int_equal(held_at_mount(m, OWNER, 0), 0);
        cr__rpc_repl_cfg_t cfg = {.replica_num = 1};
        cr__rpc_msg_t msg = {0};
        cr__rpc_item_t it = {0};
        assert_int_equal(cr__master_put_start(m, "k", 1, 4096, &cfg, 0, &msg, &it), 0);
        assert_int_equal(cr__master_put_end(m, "k", 1, it.version, 0), 0);
        cr__rpc_msg_free(&msg);
        assert_int_equal(cr__master_get_replicas(m, "k", 1, 100, &msg, &it), 0); /* a lease */
        cr__rpc_msg_free(&msg);
        assert_int_equal(cr__master_unmount(m, OWNER, "segA", 200), 0);
        if (compact)
            assert_int_equal(cr__ha_journal_compact(j, m, 1), 0);
        assert_int_equal(cr__ha_journal_sync(j), 0);
        cr__ha_journal_close(j);
        cr__master_destroy(m);
        /* the restart */
        assert_int_equal(cr__ha_journal_open(jdir, 0, &sh, &j), 0);
        assert_int_equal(cr__master_create(&c, &m2), 0);
        assert_int_equal(cr__master_restore(m2, sh, 1000, NULL), 0);
        cr__ha_shadow_destroy(sh);
        uint64_t held = held_at_mount(m2, FRESH, 1000);
        if (held != 4096)
            fail_msg("restart %d: %llu bytes held at a remount, want 4096", compact,
                     (unsigned long long)held);
        assert_int_equal(cr__master_unmount(m2, FRESH, "segA", 1000), 0);
        assert_int_equal(held_at_mount(m2, OWNER, 1000), 4096);
        cr__master_destroy(m2);
        cr__ha_journal_close(j);
        assert_int_equal(unlink(jpath), 0);
    }
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
        cmocka_unit_test_setup_teardown(test_journal_restart_keeps_held_range, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
