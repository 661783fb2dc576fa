/* KV-cache event decoder: see kv_events.h for the wire layout. */
#include "conductor/service/kv_events.h"

#include <errno.h>
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define MAX_DEPTH 24

const char *cr__kvev_err_name(cr__kvev_err_t e)
{
    switch (e) {
    case CR__KVEV_OK: return "ok";
    case CR__KVEV_ERR_MSGPACK: return "msgpack";
    case CR__KVEV_ERR_LIMIT: return "limit";
    case CR__KVEV_ERR_SHAPE: return "shape";
    case CR__KVEV_ERR_FIELD: return "field";
    case CR__KVEV_ERR__COUNT: break;
    }
    return "unknown";
}

uint64_t cr__kvev_fold_bytes(const void *p, size_t n) { return XXH3_64bits_withSeed(p, n, 0); }

/* ---- error context ----------------------------------------------------- */

typedef struct dctx {
    cr__kvev_limits_t lim;
    cr__kvev_err_t kind;
    char *err;
    size_t errlen;
} dctx_t;

__attribute__((format(printf, 3, 4))) static int fail(dctx_t *c, cr__kvev_err_t kind,
                                                      const char *fmt, ...)
{
    c->kind = kind;
    if (c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return kind == CR__KVEV_ERR_LIMIT ? -E2BIG : -EINVAL;
}

/* ---- pre-pass: well-formedness and bounded allocation ------------------- */

typedef struct walk {
    const uint8_t *p, *end;
    uint64_t objects, max_objects;
    const char *why; /* NULL or the reason of failure */
    int limit;       /* failure is a limit, not malformed input */
} walk_t;

static int need(walk_t *w, uint64_t n)
{
    if ((uint64_t)(w->end - w->p) < n) {
        w->why = "truncated input";
        return -1;
    }
    return 0;
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

static int walk_one(walk_t *w, int depth);

static int walk_children(walk_t *w, uint64_t n, int depth)
{
    /* every element takes at least one byte: reject impossible counts before
     * anybody allocates for them */
    if (n > (uint64_t)(w->end - w->p)) {
        w->why = "declared container length exceeds the input";
        return -1;
    }
    if (depth >= MAX_DEPTH) {
        w->why = "nesting too deep";
        w->limit = 1;
        return -1;
    }
    for (uint64_t i = 0; i < n; i++)
        if (walk_one(w, depth + 1))
            return -1;
    return 0;
}

static int walk_one(walk_t *w, int depth)
{
    if (need(w, 1))
        return -1;
    if (++w->objects > w->max_objects) {
        w->why = "too many msgpack objects";
        w->limit = 1;
        return -1;
    }
    uint8_t b = *w->p++;
    uint64_t n;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return 0;
    if ((b & 0xf0) == 0x80)
        return walk_children(w, 2ull * (b & 0x0f), depth);
    if ((b & 0xf0) == 0x90)
        return walk_children(w, b & 0x0f, depth);
    if ((b & 0xe0) == 0xa0) {
        n = b & 0x1f;
        goto skip;
    }
    switch (b) {
    case 0xc4: case 0xd9: /* bin8 / str8 */
        if (need(w, 1)) return -1;
        n = be(w->p, 1); w->p += 1; goto skip;
    case 0xc5: case 0xda:
        if (need(w, 2)) return -1;
        n = be(w->p, 2); w->p += 2; goto skip;
    case 0xc6: case 0xdb:
        if (need(w, 4)) return -1;
        n = be(w->p, 4); w->p += 4; goto skip;
    case 0xc7: /* ext8: len, type, data */
        if (need(w, 2)) return -1;
        n = be(w->p, 1) + 1; w->p += 1; goto skip;
    case 0xc8:
        if (need(w, 3)) return -1;
        n = be(w->p, 2) + 1; w->p += 2; goto skip;
    case 0xc9:
        if (need(w, 5)) return -1;
        n = be(w->p, 4) + 1; w->p += 4; goto skip;
    case 0xca: n = 4; goto skip;
    case 0xcb: n = 8; goto skip;
    case 0xcc: case 0xd0: n = 1; goto skip;
    case 0xcd: case 0xd1: n = 2; goto skip;
    case 0xce: case 0xd2: n = 4; goto skip;
    case 0xcf: case 0xd3: n = 8; goto skip;
    case 0xd4: n = 2; goto skip;
    case 0xd5: n = 3; goto skip;
    case 0xd6: n = 5; goto skip;
    case 0xd7: n = 9; goto skip;
    case 0xd8: n = 17; goto skip;
    case 0xdc:
        if (need(w, 2)) return -1;
        n = be(w->p, 2); w->p += 2;
        return walk_children(w, n, depth);
    case 0xdd:
        if (need(w, 4)) return -1;
        n = be(w->p, 4); w->p += 4;
        return walk_children(w, n, depth);
    case 0xde:
        if (need(w, 2)) return -1;
        n = be(w->p, 2); w->p += 2;
        return walk_children(w, 2 * n, depth);
    case 0xdf:
        if (need(w, 4)) return -1;
        n = be(w->p, 4); w->p += 4;
        return walk_children(w, 2 * n, depth);
    default: /* 0xc1 is never used */
        w->why = "invalid msgpack type byte";
        return -1;
    }
skip:
    if (need(w, n))
        return -1;
    w->p += n;
    return 0;
}

/* ---- typed accessors ---------------------------------------------------- */

static const char *tname(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return "nil";
    case MSGPACK_OBJECT_BOOLEAN: return "bool";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "int";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return "float";
    case MSGPACK_OBJECT_STR: return "str";
    case MSGPACK_OBJECT_ARRAY: return "array";
    case MSGPACK_OBJECT_MAP: return "map";
    case MSGPACK_OBJECT_BIN: return "bin";
    case MSGPACK_OBJECT_EXT: return "ext";
    }
    return "?";
}

static int str_eq(const msgpack_object *o, const char *s)
{
    size_t l = strlen(s);
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == l && !memcmp(o->via.str.ptr, s, l);
}

static int is_hash(const msgpack_object *o)
{
    return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
           o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER || o->type == MSGPACK_OBJECT_BIN ||
           o->type == MSGPACK_OBJECT_STR;
}

/* A hash given as text: "0x" + 1..16 hex digits, or 1..20 decimal digits
 * that fit in u64; anything else is folded with XXH3-64. */
static uint64_t str_hash(const char *p, uint32_t n)
{
    uint64_t v = 0;
    if (n > 2 && n <= 18 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        uint32_t k = 2;
        for (; k < n; k++) {
            char ch = p[k];
            int d = ch >= '0' && ch <= '9'   ? ch - '0'
                    : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                    : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                             : -1;
            if (d < 0)
                break;
            v = v << 4 | (uint64_t)d;
        }
        if (k == n)
            return v;
    } else if (n >= 1 && n <= 20) {
        uint32_t k = 0;
        for (; k < n && p[k] >= '0' && p[k] <= '9'; k++) {
            uint64_t d = (uint64_t)(p[k] - '0');
            if (v > (UINT64_MAX - d) / 10)
                break;
            v = v * 10 + d;
        }
        if (k == n)
            return v;
    }
    return cr__kvev_fold_bytes(p, n);
}

static uint64_t to_hash(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return o->via.u64;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return (uint64_t)o->via.i64;
    case MSGPACK_OBJECT_BIN: return cr__kvev_fold_bytes(o->via.bin.ptr, o->via.bin.size);
    case MSGPACK_OBJECT_STR: return str_hash(o->via.str.ptr, o->via.str.size);
    default: return 0;
    }
}

