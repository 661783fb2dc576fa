/* Unit tests of the shm transport and cr__seg_host_id against the transport
 * contract, with a tiny fake engine (this file provides the engine services
 * the transport calls: cr__xfer_task_done / cr__xfer_task_progress). The
 * peer is a forked child whose memory we read and write; writes are checked
 * through /proc/<pid>/mem, an access path independent of process_vm_*. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/mem_avail.h"
#include "crescent/common.h"
#include "transfer/segment_desc.h"
#include "transfer/transport/transport.h"

extern const struct cr_xfer_transport_ops cr__xfer_shm_ops; /* the unit under test */

/* ---- fake engine ----------------------------------------------------- */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static size_t g_done;
static int g_double_done;

void cr__xfer_task_done(cr__xfer_task_t *task, int err)
{
    pthread_mutex_lock(&g_lock);
    if (atomic_load(&task->state) != CR_XFER_STATE_WAITING)
        g_double_done++;
    atomic_store(&task->error, err);
    atomic_store(&task->state, err ? CR_XFER_STATE_FAILED : CR_XFER_STATE_COMPLETED);
    g_done++;
    pthread_cond_broadcast(&g_cond);
    pthread_mutex_unlock(&g_lock);
}

/* the ownership proof (shm_proof.c) is only used with a real engine; the
 * fake engine here is NULL, so these are never reached */
const struct cr__auth *cr__xfer_engine_auth(const cr_xfer_engine_t *e)
{
    (void)e;
    return NULL;
}

int cr__xfer_local_desc_json(cr_xfer_engine_t *e, char **json, size_t *len)
{
    (void)e, (void)json, (void)len;
    return -ENOSYS;
}

int cr__xfer_cap_enforced(cr_xfer_engine_t *e)
{
    (void)e;
    return 0;
}

void cr__xfer_task_progress(cr__xfer_task_t *task, uint64_t bytes)
{
    atomic_fetch_add(&task->bytes, bytes);
}

/* as the engine does (batch.c); crc_ok() checks the pieces reported cover
 * the task exactly and hash to the bytes now in its local buffer */
void cr__xfer_task_crc_add(cr__xfer_task_t *task, uint64_t off, uint64_t len, uint32_t raw)
{
    if (!task->want_crc || !len)
        return;
    if (atomic_load(&task->state) != CR_XFER_STATE_WAITING)
        g_double_done++; /* a piece reported after the task ended */
    atomic_fetch_xor(&task->crc_acc, cr__crc32c_shift(raw, task->length - off - len));
    atomic_fetch_add(&task->crc_bytes, len);
}

void cr__xfer_task_crc_range(cr__xfer_task_t *task, uint64_t off, uint64_t len)
{
    if (task->want_crc && len)
        cr__xfer_task_crc_add(task, off, len, cr__crc32c_raw(0, task->local + off, (size_t)len));
}

static int crc_ok(cr__xfer_task_t *t)
{
    if (atomic_load(&t->crc_bytes) != t->length) {
        print_message("crc pieces cover %llu of %llu bytes\n",
                      (unsigned long long)atomic_load(&t->crc_bytes),
                      (unsigned long long)t->length);
        return 0;
    }
    uint32_t c = ~(atomic_load(&t->crc_acc) ^ cr__crc32c_shift(0xFFFFFFFFu, t->length));
    return c == cr__crc32c(0, t->local, (size_t)t->length);
}

/* The transport reads a peer's buffers through this public call when it has
 * an engine; these tests run it without one (it then reads peer->desc). */
int cr_xfer_segment_buffers(cr_xfer_engine_t *e, cr_xfer_segment_t h, cr_xfer_buffer_info_t *out,
                            size_t cap, size_t *n)
{
    (void)e, (void)h, (void)out, (void)cap, (void)n;
    fail_msg("cr_xfer_segment_buffers called without an engine");
    return -ENOENT;
}

/* Waits until g_done reaches target or 60 s pass (a hang, not a timing
 * assertion). Returns the count reached. */
static size_t wait_done(size_t target)
{
    uint64_t end = cr__now_ns() + 60ull * 1000000000ull;
    pthread_mutex_lock(&g_lock);
    while (g_done < target && cr__now_ns() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&g_cond, &g_lock, &ts);
    }
    size_t d = g_done;
    pthread_mutex_unlock(&g_lock);
    return d;
}

