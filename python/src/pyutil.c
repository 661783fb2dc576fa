#include "pyutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "crescent/common.h"

/* ---- argument conversion ------------------------------------------------ */

int cr__py_u64(PyObject *o, const char *what, uint64_t *out)
{
    if (!o || o == Py_None || PyFloat_Check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %s", what,
                     o ? Py_TYPE(o)->tp_name : "NULL");
        return -1;
    }
    PyObject *i = PyNumber_Index(o);
    if (!i)
        return -1;
    int overflow = 0;
    long long sv = PyLong_AsLongLongAndOverflow(i, &overflow);
    if (sv == -1 && PyErr_Occurred()) {
        Py_DECREF(i);
        return -1;
    }
    if (overflow < 0 || (!overflow && sv < 0)) {
        Py_DECREF(i);
        PyErr_Format(PyExc_ValueError, "%s must not be negative", what);
        return -1;
    }
    unsigned long long v = overflow ? PyLong_AsUnsignedLongLong(i) : (unsigned long long)sv;
    Py_DECREF(i);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s is too large", what);
        return -1;
    }
    *out = v;
    return 0;
}

int cr__py_size(PyObject *o, const char *what, uint64_t *out)
{
    if (o && (PyUnicode_Check(o) || PyBytes_Check(o))) {
        const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : PyBytes_AsString(o);
        if (!s)
            return -1;
        uint64_t v;
        if (cr__cfg_parse_size(s, &v) < 0) {
            PyErr_Format(PyExc_ValueError,
                         "%s: cannot parse size '%s' (use e.g. 4096, \"64KB\", \"512MB\", \"1GiB\")",
                         what, s);
            return -1;
        }
        *out = v;
        return 0;
    }
    return cr__py_u64(o, what, out);
}

int cr__py_addr(PyObject *o, const char *what, int writable, uint64_t *addr, uint64_t *len_out)
{
    if (o && PyObject_CheckBuffer(o) && !PyLong_Check(o)) {
        Py_buffer view;
        int flags = PyBUF_ANY_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(o, &view, flags) < 0) {
            if (PyErr_ExceptionMatches(PyExc_BufferError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError, "%s must be a %scontiguous buffer", what,
                             writable ? "writable " : "");
            }
            return -1;
        }
        *addr = (uint64_t)(uintptr_t)view.buf;
        if (len_out)
            *len_out = (uint64_t)view.len;
        PyBuffer_Release(&view);
        return 0;
    }
    if (cr__py_u64(o, what, addr) < 0) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s must be an int address or a buffer object, not %s",
                         what, o ? Py_TYPE(o)->tp_name : "NULL");
        }
        return -1;
    }
    if (len_out)
        *len_out = UINT64_MAX;
    return 0;
}

int cr__py_addr_size(PyObject *addr_o, PyObject *size_o, const char *what, int writable,
                     uint64_t *addr, uint64_t *size)
{
    uint64_t blen;
    if (cr__py_addr(addr_o, what, writable, addr, &blen) < 0)
        return -1;
    if (!size_o || size_o == Py_None) {
        if (blen == UINT64_MAX) {
            PyErr_Format(PyExc_TypeError, "size is required when %s is an int address", what);
            return -1;
        }
        *size = blen;
        return 0;
    }
    if (cr__py_u64(size_o, "size", size) < 0)
        return -1;
    if (blen != UINT64_MAX && *size > blen) {
        PyErr_Format(PyExc_ValueError, "buffer too small: size %llu > %llu bytes of %s",
                     (unsigned long long)*size, (unsigned long long)blen, what);
        return -1;
    }
    return 0;
}