/* nil, or an empty str/bin: "no hash" in Mooncake's events */
static int no_hash(const msgpack_object *o)
{
    return !o || o->type == MSGPACK_OBJECT_NIL ||
           (o->type == MSGPACK_OBJECT_STR && o->via.str.size == 0) ||
           (o->type == MSGPACK_OBJECT_BIN && o->via.bin.size == 0);
}

/* ---- event views -------------------------------------------------------- */

typedef struct evview {
    cr__kvev_type_t type; /* 0 = unknown tag, skipped */
    const msgpack_object *hashes, *parent, *tokens, *block_size, *lora_id, *medium, *lora_name;
    const msgpack_object *key, *replicas, *model, *mc_hash; /* Mooncake events */
} evview_t;

static cr__kvev_type_t tag_of(const msgpack_object *o)
{
    static const struct {
        const char *tag;
        cr__kvev_type_t type;
    } tags[] = {{"BlockStored", CR__KVEV_STORED},       {"BlockRemoved", CR__KVEV_REMOVED},
                {"AllBlocksCleared", CR__KVEV_CLEARED}, {"BlockStoreEvent", CR__KVEV_MC_STORE},
                {"BlockUpdateEvent", CR__KVEV_MC_UPDATE}, {"RemoveAllEvent", CR__KVEV_CLEARED}};
    for (size_t t = 0; t < sizeof tags / sizeof tags[0]; t++)
        if (str_eq(o, tags[t].tag))
            return tags[t].type;
    return 0;
}

