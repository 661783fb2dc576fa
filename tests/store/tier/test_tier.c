/* Disk tier pieces in one process: the node's disk store on a real file
 * (encode/check, a flipped byte, another object's bytes, io_uring batches,
 * the restart scan, truncation, the directory lock and start-up errors),
 * cr__oalloc_reserve, the tier messages' codec, and the master's side of
 * the tier driven with an explicit clock (offload, demotion, disk reads
 * under lease and validation, races of an offload with remove and with
 * the loss of its DRAM source, corruption reports, adoption). */
#include <errno.h>
#include <fcntl.h>
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

#include "common/crc32c.h"
#include "store/allocator/offset_alloc.h"
#include "store/master/ha/record.h"
#include "store/master/master.h"
#include "store/tier/ssd/ssd.h"
#include "store/tier/tier.h"

#define MiB (1024ull * 1024)

static char dir[256];

static int setup_dir(void **s)
{
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/crescent-test-tier-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown_dir(void **s)
{
    (void)s;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static void *aligned(size_t n)
{
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, 4096, n), 0);
    return p;
}

static void test_encode_check(void **s)
{
    (void)s;
    uint8_t val[10000];
    for (size_t i = 0; i < sizeof val; i++)
        val[i] = (uint8_t)(i * 7);
    uint64_t dl = cr__tier_disk_len(3, sizeof val);
    assert_int_equal(dl, 4096 + 12288);
    uint8_t *b = aligned(dl);
    assert_int_equal(cr__ssd_encode(b, "key", 3, 42, val, sizeof val), dl);
    assert_int_equal(cr__ssd_check(b, "key", 3, 42, sizeof val), 0);
    assert_memory_equal(b + 4096, val, sizeof val);
    assert_int_equal(cr__ssd_check(b, "kez", 3, 42, sizeof val), -ESTALE);
    assert_int_equal(cr__ssd_check(b, "key", 3, 43, sizeof val), -ESTALE);
    b[4096 + 5000] ^= 0x10; /* one flipped value bit */
    assert_int_equal(cr__ssd_check(b, "key", 3, 42, sizeof val), -EBADMSG);
    b[4096 + 5000] ^= 0x10;
    b[20] ^= 1; /* header */
    assert_int_equal(cr__ssd_check(b, "key", 3, 42, sizeof val), -EBADMSG);
    free(b);
}

typedef struct seen {
    int n;
    uint64_t off[16], ver[16];
    char key[16][16];
} seen_t;

static int scan_cb(void *arg, const char *key, uint32_t kl, uint64_t version, uint64_t size,
                   uint64_t off, uint64_t dl)
{
    seen_t *x = arg;
    (void)size;
    (void)dl;
    if (x->n < 16) {
        snprintf(x->key[x->n], 16, "%.*s", (int)kl, key);
        x->off[x->n] = off;
        x->ver[x->n++] = version;
    }
    return 0;
}

/* The node notices its data file deleted or replaced behind it. */
static void test_data_file_unlinked_noticed(void **s)
{
    (void)s;
    char err[512];
    cr__ssd_t *d;
    assert_int_equal(cr__ssd_open(dir, 8 * MiB, &d, err, sizeof err), 0);
    const char *path;
    assert_int_equal(cr__ssd_linked(d, &path), 1);
    char keep[4200];
    snprintf(keep, sizeof keep, "%s.moved", path);
    assert_int_equal(rename(path, keep), 0); /* replaced: another file, same name */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(cr__ssd_linked(d, &path), 0);
    assert_int_equal(unlink(path), 0); /* deleted */
    assert_int_equal(cr__ssd_linked(d, &path), 0);
    assert_int_equal(rename(keep, path), 0); /* back */
    assert_int_equal(cr__ssd_linked(d, &path), 1);
    cr__ssd_close(d);
}

static void test_io_scan_truncate(void **s)
{
    (void)s;
    char err[512];
    cr__ssd_t *d;
    assert_int_equal(cr__ssd_open(dir, 8 * MiB, &d, err, sizeof err), 0);
    cr__ssd_ring_t r;
    assert_int_equal(cr__ssd_ring_init(&r, 4), 0);
    /* 6 objects of 300 KiB at spaced offsets, one io_uring batch (qd 4) */
    enum { N = 6, SZ = 300 * 1024 };
    cr__ssd_io_t ios[N];
    uint8_t *val = malloc(SZ);
    uint64_t dl = cr__tier_disk_len(2, SZ);
    for (int i = 0; i < N; i++) {
        memset(val, 'a' + i, SZ);
        char k[3] = {'k', (char)('0' + i), 0};
        uint8_t *b = aligned(dl);
        cr__ssd_encode(b, k, 2, 100 + (uint64_t)i, val, SZ);
        ios[i] = (cr__ssd_io_t){.write = 1, .buf = b, .off = (uint64_t)i * MiB, .len = dl};
    }
    assert_int_equal(cr__ssd_run(d, &r, ios, N), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(ios[i].result, 0);
        memset(ios[i].buf, 0, dl);
        ios[i].write = 0;
    }
    assert_int_equal(cr__ssd_run(d, &r, ios, N), 0);
    for (int i = 0; i < N; i++) {
        char k[3] = {'k', (char)('0' + i), 0};
        assert_int_equal(cr__ssd_check(ios[i].buf, k, 2, 100 + (uint64_t)i, SZ), 0);
        assert_int_equal(((uint8_t *)ios[i].buf)[4096 + 777], 'a' + i);
    }
    /* an erase (zero header block) makes an object invisible to the scan */
    memset(ios[0].buf, 0, 4096);
    cr__ssd_io_t er = {.write = 1, .buf = ios[0].buf, .off = 5 * MiB, .len = 4096};
    assert_int_equal(cr__ssd_run(d, &r, &er, 1), 0);
    cr__ssd_ring_fini(&r);
    cr__ssd_close(d);

    /* restart: the scan finds the 5 left, in offset order */
    assert_int_equal(cr__ssd_open(dir, 8 * MiB, &d, err, sizeof err), 0);
    seen_t x = {0};
    uint64_t trunc = 9;
    assert_int_equal(cr__ssd_scan(d, scan_cb, &x, &trunc), 5);
    assert_int_equal(trunc, 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(x.off[i], (uint64_t)i * MiB);
        assert_int_equal(x.ver[i], 100 + (uint64_t)i);
    }
    cr__ssd_close(d);

    /* a data file cut inside object 4 loses only object 4, and a foreign
     * file in the directory is left alone */
    char p[300];
    snprintf(p, sizeof p, "%s/crescent-ssd.data", dir);
    assert_int_equal(truncate(p, (off_t)(4 * MiB + 8192)), 0);
    snprintf(p, sizeof p, "%s/other.bin", dir);
    FILE *f = fopen(p, "w");
    fputs("foreign", f);
    fclose(f);
    assert_int_equal(cr__ssd_open(dir, 8 * MiB, &d, err, sizeof err), 0);
    memset(&x, 0, sizeof x);
    assert_int_equal(cr__ssd_scan(d, scan_cb, &x, &trunc), 4);
    assert_int_equal(trunc, 1);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_size, 7);
    cr__ssd_close(d);
    for (int i = 0; i < N; i++)
        free(ios[i].buf);
    free(val);
}

