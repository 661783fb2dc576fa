/* Mooncake trace (JSONL) parser. jansson is used instead of a hand parser:
 * it is already a crescent dependency, it is strict (rejects trailing data,
 * bad escapes, duplicate keys on request) and fuzzed upstream; per line the
 * cost is dominated by the hash_ids array either way. Every field is
 * checked; every error names the line and the field. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "conductor/internal.h"

static int fail(char *err, size_t errlen, size_t lineno, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, size_t lineno, const char *fmt, ...)
{
    if (err && errlen) {
        int k = snprintf(err, errlen, "line %zu: ", lineno);
        if (k >= 0 && (size_t)k < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return -EINVAL;
}

static int get_uint(json_t *o, const char *name, uint64_t max, uint64_t *out, size_t lineno,
                    char *err, size_t errlen)
{
    json_t *v = json_object_get(o, name);
    if (!v)
        return fail(err, errlen, lineno, "missing field \"%s\"", name);
    if (!json_is_integer(v))
        return fail(err, errlen, lineno, "field \"%s\" must be an integer", name);
    json_int_t x = json_integer_value(v);
    if (x < 0)
        return fail(err, errlen, lineno, "field \"%s\" is negative (%lld)", name, (long long)x);
    if ((uint64_t)x > max)
        return fail(err, errlen, lineno, "field \"%s\" too large (%lld > %llu)", name,
                    (long long)x, (unsigned long long)max);
    *out = (uint64_t)x;
    return 0;
}

int cr__cond_trace_parse_line(const char *line, size_t len, size_t lineno, uint32_t block_tokens,
                              cr__cond_trace_req_t *out, uint64_t *hash_buf, size_t cap,
                              char *err, size_t errlen)
{
    if (!line || !out || block_tokens == 0)
        return fail(err, errlen, lineno, "invalid arguments");
    if (len > CR__COND_TRACE_MAX_LINE)
        return fail(err, errlen, lineno, "line longer than %u bytes", CR__COND_TRACE_MAX_LINE);
    json_error_t je;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return fail(err, errlen, lineno, "malformed JSON at column %d: %s", je.column, je.text);
    int rc = -EINVAL;
    if (!json_is_object(o)) {
        fail(err, errlen, lineno, "not a JSON object");
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val)
    {
        if (strcmp(key, "timestamp") && strcmp(key, "input_length") &&
            strcmp(key, "output_length") && strcmp(key, "hash_ids")) {
            fail(err, errlen, lineno, "unknown field \"%.64s\"", key);
            goto out;
        }
    }
    cr__cond_trace_req_t r;
    memset(&r, 0, sizeof r);
    json_t *ts = json_object_get(o, "timestamp");
    if (!ts) {
        fail(err, errlen, lineno, "missing field \"timestamp\"");
        goto out;
    }
    if (!json_is_number(ts) || !isfinite(json_number_value(ts)) || json_number_value(ts) < 0 ||
        json_number_value(ts) > 1e15) {
        fail(err, errlen, lineno, "field \"timestamp\" must be a number in [0, 1e15] (ms)");
        goto out;
    }
    r.ts_ms = json_number_value(ts);
    uint64_t in, outl;
    if (get_uint(o, "input_length", CR__COND_TRACE_MAX_TOKENS, &in, lineno, err, errlen) ||
        get_uint(o, "output_length", CR__COND_TRACE_MAX_TOKENS, &outl, lineno, err, errlen))
        goto out;
    if (in == 0) {
        fail(err, errlen, lineno, "field \"input_length\" must be > 0");
        goto out;
    }
    r.input_len = (uint32_t)in;
    r.output_len = (uint32_t)outl;
    json_t *h = json_object_get(o, "hash_ids");
    if (!h) {
        fail(err, errlen, lineno, "missing field \"hash_ids\"");
        goto out;
    }
    if (!json_is_array(h)) {
        fail(err, errlen, lineno, "field \"hash_ids\" must be an array");
        goto out;
    }
    size_t nb = json_array_size(h);
    size_t maxb = (in + block_tokens - 1) / block_tokens;
    if (nb > CR__COND_TRACE_MAX_BLOCKS) {
        fail(err, errlen, lineno, "field \"hash_ids\" has %zu entries (max %u)", nb,
             CR__COND_TRACE_MAX_BLOCKS);
        goto out;
    }
    if (nb > maxb) {
        fail(err, errlen, lineno,
             "field \"hash_ids\" has %zu entries, more than the %zu blocks of %u tokens in "
             "input_length %llu",
             nb, maxb, block_tokens, (unsigned long long)in);
        goto out;
    }
    if (nb > cap) {
        rc = -ENOSPC;
        fail(err, errlen, lineno, "field \"hash_ids\": no room for %zu entries", nb);
        goto out;
    }
    for (size_t i = 0; i < nb; i++) {
        json_t *e = json_array_get(h, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0) {
            fail(err, errlen, lineno, "field \"hash_ids\"[%zu] must be a non-negative integer",
                 i);
            goto out;
        }
        hash_buf[i] = (uint64_t)json_integer_value(e);
    }
    r.n_blocks = (uint32_t)nb;
    *out = r;
    rc = 0;
out:
    json_decref(o);
    return rc;
}

/* Reads one line (without the newline) into buf (cap bytes). Returns its
 * length, -1 at end of file, -2 if it is longer than cap (the rest of the
 * line is not read: the caller stops). Bounded: never allocates. */