#define MC_REPLICAS_MAX 64
#define MC_KEY_MAX 4096

/* Maps the positional/keyed fields of one event into v. */
static int view_event(dctx_t *c, uint32_t i, const msgpack_object *o, evview_t *v)
{
    memset(v, 0, sizeof *v);
    if (o->type == MSGPACK_OBJECT_ARRAY) {
        const msgpack_object *a = o->via.array.ptr;
        uint32_t n = o->via.array.size;
        if (n == 0 || a[0].type != MSGPACK_OBJECT_STR)
            return fail(c, CR__KVEV_ERR_SHAPE, "events[%u]: expected [tag, ...] with a str tag",
                        i);
        v->type = tag_of(&a[0]);
        switch (v->type) {
        case CR__KVEV_STORED:
            if (n < 5)
                return fail(c, CR__KVEV_ERR_SHAPE,
                            "events[%u]: BlockStored needs at least 5 elements "
                            "(tag, block_hashes, parent_block_hash, token_ids, block_size), got %u",
                            i, n);
            v->hashes = &a[1];
            v->parent = &a[2];
            v->tokens = &a[3];
            v->block_size = &a[4];
            v->lora_id = n > 5 ? &a[5] : NULL;
            v->medium = n > 6 ? &a[6] : NULL;
            v->lora_name = n > 7 ? &a[7] : NULL;
            break;
        case CR__KVEV_REMOVED:
            if (n < 2)
                return fail(c, CR__KVEV_ERR_SHAPE,
                            "events[%u]: BlockRemoved needs at least 2 elements "
                            "(tag, block_hashes), got %u",
                            i, n);
            v->hashes = &a[1];
            v->medium = n > 2 ? &a[2] : NULL;
            break;
        case CR__KVEV_MC_STORE:
            if (n < 8)
                return fail(c, CR__KVEV_ERR_SHAPE,
                            "events[%u]: BlockStoreEvent needs 8 elements (tag, mooncake_key, "
                            "replicas, model_name, block_size, block_hash, parent_block_hash, "
                            "token_ids), got %u",
                            i, n);
            v->key = &a[1];
            v->replicas = &a[2];
            v->model = &a[3];
            v->block_size = &a[4];
            v->mc_hash = &a[5];
            v->parent = &a[6];
            v->tokens = &a[7];
            break;
        case CR__KVEV_MC_UPDATE:
            if (n < 3)
                return fail(c, CR__KVEV_ERR_SHAPE,
                            "events[%u]: BlockUpdateEvent needs 3 elements (tag, mooncake_key, "
                            "replicas), got %u",
                            i, n);
            v->key = &a[1];
            v->replicas = &a[2];
            break;
        default: break;
        }
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_MAP) {
        const msgpack_object_kv *kv = o->via.map.ptr;
        uint32_t n = o->via.map.size;
        const msgpack_object *tag = NULL;
        for (uint32_t k = 0; k < n; k++)
            if (str_eq(&kv[k].key, "type"))
                tag = &kv[k].val;
        if (!tag || tag->type != MSGPACK_OBJECT_STR)
            return fail(c, CR__KVEV_ERR_SHAPE, "events[%u].type: missing or not a str", i);
        v->type = tag_of(tag);
        for (uint32_t k = 0; k < n; k++) {
            const msgpack_object *key = &kv[k].key, *val = &kv[k].val;
            if (str_eq(key, "block_hashes"))
                v->hashes = val;
            else if (str_eq(key, "parent_block_hash"))
                v->parent = val;
            else if (str_eq(key, "token_ids"))
                v->tokens = val;
            else if (str_eq(key, "block_size"))
                v->block_size = val;
            else if (str_eq(key, "lora_id"))
                v->lora_id = val;
            else if (str_eq(key, "medium"))
                v->medium = val;
            else if (str_eq(key, "lora_name"))
                v->lora_name = val;
            else if (str_eq(key, "mooncake_key"))
                v->key = val;
            else if (str_eq(key, "replicas"))
                v->replicas = val;
            else if (str_eq(key, "model_name"))
                v->model = val;
            else if (str_eq(key, "block_hash"))
                v->mc_hash = val;
            /* other keys (extra_keys, group_idx, ...) are ignored */
        }
        if ((v->type == CR__KVEV_MC_STORE || v->type == CR__KVEV_MC_UPDATE) &&
            (!v->key || !v->replicas))
            return fail(c, CR__KVEV_ERR_FIELD, "events[%u].%s: missing", i,
                        !v->key ? "mooncake_key" : "replicas");
        if (v->type == CR__KVEV_MC_STORE && !v->block_size)
            return fail(c, CR__KVEV_ERR_FIELD, "events[%u].block_size: missing", i);
        if ((v->type == CR__KVEV_STORED || v->type == CR__KVEV_REMOVED) && !v->hashes)
            return fail(c, CR__KVEV_ERR_FIELD, "events[%u].block_hashes: missing", i);
        if (v->type == CR__KVEV_STORED && (!v->tokens || !v->block_size))
            return fail(c, CR__KVEV_ERR_FIELD, "events[%u].%s: missing", i,
                        !v->tokens ? "token_ids" : "block_size");
        return 0;
    }
    return fail(c, CR__KVEV_ERR_SHAPE, "events[%u]: expected array or map, got %s", i, tname(o));
}

