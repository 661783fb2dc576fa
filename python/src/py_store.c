/* crescent._crescent.DistributedStore: the Store client (include/crescent/
 * store.h) with Mooncake's MooncakeDistributedStore method names, positional
 * order, defaults and return conventions, and BufferHandle (get_buffer()).
 *
 * Concurrency: as for TransferEngine, `lock` is a writer-preferring rwlock:
 * every call holds it for reading (without the GIL) while it uses the
 * client, setup()/close() hold it for writing, so close() waits for calls in
 * flight (cr_store_destroy() must not race with other calls).
 *
 * Not set up / closed: calls return CR_E_UNAVAILABLE_IN_CURRENT_STATUS
 * (-1010) (lists of it for batch calls), get() returns b"" and get_buffer()
 * None, as Mooncake does for a missing key.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "crescent/store.h"
#include "pyutil.h"

#define NOT_READY CR_E_UNAVAILABLE_IN_CURRENT_STATUS

typedef struct {
    PyObject_HEAD
    pthread_rwlock_t lock;
    cr_store_t *st; /* guarded by lock */
    cr__py_regtab_t regs; /* buffers registered through this object */
    /* Registered staging area for the multi-buffer calls (store.h has no
     * scatter/gather form): one buffer, grown on demand, used by one call
     * at a time. */
    pthread_mutex_t stage_mu;
    void *stage;       /* guarded by stage_mu */
    size_t stage_size; /* guarded by stage_mu */
} PyStore;

typedef struct {
    PyObject_HEAD
    void *ptr; /* malloc'd by cr_store_get_alloc, freed on dealloc */
    size_t size;
    Py_ssize_t exports;
} PyBufHandle;

/* ---- helpers -------------------------------------------------------------- */

/* Mooncake's put family treats a key that already exists as success (objects
 * are immutable: the stored value is kept). */
/* A put of an existing key keeps the stored value and returns 0 (Mooncake);
 * an upsert's OBJECT_ALREADY_EXISTS (another write of the key in flight) is
 * reported as it is. */
static int put_rc(int rc, const cr_store_replicate_config_t *c)
{
    return rc == CR_E_OBJECT_ALREADY_EXISTS && !(c && c->upsert) ? 0 : rc;
}

static cr_store_t *st_acquire(PyStore *self)
{
    pthread_rwlock_rdlock(&self->lock);
    if (!self->st) {
        pthread_rwlock_unlock(&self->lock);
        return NULL;
    }
    return self->st;
}
static void st_release(PyStore *self) { pthread_rwlock_unlock(&self->lock); }

/* Replication config from any object with Mooncake's ReplicateConfig
 * attributes (replica_num, with_soft_pin, with_hard_pin, preferred_segments
 * or preferred_segment); None = defaults. Strings point into `keep`, a list
 * the caller releases after the call. */
typedef struct cfg_buf {
    cr_store_replicate_config_t c;
    const char *pref[CR_STORE_PREFERRED_MAX];
    PyObject *keep;
    int set;
} cfg_buf_t;

static int attr_bool(PyObject *o, const char *name, int *out)
{
    PyObject *v = PyObject_GetAttrString(o, name);
    if (!v) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (t < 0)
        return -1;
    *out = t;
    return 0;
}

static int parse_config(PyObject *o, cfg_buf_t *cb)
{
    memset(cb, 0, sizeof *cb);
    if (!o || o == Py_None)
        return 0;
    cb->keep = PyList_New(0);
    if (!cb->keep)
        return -1;
    cb->set = 1;
    cb->c.replica_num = 1;
    PyObject *v = PyObject_GetAttrString(o, "replica_num");
    if (!v) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        if (!PyObject_HasAttrString(o, "with_soft_pin")) {
            PyErr_Format(PyExc_TypeError, "config must be a ReplicateConfig, not %s",
                         Py_TYPE(o)->tp_name);
            return -1;
        }
    } else {
        uint64_t n;
        int r = cr__py_u64(v, "replica_num", &n);
        Py_DECREF(v);
        if (r < 0)
            return -1;
        if (n < 1 || n > CR_STORE_REPLICA_MAX) {
            PyErr_Format(PyExc_ValueError, "replica_num must be in 1..%d", CR_STORE_REPLICA_MAX);
            return -1;
        }
        cb->c.replica_num = (uint32_t)n;
    }
    if (attr_bool(o, "with_soft_pin", &cb->c.soft_pin) < 0 ||
        attr_bool(o, "with_hard_pin", &cb->c.hard_pin) < 0 ||
        attr_bool(o, "_upsert", &cb->c.upsert) < 0) /* set by crescent.store's upserts */
        return -1;
    if (cb->c.upsert)
        cb->c.field_mask = CR_STORE_REPL_V1 | CR_STORE_REPL_UPSERT;
    /* preferred_segments (list) and/or preferred_segment (str) */
    const char *names[] = {"preferred_segments", "preferred_segment"};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && cb->c.n_preferred)
            break; /* preferred_segment is the first of preferred_segments */
        v = PyObject_GetAttrString(o, names[k]);
        if (!v) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return -1;
            PyErr_Clear();
            continue;
        }
        if (v == Py_None || (PyUnicode_Check(v) && PyUnicode_GET_LENGTH(v) == 0)) {
            Py_DECREF(v);
            continue;
        }
        PyObject *seq = PyUnicode_Check(v) ? PyTuple_Pack(1, v) : cr__py_seq(v, names[k]);
        Py_DECREF(v);
        if (!seq)
            return -1;
        if (PyList_Append(cb->keep, seq) < 0) {
            Py_DECREF(seq);
            return -1;
        }
        Py_DECREF(seq);
        PyObject *fs = PySequence_Fast(seq, names[k]);
        if (!fs)
            return -1;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fs); i++) {
            PyObject *s = PySequence_Fast_GET_ITEM(fs, i);
            if (!PyUnicode_Check(s)) {
                Py_DECREF(fs);
                PyErr_Format(PyExc_TypeError, "%s must hold str", names[k]);
                return -1;
            }
            if (cb->c.n_preferred >= CR_STORE_PREFERRED_MAX) {
                Py_DECREF(fs);
                PyErr_Format(PyExc_ValueError, "at most %d preferred segments",
                             CR_STORE_PREFERRED_MAX);
                return -1;
            }
            const char *u = PyUnicode_AsUTF8(s);
            if (!u) {
                Py_DECREF(fs);
                return -1;
            }
            cb->pref[cb->c.n_preferred++] = u;
        }
        Py_DECREF(fs);
    }
    cb->c.preferred_segments = cb->c.n_preferred ? cb->pref : NULL;
    return 0;
}

static void config_done(cfg_buf_t *cb) { Py_CLEAR(cb->keep); }

static const cr_store_replicate_config_t *cfg_ptr(cfg_buf_t *cb) { return cb->set ? &cb->c : NULL; }

/* Keys as a NUL-terminated C string array pointing into the (kept alive)
 * Python objects; lens of keys over the limit are reported per key. */
typedef struct keys_buf {
    PyObject *seq;
    const char **k;
    Py_ssize_t n;
} keys_buf_t;

static int parse_keys(PyObject *o, keys_buf_t *kb)
{
    kb->k = NULL;
    kb->seq = cr__py_seq(o, "keys");
    if (!kb->seq)
        return -1;
    kb->n = PySequence_Fast_GET_SIZE(kb->seq);
    kb->k = PyMem_Calloc(kb->n ? (size_t)kb->n : 1, sizeof *kb->k);
    if (!kb->k) {
        Py_CLEAR(kb->seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < kb->n; i++) {
        Py_ssize_t l;
        if (cr__py_key(PySequence_Fast_GET_ITEM(kb->seq, i), &kb->k[i], &l) < 0) {
            PyMem_Free(kb->k);
            kb->k = NULL;
            Py_CLEAR(kb->seq);
            return -1;
        }
    }
    return 0;
}

static void keys_done(keys_buf_t *kb)
{
    PyMem_Free(kb->k);
    kb->k = NULL;
    Py_CLEAR(kb->seq);
}

/* The lone `key` argument of get/get_buffer/get_size/is_exist (fmt is
 * "O:<method>"): the key, valid for the call, or NULL with an exception. */
static const char *parse_key_arg(PyObject *args, PyObject *kw, const char *fmt)
{
    static char *kwl[] = {"key", NULL};
    PyObject *ko;
    const char *key;
    Py_ssize_t kl;
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwl, &ko) || cr__py_key(ko, &key, &kl) < 0)
        return NULL;
    return key;
}

/* The lone `keys` argument of batch_is_exist/get_batch (fmt is "O:<method>")
 * into kb (keys_done() it). Returns 0 or -1 with an exception. */
static int parse_keys_arg(PyObject *args, PyObject *kw, const char *fmt, keys_buf_t *kb)
{
    static char *kwl[] = {"keys", NULL};
    PyObject *ko;
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwl, &ko))
        return -1;
    return parse_keys(ko, kb);
}

static PyObject *int_list(const int64_t *v, Py_ssize_t n)
{
    PyObject *l = PyList_New(n);
    if (!l)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (!x) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, x);
    }
    return l;
}

/* ---- type ----------------------------------------------------------------- */

static PyObject *store_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    PyStore *self = (PyStore *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    cr__py_rwlock_init(&self->lock);
    pthread_mutex_init(&self->stage_mu, NULL);
    cr__py_reg_init(&self->regs);
    return (PyObject *)self;
}

static int store_init(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "DistributedStore() takes no arguments");
        return -1;
    }
    return 0;
}