static void reset_done(void)
{
    pthread_mutex_lock(&g_lock);
    g_done = 0;
    pthread_mutex_unlock(&g_lock);
}

/* ---- helpers ------------------------------------------------------------ */

static int sanitized(void) { return getenv("CRESCENT_SANITIZED") != NULL; }

static uint8_t pat(uint64_t i, uint32_t seed)
{
    uint64_t x = (i + seed) * 0x9E3779B97F4A7C15ull;
    return (uint8_t)(x >> 56);
}

static void fill(uint8_t *p, size_t len, uint64_t base, uint32_t seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = pat(base + i, seed);
}

/* Index of the first byte where p differs from the pattern, or -1. */
static long long check(const uint8_t *p, size_t len, uint64_t base, uint32_t seed)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != pat(base + i, seed))
            return (long long)i;
    return -1;
}

typedef struct child {
    pid_t pid;
    int ctl; /* write end: closing it lets the child exit */
    uint64_t addr, len;
} child_t;

/* Forks a peer that maps len bytes filled with pattern seed 1 and sleeps
 * until ctl is closed. If in_netns, the child first moves to a new network
 * namespace (returns -1 if that is not permitted). */
static int child_start(child_t *c, size_t len, int in_netns)
{
    int up[2], down[2];
    if (pipe(up) || pipe(down))
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        if (in_netns && unshare(CLONE_NEWNET) != 0)
            _exit(3);
        uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            _exit(2);
        fill(p, len, 0, 1);
        uint64_t msg[2] = {(uint64_t)(uintptr_t)p, len};
        if (write(up[1], msg, sizeof msg) != sizeof msg)
            _exit(2);
        char b;
        while (read(down[0], &b, 1) > 0) {
        }
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    uint64_t msg[2];
    ssize_t n = read(up[0], msg, sizeof msg);
    close(up[0]);
    if (n != sizeof msg) {
        close(down[1]);
        waitpid(pid, NULL, 0);
        return -1;
    }
    c->pid = pid;
    c->ctl = down[1];
    c->addr = msg[0];
    c->len = msg[1];
    return 0;
}

static void child_stop(child_t *c)
{
    if (c->pid > 0) {
        close(c->ctl);
        waitpid(c->pid, NULL, 0);
        c->pid = 0;
    }
}

static cr_xfer_buffer_info_t g_buf_info;

static void desc_for(cr__seg_desc_t *d, const child_t *c)
{
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "child-%d", (int)c->pid);
    cr__seg_host_id(d->host_id);
    d->pid = c->pid;
    g_buf_info.addr = c->addr;
    g_buf_info.len = c->len;
    strcpy(g_buf_info.location, "cpu:0");
    d->n_buffers = 1;
    d->buffers = &g_buf_info;
}

static void task_init(cr__xfer_task_t *t, cr__xfer_peer_t *peer, cr_xfer_opcode_t op, void *local,
                      uint64_t remote, uint64_t len)
{
    memset(t, 0, sizeof *t);
    t->opcode = op;
    t->local = local;
    t->remote_addr = remote;
    t->length = len;
    t->peer = peer;
    t->deadline_ns = cr__now_ns() + 60ull * 1000000000ull;
    atomic_init(&t->state, CR_XFER_STATE_WAITING);
    atomic_init(&t->error, 0);
    atomic_init(&t->bytes, 0);
}

/* Reads the child's memory through /proc/pid/mem (independent of process_vm). */
static int peer_pread(pid_t pid, void *buf, size_t len, uint64_t addr)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, (char *)buf + got, len - got, (off_t)(addr + got));
        if (r <= 0) {
            close(fd);
            return -EIO;
        }
        got += (size_t)r;
    }
    close(fd);
    return 0;
}

static cr__xfer_config_t g_cfg = {.io_threads = 2};

/* ---- host id ------------------------------------------------------------- */