int cr__py_hold_region(PyObject *addr_o, PyObject *size_o, const char *addr_name,
                       const char *size_name, uint64_t *addr, uint64_t *len, Py_buffer **view)
{
    *view = NULL;
    if (!addr_o || !PyObject_CheckBuffer(addr_o) || PyLong_Check(addr_o)) {
        if (cr__py_u64(addr_o, addr_name, addr) < 0)
            return -1;
        if (!size_o || size_o == Py_None) {
            PyErr_Format(PyExc_TypeError, "%s is required for an int %s", size_name, addr_name);
            return -1;
        }
        return cr__py_u64(size_o, size_name, len);
    }
    Py_buffer *v = PyMem_Calloc(1, sizeof *v);
    if (!v) {
        PyErr_NoMemory();
        return -1;
    }
    if (PyObject_GetBuffer(addr_o, v, PyBUF_ANY_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyMem_Free(v);
        if (PyErr_ExceptionMatches(PyExc_BufferError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s must be a writable contiguous buffer", addr_name);
        }
        return -1;
    }
    uint64_t have = (uint64_t)v->len, want = have;
    if (size_o && size_o != Py_None) {
        if (cr__py_u64(size_o, size_name, &want) < 0) {
            cr__py_release_view(v);
            return -1;
        }
        if (want > have) {
            PyErr_Format(PyExc_ValueError, "buffer too small: %s %llu > %llu bytes", size_name,
                         (unsigned long long)want, (unsigned long long)have);
            cr__py_release_view(v);
            return -1;
        }
    }
    *addr = (uint64_t)(uintptr_t)v->buf;
    *len = want;
    *view = v;
    return 0;
}

void cr__py_release_view(Py_buffer *view)
{
    if (view) {
        PyBuffer_Release(view);
        PyMem_Free(view);
    }
}

int cr__py_key(PyObject *o, const char **s, Py_ssize_t *len)
{
    if (o && PyUnicode_Check(o)) {
        *s = PyUnicode_AsUTF8AndSize(o, len);
        if (!*s)
            return -1;
    } else if (o && PyBytes_Check(o)) {
        *s = PyBytes_AS_STRING(o);
        *len = PyBytes_GET_SIZE(o);
    } else {
        PyErr_Format(PyExc_TypeError, "key must be str, not %s", o ? Py_TYPE(o)->tp_name : "NULL");
        return -1;
    }
    if (*len == 0) {
        PyErr_SetString(PyExc_ValueError, "key must not be empty");
        return -1;
    }
    if (memchr(*s, 0, (size_t)*len)) {
        PyErr_SetString(PyExc_ValueError, "key must not contain NUL characters");
        return -1;
    }
    return 0;
}

PyObject *cr__py_seq(PyObject *o, const char *what)
{
    if (!o || PyUnicode_Check(o) || PyBytes_Check(o) || !PySequence_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list, not %s", what,
                     o ? Py_TYPE(o)->tp_name : "NULL");
        return NULL;
    }
    /* A private tuple, not the caller's list: keys and strings it holds stay
     * alive even if another thread mutates the list while the GIL is
     * released. */
    return PySequence_Tuple(o);
}

void cr__py_rwlock_init(pthread_rwlock_t *lock)
{
    pthread_rwlockattr_t at;
    pthread_rwlockattr_init(&at);
    pthread_rwlockattr_setkind_np(&at, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(lock, &at);
    pthread_rwlockattr_destroy(&at);
}

int cr__py_mem_mapped(uint64_t addr, uint64_t len)
{
    if (addr == 0 || len == 0 || addr + len < addr)
        return 0;
    uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t start = addr & ~(pg - 1);
    uint64_t end = (addr + len + pg - 1) & ~(pg - 1);
    unsigned char vec[256];
    /* mincore() fails with ENOMEM on any unmapped page; check in chunks. */
    for (uint64_t p = start; p < end;) {
        uint64_t n = (end - p) / pg;
        if (n > sizeof vec)
            n = sizeof vec;
        if (mincore((void *)(uintptr_t)p, n * pg, vec) != 0)
            return 0;
        p += n * pg;
    }
    return 1;
}

/* ---- registered memory table ------------------------------------------- */

void cr__py_reg_init(cr__py_regtab_t *t)
{
    pthread_mutex_init(&t->mu, NULL);
    t->v = NULL;
    t->n = t->cap = 0;
}

/* First index whose addr > a (caller holds mu). */
static size_t reg_upper_locked(const cr__py_regtab_t *t, uint64_t a)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->v[mid].addr <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int cr__py_reg_add(cr__py_regtab_t *t, uint64_t addr, uint64_t len, Py_buffer *view)
{
    int rc = 0;
    pthread_mutex_lock(&t->mu);
    size_t i = reg_upper_locked(t, addr);
    if ((i > 0 && t->v[i - 1].addr + t->v[i - 1].len > addr) ||
        (i < t->n && addr + len > t->v[i].addr)) {
        rc = -EEXIST;
        goto out;
    }
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 16;
        cr__py_region_t *nv = realloc(t->v, nc * sizeof *nv);
        if (!nv) {
            rc = -ENOMEM;
            goto out;
        }
        t->v = nv;
        t->cap = nc;
    }
    memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof *t->v);
    t->v[i] = (cr__py_region_t){.addr = addr, .len = len, .view = view};
    t->n++;
out:
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int cr__py_reg_remove(cr__py_regtab_t *t, uint64_t addr, uint64_t *len, Py_buffer **view)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&t->mu);
    size_t i = reg_upper_locked(t, addr);
    if (i > 0 && t->v[i - 1].addr == addr) {
        i--;
        if (len)
            *len = t->v[i].len;
        if (view)
            *view = t->v[i].view;
        memmove(&t->v[i], &t->v[i + 1], (t->n - i - 1) * sizeof *t->v);
        t->n--;
        rc = 0;
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int cr__py_reg_covers(cr__py_regtab_t *t, uint64_t addr, uint64_t len)
{
    int ok = 0;
    if (addr + len < addr)
        return 0;
    pthread_mutex_lock(&t->mu);
    size_t i = reg_upper_locked(t, addr);
    if (i > 0) {
        const cr__py_region_t *r = &t->v[i - 1];
        ok = addr >= r->addr && addr + len <= r->addr + r->len;
    }
    pthread_mutex_unlock(&t->mu);
    return ok;
}

void cr__py_reg_release_all(cr__py_regtab_t *t)
{
    pthread_mutex_lock(&t->mu);
    cr__py_region_t *v = t->v;
    size_t n = t->n;
    t->v = NULL;
    t->n = t->cap = 0;
    pthread_mutex_unlock(&t->mu);
    /* views are released outside the lock: releasing may call into Python */
    for (size_t i = 0; i < n; i++)
        cr__py_release_view(v[i].view);
    free(v);
}

void cr__py_reg_destroy(cr__py_regtab_t *t)
{
    free(t->v);
    t->v = NULL;
    t->n = t->cap = 0;
    pthread_mutex_destroy(&t->mu);
}

/* ---- hostnames and metadata URIs ---------------------------------------- */

int cr__py_split_host(const char *s, char *host, size_t hostcap, uint16_t *port)
{
    const char *colon = NULL;
    size_t hl;
    *port = 0;
    if (!s)
        return -EINVAL;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb)
            return -EINVAL;
        hl = (size_t)(rb - s - 1);
        if (hl + 1 > hostcap)
            return -EINVAL;
        memcpy(host, s + 1, hl);
        host[hl] = 0;
        if (rb[1] == 0)
            return 0;
        if (rb[1] != ':')
            return -EINVAL;
        colon = rb + 1;
    } else {
        colon = strchr(s, ':');
        if (colon && strchr(colon + 1, ':')) { /* bare IPv6 address, no port */
            colon = NULL;
        }
        hl = colon ? (size_t)(colon - s) : strlen(s);
        if (hl + 1 > hostcap)
            return -EINVAL;
        memcpy(host, s, hl);
        host[hl] = 0;
        if (!colon)
            return 0;
    }
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || p < 0 || p > 65535)
        return -EINVAL;
    *port = (uint16_t)p;
    return 0;
}

