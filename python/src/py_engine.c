/* crescent._crescent.TransferEngine: the Transfer Engine (include/crescent/
 * transfer.h) with Mooncake's Python method names, positional order and
 * return conventions (mooncake-integration/transfer_engine).
 *
 * Concurrency: one object may be shared by Python threads. `lock` (a
 * writer-preferring rwlock) is held for reading by every operation that uses
 * the engine and for writing by initialize()/close(), so close() waits for
 * in-flight calls and no call ever sees a destroyed engine. The GIL is
 * released before taking `lock` and around every network or copy operation;
 * nothing waits for the GIL while holding `lock` or `mu`.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/config.h"
#include "crescent/transfer.h"
#include "pyutil.h"

#define SEG_CACHE_MAX 4096  /* cached remote segment handles */
#define BATCH_TABLE_MAX 65536 /* async batches awaiting get_batch_transfer_status */
#define MANAGED_MAX 4096    /* managed buffer chunks */
#define NOTIFY_POLL 32

typedef struct seg_ent {
    char *name;
    cr_xfer_segment_t h;
} seg_ent_t;

typedef struct batch_ent {
    uint64_t id;
    cr_xfer_batch_t *b;
} batch_ent_t;

typedef struct managed_ent {
    uint64_t addr;
    uint64_t size; /* power of two >= 4096 */
    int in_use;
    int in_arena; /* carved from the arena (not mapped on its own) */
} managed_ent_t;

/* Managed-buffer arena: like Mooncake's engine, initialize() registers a pool
 * of memory up front, so get_first_buffer_address(own name) and
 * allocate_managed_buffer() work right away. Mapped lazily (pages fault in
 * when first used); size from $CRESCENT_MANAGED_POOL_SIZE (0 = none). */
#define ARENA_DEFAULT (64ull << 20)

typedef struct {
    PyObject_HEAD
    pthread_rwlock_t lock;
    cr_xfer_engine_t *eng; /* guarded by lock */
    pthread_mutex_t mu;    /* guards the tables below; never held across blocking calls */
    seg_ent_t *segs;
    size_t nsegs;
    batch_ent_t *batches;
    size_t nbatches, capbatches;
    uint64_t next_batch_id;
    managed_ent_t *managed;
    size_t nmanaged;
    uint64_t arena, arena_size, arena_used; /* guarded by mu */
    cr__py_regtab_t regs; /* memory registered through this object */
} PyEngine;

/* ---- helpers -------------------------------------------------------------- */

/* Takes the engine for an operation: returns it with lock held for reading,
 * or NULL (lock not held) when not initialized. Call without the GIL. */
static cr_xfer_engine_t *eng_acquire(PyEngine *self)
{
    pthread_rwlock_rdlock(&self->lock);
    if (!self->eng) {
        pthread_rwlock_unlock(&self->lock);
        return NULL;
    }
    return self->eng;
}
static void eng_release(PyEngine *self) { pthread_rwlock_unlock(&self->lock); }

/* Segment handle for name (cached). Caller holds lock for reading, no GIL. */
static int seg_get(PyEngine *self, cr_xfer_engine_t *e, const char *name, cr_xfer_segment_t *out)
{
    pthread_mutex_lock(&self->mu);
    for (size_t i = 0; i < self->nsegs; i++) {
        if (!strcmp(self->segs[i].name, name)) {
            *out = self->segs[i].h;
            pthread_mutex_unlock(&self->mu);
            return 0;
        }
    }
    pthread_mutex_unlock(&self->mu);
    cr_xfer_segment_t h;
    int rc = cr_xfer_segment_open(e, name, &h);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&self->mu);
    int cached = 0;
    for (size_t i = 0; i < self->nsegs; i++) {
        if (!strcmp(self->segs[i].name, name)) { /* raced with another thread */
            cached = 1;
            break;
        }
    }
    if (!cached && self->nsegs < SEG_CACHE_MAX) {
        char *dup = strdup(name);
        seg_ent_t *ns = dup ? realloc(self->segs, (self->nsegs + 1) * sizeof *ns) : NULL;
        if (ns) {
            self->segs = ns;
            self->segs[self->nsegs++] = (seg_ent_t){.name = dup, .h = h};
            pthread_mutex_unlock(&self->mu);
            *out = h;
            return 0;
        }
        free(dup);
    }
    pthread_mutex_unlock(&self->mu);
    /* Same name opened twice returns the same handle (reference counted):
     * drop our extra reference, the handle stays valid through the cache or
     * through the engine's own reference. */
    if (cached)
        cr_xfer_segment_close(e, h);
    *out = h;
    return 0;
}

static int batch_put(PyEngine *self, cr_xfer_batch_t *b, uint64_t *id)
{
    int rc = 0;
    pthread_mutex_lock(&self->mu);
    if (self->nbatches >= BATCH_TABLE_MAX) {
        rc = -ENOSPC;
        goto out;
    }
    if (self->nbatches == self->capbatches) {
        size_t nc = self->capbatches ? self->capbatches * 2 : 16;
        batch_ent_t *nb = realloc(self->batches, nc * sizeof *nb);
        if (!nb) {
            rc = -ENOMEM;
            goto out;
        }
        self->batches = nb;
        self->capbatches = nc;
    }
    *id = ++self->next_batch_id;
    self->batches[self->nbatches++] = (batch_ent_t){.id = *id, .b = b};
out:
    pthread_mutex_unlock(&self->mu);
    return rc;
}

static int batch_finish(cr_xfer_batch_t *b);

/* Puts a batch taken with batch_find(take) back under its id. On failure
 * (no memory) the batch is waited for and freed. */
static int batch_reinsert(PyEngine *self, uint64_t id, cr_xfer_batch_t *b)
{
    int rc = 0;
    pthread_mutex_lock(&self->mu);
    if (self->nbatches < self->capbatches) /* taking one left room for it */
        self->batches[self->nbatches++] = (batch_ent_t){.id = id, .b = b};
    else
        rc = -ENOMEM;
    pthread_mutex_unlock(&self->mu);
    if (rc < 0)
        batch_finish(b);
    return rc;
}

/* Looks a batch up; with take, removes it from the table. */
static cr_xfer_batch_t *batch_find(PyEngine *self, uint64_t id, int take)
{
    cr_xfer_batch_t *b = NULL;
    pthread_mutex_lock(&self->mu);
    for (size_t i = 0; i < self->nbatches; i++) {
        if (self->batches[i].id == id) {
            b = self->batches[i].b;
            if (take)
                self->batches[i] = self->batches[--self->nbatches];
            break;
        }
    }
    pthread_mutex_unlock(&self->mu);
    return b;
}

/* Waits for a batch and frees it (no GIL, lock held for reading). Returns 0
 * or the first request error. */