static void test_host_id_format_and_stable(void **s)
{
    (void)s;
    char a[CR__HOST_ID_MAX], b[CR__HOST_ID_MAX];
    cr__seg_host_id(a);
    cr__seg_host_id(b);
    assert_string_equal(a, b);
    assert_non_null(strstr(a, "/net:"));
    assert_non_null(strstr(a, "/pid:"));
    assert_true(strlen(a) > 20);
    for (const char *p = a; *p; p++)
        assert_true((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
                    (*p >= 'A' && *p <= 'Z') || *p == '-' || *p == '/' || *p == ':');
}

/* A child in the same namespaces has the same id; a child in a new network
 * namespace has a different one (that is how netns tests model hosts). */
static void test_host_id_netns_differs(void **s)
{
    (void)s;
    char mine[CR__HOST_ID_MAX];
    cr__seg_host_id(mine);
    for (int netns = 0; netns <= 1; netns++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            char id[CR__HOST_ID_MAX] = "";
            if (netns && unshare(CLONE_NEWNET) != 0)
                _exit(3);
            cr__seg_host_id(id);
            _exit(write(p[1], id, sizeof id) == sizeof id ? 0 : 2);
        }
        close(p[1]);
        char theirs[CR__HOST_ID_MAX] = "";
        ssize_t n = read(p[0], theirs, sizeof theirs);
        close(p[0]);
        int st;
        waitpid(pid, &st, 0);
        if (netns && WIFEXITED(st) && WEXITSTATUS(st) == 3) {
            print_message("unshare(CLONE_NEWNET) not permitted: netns half skipped\n");
            continue;
        }
        assert_int_equal(n, (ssize_t)sizeof theirs);
        if (netns)
            assert_string_not_equal(mine, theirs);
        else
            assert_string_equal(mine, theirs);
    }
}

/* ---- can_reach ------------------------------------------------------------ */

static void test_can_reach(void **s)
{
    (void)s;
    void *st;
    assert_int_equal(cr__xfer_shm_ops.create(NULL, &g_cfg, NULL, &st), 0);
    child_t c;
    assert_int_equal(child_start(&c, 1 << 20, 0), 0);
    cr__seg_desc_t d;
    desc_for(&d, &c);
    assert_int_equal(cr__xfer_shm_ops.can_reach(st, &d), 1);

    /* another host id */
    cr__seg_desc_t d2 = d;
    d2.host_id[0] ^= 1;
    assert_int_equal(cr__xfer_shm_ops.can_reach(st, &d2), 0);
    /* a buffer the peer does not map: the probe fails */
    cr_xfer_buffer_info_t bad = {.addr = 4096, .len = 4096};
    d2 = d;
    d2.buffers = &bad;
    assert_int_equal(cr__xfer_shm_ops.can_reach(st, &d2), 0);
    /* no buffers registered yet: reachable by the /proc/pid/mem access check */
    d2 = d;
    d2.n_buffers = 0;
    assert_int_equal(cr__xfer_shm_ops.can_reach(st, &d2), 1);
    /* bad pid */
    d2 = d;
    d2.pid = 0;
    assert_int_equal(cr__xfer_shm_ops.can_reach(st, &d2), 0);

    child_stop(&c);
    /* the peer is gone */
    assert_int_equal(cr__xfer_shm_ops.can_reach(st, &d), 0);

    /* same host id claimed, but the pid lives in another network namespace */
    child_t cn;
    if (child_start(&cn, 1 << 20, 1) == 0) {
        desc_for(&d, &cn);
        assert_int_equal(cr__xfer_shm_ops.can_reach(st, &d), 0);
        child_stop(&cn);
    } else {
        print_message("no netns child: that case skipped\n");
    }
    cr__xfer_shm_ops.destroy(st);
}

/* ---- data movement ------------------------------------------------------- */

typedef struct rig {
    void *st;
    child_t c;
    cr__xfer_peer_t peer;
} rig_t;

static void rig_up(rig_t *r, size_t peer_len)
{
    memset(r, 0, sizeof *r);
    assert_int_equal(cr__xfer_shm_ops.create(NULL, &g_cfg, NULL, &r->st), 0);
    assert_int_equal(child_start(&r->c, peer_len, 0), 0);
    desc_for(&r->peer.desc, &r->c);
    assert_int_equal(cr__xfer_shm_ops.can_reach(r->st, &r->peer.desc), 1);
    reset_done();
}

static void rig_down(rig_t *r)
{
    cr__xfer_shm_ops.peer_forget(r->st, &r->peer);
    cr__xfer_shm_ops.destroy(r->st);
    child_stop(&r->c);
    assert_int_equal(g_double_done, 0);
}