static ssize_t read_line(FILE *f, char *buf, size_t cap)
{
    size_t n = 0;
    int c;
    while ((c = getc_unlocked(f)) != EOF) {
        if (c == '\n')
            return (ssize_t)n;
        if (n == cap)
            return -2;
        buf[n++] = (char)c;
    }
    return n ? (ssize_t)n : -1;
}

void cr__cond_trace_free(cr__cond_trace_t *t)
{
    if (!t)
        return;
    free(t->reqs);
    free(t->hashes);
    memset(t, 0, sizeof *t);
}

int cr__cond_trace_read(FILE *f, uint32_t block_tokens, cr__cond_trace_t *out, char *err,
                        size_t errlen)
{
    if (!f || !out || block_tokens == 0)
        return -EINVAL;
    cr__cond_trace_t t;
    memset(&t, 0, sizeof t);
    size_t rcap = 0, hcap = 0;
    uint64_t *buf = malloc(CR__COND_TRACE_MAX_BLOCKS * sizeof *buf);
    char *line = malloc(CR__COND_TRACE_MAX_LINE);
    ssize_t len;
    size_t lineno = 0;
    int rc = 0;
    double last_ts = 0;
    if (!buf || !line) {
        rc = -ENOMEM;
        goto out;
    }
    while ((len = read_line(f, line, CR__COND_TRACE_MAX_LINE)) != -1) {
        lineno++;
        if (len == -2) {
            rc = fail(err, errlen, lineno, "line longer than %u bytes", CR__COND_TRACE_MAX_LINE);
            goto out;
        }
        size_t l = (size_t)len;
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r' || line[l - 1] == ' ' ||
                     line[l - 1] == '\t'))
            l--;
        size_t s = 0;
        while (s < l && (line[s] == ' ' || line[s] == '\t'))
            s++;
        if (s == l)
            continue;
        if (t.n >= CR__COND_TRACE_MAX_REQS) {
            rc = fail(err, errlen, lineno, "more than %u requests", CR__COND_TRACE_MAX_REQS);
            goto out;
        }
        cr__cond_trace_req_t r;
        rc = cr__cond_trace_parse_line(line + s, l - s, lineno, block_tokens, &r, buf,
                                       CR__COND_TRACE_MAX_BLOCKS, err, errlen);
        if (rc)
            goto out;
        if (t.n && r.ts_ms < last_ts) {
            rc = fail(err, errlen, lineno, "field \"timestamp\" decreases (%.3f after %.3f)",
                      r.ts_ms, last_ts);
            goto out;
        }
        last_ts = r.ts_ms;
        if (t.n == rcap) {
            size_t nc = rcap ? rcap * 2 : 1024;
            void *p = realloc(t.reqs, nc * sizeof *t.reqs);
            if (!p) {
                rc = -ENOMEM;
                goto out;
            }
            t.reqs = p;
            rcap = nc;
        }
        if (t.n_hashes + r.n_blocks > hcap) {
            size_t nc = hcap ? hcap * 2 : 65536;
            while (nc < t.n_hashes + r.n_blocks)
                nc *= 2;
            void *p = realloc(t.hashes, nc * sizeof *t.hashes);
            if (!p) {
                rc = -ENOMEM;
                goto out;
            }
            t.hashes = p;
            hcap = nc;
        }
        memcpy(t.hashes + t.n_hashes, buf, r.n_blocks * sizeof *buf);
        r.off = t.n_hashes;
        t.n_hashes += r.n_blocks;
        t.reqs[t.n++] = r;
    }
    if (ferror(f)) {
        rc = -EIO;
        fail(err, errlen, lineno + 1, "read error");
    }
out:
    free(line);
    free(buf);
    if (rc)
        cr__cond_trace_free(&t);
    else
        *out = t;
    return rc;
}

int cr__cond_trace_load(const char *path, uint32_t block_tokens, cr__cond_trace_t *out,
                        char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        int e = errno;
        if (err && errlen)
            snprintf(err, errlen, "%s: %s", path, strerror(e));
        return -e;
    }
    int rc = cr__cond_trace_read(f, block_tokens, out, err, errlen);
    fclose(f);
    return rc;
}