static int batch_finish(cr_xfer_batch_t *b)
{
    int rc = cr_xfer_batch_wait(b, -1);
    for (int tries = 0; cr_xfer_batch_free(b) == -EBUSY; tries++) {
        /* wait() is bounded by the engine's request timeout; requests that
         * are still in flight after it fail with -ETIMEDOUT soon. */
        int r2 = cr_xfer_batch_wait(b, 1000);
        if (rc == 0)
            rc = r2 ? r2 : -ETIMEDOUT;
        if (tries > 600)
            return rc ? rc : -ETIMEDOUT; /* leaked to engine teardown */
    }
    return rc;
}

/* Parsed transfer arguments. */
typedef struct xfer_args {
    char target[CR_XFER_NAME_MAX];
    cr_xfer_request_t *reqs;
    size_t n;
} xfer_args_t;

static int parse_target(PyObject *o, char *out)
{
    const char *s;
    Py_ssize_t l;
    if (cr__py_key(o, &s, &l) < 0) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "target_hostname must be str");
        }
        return -1;
    }
    if ((size_t)l >= CR_XFER_NAME_MAX) {
        PyErr_SetString(PyExc_ValueError, "target_hostname too long");
        return -1;
    }
    memcpy(out, s, (size_t)l + 1);
    return 0;
}

static int parse_one(PyObject *target, PyObject *buf, PyObject *peer, PyObject *len,
                     cr_xfer_opcode_t op, xfer_args_t *a)
{
    a->reqs = NULL;
    if (parse_target(target, a->target) < 0)
        return -1;
    uint64_t local, remote, n;
    if (cr__py_addr_size(buf, len, "buffer", op == CR_XFER_READ, &local, &n) < 0 ||
        cr__py_u64(peer, "peer_buffer_address", &remote) < 0)
        return -1;
    a->reqs = PyMem_Calloc(1, sizeof *a->reqs);
    if (!a->reqs) {
        PyErr_NoMemory();
        return -1;
    }
    a->reqs[0] = (cr_xfer_request_t){.opcode = op, .local_addr = (void *)(uintptr_t)local,
                                     .target = -1, .target_addr = remote, .length = n};
    a->n = 1;
    return 0;
}

/* Returns 0, 1 when the three lists differ in length (no exception: the
 * caller returns an error code), or -1 with an exception set. */
static int parse_batch(PyObject *target, PyObject *bufs, PyObject *peers, PyObject *lens,
                       cr_xfer_opcode_t op, xfer_args_t *a)
{
    a->reqs = NULL;
    if (parse_target(target, a->target) < 0)
        return -1;
    PyObject *sb = cr__py_seq(bufs, "buffers");
    PyObject *sp = sb ? cr__py_seq(peers, "peer_buffer_addresses") : NULL;
    PyObject *sl = sp ? cr__py_seq(lens, "lengths") : NULL;
    int rc = -1;
    if (!sl)
        goto out;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(sb);
    if (PySequence_Fast_GET_SIZE(sp) != n || PySequence_Fast_GET_SIZE(sl) != n) {
        rc = 1; /* Mooncake returns an error code here, it does not raise */
        goto out;
    }
    if (n > CR_XFER_BATCH_MAX) {
        PyErr_Format(PyExc_ValueError, "too many requests in one batch (%zd > %d)", n,
                     CR_XFER_BATCH_MAX);
        goto out;
    }
    a->reqs = PyMem_Calloc(n ? (size_t)n : 1, sizeof *a->reqs);
    if (!a->reqs) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t local, remote, len;
        if (cr__py_addr_size(PySequence_Fast_GET_ITEM(sb, i), PySequence_Fast_GET_ITEM(sl, i),
                             "buffers[i]", op == CR_XFER_READ, &local, &len) < 0 ||
            cr__py_u64(PySequence_Fast_GET_ITEM(sp, i), "peer_buffer_addresses[i]", &remote) < 0) {
            PyMem_Free(a->reqs);
            a->reqs = NULL;
            goto out;
        }
        a->reqs[i] = (cr_xfer_request_t){.opcode = op, .local_addr = (void *)(uintptr_t)local,
                                         .target = -1, .target_addr = remote, .length = len};
    }
    a->n = (size_t)n;
    rc = 0;
out:
    Py_XDECREF(sb);
    Py_XDECREF(sp);
    Py_XDECREF(sl);
    return rc;
}

/* Runs the requests synchronously; notify (optional) is sent once the
 * writes have landed. No GIL. */
static int run_sync(PyEngine *self, xfer_args_t *a, const void *notify, size_t notify_len)
{
    cr_xfer_engine_t *e = eng_acquire(self);
    if (!e)
        return -ENOTCONN;
    cr_xfer_segment_t seg;
    int rc = seg_get(self, e, a->target, &seg);
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < a->n; i++)
        a->reqs[i].target = seg;
    if (a->n == 0 && !notify) {
        rc = 0;
    } else if (!notify) {
        rc = cr_xfer_transfer_sync(e, a->reqs, a->n, NULL);
    } else {
        cr_xfer_batch_t *b;
        rc = cr_xfer_batch_alloc(e, a->n ? a->n : 1, &b);
        if (rc < 0)
            goto out;
        rc = a->n ? cr_xfer_batch_submit(b, a->reqs, a->n) : 0;
        if (rc == 0)
            rc = a->n ? cr_xfer_batch_notify(b, seg, notify, notify_len)
                      : cr_xfer_notify_send(e, seg, notify, notify_len);
        int r2 = batch_finish(b);
        if (rc == 0)
            rc = r2;
    }
out:
    eng_release(self);
    return rc;
}

/* Submits the requests as an async batch; returns its id (> 0) or a negative
 * status. No GIL. */
static int64_t run_async(PyEngine *self, xfer_args_t *a)
{
    cr_xfer_engine_t *e = eng_acquire(self);
    if (!e)
        return -ENOTCONN;
    cr_xfer_segment_t seg;
    cr_xfer_batch_t *b = NULL;
    uint64_t id = 0;
    int rc = seg_get(self, e, a->target, &seg);
    if (rc < 0)
        goto out;
    if (a->n == 0) {
        rc = -EINVAL;
        goto out;
    }
    for (size_t i = 0; i < a->n; i++)
        a->reqs[i].target = seg;
    rc = cr_xfer_batch_alloc(e, a->n, &b);
    if (rc < 0)
        goto out;
    rc = cr_xfer_batch_submit(b, a->reqs, a->n);
    if (rc == 0)
        rc = batch_put(self, b, &id);
    if (rc < 0) {
        batch_finish(b);
        goto out;
    }
out:
    eng_release(self);
    return rc < 0 ? rc : (int64_t)id;
}