static int store_teardown(PyStore *self)
{
    int had;
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_wrlock(&self->lock);
    cr_store_t *s = self->st;
    self->st = NULL;
    had = s != NULL;
    cr_store_destroy(s);
    pthread_mutex_lock(&self->stage_mu);
    if (self->stage)
        munmap(self->stage, self->stage_size);
    self->stage = NULL;
    self->stage_size = 0;
    pthread_mutex_unlock(&self->stage_mu);
    pthread_rwlock_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    cr__py_reg_release_all(&self->regs);
    return had;
}

static void store_dealloc(PyObject *o)
{
    PyStore *self = (PyStore *)o;
    store_teardown(self);
    pthread_rwlock_destroy(&self->lock);
    pthread_mutex_destroy(&self->stage_mu);
    cr__py_reg_destroy(&self->regs);
    Py_TYPE(o)->tp_free(o);
}

/* setup(local_hostname, metadata_server, global_segment_size=16MiB,
 *       local_buffer_size=16MiB, protocol="tcp", rdma_devices="",
 *       master_server_addr="127.0.0.1:50051")  or  setup(config_dict) */
static PyObject *store_setup(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"local_hostname", "metadata_server", "global_segment_size",
                          "local_buffer_size", "protocol", "rdma_devices", "master_server_addr",
                          "engine", "_te_port", NULL};
    int te_port = 0;
    PyObject *lh_o = NULL, *ms_o = NULL, *gss_o = NULL, *lbs_o = NULL, *proto_o = NULL,
             *dev_o = NULL, *master_o = NULL, *engine_o = NULL;
    PyObject *dict = NULL;
    if (PyTuple_GET_SIZE(args) == 1 && PyDict_Check(PyTuple_GET_ITEM(args, 0)) &&
        (!kw || !PyDict_GET_SIZE(kw))) {
        dict = PyTuple_GET_ITEM(args, 0);
        lh_o = PyDict_GetItemString(dict, "local_hostname");
        ms_o = PyDict_GetItemString(dict, "metadata_server");
        gss_o = PyDict_GetItemString(dict, "global_segment_size");
        lbs_o = PyDict_GetItemString(dict, "local_buffer_size");
        proto_o = PyDict_GetItemString(dict, "protocol");
        dev_o = PyDict_GetItemString(dict, "rdma_devices");
        if (!dev_o)
            dev_o = PyDict_GetItemString(dict, "device_name");
        master_o = PyDict_GetItemString(dict, "master_server_addr");
        if (!master_o)
            master_o = PyDict_GetItemString(dict, "master_server_address");
    } else if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOOOOOi:setup", kwl, &lh_o, &ms_o, &gss_o,
                                            &lbs_o, &proto_o, &dev_o, &master_o, &engine_o,
                                            &te_port)) {
        return NULL;
    }
    const char *lh = "localhost", *ms = "", *proto = "tcp", *dev = "", *master = "127.0.0.1:50051";
    uint64_t gss = 16ull << 20, lbs = 16ull << 20;
    struct {
        PyObject *o;
        const char **dst;
        const char *name;
    } strs[] = {{lh_o, &lh, "local_hostname"}, {ms_o, &ms, "metadata_server"},
                {proto_o, &proto, "protocol"},  {dev_o, &dev, "rdma_devices"},
                {master_o, &master, "master_server_addr"}};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        if (!strs[i].o || strs[i].o == Py_None)
            continue;
        if (!PyUnicode_Check(strs[i].o))
            return PyErr_Format(PyExc_TypeError, "%s must be str, not %s", strs[i].name,
                                Py_TYPE(strs[i].o)->tp_name);
        *strs[i].dst = PyUnicode_AsUTF8(strs[i].o);
        if (!*strs[i].dst)
            return NULL;
    }
    /* An unparsable size string ("50%") is an error code, as in Mooncake;
     * wrong types and negative numbers raise. */
    PyObject *szo[2] = {gss_o, lbs_o};
    uint64_t *szv[2] = {&gss, &lbs};
    const char *szn[2] = {"global_segment_size", "local_buffer_size"};
    for (int i = 0; i < 2; i++) {
        if (!szo[i] || szo[i] == Py_None)
            continue;
        if (cr__py_size(szo[i], szn[i], szv[i]) < 0) {
            if (!(PyUnicode_Check(szo[i]) || PyBytes_Check(szo[i])) ||
                !PyErr_ExceptionMatches(PyExc_ValueError))
                return NULL;
            PyErr_Clear();
            return PyLong_FromLong(CR_E_INVALID_PARAMS);
        }
    }
    /* Mooncake accepts a zero local buffer (copying calls then fail there);
     * crescent's client needs >= 64 KiB of staging: a smaller request gets
     * 64 KiB and the copying calls work. */
    if (lbs < (64u << 10))
        lbs = 64u << 10;
    if (engine_o && engine_o != Py_None &&
        PyErr_WarnEx(PyExc_RuntimeWarning,
                     "crescent: setup(engine=...) is ignored; the store runs its own engine",
                     1) < 0)
        return NULL;
    if (!*master) {
        const char *env = getenv("MOONCAKE_MASTER");
        master = env && *env ? env : "127.0.0.1:50051";
    }

    char host[256], ip[64], nics[512];
    uint16_t port = 0;
    if (cr__py_split_host(lh, host, sizeof host, &port) < 0)
        return PyErr_Format(PyExc_ValueError, "local_hostname '%s' is not host or host:port", lh);
    cr__py_mc_env_t env;
    int erc = cr__py_mc_env(ms, proto, "tcp", "tcp,shm", &env);
    if (erc == -1)
        return NULL;
    if (erc < 0)
        return PyLong_FromLong(CR_E_INVALID_PARAMS);
    if (cr__py_resolve_ip(host, ip, sizeof ip) < 0)
        return PyLong_FromLong(CR_E_INVALID_PARAMS);
    cr__py_nics_from_devices(dev, nics, sizeof nics);

    cr_store_params_t p = {0};
    p.field_mask = CR_STORE_PARAM_LOCAL_HOSTNAME | CR_STORE_PARAM_METADATA_URI |
                   CR_STORE_PARAM_MASTER_ADDR | CR_STORE_PARAM_GLOBAL_SEGMENT_SIZE |
                   CR_STORE_PARAM_LOCAL_BUFFER_SIZE | CR_STORE_PARAM_PROTOCOL;
    p.local_hostname = ip;
    p.metadata_uri = env.metadata_uri;
    p.master_addr = master;
    p.global_segment_size = gss;
    p.local_buffer_size = lbs;
    p.protocol = env.transports;
    if (nics[0]) {
        p.field_mask |= CR_STORE_PARAM_DEVICE_NAMES;
        p.device_names = nics;
    }
    if (port && env.legacy_port) {
        p.field_mask |= CR_STORE_PARAM_TE_PORT;
        p.te_port = port;
    } else if (te_port > 0 && te_port < 65536) {
        /* the Python layer picks Mooncake's port range (12300-14300) */
        p.field_mask |= CR_STORE_PARAM_TE_PORT | CR_STORE_PARAM_FRESH_NAME;
        p.te_port = (uint16_t)te_port;
        p.fresh_name = 1; /* a name still held at the master: another port */
    }
    if (env.timeout_ms) {
        p.field_mask |= CR_STORE_PARAM_TRANSFER_TIMEOUT_MS;
        p.transfer_timeout_ms = env.timeout_ms;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_wrlock(&self->lock);
    if (self->st) {
        rc = NOT_READY; /* already set up */
    } else {
        cr_store_t *s = NULL;
        rc = cr_store_create(&p, &s);
        if (rc == 0)
            self->st = s;
    }
    pthread_rwlock_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

static PyObject *store_close(PyStore *self, PyObject *unused)
{
    (void)unused;
    store_teardown(self);
    return PyLong_FromLong(0);
}

static PyObject *store_get_hostname(PyStore *self, PyObject *unused)
{
    (void)unused;
    char name[512] = "";
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (s) {
        snprintf(name, sizeof name, "%s", cr_store_segment_name(s));
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    return PyUnicode_FromString(name);
}

/* ---- registered memory ---------------------------------------------------- */

static PyObject *store_register_buffer(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"buffer_ptr", "size", NULL};
    PyObject *ao, *so = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:register_buffer", kwl, &ao, &so))
        return NULL;
    uint64_t addr, len;
    Py_buffer *view;
    if (cr__py_hold_region(ao, so, "buffer_ptr", "size", &addr, &len, &view) < 0)
        return NULL;
    int mapped = 1;
    if (!view && addr && len) {
        Py_BEGIN_ALLOW_THREADS
        mapped = cr__py_mem_mapped(addr, len);
        Py_END_ALLOW_THREADS
    }
    if (addr == 0 || len == 0 || !mapped) {
        cr__py_release_view(view);
        return PyLong_FromLong(CR_E_INVALID_PARAMS);
    }
    int rc = cr__py_reg_add(&self->regs, addr, len, view);
    if (rc < 0) {
        cr__py_release_view(view);
        return PyLong_FromLong(rc == -EEXIST ? CR_E_INVALID_PARAMS : rc);
    }
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = cr_store_register_buffer(s, (void *)(uintptr_t)addr, len);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        cr__py_reg_remove(&self->regs, addr, NULL, NULL);
        cr__py_release_view(view);
    }
    return PyLong_FromLong(rc);
}

static PyObject *store_unregister_buffer(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"buffer_ptr", NULL};
    PyObject *ao;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:unregister_buffer", kwl, &ao))
        return NULL;
    uint64_t addr;
    if (cr__py_addr(ao, "buffer_ptr", 0, &addr, NULL) < 0)
        return NULL;
    Py_buffer *view = NULL;
    if (cr__py_reg_remove(&self->regs, addr, NULL, &view) < 0)
        return PyLong_FromLong(CR_E_INVALID_PARAMS);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = cr_store_unregister_buffer(s, (void *)(uintptr_t)addr);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    cr__py_release_view(view);
    return PyLong_FromLong(rc);
}

