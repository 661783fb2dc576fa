/* The shm fence (src/transfer/transport/shm/shm_fence.h): the table a
 * target revokes its registered ranges in and initiators check around every
 * copy. Tested here on its own, the target's and an initiator's view in one
 * process (through a second mapping of the table from its fd, as an
 * initiator gets it); test_shm_engine tests it through real engines. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "transfer/transport/shm/shm_fence.h"

static int owner1, owner2; /* owners are opaque addresses (engines) */

/* The live entry for addr, or fails. */
static cr__shm_range_t live_one(uint64_t addr)
{
    cr__shm_range_t *r = NULL, got = {0};
    uint32_t n = 0;
    assert_int_equal(cr__shm_fence_live(&r, &n), 0);
    int found = 0;
    for (uint32_t i = 0; i < n; i++)
        if (r[i].addr == addr) {
            got = r[i];
            found++;
        }
    free(r);
    assert_int_equal(found, 1);
    return got;
}

static int is_live(uint64_t addr)
{
    cr__shm_range_t *r = NULL;
    uint32_t n = 0;
    assert_int_equal(cr__shm_fence_live(&r, &n), 0);
    int found = 0;
    for (uint32_t i = 0; i < n; i++)
        found |= r[i].addr == addr;
    free(r);
    return found;
}

/* The initiator's view: the table mapped from its fd. */
static cr__shm_fence_slot_t *peer_view(void)
{
    uint64_t dev, ino;
    cr__shm_fence_slot_t *s = cr__shm_fence_map(cr__shm_fence_fd(), &dev, &ino);
    assert_non_null(s);
    return s;
}

static void test_revoked_range_refuses_copies(void **state)
{
    (void)state;
    assert_int_equal(cr__shm_fence_init(), 0);
    assert_int_equal(cr__shm_fence_add(&owner1, 0x10000, 4096), 0);
    cr__shm_range_t r = live_one(0x10000);
    assert_int_equal(r.len, 4096);
    assert_true(r.gen & 1); /* registered: odd */
    cr__shm_fence_slot_t *s = peer_view();
    assert_true(cr__shm_fence_current(s, r.slot, r.gen));
    assert_int_equal(cr__shm_fence_enter(s, r.slot, r.gen), 0);
    cr__shm_fence_exit(s, r.slot);

    cr__shm_fence_revoke(&owner1, 0x10000, 4096);
    assert_false(is_live(0x10000));
    assert_false(cr__shm_fence_current(s, r.slot, r.gen));
    assert_int_equal(cr__shm_fence_enter(s, r.slot, r.gen), -EFAULT);
    /* a refused enter leaves no count behind */
    assert_int_equal((uint32_t)atomic_load(&s[r.slot].word), 0);
    cr__shm_fence_unmap(s);
}

/* Registered again (same addresses): a new generation; whoever still holds
 * the old one is refused, the new one admitted. */
static void test_registered_again_is_a_new_generation(void **state)
{
    (void)state;
    assert_int_equal(cr__shm_fence_init(), 0);
    assert_int_equal(cr__shm_fence_add(&owner1, 0x20000, 8192), 0);
    cr__shm_range_t a = live_one(0x20000);
    cr__shm_fence_revoke(&owner1, 0x20000, 8192);
    assert_int_equal(cr__shm_fence_add(&owner1, 0x20000, 8192), 0);
    cr__shm_range_t b = live_one(0x20000);
    assert_true(a.slot != b.slot || a.gen != b.gen);
    cr__shm_fence_slot_t *s = peer_view();
    assert_int_equal(cr__shm_fence_enter(s, a.slot, a.gen), -EFAULT);
    assert_int_equal(cr__shm_fence_enter(s, b.slot, b.gen), 0);
    cr__shm_fence_exit(s, b.slot);
    cr__shm_fence_revoke(&owner1, 0x20000, 8192);
    cr__shm_fence_unmap(s);
}

typedef struct revoker {
    atomic_int returned;
} revoker_t;

static void *revoke_main(void *p)
{
    revoker_t *rv = p;
    cr__shm_fence_revoke(&owner1, 0x30000, 4096);
    atomic_store(&rv->returned, 1);
    return NULL;
}

/* Unregister waits for a copy that entered before it: the revoking thread
 * does not return while the copy is in flight, and returns once it left. */
static void test_revoke_waits_for_copy_in_flight(void **state)
{
    (void)state;
    assert_int_equal(cr__shm_fence_init(), 0);
    assert_int_equal(cr__shm_fence_add(&owner1, 0x30000, 4096), 0);
    cr__shm_range_t r = live_one(0x30000);
    cr__shm_fence_slot_t *s = peer_view();
    assert_int_equal(cr__shm_fence_enter(s, r.slot, r.gen), 0); /* a copy in flight */
    revoker_t rv = {0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, revoke_main, &rv), 0);
    /* wait until the revocation is visible, then give it time to (wrongly) return */
    while (cr__shm_fence_current(s, r.slot, r.gen))
        sched_yield();
    assert_int_equal(cr__shm_fence_enter(s, r.slot, r.gen), -EFAULT); /* no new copies */
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    assert_int_equal(atomic_load(&rv.returned), 0);
    cr__shm_fence_exit(s, r.slot); /* the copy ends */
    pthread_join(th, NULL);
    assert_int_equal(atomic_load(&rv.returned), 1);
    assert_false(is_live(0x30000));
    cr__shm_fence_unmap(s);
}

/* An engine destroyed with ranges still registered revokes them, and only
 * its own: the same buffer registered by another engine stays reachable. */
static void test_owner_revoke_is_per_engine(void **state)
{
    (void)state;
    assert_int_equal(cr__shm_fence_init(), 0);
    assert_int_equal(cr__shm_fence_add(&owner1, 0x40000, 4096), 0);
    assert_int_equal(cr__shm_fence_add(&owner1, 0x50000, 4096), 0);
    assert_int_equal(cr__shm_fence_add(&owner2, 0x60000, 4096), 0);
    cr__shm_fence_revoke_owner(&owner1);
    assert_false(is_live(0x40000));
    assert_false(is_live(0x50000));
    assert_true(is_live(0x60000));
    /* unknown ranges and owners: no-ops */
    cr__shm_fence_revoke(&owner1, 0x60000, 4096);
    assert_true(is_live(0x60000));
    cr__shm_fence_revoke(&owner2, 0x60000, 4096);
    assert_false(is_live(0x60000));
}

/* An initiator maps only a real table: the right size and sealed against
 * shrinking (a peer could otherwise make our checks SIGBUS). */
static void test_map_refuses_other_files(void **state)
{
    (void)state;
    uint64_t dev, ino;
    int fd = memfd_create("not-a-fence", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)CR__SHM_FENCE_BYTES), 0);
    assert_null(cr__shm_fence_map(fd, &dev, &ino)); /* unsealed */
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    cr__shm_fence_slot_t *s = cr__shm_fence_map(fd, &dev, &ino);
    assert_non_null(s);
    cr__shm_fence_unmap(s);
    close(fd);
    fd = memfd_create("short", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_int_equal(ftruncate(fd, 4096), 0);
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    assert_null(cr__shm_fence_map(fd, &dev, &ino));
    close(fd);
    assert_null(cr__shm_fence_map(-1, &dev, &ino));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_revoked_range_refuses_copies),
        cmocka_unit_test(test_registered_again_is_a_new_generation),
        cmocka_unit_test(test_revoke_waits_for_copy_in_flight),
        cmocka_unit_test(test_owner_revoke_is_per_engine),
        cmocka_unit_test(test_map_refuses_other_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