/* Called with the GIL: runs a's requests synchronously with it released,
 * frees them, and returns the status as a Python int. */
static PyObject *run_sync_gil(PyEngine *self, xfer_args_t *a)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = run_sync(self, a, NULL, 0);
    Py_END_ALLOW_THREADS
    PyMem_Free(a->reqs);
    return PyLong_FromLong(rc);
}

/* Called with the GIL: submits a's requests with it released, frees them,
 * and returns run_async's batch id or negative status. */
static int64_t run_async_gil(PyEngine *self, xfer_args_t *a)
{
    int64_t id;
    Py_BEGIN_ALLOW_THREADS
    id = run_async(self, a);
    Py_END_ALLOW_THREADS
    PyMem_Free(a->reqs);
    return id;
}

/* ---- type ----------------------------------------------------------------- */

static PyObject *engine_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    PyEngine *self = (PyEngine *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    cr__py_rwlock_init(&self->lock);
    pthread_mutex_init(&self->mu, NULL);
    cr__py_reg_init(&self->regs);
    return (PyObject *)self;
}

static int engine_init(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "TransferEngine() takes no arguments");
        return -1;
    }
    return 0;
}

/* Destroys the engine and everything attached. GIL held on entry. */
static int engine_teardown(PyEngine *self)
{
    int had = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_wrlock(&self->lock);
    cr_xfer_engine_t *e = self->eng;
    self->eng = NULL;
    had = e != NULL;
    pthread_mutex_lock(&self->mu);
    /* Destroying the engine frees batches and segments not yet released. */
    for (size_t i = 0; i < self->nsegs; i++)
        free(self->segs[i].name);
    free(self->segs);
    self->segs = NULL;
    self->nsegs = 0;
    free(self->batches);
    self->batches = NULL;
    self->nbatches = self->capbatches = 0;
    managed_ent_t *m = self->managed;
    size_t nm = self->nmanaged;
    uint64_t arena = self->arena, arena_size = self->arena_size;
    self->managed = NULL;
    self->nmanaged = 0;
    self->arena = self->arena_size = self->arena_used = 0;
    pthread_mutex_unlock(&self->mu);
    cr_xfer_engine_destroy(e);
    for (size_t i = 0; i < nm; i++)
        if (!m[i].in_arena)
            munmap((void *)(uintptr_t)m[i].addr, m[i].size);
    free(m);
    if (arena)
        munmap((void *)(uintptr_t)arena, arena_size);
    pthread_rwlock_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    cr__py_reg_release_all(&self->regs);
    return had;
}

static void engine_dealloc(PyObject *o)
{
    PyEngine *self = (PyEngine *)o;
    engine_teardown(self);
    pthread_rwlock_destroy(&self->lock);
    pthread_mutex_destroy(&self->mu);
    cr__py_reg_destroy(&self->regs);
    Py_TYPE(o)->tp_free(o);
}

/* Returns 0 or a negative status for Python, or RAISED (INT32_MIN) when a
 * Python exception is set. */
#define RAISED INT32_MIN
static int do_initialize(PyEngine *self, const char *local_hostname, const char *metadata_server,
                         const char *protocol, const char *device_name, const char *metadata_type)
{
    char host[256], ip[64], nics[512];
    uint16_t port = 0;
    if (cr__py_split_host(local_hostname, host, sizeof host, &port) < 0) {
        PyErr_Format(PyExc_ValueError, "local_hostname '%s' is not host or host:port",
                     local_hostname);
        return RAISED;
    }
    if (metadata_type && !strcmp(metadata_type, "p2p"))
        metadata_server = "P2PHANDSHAKE";
    cr__py_mc_env_t env;
    int erc = cr__py_mc_env(metadata_server, protocol, "tcp,shm", "shm,tcp", &env);
    if (erc == -1)
        return RAISED;
    if (erc < 0)
        return erc;
    cr__py_nics_from_devices(device_name, nics, sizeof nics);
    int rc = 0;
    if (!nics[0]) {
        rc = cr__py_resolve_ip(host, ip, sizeof ip);
        if (rc < 0)
            return rc;
        snprintf(nics, sizeof nics, "%s", ip);
    }
    int p2p = !strcmp(env.metadata_uri, "p2p");
    cr_xfer_params_t p = {0};
    p.field_mask = CR_XFER_PARAM_METADATA_URI | CR_XFER_PARAM_TRANSPORTS | CR_XFER_PARAM_NICS;
    p.metadata_uri = env.metadata_uri;
    p.transports = env.transports;
    p.nics = nics;
    /* With a metadata service the segment is published under local_hostname
     * as given ("host:port"), which is the name peers use as target_hostname;
     * the listening port is ephemeral unless MC_LEGACY_RPC_PORT_BINDING asks
     * for the given one. Without a port (or in P2P mode) the name is
     * "<ip>:<rpc port>". */
    if (!p2p && port) {
        p.field_mask |= CR_XFER_PARAM_LOCAL_NAME;
        p.local_name = local_hostname;
    }
    if (port && env.legacy_port) {
        p.field_mask |= CR_XFER_PARAM_PORT;
        p.port = port;
    }
    if (env.timeout_ms) {
        p.field_mask |= CR_XFER_PARAM_TIMEOUT_MS;
        p.timeout_ms = env.timeout_ms;
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_wrlock(&self->lock);
    if (self->eng) {
        rc = -EALREADY;
    } else {
        cr_xfer_engine_t *e = NULL;
        rc = cr_xfer_engine_create(&p, &e);
        if (rc == 0)
            self->eng = e;
    }
    pthread_rwlock_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    return rc;
}

static int do_register(PyEngine *self, uint64_t addr, uint64_t len, Py_buffer *view);

/* Maps and registers the managed-buffer arena of a fresh engine (GIL held).
 * Failure only leaves the engine without an arena. */
static void arena_setup(PyEngine *self)
{
    uint64_t size = ARENA_DEFAULT;
    const char *env = getenv("CRESCENT_MANAGED_POOL_SIZE");
    uint64_t parsed;
    if (env && *env && cr__cfg_parse_size(env, &parsed) == 0) /* "0", "16MB", ... */
        size = parsed;
    size = (size + 4095) & ~4095ull;
    if (!size)
        return;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return;
    if (do_register(self, (uint64_t)(uintptr_t)p, size, NULL) < 0) {
        munmap(p, size);
        return;
    }
    pthread_mutex_lock(&self->mu);
    self->arena = (uint64_t)(uintptr_t)p;
    self->arena_size = size;
    self->arena_used = 0;
    pthread_mutex_unlock(&self->mu);
}

static PyObject *engine_initialize(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"local_hostname", "metadata_server", "protocol", "device_name", NULL};
    const char *lh, *ms, *proto = "tcp", *dev = "";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|ss:initialize", kwl, &lh, &ms, &proto, &dev))
        return NULL;
    int rc = do_initialize(self, lh, ms, proto, dev, NULL);
    if (rc == RAISED)
        return NULL;
    if (rc == 0)
        arena_setup(self);
    return PyLong_FromLong(rc);
}