/* ---- single-key operations ------------------------------------------------ */

static PyObject *store_put(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"key", "value", "config", NULL};
    PyObject *ko, *cfg_o = Py_None;
    Py_buffer val;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Oy*|O:put", kwl, &ko, &val, &cfg_o))
        return NULL;
    const char *key;
    Py_ssize_t kl;
    cfg_buf_t cb = {0};
    PyObject *ret = NULL;
    if (cr__py_key(ko, &key, &kl) < 0 || parse_config(cfg_o, &cb) < 0)
        goto out;
    if (!PyBuffer_IsContiguous(&val, 'A')) {
        PyErr_SetString(PyExc_ValueError, "value must be a contiguous buffer");
        goto out;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = put_rc(cr_store_put(s, key, val.buf, (size_t)val.len, cfg_ptr(&cb)), cfg_ptr(&cb));
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    ret = PyLong_FromLong(rc);
out:
    config_done(&cb);
    PyBuffer_Release(&val);
    return ret;
}

/* put_parts(key, *parts, config=None): the parts concatenated as one value. */
static PyObject *store_put_parts(PyStore *self, PyObject *args, PyObject *kw)
{
    Py_ssize_t na = PyTuple_GET_SIZE(args);
    if (na < 1)
        return PyErr_Format(PyExc_TypeError, "put_parts() missing required argument 'key'");
    PyObject *cfg_o = Py_None;
    if (kw) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kw, &pos, &k, &v)) {
            if (PyUnicode_Check(k) && !PyUnicode_CompareWithASCIIString(k, "config"))
                cfg_o = v;
            else
                return PyErr_Format(PyExc_TypeError, "put_parts() got an unexpected keyword %R", k);
        }
    }
    const char *key;
    Py_ssize_t kl;
    if (cr__py_key(PyTuple_GET_ITEM(args, 0), &key, &kl) < 0)
        return NULL;
    Py_ssize_t np = na - 1;
    Py_buffer *views = PyMem_Calloc(np ? (size_t)np : 1, sizeof *views);
    if (!views)
        return PyErr_NoMemory();
    Py_ssize_t got = 0;
    size_t total = 0;
    char *joined = NULL;
    cfg_buf_t cb = {0};
    PyObject *ret = NULL;
    for (; got < np; got++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, got + 1), &views[got], PyBUF_ANY_CONTIGUOUS) <
            0) {
            if (PyErr_ExceptionMatches(PyExc_BufferError))
                PyErr_SetString(PyExc_TypeError, "parts must be contiguous bytes-like objects");
            goto out;
        }
        total += (size_t)views[got].len;
    }
    if (parse_config(cfg_o, &cb) < 0)
        goto out;
    joined = PyMem_Malloc(total ? total : 1);
    if (!joined) {
        PyErr_NoMemory();
        goto out;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    size_t off = 0;
    for (Py_ssize_t i = 0; i < np; i++) {
        memcpy(joined + off, views[i].buf, (size_t)views[i].len);
        off += (size_t)views[i].len;
    }
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = put_rc(cr_store_put(s, key, joined, total, cfg_ptr(&cb)), cfg_ptr(&cb));
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    ret = PyLong_FromLong(rc);
out:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(joined);
    config_done(&cb);
    return ret;
}

/* Fetches key as bytes, or NULL with *rc < 0 (no exception) on a miss/error. */
static PyObject *fetch_bytes(PyStore *self, const char *key, int *rc_out)
{
    int rc = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        uint64_t size = 0;
        Py_BEGIN_ALLOW_THREADS
        cr_store_t *s = st_acquire(self);
        if (!s) {
            rc = NOT_READY;
        } else {
            rc = cr_store_get_size(s, key, &size);
            st_release(self);
        }
        Py_END_ALLOW_THREADS
        if (rc < 0)
            break;
        if (size > PY_SSIZE_T_MAX) {
            rc = CR_E_BUFFER_OVERFLOW;
            break;
        }
        PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
        if (!b) {
            *rc_out = -ENOMEM;
            return NULL; /* exception set */
        }
        size_t len = 0;
        char *dst = PyBytes_AS_STRING(b);
        Py_BEGIN_ALLOW_THREADS
        cr_store_t *s = st_acquire(self);
        if (!s) {
            rc = NOT_READY;
        } else {
            rc = cr_store_get(s, key, dst, (size_t)size, &len);
            st_release(self);
        }
        Py_END_ALLOW_THREADS
        if (rc == 0) {
            if (len < size && _PyBytes_Resize(&b, (Py_ssize_t)len) < 0) {
                *rc_out = -ENOMEM;
                return NULL;
            }
            *rc_out = 0;
            return b;
        }
        Py_DECREF(b);
        if (rc != CR_E_BUFFER_OVERFLOW)
            break; /* the value grew between get_size and get: retry */
    }
    if (rc == CR_E_BUFFER_OVERFLOW) {
        /* replaced by bigger values again and again (upserts): read the
         * version located into a buffer of its size, then copy */
        void *p = NULL;
        size_t len = 0;
        Py_BEGIN_ALLOW_THREADS
        cr_store_t *s = st_acquire(self);
        if (!s) {
            rc = NOT_READY;
        } else {
            rc = cr_store_get_alloc(s, key, &p, &len);
            st_release(self);
        }
        Py_END_ALLOW_THREADS
        if (rc == 0) {
            PyObject *b = PyBytes_FromStringAndSize(p, (Py_ssize_t)len);
            free(p);
            if (!b)
                *rc_out = -ENOMEM;
            else
                *rc_out = 0;
            return b;
        }
    }
    *rc_out = rc;
    return NULL;
}

/* Values up to this size are read by get_batch's batch (and get's one-key
 * batch) and copied into their bytes objects; a bigger one is read by
 * itself straight into its bytes object (fetch_bytes), where its two master
 * round trips cost less than a second copy of the value. */
#define GET_BATCH_COPY_MAX (1u << 20)

static PyObject *store_get(PyStore *self, PyObject *args, PyObject *kw)
{
    const char *key = parse_key_arg(args, kw, "O:get");
    if (!key)
        return NULL;
    /* one master round trip (the value sized from the version it finds),
     * then one copy into the bytes; only a big value takes fetch_bytes */
    const char *keys1[1] = {key};
    void *out = NULL;
    size_t len = 0;
    int res = CR_E_INTERNAL_ERROR;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (s) {
        cr_store_batch_get_alloc(s, keys1, 1, GET_BATCH_COPY_MAX, &out, &len, &res);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    if (res == 0) {
        PyObject *v = PyBytes_FromStringAndSize(out, (Py_ssize_t)len);
        free(out);
        return v;
    }
    if (res != CR_E_BUFFER_OVERFLOW)
        return PyBytes_FromStringAndSize("", 0); /* Mooncake: b"" on a miss */
    int rc;
    PyObject *b = fetch_bytes(self, key, &rc);
    if (!b && PyErr_Occurred())
        return NULL;
    return b ? b : PyBytes_FromStringAndSize("", 0); /* Mooncake: b"" on a miss */
}

/* A BufferHandle owning p (malloc'd, len bytes), or NULL with an
 * exception (p then still the caller's). */
static PyObject *buf_handle(void *p, size_t len)
{
    PyBufHandle *h = PyObject_New(PyBufHandle, &cr__py_bufhandle_type);
    if (!h)
        return NULL;
    h->ptr = p;
    h->size = len;
    h->exports = 0;
    return (PyObject *)h;
}

static PyObject *store_get_buffer(PyStore *self, PyObject *args, PyObject *kw)
{
    const char *key = parse_key_arg(args, kw, "O:get_buffer");
    if (!key)
        return NULL;
    void *p = NULL;
    size_t len = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = cr_store_get_alloc(s, key, &p, &len);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    if (rc < 0)
        Py_RETURN_NONE;
    PyObject *h = buf_handle(p, len);
    if (!h)
        free(p);
    return h;
}

/* Whether the zero-copy calls may use [addr, addr + len): 0 when it lies
 * inside a buffer registered through this object, else INVALID_PARAMS
 * ("pointer not inside a registered buffer"; len 0 too). The caller holds
 * the client (st_acquire) and checks it first: a store not set up, or
 * closed, has no registrations and answers NOT_READY for every call, as
 * register_buffer() does. */
static int zc_region_rc(PyStore *self, uint64_t addr, uint64_t len)
{
    return len && cr__py_reg_covers(&self->regs, addr, len) ? 0 : CR_E_INVALID_PARAMS;
}

static PyObject *store_put_from(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"key", "buffer_ptr", "size", "config", NULL};
    PyObject *ko, *ao, *so = Py_None, *cfg_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OO:put_from", kwl, &ko, &ao, &so, &cfg_o))
        return NULL;
    const char *key;
    Py_ssize_t kl;
    uint64_t addr, size;
    cfg_buf_t cb;
    if (cr__py_key(ko, &key, &kl) < 0 || cr__py_addr_size(ao, so, "buffer_ptr", 0, &addr, &size) < 0)
        return NULL;
    if (parse_config(cfg_o, &cb) < 0) {
        config_done(&cb);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = zc_region_rc(self, addr, size);
        if (!rc)
            rc = put_rc(cr_store_put_from(s, key, (void *)(uintptr_t)addr, size, cfg_ptr(&cb)),
                        cfg_ptr(&cb));
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    config_done(&cb);
    return PyLong_FromLong(rc);
}

static PyObject *store_get_into(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"key", "buffer_ptr", "size", NULL};
    PyObject *ko, *ao, *so = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:get_into", kwl, &ko, &ao, &so))
        return NULL;
    const char *key;
    Py_ssize_t kl;
    uint64_t addr, size;
    if (cr__py_key(ko, &key, &kl) < 0 || cr__py_addr_size(ao, so, "buffer_ptr", 1, &addr, &size) < 0)
        return NULL;
    size_t len = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = zc_region_rc(self, addr, size);
        if (!rc)
            rc = cr_store_get_into(s, key, (void *)(uintptr_t)addr, size, &len);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    return rc < 0 ? PyLong_FromLong(rc) : PyLong_FromSize_t(len);
}