static void run_tasks(rig_t *r, cr__xfer_task_t **tasks, size_t n)
{
    reset_done();
    assert_int_equal(cr__xfer_shm_ops.submit(r->st, &r->peer, tasks, n), 0);
    size_t d = wait_done(n);
    if (d != n)
        print_message("only %zu of %zu tasks completed\n", d, n);
    assert_int_equal(d, n);
}

/* READ and WRITE from 1 byte to 256 MiB (64 MiB sanitized) at unaligned
 * offsets on both sides, every byte compared. */
static void test_read_write_sizes(void **s)
{
    (void)s;
    uint64_t max = sanitized() ? (64ull << 20) : (256ull << 20);
    size_t peer_len = (size_t)max + 8192;
    rig_t r;
    rig_up(&r, peer_len);
    uint8_t *local = mmap(NULL, peer_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(local != MAP_FAILED);
    uint8_t *back = mmap(NULL, peer_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(back != MAP_FAILED);

    uint64_t sizes[] = {1, 2, 7, 63, 4095, 4096, 4097, 65537, (1 << 20) + 3, (4 << 20) + 1,
                        (16 << 20) + 5, max - 13};
    uint32_t seed = 100;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++, seed++) {
        uint64_t len = sizes[k];
        uint64_t roff = 1 + (k * 37) % 4000; /* unaligned remote */
        uint64_t loff = 3 + (k * 53) % 4000; /* unaligned local */
        if (roff + len > peer_len)
            roff = peer_len - len;
        if (loff + len > peer_len)
            loff = peer_len - len;
        cr__xfer_task_t t;
        cr__xfer_task_t *tp = &t;

        /* READ: the child's initial pattern (seed 1) lands in local */
        memset(local + loff, 0, len);
        task_init(&t, &r.peer, CR_XFER_READ, local + loff, r.c.addr + roff, len);
        t.want_crc = 1; /* the crc of the landed bytes, in pieces while in cache */
        run_tasks(&r, &tp, 1);
        assert_int_equal(atomic_load(&t.error), 0);
        assert_int_equal(atomic_load(&t.bytes), len);
        assert_true(crc_ok(&t));
        long long bad = check(local + loff, len, roff, 1);
        if (bad >= 0)
            print_message("READ len %llu: first wrong byte at %lld\n", (unsigned long long)len, bad);
        assert_int_equal(bad, -1);

        /* WRITE: a new pattern; verified through /proc/pid/mem */
        fill(local + loff, len, 0, seed);
        task_init(&t, &r.peer, CR_XFER_WRITE, local + loff, r.c.addr + roff, len);
        t.want_crc = 1;
        run_tasks(&r, &tp, 1);
        assert_int_equal(atomic_load(&t.error), 0);
        assert_true(crc_ok(&t));
        assert_int_equal(peer_pread(r.c.pid, back, len, r.c.addr + roff), 0);
        bad = check(back, len, 0, seed);
        if (bad >= 0)
            print_message("WRITE len %llu: first wrong byte at %lld\n", (unsigned long long)len, bad);
        assert_int_equal(bad, -1);
        /* restore the child's pattern for the following READs */
        fill(local + loff, len, roff, 1);
        task_init(&t, &r.peer, CR_XFER_WRITE, local + loff, r.c.addr + roff, len);
        run_tasks(&r, &tp, 1);
        assert_int_equal(atomic_load(&t.error), 0);
    }
    munmap(local, peer_len);
    munmap(back, peer_len);
    rig_down(&r);
}

/* A peer that registered more since the transport's snapshot of its
 * buffers: one submit mixing tasks inside the old snapshot with tasks only
 * in the new buffers re-reads them once and runs every task; a task
 * outside both still fails alone. */
static void test_submit_after_peer_grew(void **s)
{
    (void)s;
    enum { N = 9, SZ = 1000 };
    size_t peer_len = 256u << 10;
    rig_t r;
    rig_up(&r, peer_len);
    uint8_t *local = calloc(N, 1024);
    cr__xfer_task_t t[N], *tp[N];
    assert_non_null(local);
    g_buf_info.len = peer_len / 2; /* the first half registered */
    task_init(&t[0], &r.peer, CR_XFER_READ, local, r.c.addr + 100, SZ);
    tp[0] = &t[0];
    run_tasks(&r, tp, 1); /* the transport's snapshot: the first half */
    assert_int_equal(atomic_load(&t[0].error), 0);
    assert_int_equal(check(local, SZ, 100, 1), -1);
    g_buf_info.len = peer_len; /* the peer registered the rest */
    uint64_t offs[N];
    for (int i = 0; i < N; i++) {
        /* even: first half; odd: second half; the last: past the peer */
        offs[i] = i == N - 1 ? peer_len + 4096
                  : i % 2    ? peer_len / 2 + (uint64_t)i * 4096 + 7
                             : (uint64_t)i * 4096 + 3;
        memset(local + (size_t)i * 1024, 0, 1024);
        task_init(&t[i], &r.peer, CR_XFER_READ, local + (size_t)i * 1024, r.c.addr + offs[i], SZ);
        tp[i] = &t[i];
    }
    run_tasks(&r, tp, N);
    for (int i = 0; i < N; i++) {
        int e = atomic_load(&t[i].error);
        if (e != (i == N - 1 ? -EFAULT : 0))
            print_message("task %d: error %d\n", i, e);
        assert_int_equal(e, i == N - 1 ? -EFAULT : 0);
        if (i != N - 1)
            assert_int_equal(check(local + (size_t)i * 1024, SZ, offs[i], 1), -1);
    }
    free(local);
    rig_down(&r);
}

/* Many small tasks in one submit (merged into few syscalls): each lands at
 * its own place; an out-of-range one in the middle fails alone. */
static void test_many_small_and_out_of_range(void **s)
{
    (void)s;
    enum { N = 1024, SZ = 1000 };
    size_t peer_len = (size_t)N * 1024 + 4096;
    rig_t r;
    rig_up(&r, peer_len);
    uint8_t *local = calloc(1, peer_len);
    cr__xfer_task_t *t = calloc(N, sizeof *t);
    cr__xfer_task_t **tp = calloc(N, sizeof *tp);
    assert_non_null(local);
    assert_non_null(t);
    assert_non_null(tp);
    for (int i = 0; i < N; i++) {
        uint64_t off = (uint64_t)(N - 1 - i) * 1024 + (i % 7); /* reversed, unaligned */
        task_init(&t[i], &r.peer, CR_XFER_READ, local + (size_t)i * 1024, r.c.addr + off, SZ);
        t[i].want_crc = i % 2; /* merged groups of tasks with and without */
        tp[i] = &t[i];
    }
    /* out of range: past the end of the only buffer, and straddling it */
    t[100].remote_addr = r.c.addr + peer_len;
    t[500].remote_addr = r.c.addr + peer_len - 10;
    run_tasks(&r, tp, N);
    for (int i = 0; i < N; i++) {
        int e = atomic_load(&t[i].error);
        if (i == 100 || i == 500) {
            assert_int_equal(e, -EFAULT);
            continue;
        }
        if (e)
            print_message("task %d: error %d\n", i, e);
        assert_int_equal(e, 0);
        uint64_t off = (uint64_t)(N - 1 - i) * 1024 + (i % 7);
        long long bad = check(local + (size_t)i * 1024, SZ, off, 1);
        if (bad >= 0)
            print_message("task %d: first wrong byte at %lld\n", i, bad);
        assert_int_equal(bad, -1);
        if (t[i].want_crc)
            assert_true(crc_ok(&t[i]));
        else
            assert_int_equal(atomic_load(&t[i].crc_bytes), 0);
    }

    /* WRITEs of the same shape, merged: the sources' crcs (hashed before
     * the copy) for the tasks that want them; the bytes arrive */
    for (int i = 0; i < N; i++) {
        uint64_t off = (uint64_t)(N - 1 - i) * 1024 + (i % 7);
        fill(local + (size_t)i * 1024, SZ, off, 9);
        task_init(&t[i], &r.peer, CR_XFER_WRITE, local + (size_t)i * 1024, r.c.addr + off, SZ);
        t[i].want_crc = (i % 3) != 0;
        tp[i] = &t[i];
    }
    run_tasks(&r, tp, N);
    uint8_t *back = malloc(peer_len);
    assert_non_null(back);
    assert_int_equal(peer_pread(r.c.pid, back, peer_len - 4096, r.c.addr), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(atomic_load(&t[i].error), 0);
        uint64_t off = (uint64_t)(N - 1 - i) * 1024 + (i % 7);
        assert_int_equal(check(back + off, SZ, off, 9), -1);
        if (t[i].want_crc)
            assert_true(crc_ok(&t[i]));
    }
    free(back);
    /* the child's pattern back for what follows */
    for (int i = 0; i < N; i++) {
        uint64_t off = (uint64_t)(N - 1 - i) * 1024 + (i % 7);
        fill(local + (size_t)i * 1024, SZ, off, 1);
        task_init(&t[i], &r.peer, CR_XFER_WRITE, local + (size_t)i * 1024, r.c.addr + off, SZ);
        tp[i] = &t[i];
    }
    run_tasks(&r, tp, N);

    /* a range the descriptor claims but the peer does not map: -EFAULT from
     * the kernel, for that task only, also when merged with good ones */
    static cr_xfer_buffer_info_t two[2];
    two[0] = g_buf_info;
    two[1].addr = 4096; /* page 1 is never mapped */
    two[1].len = 4096;
    r.peer.desc.buffers = two; /* sorted by the transport */
    r.peer.desc.n_buffers = 2;
    cr__xfer_shm_ops.peer_forget(r.st, &r.peer); /* new snapshot */
    for (int i = 0; i < 8; i++) {
        task_init(&t[i], &r.peer, CR_XFER_READ, local + (size_t)i * 1024,
                  i == 3 ? 4096 + 8 : r.c.addr + (uint64_t)i * 1024, SZ);
        tp[i] = &t[i];
    }
    run_tasks(&r, tp, 8);
    for (int i = 0; i < 8; i++) {
        int e = atomic_load(&t[i].error);
        if (e != (i == 3 ? -EFAULT : 0))
            print_message("task %d: error %d\n", i, e);
        assert_int_equal(e, i == 3 ? -EFAULT : 0);
        if (i != 3)
            assert_int_equal(check(local + (size_t)i * 1024, SZ, (uint64_t)i * 1024, 1), -1);
    }
    r.peer.desc.buffers = &g_buf_info;
    r.peer.desc.n_buffers = 1;
    free(local);
    free(t);
    free(tp);
    rig_down(&r);
}

/* The peer dies before and during transfers: every task completes with an
 * error or success, no hang, no crash. */
static void test_peer_killed(void **s)
{
    (void)s;
    size_t peer_len = 64u << 20;
    enum { N = 64 };
    rig_t r;
    rig_up(&r, peer_len);
    uint8_t *local = malloc(peer_len);
    assert_non_null(local);
    cr__xfer_task_t t[N], *tp[N];
    for (int i = 0; i < N; i++) {
        task_init(&t[i], &r.peer, i % 2 ? CR_XFER_WRITE : CR_XFER_READ, local + (size_t)i * (1 << 20),
                  r.c.addr + (size_t)i * (1 << 20), 1 << 20);
        tp[i] = &t[i];
    }
    /* during: kill right after submitting, repeated submits until it is gone */
    reset_done();
    assert_int_equal(cr__xfer_shm_ops.submit(r.st, &r.peer, tp, N), 0);
    kill(r.c.pid, SIGKILL);
    assert_int_equal(wait_done(N), N);
    waitpid(r.c.pid, NULL, 0);
    close(r.c.ctl);
    r.c.pid = 0;
    for (int i = 0; i < N; i++) {
        int e = atomic_load(&t[i].error);
        if (e != 0 && e != -ECONNRESET && e != -EFAULT)
            print_message("task %d: unexpected error %d\n", i, e);
        assert_true(e == 0 || e == -ECONNRESET || e == -EFAULT);
    }
    /* after: the peer is certainly gone now */
    for (int i = 0; i < N; i++)
        task_init(&t[i], &r.peer, CR_XFER_READ, local + (size_t)i * (1 << 20),
                  r.c.addr + (size_t)i * (1 << 20), 1 << 20);
    run_tasks(&r, tp, N);
    for (int i = 0; i < N; i++) {
        int e = atomic_load(&t[i].error);
        if (e != -ECONNRESET)
            print_message("task %d after death: error %d (expected %d)\n", i, e, -ECONNRESET);
        assert_int_equal(e, -ECONNRESET);
    }
    free(local);
    rig_down(&r);
}

/* A task whose deadline passed fails with -ETIMEDOUT. */
static void test_deadline(void **s)
{
    (void)s;
    rig_t r;
    rig_up(&r, 1 << 20);
    char buf[100];
    cr__xfer_task_t t, *tp = &t;
    task_init(&t, &r.peer, CR_XFER_READ, buf, r.c.addr, sizeof buf);
    t.deadline_ns = 1;
    run_tasks(&r, &tp, 1);
    assert_int_equal(atomic_load(&t.error), -ETIMEDOUT);
    rig_down(&r);
}

/* destroy with work queued: every task is reported exactly once, with
 * success or -ECANCELED. */
static void test_destroy_in_flight(void **s)
{
    (void)s;
    size_t peer_len = 32u << 20;
    enum { N = 256 };
    rig_t r;
    rig_up(&r, peer_len);
    uint8_t *local = malloc(peer_len);
    assert_non_null(local);
    static cr__xfer_task_t t[N];
    cr__xfer_task_t *tp[N];
    for (int i = 0; i < N; i++) {
        uint64_t len = i % 3 ? 8192 : (8u << 20);
        uint64_t off = (uint64_t)(i % 3) * (8u << 20);
        task_init(&t[i], &r.peer, CR_XFER_READ, local + off, r.c.addr + off, len);
        tp[i] = &t[i];
    }
    reset_done();
    assert_int_equal(cr__xfer_shm_ops.submit(r.st, &r.peer, tp, N), 0);
    cr__xfer_shm_ops.destroy(r.st); /* peer state freed by destroy */
    assert_int_equal(wait_done(N), N);
    for (int i = 0; i < N; i++) {
        int e = atomic_load(&t[i].error);
        assert_true(e == 0 || e == -ECANCELED);
    }
    assert_int_equal(g_double_done, 0);
    child_stop(&r.c);
    free(local);
}

/* A peer we may not ptrace: can_reach says no (the engine then uses tcp),
 * and a task forced onto shm fails with -EACCES instead of crashing. The
 * initiator is a forked child that dropped root for "nobody". */
static void test_access_denied(void **s)
{
    (void)s;
    if (geteuid() != 0) {
        print_message("needs root to drop privileges: skipped\n");
        skip();
    }
    child_t c;
    assert_int_equal(child_start(&c, 1 << 20, 0), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgid(65534) || setuid(65534))
            _exit(10);
        reset_done();
        void *st;
        if (cr__xfer_shm_ops.create(NULL, &g_cfg, NULL, &st))
            _exit(11);
        cr__xfer_peer_t peer;
        memset(&peer, 0, sizeof peer);
        desc_for(&peer.desc, &c);
        if (cr__xfer_shm_ops.can_reach(st, &peer.desc) != 0)
            _exit(12);
        char buf[64];
        cr__xfer_task_t t, *tp = &t;
        task_init(&t, &peer, CR_XFER_READ, buf, c.addr, sizeof buf);
        if (cr__xfer_shm_ops.submit(st, &peer, &tp, 1) || wait_done(1) != 1)
            _exit(13);
        int e = atomic_load(&t.error);
        cr__xfer_shm_ops.peer_forget(st, &peer);
        cr__xfer_shm_ops.destroy(st);
        _exit(e == -EACCES ? 0 : 14);
    }
    int stt = 0;
    assert_int_equal(waitpid(pid, &stt, 0), pid);
    child_stop(&c);
    if (!WIFEXITED(stt) || WEXITSTATUS(stt) != 0)
        print_message("unprivileged initiator: exit status %d (12: can_reach said yes, 14: "
                      "wrong error)\n", WIFEXITED(stt) ? WEXITSTATUS(stt) : -1);
    assert_true(WIFEXITED(stt));
    assert_int_equal(WEXITSTATUS(stt), 0);
}