static void test_open_errors(void **s)
{
    (void)s;
    char err[512], p[300];
    cr__ssd_t *d, *d2;
    snprintf(p, sizeof p, "%s/nope", dir);
    assert_int_equal(cr__ssd_open(p, 8 * MiB, &d, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, "--ssd_path"));
    snprintf(p, sizeof p, "%s/afile", dir);
    FILE *f = fopen(p, "w");
    fclose(f);
    assert_int_equal(cr__ssd_open(p, 8 * MiB, &d, err, sizeof err), -ENOTDIR);
    assert_int_equal(cr__ssd_open(dir, 1024, &d, err, sizeof err), -EINVAL);
    assert_int_equal(cr__ssd_open(dir, 1ull << 60, &d, err, sizeof err), -ENOSPC);
    assert_non_null(strstr(err, "does not fit"));
    assert_int_not_equal(cr__ssd_open("/proc", 8 * MiB, &d, err, sizeof err), 0);
    /* the lock: a second opener (here another open file description of this
     * process, as a second node would be) is refused, the first unharmed */
    assert_int_equal(cr__ssd_open(dir, 8 * MiB, &d, err, sizeof err), 0);
    assert_int_equal(cr__ssd_open(dir, 8 * MiB, &d2, err, sizeof err), -EBUSY);
    assert_non_null(strstr(err, "in use by another process"));
    cr__ssd_close(d);
    assert_int_equal(cr__ssd_open(dir, 8 * MiB, &d2, err, sizeof err), 0);
    cr__ssd_close(d2);
}

/* What broke: the lock and data files were opened with O_CREAT through
 * whatever the names were, mode 0644: a symlink planted in --ssd_path made a
 * root node truncate (lock: pid written) or fallocate (data) any file, and
 * every disk-resident object was readable by every local user. */
static void put_victim(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("victim contents\n", f);
    fclose(f);
}

static void assert_victim_unchanged(const char *path)
{
    char buf[64] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    assert_string_equal(buf, "victim contents\n");
}