static PyObject *store_get_size(PyStore *self, PyObject *args, PyObject *kw)
{
    const char *key = parse_key_arg(args, kw, "O:get_size");
    if (!key)
        return NULL;
    uint64_t size = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = cr_store_get_size(s, key, &size);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    return rc < 0 ? PyLong_FromLong(rc) : PyLong_FromUnsignedLongLong(size);
}

static PyObject *store_is_exist(PyStore *self, PyObject *args, PyObject *kw)
{
    const char *key = parse_key_arg(args, kw, "O:is_exist");
    if (!key)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = cr_store_exist(s, key);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

static PyObject *store_remove(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"key", "force", NULL};
    PyObject *ko;
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p:remove", kwl, &ko, &force))
        return NULL;
    const char *key;
    Py_ssize_t kl;
    if (cr__py_key(ko, &key, &kl) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = cr_store_remove(s, key, force);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

/* remove_all(force=False) -> count or negative */
static PyObject *store_remove_all(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"force", NULL};
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:remove_all", kwl, &force))
        return NULL;
    uint64_t n = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = cr_store_remove_all_force(s, force, &n);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    return rc < 0 ? PyLong_FromLong(rc) : PyLong_FromUnsignedLongLong(n);
}

/* remove_by_regex(regex_pattern, force=False) -> count or negative */
static PyObject *store_remove_by_regex(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"regex_pattern", "force", NULL};
    const char *pat;
    Py_ssize_t plen;
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s#|p:remove_by_regex", kwl, &pat, &plen, &force))
        return NULL;
    if (plen == 0 || plen > CR_STORE_KEY_MAX || (size_t)plen != strlen(pat))
        return PyLong_FromLong(CR_E_INVALID_PARAMS);
    uint64_t n = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = cr_store_remove_by_regex(s, pat, force, &n);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    return rc < 0 ? PyLong_FromLong(rc) : PyLong_FromUnsignedLongLong(n);
}

/* _seg_mount(addr, size) -> segment name, or a negative status */
static PyObject *store_seg_mount(PyStore *self, PyObject *args)
{
    unsigned long long addr, size;
    if (!PyArg_ParseTuple(args, "KK:_seg_mount", &addr, &size))
        return NULL;
    char name[CR_STORE_SEGMENT_NAME_MAX];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = cr_store_segment_mount(s, (void *)(uintptr_t)addr, (size_t)size, name, sizeof name);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    return rc ? PyLong_FromLong(rc) : PyUnicode_FromString(name);
}