/* AnonHugePages (kB) of the mapping that contains addr, from /proc/self/smaps. */
static long anon_huge_kb(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    int in = 0;
    long kb = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
            continue;
        }
        if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb;
}

/* mem_registered: populated memory becomes huge pages; memory never touched
 * stays unpopulated (the hook must not allocate a registration's memory). */
static void test_mem_registered_thp(void **s)
{
    (void)s;
    char mode[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f))
            mode[0] = 0;
        fclose(f);
    }
    if (!f || strstr(mode, "[never]")) {
        print_message("transparent huge pages unavailable (%s): skipped\n", mode);
        skip();
    }
    unsetenv("CRESCENT_SHM_THP"); /* the switch that turns this off */
    void *st;
    assert_int_equal(cr__xfer_shm_ops.create(NULL, &g_cfg, NULL, &st), 0);
    size_t len = 32u << 20;
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    madvise(p, len, MADV_NOHUGEPAGE); /* start from small pages whatever the default */
    size_t touched = 16u << 20;
    memset(p, 7, touched);
    cr__xfer_shm_ops.mem_registered(st, p + 1, len - 1); /* unaligned start */
    long kb = anon_huge_kb(p + (8u << 20));
    print_message("AnonHugePages after registration: %ld kB\n", kb);
    assert_true(kb >= 4096); /* at least two of the populated 2 MiB pages */
    /* the untouched half stays unpopulated */
    size_t pages = (len - touched - (2u << 20)) / 4096;
    unsigned char *vec = malloc(pages);
    assert_non_null(vec);
    assert_int_equal(mincore(p + touched + (2u << 20), pages * 4096, vec), 0);
    size_t resident = 0;
    for (size_t i = 0; i < pages; i++)
        resident += vec[i] & 1;
    if (resident)
        print_message("%zu of %zu untouched pages became resident\n", resident, pages);
    assert_int_equal(resident, 0);
    /* data intact */
    for (size_t i = 0; i < touched; i += 4093)
        assert_int_equal(p[i], 7);
    free(vec);
    munmap(p, len);
    /* degenerate ranges are harmless no-ops: tiny, wrapping, not mapped */
    char small[100];
    cr__xfer_shm_ops.mem_registered(st, small, sizeof small);
    cr__xfer_shm_ops.mem_registered(st, (void *)(UINTPTR_MAX - 10), 100);
    cr__xfer_shm_ops.mem_registered(st, p, len); /* unmapped just above */
    cr__xfer_shm_ops.destroy(st);
}