static int check_str(dctx_t *c, uint32_t i, const char *field, const msgpack_object *o,
                     size_t cap)
{
    if (!o || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (o->type != MSGPACK_OBJECT_STR)
        return fail(c, CR__KVEV_ERR_FIELD, "events[%u].%s: expected str or nil, got %s", i, field,
                    tname(o));
    if (o->via.str.size >= cap)
        return fail(c, CR__KVEV_ERR_LIMIT, "events[%u].%s: longer than %zu bytes", i, field,
                    cap - 1);
    for (uint32_t k = 0; k < o->via.str.size; k++) {
        unsigned char ch = (unsigned char)o->via.str.ptr[k];
        if (ch < 0x20 || ch == 0x7f)
            return fail(c, CR__KVEV_ERR_FIELD, "events[%u].%s: control character", i, field);
    }
    return 0;
}

static int check_block_size(dctx_t *c, uint32_t i, const msgpack_object *bs)
{
    if (bs->type != MSGPACK_OBJECT_POSITIVE_INTEGER || bs->via.u64 == 0 ||
        bs->via.u64 > c->lim.max_block_size)
        return fail(c, CR__KVEV_ERR_FIELD,
                    "events[%u].block_size: expected an int in 1..%u, got %s%s", i,
                    c->lim.max_block_size, tname(bs),
                    bs->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? " (negative)" : "");
    return 0;
}

static int check_tokens(dctx_t *c, uint32_t i, const msgpack_object *t)
{
    uint32_t nt = t->via.array.size;
    if (nt > c->lim.max_tokens)
        return fail(c, CR__KVEV_ERR_LIMIT, "events[%u].token_ids: %u tokens > limit %u", i, nt,
                    c->lim.max_tokens);
    for (uint32_t k = 0; k < nt; k++) {
        const msgpack_object *e = &t->via.array.ptr[k];
        if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER || e->via.u64 > UINT32_MAX)
            return fail(c, CR__KVEV_ERR_FIELD,
                        "events[%u].token_ids[%u]: expected a non-negative int < 2^32, got %s", i,
                        k, tname(e));
    }
    return 0;
}