/* _seg_unmount(name, grace_ms) -> 0 or a negative status */
static PyObject *store_seg_unmount(PyStore *self, PyObject *args)
{
    const char *name;
    unsigned int grace_ms;
    if (!PyArg_ParseTuple(args, "sI:_seg_unmount", &name, &grace_ms))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = cr_store_segment_unmount(s, name, grace_ms);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

/* _replica_desc(key) -> (size, [(replica_id, [(segment, addr, len), ...]), ...])
 * or a negative status. */
static PyObject *store_replica_desc(PyStore *self, PyObject *args, PyObject *kw)
{
    const char *key = parse_key_arg(args, kw, "O:_replica_desc");
    if (!key)
        return NULL;
    cr_store_replica_desc_t *d = PyMem_Calloc(CR_STORE_REPLICA_MAX, sizeof *d);
    if (!d)
        return PyErr_NoMemory();
    size_t n = 0;
    uint64_t size = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = cr_store_get_replica_desc(s, key, d, CR_STORE_REPLICA_MAX, &n, &size);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    if (rc) {
        PyMem_Free(d);
        return PyLong_FromLong(rc);
    }
    if (n > CR_STORE_REPLICA_MAX)
        n = CR_STORE_REPLICA_MAX;
    PyObject *reps = PyList_New((Py_ssize_t)n);
    for (size_t r = 0; reps && r < n; r++) {
        PyObject *shards = PyList_New(d[r].n_shards);
        for (uint32_t k = 0; shards && k < d[r].n_shards; k++) {
            PyObject *t = Py_BuildValue("(sKK)", d[r].shards[k].segment,
                                        (unsigned long long)d[r].shards[k].addr,
                                        (unsigned long long)d[r].shards[k].len);
            if (!t)
                Py_CLEAR(shards);
            else
                PyList_SET_ITEM(shards, k, t);
        }
        PyObject *rep = shards ? Py_BuildValue("(KN)", (unsigned long long)d[r].replica_id, shards)
                               : NULL;
        if (!rep)
            Py_CLEAR(reps);
        else
            PyList_SET_ITEM(reps, (Py_ssize_t)r, rep);
    }
    PyMem_Free(d);
    if (!reps)
        return NULL;
    return Py_BuildValue("(KN)", (unsigned long long)size, reps);
}

/* ---- replica tasks (store.h "replica tasks") ------------------------------ */

/* _task_create(type, key, source, targets) -> (hi, lo) or a negative status */
static PyObject *store_task_create(PyStore *self, PyObject *args)
{
    int type;
    const char *key, *source;
    PyObject *to;
    if (!PyArg_ParseTuple(args, "issO:_task_create", &type, &key, &source, &to))
        return NULL;
    keys_buf_t kb;
    if (parse_keys(to, &kb) < 0)
        return NULL;
    cr_store_task_id_t id = {0, 0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = cr_store_task_create(s, type, key, source, kb.k, (size_t)kb.n, &id);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    keys_done(&kb);
    if (rc)
        return PyLong_FromLong(rc);
    return Py_BuildValue("(KK)", (unsigned long long)id.hi, (unsigned long long)id.lo);
}

/* _task_run(hi, lo) -> 0 or the error the task failed with */
static PyObject *store_task_run(PyStore *self, PyObject *args)
{
    unsigned long long hi, lo;
    if (!PyArg_ParseTuple(args, "KK:_task_run", &hi, &lo))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = cr_store_task_run(s, (cr_store_task_id_t){.hi = hi, .lo = lo});
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

/* _task_query(hi, lo) -> (type, status, created_ms, updated_ms, executor,
 * message, error) or a negative status */
static PyObject *store_task_query(PyStore *self, PyObject *args)
{
    unsigned long long hi, lo;
    if (!PyArg_ParseTuple(args, "KK:_task_query", &hi, &lo))
        return NULL;
    cr_store_task_info_t info;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        rc = cr_store_task_query(s, (cr_store_task_id_t){.hi = hi, .lo = lo}, &info);
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    if (rc)
        return PyLong_FromLong(rc);
    return Py_BuildValue("(iiKKssi)", info.type, info.status,
                         (unsigned long long)info.created_unix_ms,
                         (unsigned long long)info.updated_unix_ms, info.executor, info.message,
                         info.error);
}

/* _replica_clear(keys, segment) -> [status per key] or a negative status */
static PyObject *store_replica_clear(PyStore *self, PyObject *args)
{
    PyObject *ko;
    const char *seg;
    if (!PyArg_ParseTuple(args, "Os:_replica_clear", &ko, &seg))
        return NULL;
    keys_buf_t kb;
    if (parse_keys(ko, &kb) < 0)
        return NULL;
    int *res = PyMem_Calloc((size_t)kb.n + 1, sizeof *res);
    if (!res) {
        keys_done(&kb);
        return PyErr_NoMemory();
    }
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        for (Py_ssize_t off = 0; off < kb.n && !rc; off += CR_STORE_BATCH_MAX) {
            size_t c = (size_t)(kb.n - off < CR_STORE_BATCH_MAX ? kb.n - off : CR_STORE_BATCH_MAX);
            rc = cr_store_replica_clear(s, kb.k + off, c, seg, res + off);
        }
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    PyObject *out = rc ? PyLong_FromLong(rc) : PyList_New(kb.n);
    for (Py_ssize_t i = 0; !rc && out && i < kb.n; i++)
        PyList_SET_ITEM(out, i, PyLong_FromLong(res[i]));
    PyMem_Free(res);
    keys_done(&kb);
    return out;
}

/* ---- batches -------------------------------------------------------------- */

/* Runs fn over [0, n) in chunks of CR_STORE_BATCH_MAX (the store's bound). */
#define CHUNK(n, off) ((n) - (off) < CR_STORE_BATCH_MAX ? (n) - (off) : CR_STORE_BATCH_MAX)

/* batch_is_exist (leased) and _batch_probe (not): per key 1, 0 or negative */
static PyObject *exist_list(PyStore *self, PyObject *args, PyObject *kw, const char *fmt,
                            int probe)
{
    keys_buf_t kb;
    if (parse_keys_arg(args, kw, fmt, &kb) < 0)
        return NULL;
    size_t n = (size_t)kb.n;
    int *res = PyMem_Calloc(n ? n : 1, sizeof *res);
    int64_t *out = PyMem_Calloc(n ? n : 1, sizeof *out);
    if (!res || !out) {
        PyMem_Free(res);
        PyMem_Free(out);
        keys_done(&kb);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    for (size_t off = 0; off < n; off += CR_STORE_BATCH_MAX) {
        size_t c = CHUNK(n, off);
        int rc = !s     ? NOT_READY
                 : probe ? cr_store_batch_probe(s, kb.k + off, c, res + off)
                         : cr_store_batch_is_exist(s, kb.k + off, c, res + off);
        for (size_t i = 0; i < c; i++)
            out[off + i] = rc < 0 ? rc : res[off + i];
    }
    if (s)
        st_release(self);
    Py_END_ALLOW_THREADS
    PyObject *ret = int_list(out, kb.n);
    PyMem_Free(res);
    PyMem_Free(out);
    keys_done(&kb);
    return ret;
}

static PyObject *store_batch_is_exist(PyStore *self, PyObject *args, PyObject *kw)
{
    return exist_list(self, args, kw, "O:batch_is_exist", 0);
}

static PyObject *store_batch_probe(PyStore *self, PyObject *args, PyObject *kw)
{
    return exist_list(self, args, kw, "O:_batch_probe", 1);
}

/* Whether both per-key sequences of a batch call have one entry per key.
 * When not, Mooncake answers INVALID_PARAMS for every key and runs nothing:
 * out[0..n) is set so. */
static int batch_lens_match(PyObject *sp, PyObject *ss, int64_t *out, size_t n)
{
    if ((size_t)PySequence_Fast_GET_SIZE(sp) == n && (size_t)PySequence_Fast_GET_SIZE(ss) == n)
        return 1;
    for (size_t i = 0; i < n; i++)
        out[i] = CR_E_INVALID_PARAMS;
    return 0;
}

/* Parsed (keys, buffer_ptrs, sizes) of the zero-copy batch calls. */
typedef struct zc_batch {
    keys_buf_t kb;
    void **bufs;
    size_t *sizes;
    int64_t *out; /* per-key result; preset for keys that fail validation */
    size_t n;
} zc_batch_t;

static void zc_done(zc_batch_t *z)
{
    keys_done(&z->kb);
    PyMem_Free(z->bufs);
    PyMem_Free(z->sizes);
    PyMem_Free(z->out);
}

static int zc_parse(PyObject *ko, PyObject *po, PyObject *so, int writable, zc_batch_t *z)
{
    memset(z, 0, sizeof *z);
    if (parse_keys(ko, &z->kb) < 0)
        return -1;
    PyObject *sp = cr__py_seq(po, "buffer_ptrs");
    PyObject *ss = sp ? cr__py_seq(so, "sizes") : NULL;
    if (!ss)
        goto fail;
    z->n = (size_t)z->kb.n;
    size_t m = z->n ? z->n : 1;
    z->bufs = PyMem_Calloc(m, sizeof *z->bufs);
    z->sizes = PyMem_Calloc(m, sizeof *z->sizes);
    z->out = PyMem_Calloc(m, sizeof *z->out);
    if (!z->bufs || !z->sizes || !z->out) {
        PyErr_NoMemory();
        goto fail;
    }
    if (!batch_lens_match(sp, ss, z->out, z->n))
        goto done;
    for (size_t i = 0; i < z->n; i++) {
        uint64_t a, l;
        if (cr__py_addr_size(PySequence_Fast_GET_ITEM(sp, i), PySequence_Fast_GET_ITEM(ss, i),
                             "buffer_ptrs[i]", writable, &a, &l) < 0)
            goto fail;
        z->bufs[i] = (void *)(uintptr_t)a;
        z->sizes[i] = l;
    }
done:
    Py_DECREF(sp);
    Py_DECREF(ss);
    return 0;
fail:
    Py_XDECREF(sp);
    Py_XDECREF(ss);
    zc_done(z);
    return -1;
}

/* Compacts the keys that passed validation into idx (count returned). */
static size_t zc_valid(const zc_batch_t *z, size_t *idx)
{
    size_t m = 0;
    for (size_t i = 0; i < z->n; i++)
        if (z->out[i] == 0)
            idx[m++] = i;
    return m;
}

/* Executes a batch put_from / get_into over the valid keys (no GIL). */
static void zc_run(PyStore *self, zc_batch_t *z, int is_put, const cr_store_replicate_config_t *cfg)
{
    size_t *idx = malloc((z->n ? z->n : 1) * sizeof *idx);
    const char **k = malloc((z->n ? z->n : 1) * sizeof *k);
    void **b = malloc((z->n ? z->n : 1) * sizeof *b);
    size_t *sz = malloc((z->n ? z->n : 1) * sizeof *sz);
    size_t *lens = malloc((z->n ? z->n : 1) * sizeof *lens);
    int *res = malloc((z->n ? z->n : 1) * sizeof *res);
    if (!idx || !k || !b || !sz || !lens || !res) {
        for (size_t i = 0; i < z->n; i++)
            if (z->out[i] == 0)
                z->out[i] = -ENOMEM;
        goto out;
    }
    cr_store_t *s = st_acquire(self);
    for (size_t i = 0; i < z->n; i++) /* unregistered memory is never handed to the store */
        if (z->out[i] == 0)
            z->out[i] = s ? zc_region_rc(self, (uintptr_t)z->bufs[i], z->sizes[i]) : NOT_READY;
    size_t m = zc_valid(z, idx);
    for (size_t j = 0; j < m; j++) {
        k[j] = z->kb.k[idx[j]];
        b[j] = z->bufs[idx[j]];
        sz[j] = z->sizes[idx[j]];
    }
    for (size_t off = 0; off < m; off += CR_STORE_BATCH_MAX) {
        size_t c = CHUNK(m, off);
        int rc;
        for (size_t j = off; j < off + c; j++)
            res[j] = INT32_MIN;
        if (is_put)
            rc = cr_store_batch_put_from(s, k + off, (const void *const *)(b + off), sz + off, c,
                                         cfg, res + off);
        else
            rc = cr_store_batch_get_into(s, k + off, b + off, sz + off, c, lens + off, res + off);
        for (size_t j = off; j < off + c; j++) {
            /* a failed call may leave results untouched */
            int r = res[j] == INT32_MIN ? (rc < 0 ? rc : CR_E_INTERNAL_ERROR) : res[j];
            if (is_put)
                r = put_rc(r, cfg);
            z->out[idx[j]] = r < 0 ? r : is_put ? 0 : (int64_t)lens[j];
        }
    }
    if (s)
        st_release(self);
out:
    free(idx);
    free(k);
    free(b);
    free(sz);
    free(lens);
    free(res);
}

static PyObject *store_batch_put_from(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"keys", "buffer_ptrs", "sizes", "config", NULL};
    PyObject *ko, *po, *so, *cfg_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O:batch_put_from", kwl, &ko, &po, &so, &cfg_o))
        return NULL;
    zc_batch_t z;
    cfg_buf_t cb;
    if (zc_parse(ko, po, so, 0, &z) < 0)
        return NULL;
    if (parse_config(cfg_o, &cb) < 0) {
        config_done(&cb);
        zc_done(&z);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    zc_run(self, &z, 1, cfg_ptr(&cb));
    Py_END_ALLOW_THREADS
    PyObject *ret = int_list(z.out, (Py_ssize_t)z.n);
    config_done(&cb);
    zc_done(&z);
    return ret;
}

static PyObject *store_batch_get_into(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"keys", "buffer_ptrs", "sizes", NULL};
    PyObject *ko, *po, *so;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:batch_get_into", kwl, &ko, &po, &so))
        return NULL;
    zc_batch_t z;
    if (zc_parse(ko, po, so, 1, &z) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    zc_run(self, &z, 0, NULL);
    Py_END_ALLOW_THREADS
    PyObject *ret = int_list(z.out, (Py_ssize_t)z.n);
    zc_done(&z);
    return ret;
}

static int stage_reserve_locked(PyStore *self, cr_store_t *s, size_t need);

/* Batches whose values total at most this go through the staging buffer as
 * one cr_store_batch_put_from (one master round trip per phase instead of
 * one put per key); larger ones are put key by key. */
#define PUT_BATCH_STAGE_MAX (64u << 20)

/* Stages the values and puts them as batches (no GIL, client lock held).
 * Returns 1 when done (*rc_out set), 0 when staging was not possible. */
static int put_batch_staged(PyStore *self, cr_store_t *s, const keys_buf_t *kb,
                            const Py_buffer *views, const cr_store_replicate_config_t *cfg,
                            int *rc_out)
{
    size_t n = (size_t)kb->n, total = 0;
    for (size_t i = 0; i < n; i++)
        total += ((size_t)views[i].len + 63) & ~(size_t)63;
    if (n < 2 || total > PUT_BATCH_STAGE_MAX)
        return 0;
    const void **b = malloc(n * sizeof *b);
    size_t *l = malloc(n * sizeof *l);
    int *res = malloc(n * sizeof *res);
    int done = 0, rc = 0;
    if (!b || !l || !res)
        goto out;
    pthread_mutex_lock(&self->stage_mu);
    if (stage_reserve_locked(self, s, total) == 0) {
        size_t off = 0;
        for (size_t i = 0; i < n; i++) {
            memcpy((char *)self->stage + off, views[i].buf, (size_t)views[i].len);
            b[i] = (char *)self->stage + off;
            l[i] = (size_t)views[i].len;
            off += ((size_t)views[i].len + 63) & ~(size_t)63;
        }
        for (size_t o = 0; o < n; o += CR_STORE_BATCH_MAX) {
            size_t c = CHUNK(n, o);
            for (size_t j = o; j < o + c; j++)
                res[j] = INT32_MIN;
            int r = cr_store_batch_put_from(s, kb->k + o, b + o, l + o, c, cfg, res + o);
            for (size_t j = o; j < o + c && rc == 0; j++) {
                int rj =
                    put_rc(res[j] == INT32_MIN ? (r < 0 ? r : CR_E_INTERNAL_ERROR) : res[j], cfg);
                if (rj < 0)
                    rc = rj;
            }
        }
        done = 1;
    }
    pthread_mutex_unlock(&self->stage_mu);
out:
    free(b);
    free(l);
    free(res);
    if (done)
        *rc_out = rc;
    return done;
}

/* put_batch(keys, values, config=None) -> int: copying puts (values are any
 * bytes-like objects); 0 if all succeeded, else the first error. */
static PyObject *store_put_batch(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"keys", "values", "config", NULL};
    PyObject *ko, *vo, *cfg_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:put_batch", kwl, &ko, &vo, &cfg_o))
        return NULL;
    keys_buf_t kb;
    if (parse_keys(ko, &kb) < 0)
        return NULL;
    PyObject *sv = cr__py_seq(vo, "values");
    Py_buffer *views = NULL;
    Py_ssize_t got = 0;
    cfg_buf_t cb = {0};
    PyObject *ret = NULL;
    if (!sv)
        goto out;
    if (PySequence_Fast_GET_SIZE(sv) != kb.n) {
        ret = PyLong_FromLong(CR_E_INVALID_PARAMS); /* keys and values differ in length */
        goto out;
    }
    views = PyMem_Calloc(kb.n ? (size_t)kb.n : 1, sizeof *views);
    if (!views) {
        PyErr_NoMemory();
        goto out;
    }
    for (; got < kb.n; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(sv, got), &views[got], PyBUF_ANY_CONTIGUOUS) <
            0) {
            if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "values[%zd] must be a contiguous bytes-like object",
                             got);
            }
            goto out;
        }
    }
    if (parse_config(cfg_o, &cb) < 0)
        goto out;
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    if (!s) {
        rc = NOT_READY;
    } else {
        if (!put_batch_staged(self, s, &kb, views, cfg_ptr(&cb), &rc)) {
            for (Py_ssize_t i = 0; i < kb.n; i++) {
                int r = put_rc(
                    cr_store_put(s, kb.k[i], views[i].buf, (size_t)views[i].len, cfg_ptr(&cb)),
                    cfg_ptr(&cb));
                if (r < 0 && rc == 0)
                    rc = r;
            }
        }
        st_release(self);
    }
    Py_END_ALLOW_THREADS
    ret = PyLong_FromLong(rc);
out:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    Py_XDECREF(sv);
    config_done(&cb);
    keys_done(&kb);
    return ret;
}

/* The values of a batch of keys, read with cr_store_batch_get_alloc
 * (one master round trip per CR_STORE_BATCH_MAX keys, values packed into
 * transfer batches through the local buffer). */
typedef struct alloc_batch {
    keys_buf_t kb;
    void **outs;  /* malloc'd values, NULL where none (or taken) */
    size_t *lens;
    int *res;     /* per key: 0 or why there is no value */
} alloc_batch_t;

static void alloc_batch_done(alloc_batch_t *ab)
{
    for (Py_ssize_t i = 0; ab->outs && i < ab->kb.n; i++)
        free(ab->outs[i]);
    PyMem_Free(ab->outs);
    PyMem_Free(ab->lens);
    PyMem_Free(ab->res);
    keys_done(&ab->kb);
}

/* Parses the lone `keys` argument (fmt "O:<method>") and reads them,
 * values up to max_len (0 = any; a bigger one gets CR_E_BUFFER_OVERFLOW).
 * Returns 0, or -1 with an exception (ab released). */
static int alloc_batch_run(PyStore *self, PyObject *args, PyObject *kw, const char *fmt,
                           size_t max_len, alloc_batch_t *ab)
{
    memset(ab, 0, sizeof *ab);
    if (parse_keys_arg(args, kw, fmt, &ab->kb) < 0)
        return -1;
    size_t n = (size_t)ab->kb.n, m = n ? n : 1;
    ab->outs = PyMem_Calloc(m, sizeof *ab->outs);
    ab->lens = PyMem_Calloc(m, sizeof *ab->lens);
    ab->res = PyMem_Calloc(m, sizeof *ab->res);
    if (!ab->outs || !ab->lens || !ab->res) {
        alloc_batch_done(ab);
        PyErr_NoMemory();
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    for (size_t off = 0; off < n; off += CR_STORE_BATCH_MAX) {
        size_t c = CHUNK(n, off);
        for (size_t i = off; i < off + c; i++)
            ab->res[i] = INT32_MIN;
        int rc = s ? cr_store_batch_get_alloc(s, ab->kb.k + off, c, max_len, ab->outs + off,
                                              ab->lens + off, ab->res + off)
                   : NOT_READY;
        for (size_t i = off; i < off + c; i++) /* a failed call leaves results untouched */
            if (ab->res[i] == INT32_MIN)
                ab->res[i] = rc < 0 ? rc : CR_E_INTERNAL_ERROR;
    }
    if (s)
        st_release(self);
    Py_END_ALLOW_THREADS
    return 0;
}

/* get_batch(keys) -> list of bytes (b"" for a missing key, or any other
 * failure of that key, as get()). */
static PyObject *store_get_batch(PyStore *self, PyObject *args, PyObject *kw)
{
    alloc_batch_t ab;
    if (alloc_batch_run(self, args, kw, "O:get_batch", GET_BATCH_COPY_MAX, &ab) < 0)
        return NULL;
    PyObject *list = PyList_New(ab.kb.n);
    for (Py_ssize_t i = 0; list && i < ab.kb.n; i++) {
        PyObject *b = NULL;
        int rc;
        if (!ab.res[i])
            b = PyBytes_FromStringAndSize(ab.outs[i], (Py_ssize_t)ab.lens[i]);
        else if (ab.res[i] == CR_E_BUFFER_OVERFLOW) /* over GET_BATCH_COPY_MAX */
            b = fetch_bytes(self, ab.kb.k[i], &rc);
        if (!b && !PyErr_Occurred())
            b = PyBytes_FromStringAndSize("", 0); /* Mooncake: b"" on a miss */
        free(ab.outs[i]); /* copied: give the memory back at once */
        ab.outs[i] = NULL;
        if (!b)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, b);
    }
    alloc_batch_done(&ab);
    return list;
}

/* batch_get_buffer(keys) -> list of BufferHandle (None for a missing key,
 * or any other failure of that key, as get_buffer()). */
static PyObject *store_batch_get_buffer(PyStore *self, PyObject *args, PyObject *kw)
{
    alloc_batch_t ab;
    if (alloc_batch_run(self, args, kw, "O:batch_get_buffer", 0, &ab) < 0)
        return NULL;
    PyObject *list = PyList_New(ab.kb.n);
    for (Py_ssize_t i = 0; list && i < ab.kb.n; i++) {
        PyObject *h = Py_None;
        if (!ab.res[i]) {
            h = buf_handle(ab.outs[i], ab.lens[i]);
            if (!h) {
                Py_CLEAR(list);
                break;
            }
            ab.outs[i] = NULL; /* the handle owns it */
        } else {
            Py_INCREF(h);
        }
        PyList_SET_ITEM(list, i, h);
    }
    alloc_batch_done(&ab);
    return list;
}

/* batch_remove(keys, force=False) -> list of statuses. */
static PyObject *store_batch_remove(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"keys", "force", NULL};
    PyObject *ko;
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p:batch_remove", kwl, &ko, &force))
        return NULL;
    keys_buf_t kb;
    if (parse_keys(ko, &kb) < 0)
        return NULL;
    int64_t *out = PyMem_Calloc(kb.n ? (size_t)kb.n : 1, sizeof *out);
    if (!out) {
        keys_done(&kb);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    /* one master round trip per CR_STORE_BATCH_MAX keys, a status per key */
    int res[CR_STORE_BATCH_MAX];
    for (Py_ssize_t i = 0; i < kb.n; i += CR_STORE_BATCH_MAX) {
        size_t m = (size_t)(kb.n - i) < CR_STORE_BATCH_MAX ? (size_t)(kb.n - i)
                                                           : CR_STORE_BATCH_MAX;
        if (s)
            cr_store_batch_remove(s, kb.k + i, m, force, res);
        for (size_t j = 0; j < m; j++)
            out[i + (Py_ssize_t)j] = s ? res[j] : NOT_READY;
    }
    if (s)
        st_release(self);
    Py_END_ALLOW_THREADS
    PyObject *ret = int_list(out, kb.n);
    PyMem_Free(out);
    keys_done(&kb);
    return ret;
}

/* ---- multi-buffer batches ------------------------------------------------- */

/* Per key: a list of (ptr, size) fragments. */
typedef struct mb_batch {
    keys_buf_t kb;
    size_t n;
    size_t *nfrag;   /* fragments per key */
    size_t *first;   /* index of the key's first fragment */
    uint64_t *fptr;  /* all fragments */
    uint64_t *fsize;
    size_t total_frags;
    int64_t *out;
} mb_batch_t;

static void mb_done(mb_batch_t *m)
{
    keys_done(&m->kb);
    PyMem_Free(m->nfrag);
    PyMem_Free(m->first);
    PyMem_Free(m->fptr);
    PyMem_Free(m->fsize);
    PyMem_Free(m->out);
}