int cr__py_resolve_ip(const char *host, char *ip, size_t ipcap)
{
    if (!host || !*host || !strcmp(host, "localhost")) {
        snprintf(ip, ipcap, "127.0.0.1");
        return 0;
    }
    unsigned char tmp[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, host, tmp) == 1 || inet_pton(AF_INET6, host, tmp) == 1) {
        if (strlen(host) + 1 > ipcap)
            return -EINVAL;
        memcpy(ip, host, strlen(host) + 1);
        return 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(host, NULL, &hints, &res);
    if (gai != 0 || !res) {
        CR_LOG_ERROR("python", "local_hostname \"%s\": host name does not resolve (%s)", host,
                     gai ? gai_strerror(gai) : "no address");
        return -EHOSTUNREACH;
    }
    int rc = -EHOSTUNREACH;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        const void *src = a->ai_family == AF_INET
                              ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                              : (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
        if (inet_ntop(a->ai_family, src, ip, (socklen_t)ipcap)) {
            rc = 0;
            if (a->ai_family == AF_INET)
                break; /* prefer IPv4 */
        }
    }
    freeaddrinfo(res);
    return rc;
}

int cr__py_metadata_uri(const char *in, char *out, size_t cap)
{
    if (!in || !*in || !strcasecmp(in, "P2PHANDSHAKE") || !strcmp(in, "p2p")) {
        snprintf(out, cap, "p2p");
        return 0;
    }
    if (!strncmp(in, "http://", 7) || !strncmp(in, "etcd://", 7)) {
        if ((size_t)snprintf(out, cap, "%s", in) >= cap)
            return -EINVAL;
        return 0;
    }
    if (strstr(in, "://"))
        return -EINVAL; /* redis://, https://, ... not offered by crescent */
    if ((size_t)snprintf(out, cap, "etcd://%s", in) >= cap)
        return -EINVAL;
    return 0;
}