static PyObject *engine_initialize_ext(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"local_hostname", "metadata_server", "protocol", "device_name",
                          "metadata_type", NULL};
    const char *lh, *ms, *proto, *dev, *mt;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sssss:initialize_ext", kwl, &lh, &ms, &proto, &dev,
                                     &mt))
        return NULL;
    int rc = do_initialize(self, lh, ms, proto, dev, mt);
    if (rc == RAISED)
        return NULL;
    if (rc == 0)
        arena_setup(self);
    return PyLong_FromLong(rc);
}

static PyObject *engine_close(PyEngine *self, PyObject *unused)
{
    (void)unused;
    engine_teardown(self);
    return PyLong_FromLong(0);
}

static PyObject *engine_get_rpc_port(PyEngine *self, PyObject *unused)
{
    (void)unused;
    long port;
    Py_BEGIN_ALLOW_THREADS
    cr_xfer_engine_t *e = eng_acquire(self);
    port = e ? (long)cr_xfer_engine_port(e) : -ENOTCONN;
    if (e)
        eng_release(self);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(port);
}

static PyObject *engine_get_local_name(PyEngine *self, PyObject *unused)
{
    (void)unused;
    char name[CR_XFER_NAME_MAX] = "";
    Py_BEGIN_ALLOW_THREADS
    cr_xfer_engine_t *e = eng_acquire(self);
    if (e) {
        snprintf(name, sizeof name, "%s", cr_xfer_engine_name(e));
        eng_release(self);
    }
    Py_END_ALLOW_THREADS
    return PyUnicode_FromString(name);
}

/* Registers one range; view (may be NULL) is kept until unregistered. GIL held. */
static int do_register(PyEngine *self, uint64_t addr, uint64_t len, Py_buffer *view)
{
    int mapped = 1;
    if (!view) {
        Py_BEGIN_ALLOW_THREADS
        mapped = cr__py_mem_mapped(addr, len);
        Py_END_ALLOW_THREADS
    }
    if (!mapped)
        return -EFAULT;
    int rc = cr__py_reg_add(&self->regs, addr, len, view);
    if (rc < 0)
        return rc;
    Py_BEGIN_ALLOW_THREADS
    cr_xfer_engine_t *e = eng_acquire(self);
    if (!e) {
        rc = -ENOTCONN;
    } else {
        rc = cr_xfer_mem_register(e, (void *)(uintptr_t)addr, len, NULL);
        eng_release(self);
    }
    Py_END_ALLOW_THREADS
    if (rc < 0)
        cr__py_reg_remove(&self->regs, addr, NULL, NULL);
    return rc;
}

/* Parses (buffer_addr, capacity) where buffer_addr may be a buffer object
 * (then held until unregister_memory). Returns 0, 1 for a zero capacity
 * (nothing held; Mooncake's engine answers ERR_INVALID_ARGUMENT, -1, without
 * raising) or -1 (exception: a null buffer_addr, a bad type). */
static int parse_region(PyObject *ao, PyObject *co, uint64_t *addr, uint64_t *len,
                        Py_buffer **view)
{
    if (cr__py_hold_region(ao, co, "buffer_addr", "capacity", addr, len, view) < 0)
        return -1;
    if (*len == 0 || *addr == 0) {
        cr__py_release_view(*view);
        *view = NULL;
        if (*len == 0)
            return 1;
        PyErr_SetString(PyExc_ValueError, "buffer_addr must be non-zero");
        return -1;
    }
    return 0;
}

static PyObject *engine_register_memory(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"buffer_addr", "capacity", NULL};
    PyObject *ao, *co = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:register_memory", kwl, &ao, &co))
        return NULL;
    uint64_t addr, len;
    Py_buffer *view;
    int pr = parse_region(ao, co, &addr, &len, &view);
    if (pr < 0)
        return NULL;
    if (pr > 0) /* zero length: Mooncake's ERR_INVALID_ARGUMENT */
        return PyLong_FromLong(-1);
    int rc = do_register(self, addr, len, view);
    if (rc < 0)
        cr__py_release_view(view);
    return PyLong_FromLong(rc);
}

static int do_unregister(PyEngine *self, uint64_t addr)
{
    Py_buffer *view = NULL;
    int rc = cr__py_reg_remove(&self->regs, addr, NULL, &view);
    if (rc < 0)
        return rc;
    Py_BEGIN_ALLOW_THREADS
    cr_xfer_engine_t *e = eng_acquire(self);
    if (!e) {
        rc = -ENOTCONN;
    } else {
        rc = cr_xfer_mem_unregister(e, (void *)(uintptr_t)addr);
        eng_release(self);
    }
    Py_END_ALLOW_THREADS
    cr__py_release_view(view);
    return rc;
}

static PyObject *engine_unregister_memory(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"buffer_addr", NULL};
    PyObject *ao;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:unregister_memory", kwl, &ao))
        return NULL;
    uint64_t addr;
    if (cr__py_addr(ao, "buffer_addr", 0, &addr, NULL) < 0)
        return NULL;
    return PyLong_FromLong(do_unregister(self, addr));
}

static PyObject *engine_batch_register_memory(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"buffer_addresses", "capacities", NULL};
    PyObject *ao, *co;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:batch_register_memory", kwl, &ao, &co))
        return NULL;
    PyObject *sa = cr__py_seq(ao, "buffer_addresses");
    PyObject *sc = sa ? cr__py_seq(co, "capacities") : NULL;
    if (!sc) {
        Py_XDECREF(sa);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(sa);
    if (PySequence_Fast_GET_SIZE(sc) != n) { /* Mooncake: -1, nothing registered */
        Py_DECREF(sa);
        Py_DECREF(sc);
        return PyLong_FromLong(-1);
    }
    uint64_t *done = PyMem_Calloc(n ? (size_t)n : 1, sizeof *done);
    if (!done) {
        Py_DECREF(sa);
        Py_DECREF(sc);
        return PyErr_NoMemory();
    }
    int rc = 0, raised = 0;
    Py_ssize_t ndone = 0;
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
        uint64_t addr, len;
        Py_buffer *view;
        int pr = parse_region(PySequence_Fast_GET_ITEM(sa, i), PySequence_Fast_GET_ITEM(sc, i),
                              &addr, &len, &view);
        if (pr < 0) {
            raised = 1;
            break;
        }
        if (pr > 0) { /* zero length: -1 and nothing registered, as Mooncake */
            rc = -1;
            break;
        }
        rc = do_register(self, addr, len, view);
        if (rc < 0)
            cr__py_release_view(view);
        else
            done[ndone++] = addr;
    }
    if (raised || rc < 0) { /* all or nothing: undo this call's registrations */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        for (Py_ssize_t i = 0; i < ndone; i++)
            do_unregister(self, done[i]);
        PyErr_Restore(et, ev, tb);
    }
    PyMem_Free(done);
    Py_DECREF(sa);
    Py_DECREF(sc);
    return raised ? NULL : PyLong_FromLong(rc);
}