/* Mooncake BlockStoreEvent / BlockUpdateEvent. */
static int check_mc(dctx_t *c, uint32_t i, const evview_t *v, uint64_t *tot_h, uint64_t *tot_t)
{
    int rc;
    if (v->key->type != MSGPACK_OBJECT_STR)
        return fail(c, CR__KVEV_ERR_FIELD, "events[%u].mooncake_key: expected str, got %s", i,
                    tname(v->key));
    if (v->key->via.str.size > MC_KEY_MAX)
        return fail(c, CR__KVEV_ERR_LIMIT, "events[%u].mooncake_key: longer than %d bytes", i,
                    MC_KEY_MAX);
    const msgpack_object *r = v->replicas;
    if (r->type != MSGPACK_OBJECT_ARRAY)
        return fail(c, CR__KVEV_ERR_FIELD, "events[%u].replicas: expected array, got %s", i,
                    tname(r));
    if (r->via.array.size > MC_REPLICAS_MAX)
        return fail(c, CR__KVEV_ERR_LIMIT, "events[%u].replicas: %u replicas > limit %d", i,
                    r->via.array.size, MC_REPLICAS_MAX);
    for (uint32_t k = 0; k < r->via.array.size; k++) {
        const msgpack_object *e = &r->via.array.ptr[k];
        if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size < 1 ||
            e->via.array.ptr[0].type != MSGPACK_OBJECT_STR)
            return fail(c, CR__KVEV_ERR_FIELD,
                        "events[%u].replicas[%u]: expected [type: str, location], got %s", i, k,
                        tname(e));
    }
    if (v->type == CR__KVEV_MC_UPDATE)
        return 0;
    if ((rc = check_str(c, i, "model_name", v->model, CR__KVEV_LORA_MAX)) ||
        (rc = check_block_size(c, i, v->block_size)))
        return rc;
    if (!no_hash(v->mc_hash) && !is_hash(v->mc_hash))
        return fail(c, CR__KVEV_ERR_FIELD, "events[%u].block_hash: expected str or int, got %s",
                    i, tname(v->mc_hash));
    if (!no_hash(v->parent) && !is_hash(v->parent))
        return fail(c, CR__KVEV_ERR_FIELD,
                    "events[%u].parent_block_hash: expected str or int, got %s", i,
                    tname(v->parent));
    const msgpack_object *t = v->tokens; /* may be absent in the map layout */
    uint64_t bs = v->block_size->via.u64;
    if (t && t->type == MSGPACK_OBJECT_ARRAY) {
        if ((rc = check_tokens(c, i, t)))
            return rc;
        if (t->via.array.size % bs)
            return fail(c, CR__KVEV_ERR_FIELD,
                        "events[%u].token_ids: %u tokens are not whole blocks of %llu", i,
                        t->via.array.size, (unsigned long long)bs);
    } else if (t && t->type != MSGPACK_OBJECT_NIL) {
        return fail(c, CR__KVEV_ERR_FIELD, "events[%u].token_ids: expected array, got %s", i,
                    tname(t));
    }
    if (!no_hash(v->mc_hash)) {
        *tot_h += 1;
        if (t && t->type == MSGPACK_OBJECT_ARRAY && t->via.array.size)
            *tot_t += bs; /* the block's own tokens: the last block_size of them */
    }
    return 0;
}