static void test_open_refuses_planted_names(void **s)
{
    (void)s;
    char err[1024], victim[300], lock[300], data[300];
    cr__ssd_t *d;
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(lock, sizeof lock, "%s/crescent-ssd.lock", dir);
    snprintf(data, sizeof data, "%s/crescent-ssd.data", dir);
    put_victim(victim);
    /* a symlink under the lock's name */
    assert_int_equal(symlink(victim, lock), 0);
    err[0] = 0;
    assert_int_equal(cr__ssd_open(dir, 8 * MiB, &d, err, sizeof err), -ELOOP);
    print_message("refused: %s\n", err);
    assert_non_null(strstr(err, lock));
    assert_non_null(strstr(err, "symbolic link"));
    assert_victim_unchanged(victim);
    assert_int_equal(unlink(lock), 0);
    /* a symlink under the data file's name */
    assert_int_equal(symlink(victim, data), 0);
    assert_int_equal(cr__ssd_open(dir, 8 * MiB, &d, err, sizeof err), -ELOOP);
    assert_non_null(strstr(err, data));
    assert_non_null(strstr(err, "symbolic link"));
    assert_victim_unchanged(victim);
    assert_int_equal(unlink(data), 0);
    /* a hard link to the victim */
    assert_int_equal(link(victim, data), 0);
    assert_int_equal(cr__ssd_open(dir, 8 * MiB, &d, err, sizeof err), -EMLINK);
    assert_non_null(strstr(err, data));
    assert_victim_unchanged(victim);
    assert_int_equal(unlink(data), 0);
    /* a FIFO: refused, and the open does not hang */
    assert_int_equal(mkfifo(data, 0600), 0);
    assert_int_equal(cr__ssd_open(dir, 8 * MiB, &d, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "not a regular file"));
    assert_int_equal(unlink(data), 0);
    /* created files are the node's alone */
    struct stat st;
    assert_int_equal(cr__ssd_open(dir, 8 * MiB, &d, err, sizeof err), 0);
    assert_int_equal(stat(lock, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(stat(data, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    int ro = cr__ssd_open_readonly(d);
    assert_true(ro >= 0);
    close(ro);
    cr__ssd_close(d);
    /* one left world-readable by an older version is narrowed */
    assert_int_equal(chmod(data, 0644), 0);
    assert_int_equal(chmod(lock, 0644), 0);
    assert_int_equal(cr__ssd_open(dir, 8 * MiB, &d, err, sizeof err), 0);
    assert_int_equal(stat(data, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(stat(lock, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* the same-host read path reopens by name: not through a symlink swapped in */
    assert_int_equal(rename(data, victim), 0);
    assert_int_equal(symlink(victim, data), 0);
    assert_int_equal(cr__ssd_open_readonly(d), -ELOOP);
    cr__ssd_close(d);
}

static void test_oalloc_reserve(void **s)
{
    (void)s;
    cr__oalloc_t *a;
    assert_int_equal(cr__oalloc_create(64 * MiB, 6, &a), 0);
    uint32_t b1 = cr__oalloc_reserve(a, 4 * MiB, 8192);
    uint32_t b2 = cr__oalloc_reserve(a, 4 * MiB + 8192, 4096);
    uint32_t b3 = cr__oalloc_reserve(a, 10 * MiB, MiB);
    assert_int_not_equal(b1, CR__OALLOC_NONE);
    assert_int_not_equal(b2, CR__OALLOC_NONE);
    assert_int_not_equal(b3, CR__OALLOC_NONE);
    assert_int_equal(cr__oalloc_block_offset(a, b2), 4 * MiB + 8192);
    /* overlapping, misaligned, out of range */
    assert_int_equal(cr__oalloc_reserve(a, 4 * MiB + 4096, 4096), CR__OALLOC_NONE);
    assert_int_equal(cr__oalloc_reserve(a, 10 * MiB + MiB - 64, 4096), CR__OALLOC_NONE);
    assert_int_equal(cr__oalloc_reserve(a, 5, 4096), CR__OALLOC_NONE);
    assert_int_equal(cr__oalloc_reserve(a, 64 * MiB - 4096, 8192), CR__OALLOC_NONE);
    /* out of order still works */
    uint32_t b0 = cr__oalloc_reserve(a, 0, 4096);
    assert_int_not_equal(b0, CR__OALLOC_NONE);
    assert_int_equal(cr__oalloc_used(a), 8192 + 4096 + MiB + 4096);
    /* normal allocation never lands on a reserved range; frees coalesce */
    uint64_t off;
    for (int i = 0; i < 50; i++) {
        uint32_t b = cr__oalloc_alloc(a, MiB, &off);
        if (b == CR__OALLOC_NONE)
            break;
        assert_true(off + MiB <= 4 * MiB || off >= 4 * MiB + 12288);
        assert_true(off + MiB <= 10 * MiB || off >= 11 * MiB);
        assert_true(off >= 4096);
    }
    cr__oalloc_destroy(a);
}

static void test_tier_codec(void **s)
{
    (void)s;
    cr__rpc_msg_t m = {0}, d = {0};
    m.type = CR__RPC_TIER_SYNC | CR__RPC_REPLY;
    m.segment = "ssd@127.0.0.1:9";
    m.count = 77;
    m.n_items = 2;
    cr__rpc_shard_t sh[2] = {{"127.0.0.1:5", 0x1000, 10, NULL},
                               {"ssd@127.0.0.1:9", 8192, 8192, NULL}};
    cr__rpc_replica_t rp[2] = {{0, 1, &sh[0]}, {0, 1, &sh[1]}};
    cr__rpc_item_t it[2] = {{.key = "k", .key_len = 1, .version = 5, .size = 10,
                             .replica_id = 8192, .flags = CR__TIER_OP_OFFLOAD, .n_replicas = 2,
                             .replicas = rp},
                            {.flags = CR__TIER_OP_ERASE, .replica_id = 4096}};
    m.items = it;
    cr__rpc_buf_t b;
    cr__rpc_buf_init(&b);
    assert_int_equal(cr__rpc_encode(&m, &b), 0);
    cr__rpc_hdr_t h;
    assert_int_equal(cr__rpc_decode_hdr(b.data, &h), 0);
    assert_int_equal(cr__rpc_decode(&h, b.data + 32, b.len - 32, &d), 0);
    assert_int_equal(d.n_items, 2);
    assert_int_equal(d.count, 77);
    assert_string_equal(d.segment, "ssd@127.0.0.1:9");
    assert_string_equal(d.items[0].replicas[1].shards[0].segment, "ssd@127.0.0.1:9");
    assert_int_equal(d.items[0].replicas[0].shards[0].addr, 0x1000);
    assert_int_equal(d.items[1].flags, CR__TIER_OP_ERASE);
    assert_int_equal(d.items[1].key_len, 0);
    cr__rpc_msg_free(&d);
    /* every truncation is refused */
    for (size_t cut = 0; cut < b.len - 32; cut++) {
        h.payload_len = (uint32_t)cut;
        assert_int_not_equal(cr__rpc_decode(&h, b.data + 32, cut, &d), 0);
    }
    cr__rpc_buf_free(&b);
}

/* ---- master ---------------------------------------------------------------- */

static const cr__rpc_client_id_t NODE = {7, 7};
#define DRAM_BASE 0x100000000ull
#define SSD "ssd@127.0.0.1:4000"

static cr__master_t *mk_master(double offload_wm)
{
    cr__master_cfg_t c;
    cr__master_cfg_default(&c);
    c.lease_ttl_ms = 1000;
    c.offload_watermark = offload_wm;
    cr__master_t *m;
    assert_int_equal(cr__master_create(&c, &m), 0);
    uint32_t fl;
    assert_int_equal(cr__master_ping(m, NODE, 0, &fl), 0);
    assert_int_equal(cr__master_mount(m, NODE, "127.0.0.1:5000", DRAM_BASE, 16 * MiB, 0), 0);
    return m;
}

static int tier_call(cr__master_t *m, uint16_t type, cr__rpc_item_t *items, uint32_t n,
                     uint64_t size, uint64_t now, cr__rpc_msg_t *rep)
{
    cr__rpc_msg_t req = {0};
    req.type = type;
    req.client_id = NODE;
    req.segment = SSD;
    req.size = size;
    req.n_items = n;
    req.items = items;
    memset(rep, 0, sizeof *rep);
    rep->type = type | CR__RPC_REPLY;
    cr__master_handle(m, &req, rep, now);
    return rep->status;
}

static int put(cr__master_t *m, const char *key, uint64_t size, uint64_t now, uint64_t *ver)
{
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    cr__rpc_repl_cfg_t cfg = {.replica_num = 1};
    int rc = cr__master_put_start(m, key, strlen(key), size, &cfg, now, &msg, &it);
    if (rc == 0) {
        if (ver)
            *ver = it.version;
        rc = cr__master_put_end(m, key, strlen(key), it.version, now);
    }
    cr__rpc_msg_free(&msg);
    return rc;
}

/* Runs one TIER_SYNC, completing every OFFLOAD task with status st
 * (unless skip_key names one to leave hanging); returns tasks handed. */
static int sync_all(cr__master_t *m, uint64_t now, int st, cr__rpc_item_t *prev, uint32_t n_prev,
                    cr__rpc_msg_t *out)
{
    assert_int_equal(tier_call(m, CR__RPC_TIER_SYNC, prev, n_prev, 0, now, out), 0);
    for (uint32_t i = 0; i < out->n_items; i++)
        out->items[i].status = st;
    return (int)out->n_items;
}

static int get_tier(cr__master_t *m, const char *key, uint64_t now, uint64_t *ver, uint64_t *rid)
{
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    int rc = cr__master_get_replicas(m, key, strlen(key), now, &msg, &it);
    int tier = -1;
    if (rc == 0) {
        tier = cr__tier_is_ssd(it.replicas[0].shards[0].segment);
        if (ver)
            *ver = it.version;
        if (rid)
            *rid = it.replicas[0].replica_id;
    }
    cr__rpc_msg_free(&msg);
    return rc ? rc : tier;
}

static void test_master_offload_demote_and_read(void **s)
{
    (void)s;
    cr__master_t *m = mk_master(0.5);
    cr__rpc_msg_t rep;
    /* a plain MOUNT of a disk name is refused; TIER_MOUNT works */
    cr__rpc_msg_t mreq = {.type = CR__RPC_MOUNT_SEGMENT, .client_id = NODE, .segment = SSD,
                          .size = 64 * MiB};
    memset(&rep, 0, sizeof rep);
    rep.type = CR__RPC_MOUNT_SEGMENT | CR__RPC_REPLY;
    cr__master_handle(m, &mreq, &rep, 0);
    assert_int_equal(rep.status, CR_E_INVALID_PARAMS);
    cr__rpc_msg_free(&rep);
    assert_int_equal(tier_call(m, CR__RPC_TIER_MOUNT, NULL, 0, 64 * MiB, 0, &rep), 0);
    cr__rpc_msg_free(&rep);
    char k[32];
    for (int i = 0; i < 12; i++) { /* 12 MiB in a 16 MiB pool: over 0.5 */
        snprintf(k, sizeof k, "o%d", i);
        assert_int_equal(put(m, k, MiB, 1, NULL), 0);
    }
    cr__master_tick(m, 2);
    cr__rpc_msg_t t;
    int n = sync_all(m, 3, 0, NULL, 0, &t);
    assert_true(n > 0);
    /* tasks are for the coldest objects, source in DRAM, 4 KiB-aligned disk extents */
    assert_int_equal(t.items[0].flags, CR__TIER_OP_OFFLOAD);
    assert_string_equal(t.items[0].key, "o0");
    assert_int_equal(t.items[0].replicas[1].shards[0].addr % 4096, 0);
    assert_int_equal(t.items[0].replicas[1].shards[0].len, cr__tier_disk_len(2, MiB));
    assert_true(t.items[0].replicas[0].shards[0].addr >= DRAM_BASE);
    /* complete them: the objects are demoted (DRAM over the watermark) */
    cr__rpc_msg_t t2;
    sync_all(m, 4, 0, t.items, t.n_items, &t2);
    cr__rpc_msg_free(&t);
    cr__rpc_msg_free(&t2);
    uint64_t ver, rid;
    assert_int_equal(get_tier(m, "o0", 5, &ver, &rid), 1);
    assert_int_equal(get_tier(m, "o11", 5, NULL, NULL), 0);
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_true(st.counters[CR__MM_tier_ssd_offloads_total] >= 1);
    assert_true(st.counters[CR__MM_tier_ssd_demotions_total] >= 1);
    assert_int_equal(st.counters[CR__MM_tier_ssd_hits_total], 1);
    assert_true(st.allocated_bytes < 12 * MiB);
    /* the disk read is leased like a DRAM read: no non-force remove */
    assert_int_equal(cr__master_remove(m, "o0", 2, 0, 6), CR_E_OBJECT_HAS_LEASE);
    assert_int_equal(cr__master_validate(m, "o0", 2, ver, rid, 7), 0);
    /* a reader stalled past its lease: the object is force-removed, its
     * disk extent erased; the late validation says the bytes are stale */
    assert_int_equal(cr__master_remove(m, "o0", 2, 1, 5000), 0);
    assert_int_equal(cr__master_validate(m, "o0", 2, ver, rid, 5001), CR_E_OBJECT_NOT_FOUND);
    cr__master_tick(m, 9000); /* quarantine over: the extent is freed -> erase task */
    sync_all(m, 9001, 0, NULL, 0, &t);
    int erases = 0;
    for (uint32_t i = 0; i < t.n_items; i++)
        erases += t.items[i].flags == CR__TIER_OP_ERASE;
    assert_true(erases >= 1);
    cr__rpc_msg_free(&t);
    char *js;
    size_t jl;
    assert_int_equal(cr__master_query_key_json(m, "o1", 2, 9002, &js, &jl), 0);
    assert_non_null(strstr(js, "\"tier\":\"ssd\""));
    free(js);
    cr__master_destroy(m);
}

static void test_master_offload_races(void **s)
{
    (void)s;
    cr__master_t *m = mk_master(0); /* write-through */
    cr__rpc_msg_t rep;
    assert_int_equal(tier_call(m, CR__RPC_TIER_MOUNT, NULL, 0, 64 * MiB, 0, &rep), 0);
    cr__rpc_msg_free(&rep);
    assert_int_equal(put(m, "gone", MiB, 1, NULL), 0);
    assert_int_equal(put(m, "fail", MiB, 1, NULL), 0);
    assert_int_equal(put(m, "ok", MiB, 1, NULL), 0);
    cr__rpc_msg_t t, t2;
    assert_int_equal(sync_all(m, 2, 0, NULL, 0, &t), 3);
    /* removed while its copy was being written: the copy is not attached */
    assert_int_equal(cr__master_remove(m, "gone", 4, 1, 3), 0);
    for (uint32_t i = 0; i < t.n_items; i++)
        if (!strcmp(t.items[i].key, "fail"))
            t.items[i].status = CR_E_TRANSFER_FAIL; /* the disk write failed */
    sync_all(m, 4, 0, t.items, t.n_items, &t2);
    cr__rpc_msg_free(&t);
    assert_int_equal(get_tier(m, "gone", 5, NULL, NULL), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(get_tier(m, "fail", 5, NULL, NULL), 0); /* still in DRAM, not lost */
    assert_int_equal(get_tier(m, "ok", 5, NULL, NULL), 0);   /* write-through keeps DRAM */
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.counters[CR__MM_tier_ssd_offloads_total], 1);
    assert_int_equal(st.counters[CR__MM_tier_ssd_offload_failures_total], 1);
    /* the one that failed is retried, and it is offloaded by an eviction */
    cr__rpc_msg_free(&t2);
    /* an offload whose DRAM source was lost (the node's DRAM segment went
     * away) is not attached: its copy may hold reused bytes */
    assert_int_equal(put(m, "src", MiB, 10, NULL), 0);
    assert_true(sync_all(m, 11, 0, NULL, 0, &t) >= 1);
    assert_int_equal(cr__master_unmount(m, NODE, "127.0.0.1:5000", 12), 0);
    assert_int_equal(cr__master_mount(m, NODE, "127.0.0.1:5000", DRAM_BASE, 16 * MiB, 13), 0);
    sync_all(m, 14, 0, t.items, t.n_items, &t2);
    cr__rpc_msg_free(&t);
    cr__rpc_msg_free(&t2);
    assert_int_equal(get_tier(m, "src", 15, NULL, NULL), CR_E_OBJECT_NOT_FOUND);
    /* a corrupt report drops that disk copy; the object with no other
     * replica is gone (a miss), counted */
    assert_int_equal(put(m, "c", MiB, 40000, NULL), 0);
    assert_int_equal(sync_all(m, 40001, 0, NULL, 0, &t), 1);
    uint64_t off = t.items[0].replica_id, ver = t.items[0].version;
    sync_all(m, 40002, 0, t.items, t.n_items, &t2);
    cr__rpc_msg_free(&t);
    cr__rpc_msg_free(&t2);
    assert_int_equal(cr__master_unmount(m, NODE, "127.0.0.1:5000", 40003), 0); /* DRAM copy gone */
    assert_int_equal(get_tier(m, "c", 40004, NULL, NULL), 1);
    cr__rpc_item_t cor = {.key = "c", .key_len = 1, .version = ver, .replica_id = off,
                          .flags = CR__TIER_OP_CORRUPT};
    sync_all(m, 40005, 0, &cor, 1, &t);
    cr__rpc_msg_free(&t);
    assert_int_equal(get_tier(m, "c", 50000, NULL, NULL), CR_E_OBJECT_NOT_FOUND);
    cr__master_stats(m, &st);
    assert_int_equal(st.counters[CR__MM_tier_ssd_corrupt_total], 1);
    cr__master_destroy(m);
}

static void test_master_adopt(void **s)
{
    (void)s;
    cr__master_t *m = mk_master(0.7);
    cr__rpc_msg_t rep;
    /* TIER_SYNC before TIER_MOUNT: the node must mount (and re-report) */
    assert_int_equal(tier_call(m, CR__RPC_TIER_SYNC, NULL, 0, 0, 0, &rep), CR_E_SEGMENT_NOT_FOUND);
    cr__rpc_msg_free(&rep);
    assert_int_equal(tier_call(m, CR__RPC_TIER_MOUNT, NULL, 0, 64 * MiB, 0, &rep), 0);
    cr__rpc_msg_free(&rep);
    uint64_t dl = cr__tier_disk_len(1, 5000);
    cr__rpc_shard_t sh[4] = {{SSD, 0, dl, NULL},
                               {SSD, dl, dl, NULL},
                               {SSD, dl + 4096, dl, NULL},
                               {SSD, 3 * dl, dl, NULL}};
    cr__rpc_replica_t rp[4] = {{0, 1, &sh[0]}, {0, 1, &sh[1]}, {0, 1, &sh[2]}, {0, 1, &sh[3]}};
    uint64_t v;
    assert_int_equal(put(m, "d", 5000, 1, &v), 0);
    cr__rpc_item_t it[4] = {
        {.key = "a", .key_len = 1, .version = 11, .size = 5000, .n_replicas = 1, .replicas = &rp[0]},
        {.key = "b", .key_len = 1, .version = 12, .size = 5000, .n_replicas = 1, .replicas = &rp[1]},
        /* overlaps b */
        {.key = "c", .key_len = 1, .version = 13, .size = 5000, .n_replicas = 1, .replicas = &rp[2]},
        /* another version than the master's */
        {.key = "d", .key_len = 1, .version = v + 1, .size = 5000, .n_replicas = 1,
         .replicas = &rp[3]}};
    assert_int_equal(tier_call(m, CR__RPC_TIER_REPORT, it, 4, 0, 2, &rep), 0);
    assert_int_equal(rep.items[0].status, 0);
    assert_int_equal(rep.items[1].status, 0);
    assert_int_equal(rep.items[2].status, CR_E_INVALID_PARAMS);
    assert_int_equal(rep.items[3].status, CR_E_OBJECT_ALREADY_EXISTS);
    cr__rpc_msg_free(&rep);
    uint64_t ver;
    assert_int_equal(get_tier(m, "a", 3, &ver, NULL), 1);
    assert_int_equal(ver, 11);
    assert_int_equal(get_tier(m, "c", 3, NULL, NULL), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(get_tier(m, "d", 3, &ver, NULL), 0);
    assert_int_equal(ver, v);
    /* a new put never lands on the disk segment, and is newer than adopted */
    uint64_t v2;
    assert_int_equal(put(m, "e", MiB, 4, &v2), 0);
    assert_int_equal(get_tier(m, "e", 5, NULL, NULL), 0);
    assert_true(v2 > 12);
    cr__master_destroy(m);
}

/* --tier_promote=false: repeated disk hits stay disk hits (no PROMOTE). */
static void test_master_no_promote_keeps_disk_hits_on_disk(void **s)
{
    (void)s;
    cr__master_cfg_t c;
    cr__master_cfg_default(&c);
    c.lease_ttl_ms = 1000;
    c.offload_watermark = 0;
    c.tier_no_promote = 1;
    cr__master_t *m;
    assert_int_equal(cr__master_create(&c, &m), 0);
    uint32_t fl;
    assert_int_equal(cr__master_ping(m, NODE, 0, &fl), 0);
    assert_int_equal(cr__master_mount(m, NODE, "127.0.0.1:5000", DRAM_BASE, 16 * MiB, 0), 0);
    cr__rpc_msg_t rep, t, t2;
    assert_int_equal(tier_call(m, CR__RPC_TIER_MOUNT, NULL, 0, 64 * MiB, 0, &rep), 0);
    cr__rpc_msg_free(&rep);
    assert_int_equal(put(m, "q0", MiB, 1, NULL), 0);
    assert_int_equal(sync_all(m, 2, 0, NULL, 0, &t), 1);
    sync_all(m, 3, 0, t.items, t.n_items, &t2);
    cr__rpc_msg_free(&t);
    cr__rpc_msg_free(&t2);
    assert_int_equal(cr__master_evict(m, 16 * MiB, 4), 1);
    for (uint64_t now = 10; now < 14; now++)
        assert_int_equal(get_tier(m, "q0", now, NULL, NULL), 1);
    assert_int_equal(sync_all(m, 15, 0, NULL, 0, &t), 0);
    cr__rpc_msg_free(&t);
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.allocated_bytes, 0);
    assert_int_equal(st.counters[CR__MM_tier_ssd_promotions_total], 0);
    cr__master_destroy(m);
}

/* The node's DRAM segment dropped (unmounted, or its client expired) while
 * a PROMOTE into it was handed out, and the same memory mounted again at
 * once: the node may still be writing that block, so it is quarantined
 * until the task could no longer write (handed + two task timeouts), not
 * given to a new object; a PROMOTE not handed yet is dropped, never handed
 * later with its old address. */
static void test_master_promote_target_held_when_dram_drops(void **s)
{
    (void)s;
    cr__master_t *m = mk_master(0);
    cr__rpc_msg_t rep, t, t2;
    assert_int_equal(tier_call(m, CR__RPC_TIER_MOUNT, NULL, 0, 64 * MiB, 0, &rep), 0);
    cr__rpc_msg_free(&rep);
    assert_int_equal(put(m, "p0", MiB, 1, NULL), 0);
    assert_int_equal(put(m, "p1", MiB, 1, NULL), 0);
    assert_int_equal(sync_all(m, 2, 0, NULL, 0, &t), 2);
    sync_all(m, 3, 0, t.items, t.n_items, &t2);
    cr__rpc_msg_free(&t);
    cr__rpc_msg_free(&t2);
    assert_int_equal(cr__master_evict(m, 16 * MiB, 4), 2); /* both demoted */
    assert_int_equal(get_tier(m, "p0", 10, NULL, NULL), 1);
    assert_int_equal(get_tier(m, "p0", 11, NULL, NULL), 1);
    assert_int_equal(sync_all(m, 12, 0, NULL, 0, &t), 1); /* p0's PROMOTE handed */
    assert_int_equal(t.items[0].flags, CR__TIER_OP_PROMOTE);
    uint64_t dst = t.items[0].replicas[1].shards[0].addr;
    assert_int_equal(get_tier(m, "p1", 13, NULL, NULL), 1);
    assert_int_equal(get_tier(m, "p1", 14, NULL, NULL), 1); /* p1's queued, not handed */
    uint32_t fl;
    assert_int_equal(cr__master_ping(m, NODE, 15, &fl), 0);
    assert_int_equal(cr__master_unmount(m, NODE, "127.0.0.1:5000", 15), 0);
    assert_int_equal(cr__master_mount(m, NODE, "127.0.0.1:5000", DRAM_BASE, 16 * MiB, 16), 0);
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.quarantine_bytes, MiB);
    assert_int_equal(sync_all(m, 17, 0, NULL, 0, &t2), 0); /* p1's never handed */
    cr__rpc_msg_free(&t2);
    /* the rest of the segment: 15 MiB, none of it over the promote target */
    for (int i = 0; i < 15; i++) {
        char k[16];
        cr__rpc_msg_t msg = {0};
        cr__rpc_item_t it = {0};
        cr__rpc_repl_cfg_t cfg = {.replica_num = 1, .flags = CR__RPC_CFG_HARD_PIN};
        snprintf(k, sizeof k, "n%d", i);
        assert_int_equal(cr__master_put_start(m, k, strlen(k), MiB, &cfg, 18, &msg, &it), 0);
        uint64_t a = it.replicas[0].shards[0].addr;
        assert_false(a < dst + MiB && dst < a + MiB);
        cr__rpc_msg_free(&msg);
    }
    sync_all(m, 19, 0, t.items, t.n_items, &t2); /* the late completion: not attached */
    cr__rpc_msg_free(&t);
    cr__rpc_msg_free(&t2);
    assert_int_equal(get_tier(m, "p0", 20, NULL, NULL), 1);
    for (uint64_t now = 1000; now <= 12 + 120000; now += 1000)
        cr__master_ping(m, NODE, now, &fl), cr__master_tick(m, now);
    cr__master_ping(m, NODE, 12 + 120001, &fl);
    cr__master_tick(m, 12 + 120001);
    cr__master_stats(m, &st);
    assert_int_equal(st.quarantine_bytes, 0);
    cr__master_destroy(m);
}

/* The node's disk segment dropped (its client expired: DRAM and disk go
 * in slot order, the disk one may be first) while a PROMOTE into its live
 * DRAM segment was handed out: the node may still be writing that DRAM
 * block (it may only be partitioned), so the block is quarantined until
 * the task could no longer write, never freed at once for a new object. */
static void test_master_promote_target_held_when_disk_drops(void **s)
{
    (void)s;
    cr__master_t *m = mk_master(0);
    cr__rpc_msg_t rep, t, t2;
    assert_int_equal(tier_call(m, CR__RPC_TIER_MOUNT, NULL, 0, 64 * MiB, 0, &rep), 0);
    cr__rpc_msg_free(&rep);
    assert_int_equal(put(m, "p0", MiB, 1, NULL), 0);
    assert_int_equal(sync_all(m, 2, 0, NULL, 0, &t), 1);
    sync_all(m, 3, 0, t.items, t.n_items, &t2);
    cr__rpc_msg_free(&t);
    cr__rpc_msg_free(&t2);
    assert_int_equal(cr__master_evict(m, 16 * MiB, 4), 1); /* demoted */
    assert_int_equal(get_tier(m, "p0", 10, NULL, NULL), 1);
    assert_int_equal(get_tier(m, "p0", 11, NULL, NULL), 1);
    assert_int_equal(sync_all(m, 12, 0, NULL, 0, &t), 1); /* p0's PROMOTE handed */
    assert_int_equal(t.items[0].flags, CR__TIER_OP_PROMOTE);
    uint64_t dst = t.items[0].replicas[1].shards[0].addr;
    cr__rpc_msg_free(&t);
    uint32_t fl;
    assert_int_equal(cr__master_ping(m, NODE, 15, &fl), 0);
    assert_int_equal(cr__master_unmount(m, NODE, SSD, 15), 0);
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.quarantine_bytes, MiB);
    /* the rest of the DRAM segment: 15 MiB, none of it over the target */
    for (int i = 0; i < 15; i++) {
        char k[16];
        cr__rpc_msg_t msg = {0};
        cr__rpc_item_t it = {0};
        cr__rpc_repl_cfg_t cfg = {.replica_num = 1, .flags = CR__RPC_CFG_HARD_PIN};
        snprintf(k, sizeof k, "n%d", i);
        assert_int_equal(cr__master_put_start(m, k, strlen(k), MiB, &cfg, 16, &msg, &it), 0);
        uint64_t a = it.replicas[0].shards[0].addr;
        assert_false(a < dst + MiB && dst < a + MiB);
        cr__rpc_msg_free(&msg);
    }
    cr__master_destroy(m);
}

static void test_master_promote_second_hit_and_races(void **s)
{
    (void)s;
    cr__master_t *m = mk_master(0); /* write-through, admission below 0.9 */
    cr__rpc_msg_t rep, t, t2;
    assert_int_equal(tier_call(m, CR__RPC_TIER_MOUNT, NULL, 0, 64 * MiB, 0, &rep), 0);
    cr__rpc_msg_free(&rep);
    char k[8];
    for (int i = 0; i < 4; i++) {
        snprintf(k, sizeof k, "p%d", i);
        assert_int_equal(put(m, k, MiB, 1, NULL), 0);
    }
    assert_int_equal(sync_all(m, 2, 0, NULL, 0, &t), 4);
    sync_all(m, 3, 0, t.items, t.n_items, &t2);
    cr__rpc_msg_free(&t);
    cr__rpc_msg_free(&t2);
    assert_int_equal(cr__master_evict(m, 16 * MiB, 4), 4); /* all demoted */
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.allocated_bytes, 0);
    /* first hit: served from disk, nothing promoted (one-hit keys stay) */
    assert_int_equal(get_tier(m, "p0", 10, NULL, NULL), 1);
    assert_int_equal(sync_all(m, 11, 0, NULL, 0, &t), 0);
    cr__rpc_msg_free(&t);
    /* second hit: a PROMOTE into the node's DRAM */
    assert_int_equal(get_tier(m, "p0", 12, NULL, NULL), 1);
    assert_int_equal(get_tier(m, "p1", 12, NULL, NULL), 1);
    assert_int_equal(get_tier(m, "p1", 13, NULL, NULL), 1);
    assert_int_equal(sync_all(m, 14, 0, NULL, 0, &t), 2);
    assert_int_equal(t.items[0].flags, CR__TIER_OP_PROMOTE);
    assert_true(cr__tier_is_ssd(t.items[0].replicas[0].shards[0].segment));
    assert_true(t.items[0].replicas[1].shards[0].addr >= DRAM_BASE);
    cr__master_stats(m, &st);
    assert_int_equal(st.allocated_bytes, 2 * MiB); /* reserved, not readable yet */
    assert_int_equal(get_tier(m, "p0", 15, NULL, NULL), 1);
    /* promotion racing removal: p1 goes while its copy is being made; the
     * DRAM block is freed, nothing attached */
    assert_int_equal(cr__master_remove(m, "p1", 2, 1, 16), 0);
    sync_all(m, 17, 0, t.items, t.n_items, &t2);
    cr__rpc_msg_free(&t);
    cr__rpc_msg_free(&t2);
    assert_int_equal(get_tier(m, "p0", 18, NULL, NULL), 0); /* DRAM now, first in the list */
    assert_int_equal(get_tier(m, "p1", 18, NULL, NULL), CR_E_OBJECT_NOT_FOUND);
    cr__master_stats(m, &st);
    assert_int_equal(st.allocated_bytes, MiB);
    assert_int_equal(st.counters[CR__MM_tier_ssd_promotions_total], 1);
    /* promotion racing disk eviction of the object, and a failed check at
     * the node: neither attaches */
    assert_int_equal(get_tier(m, "p2", 20, NULL, NULL), 1);
    assert_int_equal(get_tier(m, "p2", 21, NULL, NULL), 1);
    assert_int_equal(get_tier(m, "p3", 21, NULL, NULL), 1);
    assert_int_equal(get_tier(m, "p3", 22, NULL, NULL), 1);
    assert_int_equal(sync_all(m, 23, 0, NULL, 0, &t), 2);
    for (uint32_t i = 0; i < t.n_items; i++)
        if (!strcmp(t.items[i].key, "p3"))
            t.items[i].status = CR_E_OBJECT_NOT_FOUND;
    assert_int_equal(cr__master_remove(m, "p2", 2, 1, 24), 0);
    sync_all(m, 25, 0, t.items, t.n_items, &t2);
    cr__rpc_msg_free(&t);
    cr__rpc_msg_free(&t2);
    cr__master_stats(m, &st);
    assert_int_equal(st.allocated_bytes, MiB);
    assert_int_equal(st.counters[CR__MM_tier_ssd_promotion_failures_total], 1);
    assert_int_equal(get_tier(m, "p3", 26, NULL, NULL), 1); /* still on disk, readable */
    cr__master_destroy(m);
}


/* ---- shared-file-system tier (master side, fs.c) ---------------------------- */

static char fsdir[300];

/* Writes tmp/<name>.tmp of (key, version) holding val, as a client does. */
static void fs_write_tmp(const char *key, uint64_t version, const void *val, size_t size)
{
    uint64_t dl = cr__tier_disk_len(strlen(key), size);
    void *b = aligned(dl);
    assert_int_equal(cr__ssd_encode(b, key, (uint32_t)strlen(key), version, val, size), dl);
    char name[CR__TIER_FS_NAME_MAX], path[512];
    cr__tier_fs_name(name, key, strlen(key), version);
    snprintf(path, sizeof path, "%s/%s/%s.tmp", fsdir, CR__TIER_FS_TMP, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0640);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b, dl), (ssize_t)dl);
    close(fd);
    free(b);
}

static int fs_exists(const char *key, uint64_t version, int tmp)
{
    char name[CR__TIER_FS_NAME_MAX], path[512];
    cr__tier_fs_name(name, key, strlen(key), version);
    snprintf(path, sizeof path, "%s/%s%s%s", fsdir, tmp ? CR__TIER_FS_TMP "/" : "", name,
             tmp ? ".tmp" : "");
    return access(path, F_OK) == 0;
}

static int fs_sync(cr__master_t *m, const char *key, uint64_t version, uint64_t size, int op,
                   uint64_t now)
{
    cr__rpc_item_t it = {.key = key, .key_len = (uint32_t)strlen(key), .version = version,
                         .size = size, .flags = (uint32_t)op};
    cr__rpc_msg_t rep;
    int rc = tier_call(m, CR__RPC_FS_SYNC, &it, 1, 0, now, &rep);
    if (!rc)
        rc = rep.items[0].status;
    cr__rpc_msg_free(&rep);
    return rc;
}

/* Replica count and whether the last one is the file. */
static int fs_replicas(cr__master_t *m, const char *key, uint64_t now, int *last_fs)
{
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    int rc = cr__master_get_replicas(m, key, strlen(key), now, &msg, &it);
    int n = rc ? rc : (int)it.n_replicas;
    if (!rc && last_fs)
        *last_fs = cr__tier_is_fs(it.replicas[it.n_replicas - 1].shards[0].segment) &&
                   it.replicas[it.n_replicas - 1].replica_id == ((it.version << 3) | 7);
    cr__rpc_msg_free(&msg);
    return n;
}

static uint8_t last_obj_flags;
static void grab_journal(void *user, const uint8_t *frame, size_t len)
{
    (void)user;
    cr__ha_rec_t r;
    if (cr__ha_rec_get(frame, len, &r) > 0 && r.type == CR__HA_OBJ)
        last_obj_flags = r.flags;
}

static void test_master_fs_attach_evict_remove_corrupt_scan(void **s)
{
    (void)s;
    snprintf(fsdir, sizeof fsdir, "%s/c1", dir);
    cr__master_t *m = mk_master(0.7);
    char err[256];
    /* bad input: a missing root, a bad cluster id */
    assert_int_equal(cr__master_fs_open(m, "/nonexistent-crescent", "c1", err, sizeof err),
                     -ENOENT);
    assert_int_equal(cr__master_fs_open(m, dir, "../x", err, sizeof err), -EINVAL);
    cr__rpc_msg_t rep;
    assert_int_equal(tier_call(m, CR__RPC_FS_INFO, NULL, 0, 0, 0, &rep), 0);
    assert_int_equal(rep.n_items, 0); /* no tier yet */
    cr__rpc_msg_free(&rep);
    assert_int_equal(cr__master_fs_open(m, dir, "c1", err, sizeof err), 0);
    assert_int_equal(tier_call(m, CR__RPC_FS_INFO, NULL, 0, 0, 0, &rep), 0);
    assert_int_equal(rep.n_items, 1);
    assert_string_equal(rep.items[0].key, fsdir);
    cr__rpc_msg_free(&rep);
    cr__master_set_journal(m, grab_journal, NULL);

    uint8_t *val = malloc(MiB), *other = malloc(MiB);
    memset(val, 0x5a, MiB);
    memset(other, 0x33, MiB);
    uint64_t va, vb, vc, now = 1000;
    assert_int_equal(put(m, "a", MiB, now, &va), 0);
    assert_int_equal(put(m, "b", MiB, now, &vb), 0);
    assert_int_equal(put(m, "c", MiB, now, &vc), 0);
    /* a stale version: refused, its tmp file deleted */
    fs_write_tmp("a", va + 1000, val, MiB);
    assert_int_equal(fs_sync(m, "a", va + 1000, MiB, CR__TIER_FS_OP_ATTACH, now),
                     CR_E_OBJECT_NOT_FOUND);
    assert_false(fs_exists("a", va + 1000, 1));
    /* another key's bytes under a's name: refused */
    fs_write_tmp("b", va, val, MiB);
    char n1[CR__TIER_FS_NAME_MAX], n2[CR__TIER_FS_NAME_MAX], p1[600], p2[600];
    cr__tier_fs_name(n1, "b", 1, va);
    cr__tier_fs_name(n2, "a", 1, va);
    snprintf(p1, sizeof p1, "%s/tmp/%s.tmp", fsdir, n1);
    snprintf(p2, sizeof p2, "%s/tmp/%s.tmp", fsdir, n2);
    assert_int_equal(rename(p1, p2), 0);
    assert_int_equal(fs_sync(m, "a", va, MiB, CR__TIER_FS_OP_ATTACH, now), CR_E_INVALID_WRITE);
    assert_false(fs_exists("a", va, 1));
    assert_false(fs_exists("a", va, 0));
    /* no file at all */
    assert_int_equal(fs_sync(m, "a", va, MiB, CR__TIER_FS_OP_ATTACH, now), CR_E_FILE_NOT_FOUND);
    /* good ones: renamed, recorded, journaled with the fs bit */
    last_obj_flags = 0;
    fs_write_tmp("a", va, val, MiB);
    assert_int_equal(fs_sync(m, "a", va, MiB, CR__TIER_FS_OP_ATTACH, now), 0);
    assert_true(last_obj_flags & CR__HA_OBJ_FS);
    assert_true(fs_exists("a", va, 0));
    assert_false(fs_exists("a", va, 1));
    fs_write_tmp("b", vb, val, MiB);
    assert_int_equal(fs_sync(m, "b", vb, MiB, CR__TIER_FS_OP_ATTACH, now), 0);
    fs_write_tmp("c", vc, val, MiB);
    assert_int_equal(fs_sync(m, "c", vc, MiB, CR__TIER_FS_OP_ATTACH, now), 0);
    int last_fs = 0;
    assert_int_equal(fs_replicas(m, "a", now, &last_fs), 2);
    assert_true(last_fs);
    assert_int_equal(cr__master_validate(m, "a", 1, va, (va << 3) | 7, now), 0);
    /* DRAM eviction keeps objects that have a file: only the file is left */
    now += 5000; /* past every lease */
    assert_true(cr__master_evict(m, 16 * MiB, now) >= 3);
    assert_int_equal(fs_replicas(m, "a", now, &last_fs), 1);
    assert_true(last_fs);
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.counters[CR__MM_tier_fs_only_objects], 3);
    assert_int_equal(st.counters[CR__MM_tier_fs_objects], 3);
    /* a false corruption report (the file is good): ignored */
    assert_int_equal(fs_sync(m, "b", vb, MiB, CR__TIER_FS_OP_CORRUPT, now), 0);
    assert_int_equal(fs_replicas(m, "b", now, NULL), 1);
    /* a flipped byte: confirmed, the file deleted, the object lost (its only copy) */
    char name[CR__TIER_FS_NAME_MAX], path[600];
    cr__tier_fs_name(name, "b", 1, vb);
    snprintf(path, sizeof path, "%s/%s", fsdir, name);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "X", 1, 4096 + 77), 1);
    close(fd);
    assert_int_equal(fs_sync(m, "b", vb, MiB, CR__TIER_FS_OP_CORRUPT, now), 0);
    assert_int_equal(fs_replicas(m, "b", now, NULL), CR_E_OBJECT_NOT_FOUND);
    assert_false(fs_exists("b", vb, 0));
    cr__master_stats(m, &st);
    assert_int_equal(st.counters[CR__MM_tier_fs_corrupt_total], 1);
    /* remove deletes the file */
    now += 5000;
    assert_int_equal(cr__master_remove(m, "c", 1, 0, now), 0);
    assert_false(fs_exists("c", vc, 0));
    cr__master_destroy(m);

    /* a new master on the directory adopts what is left ("a"), ignores a
     * foreign file and a torn one named like ours */
    char foreign[600];
    snprintf(foreign, sizeof foreign, "%s/README", fsdir);
    fd = open(foreign, O_WRONLY | O_CREAT, 0640);
    assert_true(fd >= 0 && write(fd, "hi", 2) == 2);
    close(fd);
    cr__tier_fs_name(name, "zz", 2, 77);
    snprintf(path, sizeof path, "%s/%s", fsdir, name);
    fd = open(path, O_WRONLY | O_CREAT, 0640);
    assert_true(fd >= 0 && write(fd, "garbage", 7) == 7);
    close(fd);
    m = mk_master(0.7);
    assert_int_equal(cr__master_fs_open(m, dir, "c1", err, sizeof err), 0);
    uint64_t bad = 0;
    assert_int_equal(cr__master_fs_scan(m, now, &bad), 1);
    assert_int_equal(bad, 1);
    assert_int_equal(fs_replicas(m, "a", now, &last_fs), 1);
    assert_true(last_fs);
    assert_int_equal(access(foreign, F_OK), 0);
    uint64_t vn;
    assert_int_equal(put(m, "new", MiB, now, &vn), 0);
    assert_true(vn > va); /* versions restart above the adopted ones */
    cr__master_destroy(m);
    free(val);
    free(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_check),
        cmocka_unit_test_setup_teardown(test_data_file_unlinked_noticed, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_io_scan_truncate, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_open_errors, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_open_refuses_planted_names, setup_dir, teardown_dir),
        cmocka_unit_test(test_oalloc_reserve),
        cmocka_unit_test(test_tier_codec),
        cmocka_unit_test(test_master_offload_demote_and_read),
        cmocka_unit_test(test_master_offload_races),
        cmocka_unit_test(test_master_adopt),
        cmocka_unit_test(test_master_promote_target_held_when_disk_drops),
        cmocka_unit_test(test_master_promote_second_hit_and_races),
        cmocka_unit_test(test_master_promote_target_held_when_dram_drops),
        cmocka_unit_test(test_master_no_promote_keeps_disk_hits_on_disk),
        cmocka_unit_test_setup_teardown(test_master_fs_attach_evict_remove_corrupt_scan,
                                        setup_dir, teardown_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