static PyObject *engine_batch_unregister_memory(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"buffer_addresses", NULL};
    PyObject *ao;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:batch_unregister_memory", kwl, &ao))
        return NULL;
    PyObject *sa = cr__py_seq(ao, "buffer_addresses");
    if (!sa)
        return NULL;
    int rc = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(sa); i++) {
        uint64_t addr;
        if (cr__py_addr(PySequence_Fast_GET_ITEM(sa, i), "buffer_addresses[i]", 0, &addr, NULL) <
            0) {
            Py_DECREF(sa);
            return NULL;
        }
        int r = do_unregister(self, addr);
        if (r < 0 && rc == 0)
            rc = r;
    }
    Py_DECREF(sa);
    return PyLong_FromLong(rc);
}

/* ---- transfers ------------------------------------------------------------ */

static PyObject *xfer_one_sync(PyEngine *self, PyObject *args, PyObject *kw, cr_xfer_opcode_t op,
                               const char *fmt)
{
    static char *kwl[] = {"target_hostname", "buffer", "peer_buffer_address", "length",
                          "transport_hint", "nic_hint", NULL};
    PyObject *t, *b, *p, *l = Py_None;
    const char *hint = "", *nic = "";
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwl, &t, &b, &p, &l, &hint, &nic))
        return NULL;
    xfer_args_t a;
    if (parse_one(t, b, p, l, op, &a) < 0)
        return NULL;
    return run_sync_gil(self, &a);
}

static PyObject *engine_transfer_sync_write(PyEngine *self, PyObject *args, PyObject *kw)
{
    return xfer_one_sync(self, args, kw, CR_XFER_WRITE, "OOO|Oss:transfer_sync_write");
}

static PyObject *engine_transfer_sync_read(PyEngine *self, PyObject *args, PyObject *kw)
{
    return xfer_one_sync(self, args, kw, CR_XFER_READ, "OOO|Oss:transfer_sync_read");
}

static PyObject *xfer_batch_sync(PyEngine *self, PyObject *args, PyObject *kw, cr_xfer_opcode_t op,
                                 const char *fmt)
{
    static char *kwl[] = {"target_hostname", "buffers", "peer_buffer_addresses", "lengths",
                          "transport_hint", "nic_hint", NULL};
    PyObject *t, *b, *p, *l;
    const char *hint = "", *nic = "";
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwl, &t, &b, &p, &l, &hint, &nic))
        return NULL;
    xfer_args_t a;
    int pr = parse_batch(t, b, p, l, op, &a);
    if (pr)
        return pr < 0 ? NULL : PyLong_FromLong(-EINVAL);
    return run_sync_gil(self, &a);
}

static PyObject *engine_batch_transfer_sync_write(PyEngine *self, PyObject *args, PyObject *kw)
{
    return xfer_batch_sync(self, args, kw, CR_XFER_WRITE, "OOOO|ss:batch_transfer_sync_write");
}

static PyObject *engine_batch_transfer_sync_read(PyEngine *self, PyObject *args, PyObject *kw)
{
    return xfer_batch_sync(self, args, kw, CR_XFER_READ, "OOOO|ss:batch_transfer_sync_read");
}

static int parse_opcode(PyObject *o, cr_xfer_opcode_t *op)
{
    uint64_t v;
    if (cr__py_u64(o, "opcode", &v) < 0)
        return -1;
    if (v > 1) {
        PyErr_SetString(PyExc_ValueError, "opcode must be TransferOpcode.READ (0) or WRITE (1)");
        return -1;
    }
    *op = v ? CR_XFER_WRITE : CR_XFER_READ;
    return 0;
}

/* _transfer_sync(target, buffers, peer_buffer_addresses, lengths, opcode, notify=None):
 * the engine of transfer_sync()/batch_transfer_sync(); notify is the bytes
 * payload sent after the writes landed (see crescent/engine.py). */
static PyObject *engine__transfer_sync(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"target_hostname", "buffers", "peer_buffer_addresses", "lengths",
                          "opcode", "notify", NULL};
    PyObject *t, *b, *p, *l, *opo;
    Py_buffer notify = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO|z*:_transfer_sync", kwl, &t, &b, &p, &l,
                                     &opo, &notify))
        return NULL;
    cr_xfer_opcode_t op;
    xfer_args_t a = {0};
    PyObject *ret = NULL;
    if (notify.buf && (size_t)notify.len > CR_XFER_NOTIFY_MAX) {
        PyErr_Format(PyExc_ValueError, "notification longer than %d bytes", CR_XFER_NOTIFY_MAX);
        goto out;
    }
    if (parse_opcode(opo, &op) < 0)
        goto out;
    int pr = parse_batch(t, b, p, l, op, &a);
    if (pr) {
        if (pr > 0)
            ret = PyLong_FromLong(-EINVAL);
        goto out;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = run_sync(self, &a, notify.buf, notify.buf ? (size_t)notify.len : 0);
    Py_END_ALLOW_THREADS
    ret = PyLong_FromLong(rc);
out:
    PyMem_Free(a.reqs);
    if (notify.obj)
        PyBuffer_Release(&notify);
    return ret;
}

static PyObject *xfer_batch_async(PyEngine *self, PyObject *args, PyObject *kw, int with_opcode,
                                  cr_xfer_opcode_t op, const char *fmt)
{
    static char *kwl5[] = {"target_hostname", "buffers", "peer_buffer_addresses", "lengths",
                           "opcode", "transport_hint", "nic_hint", NULL};
    static char *kwl4[] = {"target_hostname", "buffers", "peer_buffer_addresses", "lengths",
                           "transport_hint", "nic_hint", NULL};
    PyObject *t, *b, *p, *l, *opo = NULL;
    const char *hint = "", *nic = "";
    int ok = with_opcode ? PyArg_ParseTupleAndKeywords(args, kw, fmt, kwl5, &t, &b, &p, &l, &opo,
                                                       &hint, &nic)
                         : PyArg_ParseTupleAndKeywords(args, kw, fmt, kwl4, &t, &b, &p, &l,
                                                       &hint, &nic);
    if (!ok)
        return NULL;
    if (opo && parse_opcode(opo, &op) < 0)
        return NULL;
    xfer_args_t a;
    int pr = parse_batch(t, b, p, l, op, &a);
    if (pr)
        return pr < 0 ? NULL : PyLong_FromLong(0); /* batch id 0: failure */
    int64_t id = run_async_gil(self, &a);
    /* Mooncake: batch id, or 0 on failure. */
    return PyLong_FromLongLong(id > 0 ? id : 0);
}