static int mb_parse(PyObject *ko, PyObject *po, PyObject *so, int writable, mb_batch_t *m)
{
    memset(m, 0, sizeof *m);
    if (parse_keys(ko, &m->kb) < 0)
        return -1;
    PyObject *sp = cr__py_seq(po, "all_buffer_ptrs");
    PyObject *ss = sp ? cr__py_seq(so, "all_sizes") : NULL;
    if (!ss)
        goto fail;
    m->n = (size_t)m->kb.n;
    size_t cap = m->n ? m->n : 1;
    m->nfrag = PyMem_Calloc(cap, sizeof *m->nfrag);
    m->first = PyMem_Calloc(cap, sizeof *m->first);
    m->out = PyMem_Calloc(cap, sizeof *m->out);
    m->fptr = PyMem_Calloc(1, sizeof *m->fptr);
    m->fsize = PyMem_Calloc(1, sizeof *m->fsize);
    if (!m->nfrag || !m->first || !m->out || !m->fptr || !m->fsize) {
        PyErr_NoMemory();
        goto fail;
    }
    if (!batch_lens_match(sp, ss, m->out, m->n))
        goto done;
    size_t total = 0;
    for (size_t i = 0; i < m->n; i++) {
        PyObject *pl = PySequence_Fast_GET_ITEM(sp, i), *sl = PySequence_Fast_GET_ITEM(ss, i);
        Py_ssize_t a = PySequence_Check(pl) ? PySequence_Size(pl) : -1;
        Py_ssize_t b = PySequence_Check(sl) ? PySequence_Size(sl) : -1;
        if (a < 0 || b < 0) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "all_buffer_ptrs and all_sizes must be lists of lists");
            goto fail;
        }
        m->first[i] = total;
        if (a != b) { /* this key fails, the others run */
            m->out[i] = CR_E_INVALID_PARAMS;
            continue;
        }
        m->nfrag[i] = (size_t)a;
        total += (size_t)a;
    }
    m->total_frags = total;
    PyMem_Free(m->fptr);
    PyMem_Free(m->fsize);
    m->fptr = PyMem_Calloc(total ? total : 1, sizeof *m->fptr);
    m->fsize = PyMem_Calloc(total ? total : 1, sizeof *m->fsize);
    if (!m->fptr || !m->fsize) {
        PyErr_NoMemory();
        goto fail;
    }
    for (size_t i = 0; i < m->n; i++) {
        if (m->out[i] != 0)
            continue; /* fragment lists of different lengths */
        PyObject *pl = cr__py_seq(PySequence_Fast_GET_ITEM(sp, i), "all_buffer_ptrs[i]");
        PyObject *sl = pl ? cr__py_seq(PySequence_Fast_GET_ITEM(ss, i), "all_sizes[i]") : NULL;
        if (!sl) {
            Py_XDECREF(pl);
            goto fail;
        }
        for (size_t j = 0; j < m->nfrag[i]; j++) {
            uint64_t a, l;
            if (cr__py_addr_size(PySequence_Fast_GET_ITEM(pl, j), PySequence_Fast_GET_ITEM(sl, j),
                                 "all_buffer_ptrs[i][j]", writable, &a, &l) < 0) {
                Py_DECREF(pl);
                Py_DECREF(sl);
                goto fail;
            }
            m->fptr[m->first[i] + j] = a;
            m->fsize[m->first[i] + j] = l;
        }
        if (m->nfrag[i] == 0)
            m->out[i] = CR_E_INVALID_PARAMS;
        Py_DECREF(pl);
        Py_DECREF(sl);
    }
done:
    Py_DECREF(sp);
    Py_DECREF(ss);
    return 0;
fail:
    Py_XDECREF(sp);
    Py_XDECREF(ss);
    mb_done(m);
    return -1;
}

/* Ensures the staging buffer holds need bytes (caller holds stage_mu and the
 * client lock for reading; no GIL). Returns 0 or a negative status. */
static int stage_reserve_locked(PyStore *self, cr_store_t *s, size_t need)
{
    if (self->stage && self->stage_size >= need)
        return 0;
    size_t sz = 1u << 20;
    while (sz < need)
        sz <<= 1;
    if (self->stage) {
        cr_store_unregister_buffer(s, self->stage);
        munmap(self->stage, self->stage_size);
        self->stage = NULL;
        self->stage_size = 0;
    }
    void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    if (p == MAP_FAILED)
        return -ENOMEM;
    int rc = cr_store_register_buffer(s, p, sz);
    if (rc < 0) {
        munmap(p, sz);
        return rc;
    }
    self->stage = p;
    self->stage_size = sz;
    return 0;
}

/* Multi-buffer put/get (no GIL). A key whose fragments are contiguous in
 * memory is passed to the store as one buffer; the others are gathered into
 * (or scattered from) the registered staging buffer. */
static void mb_run(PyStore *self, mb_batch_t *m, int is_put, const cr_store_replicate_config_t *cfg)
{
    size_t cap = m->n ? m->n : 1;
    const char **k = malloc(cap * sizeof *k);
    void **b = malloc(cap * sizeof *b);
    size_t *sz = malloc(cap * sizeof *sz), *lens = malloc(cap * sizeof *lens);
    size_t *idx = malloc(cap * sizeof *idx);
    int *res = malloc(cap * sizeof *res);
    char *staged = calloc(cap, 1);
    cr_store_t *s = NULL;
    int locked_stage = 0;
    if (!k || !b || !sz || !lens || !idx || !res || !staged) {
        for (size_t i = 0; i < m->n; i++)
            if (m->out[i] == 0)
                m->out[i] = -ENOMEM;
        goto out;
    }
    s = st_acquire(self);
    if (!s) {
        for (size_t i = 0; i < m->n; i++)
            if (m->out[i] == 0)
                m->out[i] = NOT_READY;
        goto out;
    }
    for (size_t i = 0; i < m->n; i++) /* unregistered memory is never handed to the store */
        for (size_t j = 0; m->out[i] == 0 && j < m->nfrag[i]; j++)
            m->out[i] = zc_region_rc(self, m->fptr[m->first[i] + j], m->fsize[m->first[i] + j]);
    size_t cnt = 0, stage_need = 0;
    for (size_t i = 0; i < m->n; i++) {
        if (m->out[i] != 0)
            continue;
        const uint64_t *fp = m->fptr + m->first[i], *fs = m->fsize + m->first[i];
        uint64_t tot = fs[0];
        int contig = 1;
        for (size_t j = 1; j < m->nfrag[i]; j++) {
            if (fp[j] != fp[j - 1] + fs[j - 1])
                contig = 0;
            tot += fs[j];
        }
        if (contig && !cr__py_reg_covers(&self->regs, fp[0], tot))
            contig = 0; /* adjacent fragments from two registrations */
        idx[cnt] = i;
        k[cnt] = m->kb.k[i];
        sz[cnt] = tot;
        if (contig) {
            b[cnt] = (void *)(uintptr_t)fp[0];
        } else {
            staged[cnt] = 1;
            b[cnt] = (void *)(uintptr_t)stage_need; /* offset, fixed up below */
            stage_need += (tot + 63) & ~(uint64_t)63;
        }
        cnt++;
    }
    if (stage_need) {
        pthread_mutex_lock(&self->stage_mu);
        locked_stage = 1;
        int rc = stage_reserve_locked(self, s, stage_need);
        if (rc < 0) {
            for (size_t j = 0; j < cnt; j++)
                if (staged[j])
                    m->out[idx[j]] = rc, sz[j] = 0;
        }
        for (size_t j = 0; j < cnt; j++) {
            if (!staged[j] || !sz[j])
                continue;
            b[j] = (char *)self->stage + (uintptr_t)b[j];
            if (is_put) { /* gather */
                size_t i = idx[j], off = 0;
                for (size_t f = 0; f < m->nfrag[i]; f++) {
                    memcpy((char *)b[j] + off, (void *)(uintptr_t)m->fptr[m->first[i] + f],
                           m->fsize[m->first[i] + f]);
                    off += m->fsize[m->first[i] + f];
                }
            }
        }
    }
    /* drop keys whose staging failed */
    size_t c2 = 0;
    for (size_t j = 0; j < cnt; j++) {
        if (!sz[j])
            continue;
        idx[c2] = idx[j], k[c2] = k[j], b[c2] = b[j], sz[c2] = sz[j], staged[c2] = staged[j];
        c2++;
    }
    for (size_t off = 0; off < c2; off += CR_STORE_BATCH_MAX) {
        size_t c = CHUNK(c2, off);
        for (size_t j = off; j < off + c; j++)
            res[j] = INT32_MIN;
        int rc = is_put ? cr_store_batch_put_from(s, k + off, (const void *const *)(b + off),
                                                  sz + off, c, cfg, res + off)
                        : cr_store_batch_get_into(s, k + off, b + off, sz + off, c, lens + off,
                                                  res + off);
        for (size_t j = off; j < off + c; j++) {
            int r = res[j] == INT32_MIN ? (rc < 0 ? rc : CR_E_INTERNAL_ERROR) : res[j];
            if (is_put)
                r = put_rc(r, cfg);
            size_t i = idx[j];
            if (r < 0) {
                m->out[i] = r;
                continue;
            }
            m->out[i] = is_put ? 0 : (int64_t)lens[j];
            if (!is_put && staged[j]) { /* scatter what arrived */
                size_t left = lens[j], off2 = 0;
                for (size_t f = 0; f < m->nfrag[i] && left; f++) {
                    size_t l = m->fsize[m->first[i] + f] < left ? m->fsize[m->first[i] + f] : left;
                    memcpy((void *)(uintptr_t)m->fptr[m->first[i] + f], (char *)b[j] + off2, l);
                    off2 += l;
                    left -= l;
                }
            }
        }
    }
out:
    if (locked_stage)
        pthread_mutex_unlock(&self->stage_mu);
    if (s)
        st_release(self);
    free(k);
    free(b);
    free(sz);
    free(lens);
    free(idx);
    free(res);
    free(staged);
}

static PyObject *store_batch_put_from_multi_buffers(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"keys", "all_buffer_ptrs", "all_sizes", "config", NULL};
    PyObject *ko, *po, *so, *cfg_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O:batch_put_from_multi_buffers", kwl, &ko, &po,
                                     &so, &cfg_o))
        return NULL;
    mb_batch_t m;
    cfg_buf_t cb;
    if (mb_parse(ko, po, so, 0, &m) < 0)
        return NULL;
    if (parse_config(cfg_o, &cb) < 0) {
        config_done(&cb);
        mb_done(&m);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    mb_run(self, &m, 1, cfg_ptr(&cb));
    Py_END_ALLOW_THREADS
    PyObject *ret = int_list(m.out, (Py_ssize_t)m.n);
    config_done(&cb);
    mb_done(&m);
    return ret;
}