static void keep_line(void *user, int level, const char *component, const char *msg)
{
    (void)component;
    if (level == CR_LOG_LEVEL_ERROR)
        snprintf(user, 512, "%s", msg);
}

/* cr_xfer_mem_alloc_shared of more than the host can back is refused
 * before a page is touched (NULL, errno ENOMEM, a line naming
 * MemAvailable), not OOM-killed while it pre-faults. RLIMIT_FSIZE is the
 * test's safety net: were the check gone, the memfd's ftruncate would fail
 * (EFBIG) instead of the host filling up. */
static void test_alloc_shared_larger_than_memory_refused(void **s)
{
    (void)s;
    unsetenv("CRESCENT_MEM_CHECK"); /* the switch that turns the check off */
    cr__mem_avail_t m;
    assert_int_equal(cr__mem_avail_read(NULL, &m), 0);
    uint64_t len = m.avail + m.swap_free + (4ull << 30);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old; /* the soft limit only, so it can be put back */
    if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur > (1ull << 30))
        lim.rlim_cur = 1ull << 30;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    signal(SIGXFSZ, SIG_IGN);
    char line[512] = "";
    cr_log_set_handler(keep_line, line);
    errno = 0;
    void *p = cr_xfer_mem_alloc_shared((size_t)len);
    int e = errno;
    cr_log_set_handler(NULL, NULL);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
    if (p || e != ENOMEM || !strstr(line, "MemAvailable"))
        fail_msg("alloc_shared(%llu): %p, errno %d (%s), line \"%s\"; want NULL, ENOMEM and "
                 "a line naming MemAvailable", (unsigned long long)len, p, e, strerror(e), line);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_id_format_and_stable),
        cmocka_unit_test(test_host_id_netns_differs),
        cmocka_unit_test(test_can_reach),
        cmocka_unit_test(test_read_write_sizes),
        cmocka_unit_test(test_many_small_and_out_of_range),
        cmocka_unit_test(test_submit_after_peer_grew),
        cmocka_unit_test(test_peer_killed),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_destroy_in_flight),
        cmocka_unit_test(test_mem_registered_thp),
        cmocka_unit_test(test_access_denied),
        cmocka_unit_test(test_alloc_shared_larger_than_memory_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