static PyObject *engine_batch_transfer_async_write(PyEngine *self, PyObject *args, PyObject *kw)
{
    return xfer_batch_async(self, args, kw, 0, CR_XFER_WRITE, "OOOO|ss:batch_transfer_async_write");
}

static PyObject *engine_batch_transfer_async_read(PyEngine *self, PyObject *args, PyObject *kw)
{
    return xfer_batch_async(self, args, kw, 0, CR_XFER_READ, "OOOO|ss:batch_transfer_async_read");
}

static PyObject *engine_batch_transfer_async(PyEngine *self, PyObject *args, PyObject *kw)
{
    return xfer_batch_async(self, args, kw, 1, CR_XFER_WRITE, "OOOOO|ss:batch_transfer_async");
}

static PyObject *engine_get_batch_transfer_status(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"batch_ids", NULL};
    PyObject *ids;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:get_batch_transfer_status", kwl, &ids))
        return NULL;
    PyObject *s = cr__py_seq(ids, "batch_ids");
    if (!s)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(s);
    uint64_t *v = PyMem_Calloc(n ? (size_t)n : 1, sizeof *v);
    if (!v) {
        Py_DECREF(s);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (cr__py_u64(PySequence_Fast_GET_ITEM(s, i), "batch_ids[i]", &v[i]) < 0) {
            Py_DECREF(s);
            PyMem_Free(v);
            return NULL;
        }
    }
    Py_DECREF(s);
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    cr_xfer_engine_t *e = eng_acquire(self);
    if (!e) {
        rc = -ENOTCONN;
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            cr_xfer_batch_t *b = batch_find(self, v[i], 1);
            int r = b ? batch_finish(b) : -EINVAL;
            if (r < 0 && rc == 0)
                rc = r;
        }
        eng_release(self);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(v);
    return PyLong_FromLong(rc);
}

static PyObject *engine_transfer_submit_write(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"target_hostname", "buffer", "peer_buffer_address", "length",
                          "transport_hint", "nic_hint", NULL};
    PyObject *t, *b, *p, *l;
    const char *hint = "", *nic = "";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|ss:transfer_submit_write", kwl, &t, &b, &p,
                                     &l, &hint, &nic))
        return NULL;
    xfer_args_t a;
    if (parse_one(t, b, p, l, CR_XFER_WRITE, &a) < 0)
        return NULL;
    return PyLong_FromLongLong(run_async_gil(self, &a));
}

/* transfer_check_status(batch_id): 1 completed, 0 in progress, -1 failed,
 * -2 timed out (Mooncake's values). A finished batch is released. */
static PyObject *engine_transfer_check_status(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"batch_id", NULL};
    PyObject *io;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:transfer_check_status", kwl, &io))
        return NULL;
    uint64_t id;
    if (cr__py_u64(io, "batch_id", &id) < 0)
        return NULL;
    int res;
    Py_BEGIN_ALLOW_THREADS
    cr_xfer_engine_t *e = eng_acquire(self);
    if (!e) {
        res = -1;
    } else {
        /* Taken out of the table while it is inspected, so a concurrent
         * get_batch_transfer_status() of the same id cannot free it under us. */
        cr_xfer_batch_t *b = batch_find(self, id, 1);
        cr_xfer_status_t st;
        if (!b) {
            res = -1;
        } else if (cr_xfer_batch_status_all(b, &st) < 0) {
            res = -1;
            batch_finish(b);
        } else if (st.state == CR_XFER_STATE_WAITING) {
            res = batch_reinsert(self, id, b) == 0 ? 0 : -1;
        } else {
            res = st.state == CR_XFER_STATE_COMPLETED ? 1 : st.error == -ETIMEDOUT ? -2 : -1;
            batch_finish(b);
        }
        eng_release(self);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(res);
}

/* ---- segments, notifications ---------------------------------------------- */

static PyObject *engine_get_first_buffer_address(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"segment_name", NULL};
    PyObject *t;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:get_first_buffer_address", kwl, &t))
        return NULL;
    char name[CR_XFER_NAME_MAX];
    if (parse_target(t, name) < 0)
        return NULL;
    uint64_t addr = 0;
    Py_BEGIN_ALLOW_THREADS
    cr_xfer_engine_t *e = eng_acquire(self);
    if (e && !strcmp(name, cr_xfer_engine_name(e))) {
        /* Own segment: answer from the live registrations (the engine's copy
         * of its own descriptor may predate the latest register_memory). */
        pthread_mutex_lock(&self->regs.mu);
        addr = self->regs.n ? self->regs.v[0].addr : 0;
        pthread_mutex_unlock(&self->regs.mu);
        eng_release(self);
    } else if (e) {
        cr_xfer_segment_t seg;
        cr_xfer_buffer_info_t info;
        size_t n = 0;
        if (seg_get(self, e, name, &seg) == 0 &&
            cr_xfer_segment_buffers(e, seg, &info, 1, &n) == 0 && n > 0)
            addr = info.addr;
        eng_release(self);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLongLong(addr);
}

static PyObject *engine__send_notify(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"target_hostname", "payload", NULL};
    PyObject *t;
    Py_buffer msg;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Oy*:_send_notify", kwl, &t, &msg))
        return NULL;
    char name[CR_XFER_NAME_MAX];
    if (parse_target(t, name) < 0 || (size_t)msg.len > CR_XFER_NOTIFY_MAX) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "notification longer than %d bytes",
                         CR_XFER_NOTIFY_MAX);
        PyBuffer_Release(&msg);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_xfer_engine_t *e = eng_acquire(self);
    if (!e) {
        rc = -ENOTCONN;
    } else {
        cr_xfer_segment_t seg;
        rc = seg_get(self, e, name, &seg);
        if (rc == 0)
            rc = cr_xfer_notify_send(e, seg, msg.buf, (size_t)msg.len);
        eng_release(self);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&msg);
    return PyLong_FromLong(rc);
}