/* Validates the field values of one viewed event; adds its sizes to totals. */
static int check_event(dctx_t *c, uint32_t i, const evview_t *v, uint64_t *tot_h, uint64_t *tot_t)
{
    if (v->type == CR__KVEV_MC_STORE || v->type == CR__KVEV_MC_UPDATE)
        return check_mc(c, i, v, tot_h, tot_t);
    if (v->type != CR__KVEV_STORED && v->type != CR__KVEV_REMOVED)
        return 0;
    const msgpack_object *h = v->hashes;
    if (h->type != MSGPACK_OBJECT_ARRAY)
        return fail(c, CR__KVEV_ERR_FIELD, "events[%u].block_hashes: expected array, got %s", i,
                    tname(h));
    if (h->via.array.size > c->lim.max_hashes)
        return fail(c, CR__KVEV_ERR_LIMIT, "events[%u].block_hashes: %u hashes > limit %u", i,
                    h->via.array.size, c->lim.max_hashes);
    for (uint32_t k = 0; k < h->via.array.size; k++)
        if (!is_hash(&h->via.array.ptr[k]))
            return fail(c, CR__KVEV_ERR_FIELD,
                        "events[%u].block_hashes[%u]: expected int or bytes, got %s", i, k,
                        tname(&h->via.array.ptr[k]));
    int rc = check_str(c, i, "medium", v->medium, CR__KVEV_MEDIUM_MAX);
    if (rc)
        return rc;
    *tot_h += h->via.array.size;
    if (v->type == CR__KVEV_REMOVED)
        return 0;

    if (v->parent && v->parent->type != MSGPACK_OBJECT_NIL && !is_hash(v->parent))
        return fail(c, CR__KVEV_ERR_FIELD,
                    "events[%u].parent_block_hash: expected int, bytes or nil, got %s", i,
                    tname(v->parent));
    const msgpack_object *bs = v->block_size;
    if ((rc = check_block_size(c, i, bs)))
        return rc;
    const msgpack_object *t = v->tokens;
    if (t->type == MSGPACK_OBJECT_NIL) {
        /* tolerated: no tokens, the engine hashes are used as-is */
    } else if (t->type != MSGPACK_OBJECT_ARRAY) {
        return fail(c, CR__KVEV_ERR_FIELD, "events[%u].token_ids: expected array, got %s", i,
                    tname(t));
    } else {
        uint32_t nt = t->via.array.size;
        if ((rc = check_tokens(c, i, t)))
            return rc;
        if (nt && (uint64_t)nt != (uint64_t)h->via.array.size * bs->via.u64)
            return fail(c, CR__KVEV_ERR_FIELD,
                        "events[%u].token_ids: %u tokens do not fill %u blocks of %llu", i, nt,
                        h->via.array.size, (unsigned long long)bs->via.u64);
        *tot_t += nt;
    }
    if (v->lora_id && v->lora_id->type != MSGPACK_OBJECT_NIL &&
        v->lora_id->type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
        v->lora_id->type != MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return fail(c, CR__KVEV_ERR_FIELD, "events[%u].lora_id: expected int or nil, got %s", i,
                    tname(v->lora_id));
    return check_str(c, i, "lora_name", v->lora_name, CR__KVEV_LORA_MAX);
}

/* Copies a validated str (truncating at cap as a second line of defence). */
static void copy_str(char *dst, size_t cap, const msgpack_object *o)
{
    dst[0] = 0;
    if (o && o->type == MSGPACK_OBJECT_STR) {
        size_t n = o->via.str.size < cap - 1 ? o->via.str.size : cap - 1;
        memcpy(dst, o->via.str.ptr, n);
        dst[n] = 0;
    }
}

static int str_ieq(const msgpack_object *o, const char *s)
{
    size_t l = strlen(s);
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size != l)
        return 0;
    for (size_t k = 0; k < l; k++) {
        char a = o->via.str.ptr[k];
        if ((a >= 'A' && a <= 'Z' ? a + 32 : a) != s[k])
            return 0;
    }
    return 1;
}

/* Fills a Mooncake event validated by check_mc(). */
static void fill_mc(const evview_t *v, cr__kvev_t *e, uint64_t **hp, uint32_t **tp)
{
    e->key = cr__kvev_fold_bytes(v->key->via.str.ptr, v->key->via.str.size);
    for (uint32_t k = 0; k < v->replicas->via.array.size; k++) {
        const msgpack_object *t = &v->replicas->via.array.ptr[k].via.array.ptr[0];
        if (str_ieq(t, "memory"))
            e->replicas |= CR__KVEV_REPLICA_MEMORY;
        else if (str_ieq(t, "disk") || str_ieq(t, "local_disk") || str_ieq(t, "ssd"))
            e->replicas |= CR__KVEV_REPLICA_DISK;
    }
    if (v->type != CR__KVEV_MC_STORE)
        return;
    copy_str(e->model, sizeof e->model, v->model);
    e->block_size = (uint32_t)v->block_size->via.u64;
    if (no_hash(v->mc_hash))
        return;
    e->hashes = *hp;
    (*hp)[0] = to_hash(v->mc_hash);
    e->n_hashes = 1;
    *hp += 1;
    if (!no_hash(v->parent)) {
        e->has_parent = 1;
        e->parent = to_hash(v->parent);
    }
    const msgpack_object *t = v->tokens;
    if (t && t->type == MSGPACK_OBJECT_ARRAY && t->via.array.size) {
        /* the block's own tokens are the last block_size ones */
        uint32_t from = t->via.array.size - e->block_size;
        e->tokens = *tp;
        e->n_tokens = e->block_size;
        for (uint32_t k = 0; k < e->n_tokens; k++)
            (*tp)[k] = (uint32_t)t->via.array.ptr[from + k].via.u64;
        *tp += e->n_tokens;
    }
}

/* ---- batch -------------------------------------------------------------- */

static int get_int(const msgpack_object *o, int64_t *v)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
        *v = (int64_t)o->via.u64;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *v = o->via.i64;
        return 0;
    }
    return -1;
}