void cr__py_nics_from_devices(const char *devices, char *out, size_t cap)
{
    size_t o = 0;
    out[0] = 0;
    if (!devices)
        return;
    const char *p = devices;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        char tok[64];
        unsigned char tmp[sizeof(struct in6_addr)];
        if (l > 0 && l < sizeof tok) {
            memcpy(tok, p, l);
            tok[l] = 0;
            if ((inet_pton(AF_INET, tok, tmp) == 1 || inet_pton(AF_INET6, tok, tmp) == 1) &&
                o + l + 2 < cap) {
                if (o)
                    out[o++] = ',';
                memcpy(out + o, tok, l + 1);
                o += l;
            }
        }
        if (!e)
            break;
        p = e + 1;
    }
}

int cr__py_mc_env(const char *metadata_server, const char *protocol, const char *for_tcp,
                  const char *for_shm, cr__py_mc_env_t *env)
{
    memset(env, 0, sizeof *env);
    if (!metadata_server || !*metadata_server) {
        const char *v = getenv("MC_METADATA_SERVER");
        metadata_server = v && *v ? v : "P2PHANDSHAKE";
    }
    if (cr__py_metadata_uri(metadata_server, env->metadata_uri, sizeof env->metadata_uri) < 0)
        return -EINVAL;
    const char *tr = for_tcp;
    if (protocol && (!strcmp(protocol, "shm") || !strcmp(protocol, "tcp,shm"))) {
        tr = for_shm;
    } else if (protocol && *protocol && strcmp(protocol, "tcp") != 0) {
        /* rdma, nvlink, ...: crescent moves bytes over TCP/shared memory. */
        if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                             "crescent: protocol '%s' is not available, using tcp", protocol) < 0)
            return -1;
    }
    const char *v = getenv("CRESCENT_TRANSPORTS");
    snprintf(env->transports, sizeof env->transports, "%s", v && *v ? v : tr);
    v = getenv("MC_LEGACY_RPC_PORT_BINDING");
    env->legacy_port = v && *v && strcmp(v, "0") != 0;
    v = getenv("MC_TRANSFER_TIMEOUT");
    if (v && atoi(v) > 0)
        env->timeout_ms = (unsigned)atoi(v) * 1000u;
    return 0;
}