/* _get_notifies_raw() -> [(sender_segment_name, payload_bytes), ...] */
static PyObject *engine__get_notifies_raw(PyEngine *self, PyObject *unused)
{
    (void)unused;
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    cr_xfer_notify_t *buf = PyMem_Malloc(NOTIFY_POLL * sizeof *buf);
    if (!buf) {
        Py_DECREF(list);
        return PyErr_NoMemory();
    }
    for (;;) {
        size_t n = 0;
        Py_BEGIN_ALLOW_THREADS
        cr_xfer_engine_t *e = eng_acquire(self);
        if (e) {
            cr_xfer_notify_poll(e, buf, NOTIFY_POLL, &n);
            eng_release(self);
        }
        Py_END_ALLOW_THREADS
        for (size_t i = 0; i < n; i++) {
            size_t len = buf[i].len <= CR_XFER_NOTIFY_MAX ? buf[i].len : CR_XFER_NOTIFY_MAX;
            PyObject *tup = Py_BuildValue("(sy#)", buf[i].from, buf[i].msg, (Py_ssize_t)len);
            if (!tup || PyList_Append(list, tup) < 0) {
                Py_XDECREF(tup);
                Py_DECREF(list);
                PyMem_Free(buf);
                return NULL;
            }
            Py_DECREF(tup);
        }
        if (n < NOTIFY_POLL)
            break;
    }
    PyMem_Free(buf);
    return list;
}

/* ---- managed buffers and raw byte access ---------------------------------- */

static PyObject *engine_allocate_managed_buffer(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"length", NULL};
    PyObject *lo;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:allocate_managed_buffer", kwl, &lo))
        return NULL;
    uint64_t len;
    if (cr__py_size(lo, "length", &len) < 0)
        return NULL;
    if (len == 0 || len > (1ull << 40))
        return PyErr_Format(PyExc_ValueError, "length must be in 1..2^40");
    uint64_t size = 4096;
    while (size < len)
        size <<= 1;
    uint64_t addr = 0;
    /* Reuse a free chunk of the same size class (chunks stay registered). */
    pthread_mutex_lock(&self->mu);
    for (size_t i = 0; i < self->nmanaged; i++) {
        if (!self->managed[i].in_use && self->managed[i].size == size) {
            self->managed[i].in_use = 1;
            addr = self->managed[i].addr;
            break;
        }
    }
    int full = self->nmanaged >= MANAGED_MAX;
    if (!addr && !full && self->arena && self->arena_size - self->arena_used >= size) {
        managed_ent_t *nm = realloc(self->managed, (self->nmanaged + 1) * sizeof *nm);
        if (nm) {
            self->managed = nm;
            addr = self->arena + self->arena_used;
            self->arena_used += size;
            self->managed[self->nmanaged++] =
                (managed_ent_t){.addr = addr, .size = size, .in_use = 1, .in_arena = 1};
        }
    }
    pthread_mutex_unlock(&self->mu);
    if (addr)
        return PyLong_FromUnsignedLongLong(addr);
    if (full)
        return PyLong_FromLong(0);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    rc = p == MAP_FAILED ? -ENOMEM : 0;
    if (rc == 0)
        addr = (uint64_t)(uintptr_t)p;
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return PyLong_FromLong(0);
    rc = do_register(self, addr, size, NULL);
    if (rc == 0) {
        pthread_mutex_lock(&self->mu);
        managed_ent_t *nm = realloc(self->managed, (self->nmanaged + 1) * sizeof *nm);
        if (nm) {
            self->managed = nm;
            self->managed[self->nmanaged++] = (managed_ent_t){.addr = addr, .size = size, .in_use = 1};
        } else {
            rc = -ENOMEM;
        }
        pthread_mutex_unlock(&self->mu);
        if (rc < 0)
            do_unregister(self, addr);
    }
    if (rc < 0) {
        munmap((void *)(uintptr_t)addr, size);
        return PyLong_FromLong(0);
    }
    return PyLong_FromUnsignedLongLong(addr);
}

static PyObject *engine_free_managed_buffer(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"buffer_addr", "length", NULL};
    PyObject *ao, *lo;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:free_managed_buffer", kwl, &ao, &lo))
        return NULL;
    uint64_t addr, len;
    if (cr__py_u64(ao, "buffer_addr", &addr) < 0 || cr__py_size(lo, "length", &len) < 0)
        return NULL;
    int rc = -EINVAL;
    pthread_mutex_lock(&self->mu);
    for (size_t i = 0; i < self->nmanaged; i++) {
        if (self->managed[i].addr == addr && self->managed[i].in_use && len <= self->managed[i].size) {
            self->managed[i].in_use = 0;
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&self->mu);
    return PyLong_FromLong(rc);
}

static PyObject *engine_write_bytes_to_buffer(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"dest_address", "src_ptr", "length", NULL};
    PyObject *ao, *lo = Py_None;
    Py_buffer src;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Oy*|O:write_bytes_to_buffer", kwl, &ao, &src, &lo))
        return NULL;
    uint64_t addr, len = (uint64_t)src.len;
    PyObject *ret = NULL;
    if (cr__py_u64(ao, "dest_address", &addr) < 0 ||
        (lo != Py_None && cr__py_u64(lo, "length", &len) < 0))
        goto out;
    if (len > (uint64_t)src.len) {
        PyErr_Format(PyExc_ValueError, "length %llu exceeds the %zd source bytes",
                     (unsigned long long)len, src.len);
        goto out;
    }
    if (len && !cr__py_reg_covers(&self->regs, addr, len)) {
        ret = PyLong_FromLong(-EFAULT); /* not memory registered with this engine */
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS
    memcpy((void *)(uintptr_t)addr, src.buf, len);
    Py_END_ALLOW_THREADS
    ret = PyLong_FromLong(0);
out:
    PyBuffer_Release(&src);
    return ret;
}

static PyObject *engine_read_bytes_from_buffer(PyEngine *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"source_address", "length", NULL};
    PyObject *ao, *lo;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:read_bytes_from_buffer", kwl, &ao, &lo))
        return NULL;
    uint64_t addr, len;
    if (cr__py_u64(ao, "source_address", &addr) < 0 || cr__py_u64(lo, "length", &len) < 0)
        return NULL;
    if (len > PY_SSIZE_T_MAX)
        return PyErr_Format(PyExc_ValueError, "length too large");
    if (len && !cr__py_reg_covers(&self->regs, addr, len))
        return PyErr_Format(PyExc_ValueError,
                            "[0x%llx, +%llu) is not memory registered with this engine",
                            (unsigned long long)addr, (unsigned long long)len);
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
    if (!b)
        return NULL;
    char *dst = PyBytes_AS_STRING(b);
    Py_BEGIN_ALLOW_THREADS
    memcpy(dst, (const void *)(uintptr_t)addr, len);
    Py_END_ALLOW_THREADS
    return b;
}

static PyObject *engine_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    Py_INCREF(self);
    return self;
}

