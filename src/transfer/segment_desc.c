/* Segment descriptor <-> JSON (jansson), with strict validation.
 *
 * Wire format (one JSON object; unknown members are ignored so that newer
 * writers can add fields):
 *   {"name": "host:port", "host_id": "...", "pid": 1234, "version": 7,
 *    "rpc_port": 15000,
 *    "nics": [{"addr": "127.0.0.1", "port": 40123}, ...],
 *    "buffers": [{"addr": 140234..., "len": 4194304, "location": "cpu:0"}, ...]}
 * Addresses and lengths are JSON integers; a value above INT64_MAX (which
 * jansson cannot hold as an integer) is written as a "0x..." string, and the
 * decoder accepts both forms. Everything read from the wire is bounded:
 * string lengths, array counts, integer ranges, total input size; buffers
 * must be sorted by addr and must not overlap. */
#include "transfer/segment_desc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NIC_ADDR_MAX ((int)sizeof(((cr__seg_nic_t *)0)->addr))

/* ---- encode ------------------------------------------------------------ */

static json_t *u64_to_json(uint64_t v)
{
    if (v <= (uint64_t)INT64_MAX)
        return json_integer((json_int_t)v);
    char buf[24];
    snprintf(buf, sizeof buf, "0x%" PRIx64, v);
    return json_string(buf);
}

/* json_stringn of a fixed char array that may lack a terminator. */
static json_t *fixed_str(const char *s, size_t cap)
{
    return json_stringn(s, strnlen(s, cap));
}

/* Adds v to obj under key, consuming v. Returns 0 or -ENOMEM. */
static int obj_put(json_t *obj, const char *key, json_t *v)
{
    if (!v)
        return -ENOMEM;
    return json_object_set_new(obj, key, v) == 0 ? 0 : -ENOMEM;
}

static int arr_put(json_t *arr, json_t *v)
{
    if (!v)
        return -ENOMEM;
    return json_array_append_new(arr, v) == 0 ? 0 : -ENOMEM;
}

int cr__seg_desc_encode(const cr__seg_desc_t *d, char **out, size_t *out_len)
{
    int rc = -ENOMEM;
    json_t *root = json_object();
    json_t *nics = json_array();
    json_t *bufs = json_array();
    if (!root || !nics || !bufs)
        goto fail;
    if (obj_put(root, "name", fixed_str(d->name, sizeof d->name)) ||
        obj_put(root, "host_id", fixed_str(d->host_id, sizeof d->host_id)) ||
        obj_put(root, "pid", json_integer(d->pid)) ||
        obj_put(root, "version", u64_to_json(d->version)) ||
        obj_put(root, "rpc_port", json_integer(d->rpc_port)))
        goto fail;
    uint32_t n_nics = d->n_nics < CR_XFER_MAX_NICS ? d->n_nics : CR_XFER_MAX_NICS;
    for (uint32_t i = 0; i < n_nics; i++) {
        json_t *nic = json_object();
        if (!nic)
            goto fail;
        if (arr_put(nics, nic))
            goto fail;
        if (obj_put(nic, "addr", fixed_str(d->nics[i].addr, sizeof d->nics[i].addr)) ||
            obj_put(nic, "port", json_integer(d->nics[i].port)))
            goto fail;
    }
    for (uint32_t i = 0; i < d->n_buffers; i++) {
        const cr_xfer_buffer_info_t *b = &d->buffers[i];
        json_t *jb = json_object();
        if (!jb)
            goto fail;
        if (arr_put(bufs, jb))
            goto fail;
        if (obj_put(jb, "addr", u64_to_json(b->addr)) ||
            obj_put(jb, "len", u64_to_json(b->len)) ||
            obj_put(jb, "location", fixed_str(b->location, sizeof b->location)))
            goto fail;
    }
    /* set_new steals the arrays: clear our pointers only after success */
    if (json_object_set(root, "nics", nics) || json_object_set(root, "buffers", bufs))
        goto fail;
    char *s = json_dumps(root, JSON_COMPACT);
    if (!s)
        goto fail;
    *out = s;
    if (out_len)
        *out_len = strlen(s);
    rc = 0;
fail:
    json_decref(nics);
    json_decref(bufs);
    json_decref(root);
    return rc;
}

/* ---- decode ------------------------------------------------------------ */

/* Copies a JSON string of length 1..cap-1 (0..cap-1 when allow_empty) into
 * dst. Embedded NULs are rejected. Returns 0 or -EINVAL. */
static int get_str(json_t *obj, const char *key, char *dst, size_t cap, int allow_empty)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_string(v))
        return -EINVAL;
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (n >= cap || (!allow_empty && n == 0) || strlen(s) != n)
        return -EINVAL;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return 0;
}

/* Parses "0x..." (hex) or a decimal digit string into a uint64 without
 * overflow. Returns 0 or -EINVAL. */
static int parse_u64_text(const char *s, size_t n, uint64_t *out)
{
    int base = 10;
    size_t i = 0;
    if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        i = 2;
    }
    if (i >= n || n - i > 20)
        return -EINVAL;
    uint64_t v = 0;
    for (; i < n; i++) {
        char c = s[i];
        unsigned dig;
        if (c >= '0' && c <= '9')
            dig = (unsigned)(c - '0');
        else if (base == 16 && c >= 'a' && c <= 'f')
            dig = (unsigned)(c - 'a' + 10);
        else if (base == 16 && c >= 'A' && c <= 'F')
            dig = (unsigned)(c - 'A' + 10);
        else
            return -EINVAL;
        if (v > (UINT64_MAX - dig) / (uint64_t)base)
            return -EINVAL;
        v = v * (uint64_t)base + dig;
    }
    *out = v;
    return 0;
}