static PyObject *store_batch_get_into_multi_buffers(PyStore *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"keys", "all_buffer_ptrs", "all_sizes", "prefer_alloc_in_same_node",
                          NULL};
    PyObject *ko, *po, *so, *pref = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O:batch_get_into_multi_buffers", kwl, &ko, &po,
                                     &so, &pref))
        return NULL;
    mb_batch_t m;
    if (mb_parse(ko, po, so, 1, &m) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    mb_run(self, &m, 0, NULL);
    Py_END_ALLOW_THREADS
    PyObject *ret = int_list(m.out, (Py_ssize_t)m.n);
    mb_done(&m);
    return ret;
}

static PyObject *store_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    Py_INCREF(self);
    return self;
}

static PyObject *store_exit(PyStore *self, PyObject *args)
{
    (void)args;
    store_teardown(self);
    Py_RETURN_FALSE;
}

static PyObject *store_is_setup(PyStore *self, PyObject *unused)
{
    (void)unused;
    int up;
    Py_BEGIN_ALLOW_THREADS
    cr_store_t *s = st_acquire(self);
    up = s != NULL;
    if (s)
        st_release(self);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(up);
}

#define KW (PyCFunction)(void (*)(void))
#define M(name, fn, doc) {name, KW fn, METH_VARARGS | METH_KEYWORDS, doc}
static PyMethodDef store_methods[] = {
    M("setup", store_setup,
      "setup(local_hostname, metadata_server, global_segment_size=16MiB, local_buffer_size=16MiB, "
      "protocol='tcp', rdma_devices='', master_server_addr='127.0.0.1:50051') or setup(dict) -> int"),
    {"close", (PyCFunction)store_close, METH_NOARGS, "close() -> 0"},
    {"get_hostname", (PyCFunction)store_get_hostname, METH_NOARGS,
     "get_hostname() -> str: this client's segment name"},
    {"_is_setup", (PyCFunction)store_is_setup, METH_NOARGS, NULL},
    M("register_buffer", store_register_buffer,
      "register_buffer(buffer_ptr, size) -> int; buffer_ptr may be a buffer object"),
    M("unregister_buffer", store_unregister_buffer, "unregister_buffer(buffer_ptr) -> int"),
    M("put", store_put, "put(key, value, config=None) -> int"),
    M("put_parts", store_put_parts, "put_parts(key, *parts, config=None) -> int"),
    M("get", store_get, "get(key) -> bytes (b'' if missing)"),
    M("get_buffer", store_get_buffer, "get_buffer(key) -> BufferHandle or None"),
    M("put_from", store_put_from, "put_from(key, buffer_ptr, size, config=None) -> int"),
    M("get_into", store_get_into, "get_into(key, buffer_ptr, size) -> bytes read or negative"),
    M("get_size", store_get_size, "get_size(key) -> size or negative"),
    M("is_exist", store_is_exist, "is_exist(key) -> 1, 0 or negative"),
    M("remove", store_remove, "remove($self, key, force=False)\n--\n\nRemoves key: 0 or negative."),
    M("remove_all", store_remove_all, "remove_all($self, force=False)\n--\n\nRemoves every object: count or negative."),
    M("remove_by_regex", store_remove_by_regex,
      "remove_by_regex($self, regex_pattern, force=False)\n--\n\n"
      "Removes the keys the regex matches: count removed or negative."),
    M("_replica_desc", store_replica_desc,
      "_replica_desc(key) -> (size, [(replica_id, [(segment, addr, len)])]) or negative"),
    {"_task_create", (PyCFunction)store_task_create, METH_VARARGS,
     "_task_create(type, key, source, targets) -> (hi, lo) or negative"},
    {"_task_run", (PyCFunction)store_task_run, METH_VARARGS, "_task_run(hi, lo) -> int"},
    {"_task_query", (PyCFunction)store_task_query, METH_VARARGS,
     "_task_query(hi, lo) -> (type, status, created_ms, updated_ms, executor, message, error)"},
    {"_seg_mount", (PyCFunction)store_seg_mount, METH_VARARGS,
     "_seg_mount(addr, size) -> segment name or negative"},
    {"_seg_unmount", (PyCFunction)store_seg_unmount, METH_VARARGS,
     "_seg_unmount(name, grace_ms) -> int"},
    {"_replica_clear", (PyCFunction)store_replica_clear, METH_VARARGS,
     "_replica_clear(keys, segment) -> [int] or negative"},
    M("batch_is_exist", store_batch_is_exist,
      "batch_is_exist($self, keys)\n--\n\nPer key 1, 0 or negative; a key found is read-leased."),
    M("_batch_probe", store_batch_probe,
      "_batch_probe($self, keys)\n--\n\nbatch_is_exist without the read lease."),
    M("batch_put_from", store_batch_put_from,
      "batch_put_from(keys, buffer_ptrs, sizes, config=None) -> [int]"),
    M("batch_get_into", store_batch_get_into,
      "batch_get_into(keys, buffer_ptrs, sizes) -> [bytes read or negative]"),
    M("put_batch", store_put_batch, "put_batch(keys, values, config=None) -> int"),
    M("get_batch", store_get_batch, "get_batch(keys) -> [bytes]"),
    M("batch_get_buffer", store_batch_get_buffer,
      "batch_get_buffer(keys) -> [BufferHandle or None]"),
    M("batch_remove", store_batch_remove, "batch_remove($self, keys, force=False)\n--\n\nPer key 0 or negative."),
    M("batch_put_from_multi_buffers", store_batch_put_from_multi_buffers,
      "batch_put_from_multi_buffers(keys, all_buffer_ptrs, all_sizes, config=None) -> [int]"),
    M("batch_get_into_multi_buffers", store_batch_get_into_multi_buffers,
      "batch_get_into_multi_buffers($self, keys, all_buffer_ptrs, all_sizes, "
      "prefer_alloc_in_same_node=False)\n--\n\nPer key bytes read or negative."),
    {"__enter__", store_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)store_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject cr__py_store_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "crescent._crescent.DistributedStore",
    .tp_basicsize = sizeof(PyStore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Store client (Mooncake MooncakeDistributedStore methods). Thread-safe.",
    .tp_new = store_new,
    .tp_init = store_init,
    .tp_dealloc = store_dealloc,
    .tp_methods = store_methods,
};

/* ---- BufferHandle --------------------------------------------------------- */

static void bh_dealloc(PyObject *o)
{
    PyBufHandle *h = (PyBufHandle *)o;
    free(h->ptr);
    PyObject_Free(o);
}

static int bh_getbuffer(PyObject *o, Py_buffer *view, int flags)
{
    PyBufHandle *h = (PyBufHandle *)o;
    static char empty;
    int rc = PyBuffer_FillInfo(view, o, h->ptr ? h->ptr : &empty, (Py_ssize_t)h->size, 0, flags);
    if (rc == 0)
        h->exports++;
    return rc;
}

static void bh_releasebuffer(PyObject *o, Py_buffer *view)
{
    (void)view;
    ((PyBufHandle *)o)->exports--;
}

static PyBufferProcs bh_as_buffer = {bh_getbuffer, bh_releasebuffer};

static PyObject *bh_ptr(PyObject *o, PyObject *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong((uint64_t)(uintptr_t)((PyBufHandle *)o)->ptr);
}

static PyObject *bh_size(PyObject *o, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSize_t(((PyBufHandle *)o)->size);
}

static Py_ssize_t bh_len(PyObject *o) { return (Py_ssize_t)((PyBufHandle *)o)->size; }

static int bh_bool(PyObject *o)
{
    (void)o;
    return 1; /* a handle exists only for a found key, even an empty one */
}

static PyMethodDef bh_methods[] = {
    {"ptr", bh_ptr, METH_NOARGS, "ptr($self)\n--\n\nAddress of the data (int)."},
    {"size", bh_size, METH_NOARGS, "size($self)\n--\n\nBytes (int)."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods bh_as_seq = {.sq_length = bh_len};
static PyNumberMethods bh_as_num = {.nb_bool = bh_bool};

PyTypeObject cr__py_bufhandle_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "crescent._crescent.BufferHandle",
    .tp_basicsize = sizeof(PyBufHandle),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An object's bytes (from get_buffer), exposed through the buffer protocol.",
    .tp_dealloc = bh_dealloc,
    .tp_as_buffer = &bh_as_buffer,
    .tp_as_sequence = &bh_as_seq,
    .tp_as_number = &bh_as_num,
    .tp_methods = bh_methods,
};

int cr__py_store_types_ready(PyObject *m)
{
    if (PyType_Ready(&cr__py_store_type) < 0 || PyType_Ready(&cr__py_bufhandle_type) < 0)
        return -1;
    Py_INCREF(&cr__py_store_type);
    if (PyModule_AddObject(m, "DistributedStore", (PyObject *)&cr__py_store_type) < 0) {
        Py_DECREF(&cr__py_store_type);
        return -1;
    }
    Py_INCREF(&cr__py_bufhandle_type);
    if (PyModule_AddObject(m, "BufferHandle", (PyObject *)&cr__py_bufhandle_type) < 0) {
        Py_DECREF(&cr__py_bufhandle_type);
        return -1;
    }
    PyModule_AddIntConstant(m, "STORE_BATCH_MAX", CR_STORE_BATCH_MAX);
    PyModule_AddIntConstant(m, "STORE_KEY_MAX", CR_STORE_KEY_MAX);
    return 0;
}