static int decode_tree(dctx_t *c, const msgpack_object *root, cr__kvev_batch_t **out)
{
    const msgpack_object *ts = NULL, *events = NULL, *dp = NULL;
    if (root->type == MSGPACK_OBJECT_ARRAY) {
        if (root->via.array.size < 2)
            return fail(c, CR__KVEV_ERR_SHAPE,
                        "batch: expected [ts, events, dp_rank?], got an array of %u",
                        root->via.array.size);
        ts = &root->via.array.ptr[0];
        events = &root->via.array.ptr[1];
        dp = root->via.array.size > 2 ? &root->via.array.ptr[2] : NULL;
    } else if (root->type == MSGPACK_OBJECT_MAP) {
        for (uint32_t k = 0; k < root->via.map.size; k++) {
            const msgpack_object_kv *kv = &root->via.map.ptr[k];
            if (str_eq(&kv->key, "ts"))
                ts = &kv->val;
            else if (str_eq(&kv->key, "events"))
                events = &kv->val;
            else if (str_eq(&kv->key, "data_parallel_rank") || str_eq(&kv->key, "attn_dp_rank"))
                dp = &kv->val;
        }
        if (!ts || !events)
            return fail(c, CR__KVEV_ERR_SHAPE, "batch.%s: missing", !ts ? "ts" : "events");
    } else {
        return fail(c, CR__KVEV_ERR_SHAPE, "batch: expected array or map, got %s", tname(root));
    }

    double tsv;
    int64_t iv;
    if (ts->type == MSGPACK_OBJECT_FLOAT64 || ts->type == MSGPACK_OBJECT_FLOAT32)
        tsv = ts->via.f64;
    else if (!get_int(ts, &iv))
        tsv = (double)iv;
    else
        return fail(c, CR__KVEV_ERR_FIELD, "batch.ts: expected float or int, got %s", tname(ts));
    if (!isfinite(tsv))
        return fail(c, CR__KVEV_ERR_FIELD, "batch.ts: not finite");
    int has_dp = 0;
    int64_t dpv = 0;
    if (dp && dp->type != MSGPACK_OBJECT_NIL) {
        if (get_int(dp, &dpv) || dpv < 0 || dpv > 65535)
            return fail(c, CR__KVEV_ERR_FIELD,
                        "batch.data_parallel_rank: expected an int in 0..65535 or nil, got %s",
                        tname(dp));
        has_dp = 1;
    }
    if (events->type != MSGPACK_OBJECT_ARRAY)
        return fail(c, CR__KVEV_ERR_SHAPE, "batch.events: expected array, got %s",
                    tname(events));
    uint32_t ne = events->via.array.size;
    if (ne > c->lim.max_events)
        return fail(c, CR__KVEV_ERR_LIMIT, "batch.events: %u events > limit %u", ne,
                    c->lim.max_events);

    evview_t *views = ne ? calloc(ne, sizeof *views) : NULL;
    if (ne && !views)
        return -ENOMEM;
    uint64_t tot_h = 0, tot_t = 0;
    uint32_t known = 0;
    int rc = 0;
    for (uint32_t i = 0; i < ne && !rc; i++) {
        rc = view_event(c, i, &events->via.array.ptr[i], &views[i]);
        if (!rc)
            rc = check_event(c, i, &views[i], &tot_h, &tot_t);
        if (!rc && views[i].type)
            known++;
    }
    if (rc) {
        free(views);
        return rc < 0 ? rc : -EINVAL;
    }

    size_t sz = sizeof(cr__kvev_batch_t) + (size_t)known * sizeof(cr__kvev_t) +
                (size_t)tot_h * sizeof(uint64_t) + (size_t)tot_t * sizeof(uint32_t);
    cr__kvev_batch_t *b = calloc(1, sz);
    if (!b) {
        free(views);
        return -ENOMEM;
    }
    b->ts = tsv;
    b->has_dp_rank = has_dp;
    b->dp_rank = dpv;
    b->events = (cr__kvev_t *)(b + 1);
    uint64_t *hp = (uint64_t *)(b->events + known);
    uint32_t *tp = (uint32_t *)(hp + tot_h);
    for (uint32_t i = 0; i < ne; i++) {
        const evview_t *v = &views[i];
        if (!v->type) {
            b->n_unknown++;
            continue;
        }
        cr__kvev_t *e = &b->events[b->n_events++];
        e->type = v->type;
        /* only the fields check_event() validated for this type are read */
        if (v->type == CR__KVEV_CLEARED)
            continue;
        if (v->type == CR__KVEV_MC_STORE || v->type == CR__KVEV_MC_UPDATE) {
            fill_mc(v, e, &hp, &tp);
            continue;
        }
        e->hashes = hp;
        e->n_hashes = v->hashes->via.array.size;
        for (uint32_t k = 0; k < e->n_hashes; k++)
            hp[k] = to_hash(&v->hashes->via.array.ptr[k]);
        hp += e->n_hashes;
        copy_str(e->medium, sizeof e->medium, v->medium);
        if (v->type != CR__KVEV_STORED)
            continue;
        if (v->parent && v->parent->type != MSGPACK_OBJECT_NIL) {
            e->has_parent = 1;
            e->parent = to_hash(v->parent);
        }
        e->block_size = (uint32_t)v->block_size->via.u64;
        if (v->tokens->type == MSGPACK_OBJECT_ARRAY && v->tokens->via.array.size) {
            e->tokens = tp;
            e->n_tokens = v->tokens->via.array.size;
            for (uint32_t k = 0; k < e->n_tokens; k++)
                tp[k] = (uint32_t)v->tokens->via.array.ptr[k].via.u64;
            tp += e->n_tokens;
        }
        if (v->lora_id && !get_int(v->lora_id, &iv)) {
            e->has_lora_id = 1;
            e->lora_id = iv;
        }
        copy_str(e->lora_name, sizeof e->lora_name, v->lora_name);
    }
    free(views);
    *out = b;
    return 0;
}