/* A non-negative JSON integer, or a string holding one. Reals, booleans,
 * null and negative values are rejected. */
static int get_u64(json_t *obj, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0)
            return -EINVAL;
        *out = (uint64_t)i;
        return 0;
    }
    if (json_is_string(v))
        return parse_u64_text(json_string_value(v), json_string_length(v), out);
    return -EINVAL;
}

static int is_numeric_ip(const char *s)
{
    unsigned char tmp[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, s, tmp) == 1 || inet_pton(AF_INET6, s, tmp) == 1;
}

static int decode_nics(json_t *arr, cr__seg_desc_t *d)
{
    if (!json_is_array(arr) || json_array_size(arr) > CR_XFER_MAX_NICS)
        return -EINVAL;
    d->n_nics = (uint32_t)json_array_size(arr);
    for (uint32_t i = 0; i < d->n_nics; i++) {
        json_t *nic = json_array_get(arr, i);
        uint64_t port;
        if (!json_is_object(nic) ||
            get_str(nic, "addr", d->nics[i].addr, NIC_ADDR_MAX, 0) ||
            !is_numeric_ip(d->nics[i].addr))
            return -EINVAL;
        json_t *p = json_object_get(nic, "port");
        /* 0: the segment runs no network data transport (same-host only) */
        if (!json_is_integer(p) || get_u64(nic, "port", &port) || port > 65535)
            return -EINVAL;
        d->nics[i].port = (uint16_t)port;
    }
    return 0;
}

static int decode_buffers(json_t *arr, cr__seg_desc_t *d)
{
    if (!json_is_array(arr) || json_array_size(arr) > CR__SEG_MAX_BUFFERS)
        return -EINVAL;
    size_t n = json_array_size(arr);
    d->n_buffers = (uint32_t)n;
    d->buffers = NULL;
    if (n == 0)
        return 0;
    d->buffers = calloc(n, sizeof *d->buffers);
    if (!d->buffers)
        return -ENOMEM;
    uint64_t prev_end = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *jb = json_array_get(arr, i);
        cr_xfer_buffer_info_t *b = &d->buffers[i];
        if (!json_is_object(jb) || get_u64(jb, "addr", &b->addr) ||
            get_u64(jb, "len", &b->len) ||
            get_str(jb, "location", b->location, sizeof b->location, 0))
            return -EINVAL;
        /* non-empty, no wrap-around, strictly sorted and non-overlapping */
        if (b->len == 0 || b->addr > UINT64_MAX - b->len)
            return -EINVAL;
        if (i > 0 && b->addr < prev_end)
            return -EINVAL;
        prev_end = b->addr + b->len;
    }
    return 0;
}

int cr__seg_desc_decode(const char *json, size_t len, cr__seg_desc_t *out)
{
    if (!json || !out || len == 0 || len > CR__SEG_DESC_MAX_JSON)
        return -EINVAL;
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return -EINVAL;
    int rc = -EINVAL;
    cr__seg_desc_t d;
    memset(&d, 0, sizeof d);
    uint64_t pid, version;
    if (!json_is_object(root))
        goto done;
    if (get_str(root, "name", d.name, sizeof d.name, 0) ||
        get_str(root, "host_id", d.host_id, sizeof d.host_id, 1))
        goto done;
    if (!json_is_integer(json_object_get(root, "pid")) || get_u64(root, "pid", &pid) ||
        pid > INT32_MAX)
        goto done;
    d.pid = (int32_t)pid;
    if (get_u64(root, "version", &version))
        goto done;
    d.version = version;
    /* absent (older writers): 0, the segment cannot be notified */
    uint64_t rpc_port = 0;
    if (json_object_get(root, "rpc_port") &&
        (!json_is_integer(json_object_get(root, "rpc_port")) ||
         get_u64(root, "rpc_port", &rpc_port) || rpc_port > 65535))
        goto done;
    d.rpc_port = (uint16_t)rpc_port;
    if ((rc = decode_nics(json_object_get(root, "nics"), &d)) != 0)
        goto done;
    if ((rc = decode_buffers(json_object_get(root, "buffers"), &d)) != 0)
        goto done;
    rc = 0;
done:
    json_decref(root);
    if (rc) {
        free(d.buffers);
        return rc;
    }
    *out = d;
    return 0;
}

void cr__seg_desc_clear(cr__seg_desc_t *d)
{
    if (!d)
        return;
    free(d->buffers);
    memset(d, 0, sizeof *d);
}

int cr__seg_desc_contains(const cr__seg_desc_t *d, uint64_t addr, uint64_t len)
{
    if (!d || !d->buffers || d->n_buffers == 0 || len == 0 || addr > UINT64_MAX - len)
        return 0;
    /* last buffer whose start is <= addr */
    size_t lo = 0, hi = d->n_buffers; /* invariant: answer in [lo, hi) or none */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->buffers[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return 0;
    const cr_xfer_buffer_info_t *b = &d->buffers[lo - 1];
    return addr - b->addr <= b->len && len <= b->len - (addr - b->addr);
}