static PyObject *engine_exit(PyEngine *self, PyObject *args)
{
    (void)args;
    engine_teardown(self);
    Py_RETURN_FALSE;
}

#define KW (PyCFunction)(void (*)(void))
static PyMethodDef engine_methods[] = {
    {"initialize", KW engine_initialize, METH_VARARGS | METH_KEYWORDS,
     "initialize(local_hostname, metadata_server, protocol='tcp', device_name='') -> int"},
    {"initialize_ext", KW engine_initialize_ext, METH_VARARGS | METH_KEYWORDS,
     "initialize_ext(local_hostname, metadata_server, protocol, device_name, metadata_type) -> int"},
    {"close", (PyCFunction)engine_close, METH_NOARGS,
     "close() -> 0: stops the engine (waits for calls in flight); also done on deletion"},
    {"get_rpc_port", (PyCFunction)engine_get_rpc_port, METH_NOARGS, "get_rpc_port() -> int"},
    {"get_local_name", (PyCFunction)engine_get_local_name, METH_NOARGS,
     "get_local_name() -> str: the segment name peers pass as target_hostname"},
    {"register_memory", KW engine_register_memory, METH_VARARGS | METH_KEYWORDS,
     "register_memory(buffer_addr, capacity) -> int; buffer_addr may be a buffer object"},
    {"unregister_memory", KW engine_unregister_memory, METH_VARARGS | METH_KEYWORDS,
     "unregister_memory(buffer_addr) -> int"},
    {"batch_register_memory", KW engine_batch_register_memory, METH_VARARGS | METH_KEYWORDS,
     "batch_register_memory(buffer_addresses, capacities) -> int"},
    {"batch_unregister_memory", KW engine_batch_unregister_memory, METH_VARARGS | METH_KEYWORDS,
     "batch_unregister_memory(buffer_addresses) -> int"},
    {"transfer_sync_write", KW engine_transfer_sync_write, METH_VARARGS | METH_KEYWORDS,
     "transfer_sync_write($self, target_hostname, buffer, peer_buffer_address, length=None, transport_hint='', nic_hint='')\n--\n\nWrites length bytes to the peer: 0 or negative."},
    {"transfer_sync_read", KW engine_transfer_sync_read, METH_VARARGS | METH_KEYWORDS,
     "transfer_sync_read($self, target_hostname, buffer, peer_buffer_address, length=None, transport_hint='', nic_hint='')\n--\n\nReads length bytes from the peer: 0 or negative."},
    {"batch_transfer_sync_write", KW engine_batch_transfer_sync_write, METH_VARARGS | METH_KEYWORDS,
     "batch_transfer_sync_write($self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint='', nic_hint='')\n--\n\n0 or negative."},
    {"batch_transfer_sync_read", KW engine_batch_transfer_sync_read, METH_VARARGS | METH_KEYWORDS,
     "batch_transfer_sync_read($self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint='', nic_hint='')\n--\n\n0 or negative."},
    {"_transfer_sync", KW engine__transfer_sync, METH_VARARGS | METH_KEYWORDS,
     "_transfer_sync(target, buffers, peer_addresses, lengths, opcode, notify_payload=None)"},
    {"batch_transfer_async_write", KW engine_batch_transfer_async_write,
     METH_VARARGS | METH_KEYWORDS,
     "batch_transfer_async_write($self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint='', nic_hint='')\n--\n\nBatch id (0 on failure)."},
    {"batch_transfer_async_read", KW engine_batch_transfer_async_read, METH_VARARGS | METH_KEYWORDS,
     "batch_transfer_async_read($self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint='', nic_hint='')\n--\n\nBatch id (0 on failure)."},
    {"batch_transfer_async", KW engine_batch_transfer_async, METH_VARARGS | METH_KEYWORDS,
     "batch_transfer_async($self, target_hostname, buffers, peer_buffer_addresses, lengths, "
     "opcode, transport_hint='', nic_hint='')\n--\n\nBatch id (0 on failure)."},
    {"get_batch_transfer_status", KW engine_get_batch_transfer_status, METH_VARARGS | METH_KEYWORDS,
     "get_batch_transfer_status(batch_ids) -> 0 when all completed, else negative"},
    {"transfer_submit_write", KW engine_transfer_submit_write, METH_VARARGS | METH_KEYWORDS,
     "transfer_submit_write(target_hostname, buffer, peer_buffer_address, length) -> batch id"},
    {"transfer_check_status", KW engine_transfer_check_status, METH_VARARGS | METH_KEYWORDS,
     "transfer_check_status(batch_id) -> 1 done, 0 running, -1 failed, -2 timed out"},
    {"get_first_buffer_address", KW engine_get_first_buffer_address, METH_VARARGS | METH_KEYWORDS,
     "get_first_buffer_address(segment_name) -> int (0 if none)"},
    {"_send_notify", KW engine__send_notify, METH_VARARGS | METH_KEYWORDS,
     "_send_notify(target_hostname, payload) -> int"},
    {"_get_notifies_raw", (PyCFunction)engine__get_notifies_raw, METH_NOARGS,
     "_get_notifies_raw() -> [(sender, payload)]"},
    {"allocate_managed_buffer", KW engine_allocate_managed_buffer, METH_VARARGS | METH_KEYWORDS,
     "allocate_managed_buffer(length) -> address (0 on failure); registered memory"},
    {"free_managed_buffer", KW engine_free_managed_buffer, METH_VARARGS | METH_KEYWORDS,
     "free_managed_buffer(buffer_addr, length) -> int"},
    {"write_bytes_to_buffer", KW engine_write_bytes_to_buffer, METH_VARARGS | METH_KEYWORDS,
     "write_bytes_to_buffer(dest_address, src_ptr, length) -> int"},
    {"read_bytes_from_buffer", KW engine_read_bytes_from_buffer, METH_VARARGS | METH_KEYWORDS,
     "read_bytes_from_buffer(source_address, length) -> bytes"},
    {"__enter__", engine_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)engine_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject cr__py_engine_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "crescent._crescent.TransferEngine",
    .tp_basicsize = sizeof(PyEngine),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Transfer Engine (Mooncake-compatible methods). Thread-safe.",
    .tp_new = engine_new,
    .tp_init = engine_init,
    .tp_dealloc = engine_dealloc,
    .tp_methods = engine_methods,
};

int cr__py_engine_types_ready(PyObject *m)
{
    if (PyType_Ready(&cr__py_engine_type) < 0)
        return -1;
    Py_INCREF(&cr__py_engine_type);
    if (PyModule_AddObject(m, "TransferEngine", (PyObject *)&cr__py_engine_type) < 0) {
        Py_DECREF(&cr__py_engine_type);
        return -1;
    }
    return 0;
}