int cr__kvev_decode(const void *buf, size_t len, const cr__kvev_limits_t *limits,
                    cr__kvev_batch_t **out, cr__kvev_err_t *kind, char *err, size_t errlen)
{
    dctx_t c = {.err = err, .errlen = errlen};
    if (limits)
        c.lim = *limits;
    if (!c.lim.max_bytes)
        c.lim.max_bytes = 4u << 20;
    if (!c.lim.max_objects)
        c.lim.max_objects = 1u << 20;
    if (!c.lim.max_events)
        c.lim.max_events = 65536;
    if (!c.lim.max_hashes)
        c.lim.max_hashes = 16384;
    if (!c.lim.max_tokens)
        c.lim.max_tokens = 1u << 20;
    if (!c.lim.max_block_size)
        c.lim.max_block_size = 65536;
    if (err && errlen)
        err[0] = 0;
    int rc;
    if (!out || (!buf && len)) {
        rc = fail(&c, CR__KVEV_ERR_SHAPE, "invalid arguments");
        goto done;
    }
    if (len > c.lim.max_bytes) {
        rc = fail(&c, CR__KVEV_ERR_LIMIT, "batch: %zu bytes > limit %zu", len, c.lim.max_bytes);
        goto done;
    }
    if (len == 0) {
        rc = fail(&c, CR__KVEV_ERR_MSGPACK, "batch: empty payload");
        goto done;
    }
    walk_t w = {.p = buf, .end = (const uint8_t *)buf + len, .max_objects = c.lim.max_objects};
    if (walk_one(&w, 0)) {
        rc = fail(&c, w.limit ? CR__KVEV_ERR_LIMIT : CR__KVEV_ERR_MSGPACK,
                  "batch: malformed msgpack at byte %zu: %s",
                  (size_t)(w.p - (const uint8_t *)buf), w.why);
        goto done;
    }
    if (w.p != w.end) {
        rc = fail(&c, CR__KVEV_ERR_MSGPACK, "batch: %zu trailing bytes after the batch",
                  (size_t)(w.end - w.p));
        goto done;
    }
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    msgpack_unpack_return r = msgpack_unpack_next(&up, buf, len, &off);
    if (r == MSGPACK_UNPACK_NOMEM_ERROR)
        rc = -ENOMEM;
    else if (r != MSGPACK_UNPACK_SUCCESS || off != len)
        rc = fail(&c, CR__KVEV_ERR_MSGPACK, "batch: msgpack-c rejected the payload (%d)", (int)r);
    else
        rc = decode_tree(&c, &up.data, out);
    msgpack_unpacked_destroy(&up);
done:
    if (rc && kind)
        *kind = rc == -ENOMEM ? CR__KVEV_ERR_LIMIT : c.kind;
    return rc;
}

void cr__kvev_batch_free(cr__kvev_batch_t *b) { free(b); }
