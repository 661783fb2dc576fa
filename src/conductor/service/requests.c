/* crescent-conductor request bodies: see requests.h. */
#include "conductor/service/requests.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pctx {
    cr__creq_limits_t lim;
    char *err;
    size_t errlen;
} pctx_t;

__attribute__((format(printf, 3, 4))) static int fail(pctx_t *c, int rc, const char *fmt, ...)
{
    if (c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static void init_ctx(pctx_t *c, const cr__creq_limits_t *lim, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    if (lim)
        c->lim = *lim;
    if (!c->lim.max_tokens)
        c->lim.max_tokens = 1u << 20;
    if (!c->lim.max_hashes)
        c->lim.max_hashes = 1u << 16;
    if (!c->lim.max_block_size)
        c->lim.max_block_size = 65536;
    c->err = err;
    c->errlen = errlen;
    if (err && errlen)
        err[0] = 0;
}

static const char *jtype(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Loads body as one JSON object. */
static int load_obj(pctx_t *c, const char *body, size_t len, json_t **out)
{
    if (!body || len == 0)
        return fail(c, -EINVAL, "body: empty, expected a JSON object");
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (strstr(je.text, "too big integer"))
            return fail(c, -EINVAL,
                        "body: invalid JSON at line %d column %d: %s (send hashes above "
                        "2^63-1 as strings or as their negative two's complement)",
                        je.line, je.column, je.text);
        return fail(c, -EINVAL, "body: invalid JSON at line %d column %d: %s", je.line,
                    je.column, je.text);
    }
    if (!json_is_object(root)) {
        int rc = fail(c, -EINVAL, "body: expected a JSON object, got %s", jtype(root));
        json_decref(root);
        return rc;
    }
    *out = root;
    return 0;
}

/* Rejects fields not in allowed (NULL-terminated). */
static int check_fields(pctx_t *c, json_t *obj, const char *const *allowed)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++)
            ok = !strcmp(*a, key);
        if (!ok) {
            char shown[64];
            size_t i = 0;
            for (; key[i] && i < sizeof shown - 1; i++)
                shown[i] = (key[i] >= 0x20 && key[i] < 0x7f) ? key[i] : '?';
            shown[i] = 0;
            return fail(c, -EINVAL, "%s: unknown field", shown);
        }
    }
    return 0;
}

static int get_str(pctx_t *c, json_t *obj, const char *field, char *dst, size_t cap)
{
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return fail(c, -EINVAL, "%s: expected a string, got %s", field, jtype(v));
    size_t l = json_string_length(v);
    const char *s = json_string_value(v);
    if (l >= cap)
        return fail(c, -EINVAL, "%s: longer than %zu bytes", field, cap - 1);
    for (size_t i = 0; i < l; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return fail(c, -EINVAL, "%s: control character at byte %zu", field, i);
    memcpy(dst, s, l + 1);
    return 0;
}

/* Integer field in [0, max]. *has (may be NULL) tells whether it was given. */
static int get_uint(pctx_t *c, json_t *obj, const char *field, uint64_t max, uint64_t *out,
                    int *has)
{
    json_t *v = json_object_get(obj, field);
    if (has)
        *has = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return fail(c, -EINVAL, "%s: expected an integer, got %s", field, jtype(v));
    json_int_t x = json_integer_value(v);
    if (x < 0 || (uint64_t)x > max)
        return fail(c, -EINVAL, "%s: %" JSON_INTEGER_FORMAT " out of range 0..%" PRIu64, field,
                    x, max);
    *out = (uint64_t)x;
    if (has)
        *has = 1;
    return 0;
}

static int get_num(pctx_t *c, json_t *obj, const char *field, double max, double *out)
{
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return fail(c, -EINVAL, "%s: expected a number, got %s", field, jtype(v));
    double x = json_number_value(v);
    if (!isfinite(x) || x < 0 || x > max)
        return fail(c, -EINVAL, "%s: %g out of range 0..%g", field, x, max);
    *out = x;
    return 0;
}

static int get_bool(pctx_t *c, json_t *obj, const char *field, int *out)
{
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return fail(c, -EINVAL, "%s: expected true or false, got %s", field, jtype(v));
    *out = json_is_true(v);
    return 0;
}

static int require(pctx_t *c, json_t *obj, const char *field)
{
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v))
        return fail(c, -EINVAL, "%s: required", field);
    return 0;
}

int cr__creq_parse_hash_text(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return -EINVAL;
    char *end;
    errno = 0;
    uint64_t v;
    if (s[0] == '-') {
        long long x = strtoll(s, &end, 10);
        v = (uint64_t)x;
    } else if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        if (!s[2])
            return -EINVAL;
        v = strtoull(s + 2, &end, 16);
    } else {
        if (s[0] < '0' || s[0] > '9')
            return -EINVAL;
        v = strtoull(s, &end, 10);
    }
    if (errno || *end)
        return -EINVAL;
    *out = v;
    return 0;
}

/* Identity fields. model_key: "modelname" (register) or "model". */
static int get_ident(pctx_t *c, json_t *o, cr__creq_ident_t *id, int register_names)
{
    int rc, has;
    uint64_t u;
    memset(id, 0, sizeof *id);
    if ((rc = get_str(c, o, "model", id->model, sizeof id->model)))
        return rc;
    if (register_names) {
        json_t *m = json_object_get(o, "modelname");
        if (m && json_object_get(o, "model"))
            return fail(c, -EINVAL, "model: give either modelname or model, not both");
        if ((rc = get_str(c, o, "modelname", id->model, sizeof id->model)))
            return rc;
        if (json_object_get(o, "additionalsalt") && json_object_get(o, "additional_salt"))
            return fail(c, -EINVAL, "additional_salt: give either additionalsalt or "
                                    "additional_salt, not both");
        if ((rc = get_str(c, o, "additionalsalt", id->salt, sizeof id->salt)) ||
            (rc = get_str(c, o, "additional_salt", id->salt, sizeof id->salt)))
            return rc;
    } else if ((rc = get_str(c, o, "cache_salt", id->salt, sizeof id->salt))) {
        return rc;
    }
    if ((rc = get_str(c, o, "lora_name", id->lora_name, sizeof id->lora_name)))
        return rc;
    json_t *lid = json_object_get(o, "lora_id");
    if (lid && !json_is_null(lid)) {
        if (!json_is_integer(lid))
            return fail(c, -EINVAL, "lora_id: expected an integer, got %s", jtype(lid));
        json_int_t x = json_integer_value(lid);
        if (x < -1 || x > INT32_MAX)
            return fail(c, -EINVAL, "lora_id: %" JSON_INTEGER_FORMAT " out of range -1..%d", x,
                        INT32_MAX);
        if (id->lora_name[0] && x >= 0)
            return fail(c, -EINVAL, "lora_id: cannot be used together with lora_name");
        if (x >= 0)
            snprintf(id->lora_name, sizeof id->lora_name, "lora_id:%d", (int)x);
    }
    if ((rc = get_str(c, o, "tenant_id", id->tenant_id, sizeof id->tenant_id)))
        return rc;
    if (!id->tenant_id[0])
        strcpy(id->tenant_id, "default");
    if ((rc = get_str(c, o, "instance_id", id->instance_id, sizeof id->instance_id)))
        return rc;
    if ((rc = get_uint(c, o, "block_size", c->lim.max_block_size, &u, &has)))
        return rc;
    if (has && u == 0)
        return fail(c, -EINVAL, "block_size: must be at least 1");
    id->block_size = has ? (uint32_t)u : 0;
    if ((rc = get_uint(c, o, "dp_rank", 65535, &u, &has)))
        return rc;
    id->has_dp_rank = has;
    id->dp_rank = has ? (uint32_t)u : 0;
    return 0;
}

static int check_endpoint(pctx_t *c, const char *field, const char *ep)
{
    if (strncmp(ep, "tcp://", 6) && strncmp(ep, "ipc://", 6) && strncmp(ep, "inproc://", 9))
        return fail(c, -EINVAL, "%s: expected tcp://host:port, ipc://path or inproc://name",
                    field);
    for (const char *p = ep; *p; p++)
        if (*p == ' ')
            return fail(c, -EINVAL, "%s: contains a space", field);
    return 0;
}

int cr__creq_parse_register(const char *body, size_t len, const cr__creq_limits_t *lim,
                            cr__creq_register_t *out, char *err, size_t errlen)
{
    static const char *const allowed[] = {
        "endpoint", "replay_endpoint", "type", "modelname", "model", "lora_name", "lora_id",
        "tenant_id", "instance_id", "block_size", "dp_rank", "additionalsalt",
        "additional_salt", "role", "medium", NULL};
    pctx_t c;
    init_ctx(&c, lim, err, errlen);
    json_t *o;
    int rc = load_obj(&c, body, len, &o);
    if (rc)
        return rc;
    cr__creq_register_t r;
    memset(&r, 0, sizeof r);
    char role[16] = "";
    if ((rc = check_fields(&c, o, allowed)) || (rc = get_ident(&c, o, &r.id, 1)) ||
        (rc = require(&c, o, "endpoint")) || (rc = require(&c, o, "instance_id")) ||
        (rc = require(&c, o, "block_size")) ||
        (rc = get_str(&c, o, "endpoint", r.endpoint, sizeof r.endpoint)) ||
        (rc = get_str(&c, o, "replay_endpoint", r.replay_endpoint, sizeof r.replay_endpoint)) ||
        (rc = get_str(&c, o, "type", r.type, sizeof r.type)) ||
        (rc = get_str(&c, o, "role", role, sizeof role)) ||
        (rc = get_str(&c, o, "medium", r.medium, sizeof r.medium)))
        goto out;
    if (!r.id.model[0]) {
        rc = fail(&c, -EINVAL, "modelname: required");
        goto out;
    }
    if (!r.id.instance_id[0]) {
        rc = fail(&c, -EINVAL, "instance_id: must not be empty");
        goto out;
    }
    if ((rc = check_endpoint(&c, "endpoint", r.endpoint)) ||
        (r.replay_endpoint[0] &&
         (rc = check_endpoint(&c, "replay_endpoint", r.replay_endpoint))))
        goto out;
    if (!r.type[0])
        strcpy(r.type, "vLLM");
    if (!role[0] || !strcmp(role, "both"))
        r.role = CR__ROLE_BOTH;
    else if (!strcmp(role, "prefill"))
        r.role = CR__ROLE_PREFILL;
    else if (!strcmp(role, "decode"))
        r.role = CR__ROLE_DECODE;
    else {
        rc = fail(&c, -EINVAL, "role: expected \"prefill\", \"decode\" or \"both\"");
        goto out;
    }
    *out = r;
out:
    json_decref(o);
    return rc;
}

int cr__creq_parse_unregister(const char *body, size_t len, const cr__creq_limits_t *lim,
                              cr__creq_ident_t *out, char *err, size_t errlen)
{
    static const char *const allowed[] = {"type", "modelname", "model", "lora_name",
                                          "lora_id", "tenant_id", "instance_id", "block_size",
                                          "dp_rank", "additionalsalt", "additional_salt", NULL};
    pctx_t c;
    init_ctx(&c, lim, err, errlen);
    json_t *o;
    int rc = load_obj(&c, body, len, &o);
    if (rc)
        return rc;
    cr__creq_ident_t id;
    char type[32];
    if ((rc = check_fields(&c, o, allowed)) || (rc = get_ident(&c, o, &id, 1)) ||
        (rc = get_str(&c, o, "type", type, sizeof type)) ||
        (rc = require(&c, o, "instance_id")))
        goto out;
    *out = id;
out:
    json_decref(o);
    return rc;
}

static int get_tokens(pctx_t *c, json_t *o, const char *field, cr__creq_query_t *q)
{
    json_t *a = json_object_get(o, field);
    if (!json_is_array(a))
        return fail(c, -EINVAL, "%s: expected an array of integers, got %s", field, jtype(a));
    size_t n = json_array_size(a);
    if (n > c->lim.max_tokens)
        return fail(c, -E2BIG, "%s: %zu tokens > limit %u", field, n, c->lim.max_tokens);
    uint32_t *t = malloc((n ? n : 1) * sizeof *t);
    if (!t)
        return fail(c, -ENOMEM, "%s: out of memory", field);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(a, i);
        json_int_t x = json_is_integer(e) ? json_integer_value(e) : -1;
        if (x < 0 || x > (json_int_t)UINT32_MAX) {
            free(t);
            return fail(c, -EINVAL, "%s[%zu]: expected an integer in 0..4294967295, got %s",
                        field, i, json_is_integer(e) ? "an out-of-range integer" : jtype(e));
        }
        t[i] = (uint32_t)x;
    }
    q->tokens = t;
    q->n_tokens = n;
    return 0;
}

static int get_hashes(pctx_t *c, json_t *o, const char *field, cr__creq_query_t *q)
{
    json_t *a = json_object_get(o, field);
    if (!json_is_array(a))
        return fail(c, -EINVAL, "%s: expected an array of hashes, got %s", field, jtype(a));
    size_t n = json_array_size(a);
    if (n > c->lim.max_hashes)
        return fail(c, -E2BIG, "%s: %zu hashes > limit %u", field, n, c->lim.max_hashes);
    uint64_t *h = malloc((n ? n : 1) * sizeof *h);
    if (!h)
        return fail(c, -ENOMEM, "%s: out of memory", field);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(a, i);
        if (json_is_integer(e)) {
            h[i] = (uint64_t)json_integer_value(e);
        } else if (!json_is_string(e) || cr__creq_parse_hash_text(json_string_value(e), &h[i])) {
            free(h);
            return fail(c, -EINVAL,
                        "%s[%zu]: expected an integer or a decimal/0x-hex string, got %s", field,
                        i, json_is_string(e) ? "a malformed string" : jtype(e));
        }
    }
    q->hashes = h;
    q->n_hashes = n;
    q->by_hash = 1;
    return 0;
}

/* token_ids / seq_hashes / block_hash: exactly one of the allowed ones. */
static int get_prompt(pctx_t *c, json_t *o, cr__creq_query_t *q, int allow_tokens,
                      int allow_hashes)
{
    int nt = allow_tokens && json_object_get(o, "token_ids");
    int ns = allow_hashes && json_object_get(o, "seq_hashes");
    int nb = allow_hashes && json_object_get(o, "block_hash");
    if (nt + ns + nb == 0)
        return fail(c, -EINVAL, "%s: required",
                    allow_tokens && allow_hashes ? "token_ids or seq_hashes"
                    : allow_tokens             ? "token_ids"
                                               : "seq_hashes");
    if (nt + ns + nb > 1)
        return fail(c, -EINVAL, "%s: give only one of token_ids, seq_hashes, block_hash",
                    nt ? "token_ids" : "seq_hashes");
    if (nt)
        return get_tokens(c, o, "token_ids", q);
    return get_hashes(c, o, ns ? "seq_hashes" : "block_hash", q);
}

void cr__creq_query_free(cr__creq_query_t *q)
{
    if (!q)
        return;
    free(q->tokens);
    free(q->hashes);
    q->tokens = NULL;
    q->hashes = NULL;
    q->n_tokens = q->n_hashes = 0;
}

int cr__creq_parse_query(const char *body, size_t len, const cr__creq_limits_t *lim, int by_hash,
                         cr__creq_query_t *out, char *err, size_t errlen)
{
    static const char *const allowed_tok[] = {"model",       "lora_name",  "lora_id",
                                              "token_ids",   "tenant_id",  "instance_id",
                                              "block_size",  "cache_salt", NULL};
    static const char *const allowed_hash[] = {"model",       "lora_name",  "lora_id",
                                               "seq_hashes",  "block_hash", "tenant_id",
                                               "instance_id", "block_size", "cache_salt",
                                               NULL};
    pctx_t c;
    init_ctx(&c, lim, err, errlen);
    json_t *o;
    int rc = load_obj(&c, body, len, &o);
    if (rc)
        return rc;
    cr__creq_query_t q;
    memset(&q, 0, sizeof q);
    if ((rc = check_fields(&c, o, by_hash ? allowed_hash : allowed_tok)) ||
        (rc = get_ident(&c, o, &q.id, 0)) || (rc = require(&c, o, "model")) ||
        (rc = get_prompt(&c, o, &q, !by_hash, by_hash)))
        goto out;
    *out = q;
out:
    if (rc)
        cr__creq_query_free(&q);
    json_decref(o);
    return rc;
}

int cr__creq_parse_schedule(const char *body, size_t len, const cr__creq_limits_t *lim,
                            cr__creq_schedule_t *out, char *err, size_t errlen)
{
    static const char *const allowed[] = {
        "model",      "lora_name",   "lora_id",     "tenant_id",  "token_ids",
        "seq_hashes", "block_hash",  "block_size",  "cache_salt", "input_len",
        "output_len", "ttft_slo_ms", "tbt_slo_ms",  "dry_run",    NULL};
    pctx_t c;
    init_ctx(&c, lim, err, errlen);
    json_t *o;
    int rc = load_obj(&c, body, len, &o);
    if (rc)
        return rc;
    cr__creq_schedule_t s;
    memset(&s, 0, sizeof s);
    int has_in = 0;
    if ((rc = check_fields(&c, o, allowed)) || (rc = get_ident(&c, o, &s.q.id, 0)) ||
        (rc = get_prompt(&c, o, &s.q, 1, 1)) ||
        (rc = get_uint(&c, o, "input_len", UINT32_MAX, &s.input_len, &has_in)) ||
        (rc = get_uint(&c, o, "output_len", UINT32_MAX, &s.output_len, NULL)) ||
        (rc = get_num(&c, o, "ttft_slo_ms", 1e9, &s.ttft_slo_ms)) ||
        (rc = get_num(&c, o, "tbt_slo_ms", 1e9, &s.tbt_slo_ms)) ||
        (rc = get_bool(&c, o, "dry_run", &s.dry_run)))
        goto out;
    if (!has_in)
        s.input_len = s.q.by_hash ? 0 : s.q.n_tokens; /* by hash: filled by the service */
    else if (!s.q.by_hash && s.input_len < s.q.n_tokens) {
        rc = fail(&c, -EINVAL, "input_len: %" PRIu64 " is less than the %zu token_ids given",
                  s.input_len, s.q.n_tokens);
        goto out;
    }
    if (!s.q.id.model[0]) { /* the hash namespace needs it (service.c ns_of) */
        rc = fail(&c, -EINVAL, "model: required");
        goto out;
    }
    *out = s;
out:
    if (rc)
        cr__creq_query_free(&s.q);
    json_decref(o);
    return rc;
}

int cr__creq_parse_load(const char *body, size_t len, const cr__creq_limits_t *lim,
                        cr__creq_load_t *out, char *err, size_t errlen)
{
    static const char *const allowed[] = {"instance_id",      "tenant_id",
                                          "dp_rank",          "prefill_queue_ms",
                                          "decode_batch",     "decode_context_tokens",
                                          "decode_max_batch", NULL};
    pctx_t c;
    init_ctx(&c, lim, err, errlen);
    json_t *o;
    int rc = load_obj(&c, body, len, &o);
    if (rc)
        return rc;
    cr__creq_load_t l;
    memset(&l, 0, sizeof l);
    uint64_t b = 0, ctx = 0, mb = 0;
    int hb = 0, hc = 0, hm = 0;
    if ((rc = check_fields(&c, o, allowed)) || (rc = get_ident(&c, o, &l.id, 0)) ||
        (rc = require(&c, o, "instance_id")) ||
        (rc = get_num(&c, o, "prefill_queue_ms", 1e9, &l.prefill_queue_ms)) ||
        (rc = get_uint(&c, o, "decode_batch", UINT32_MAX, &b, &hb)) ||
        (rc = get_uint(&c, o, "decode_context_tokens", UINT64_MAX >> 1, &ctx, &hc)) ||
        (rc = get_uint(&c, o, "decode_max_batch", UINT32_MAX, &mb, &hm)))
        goto out;
    l.has_prefill = json_object_get(o, "prefill_queue_ms") != NULL;
    l.has_decode = hb || hc || hm;
    l.decode_batch = (uint32_t)b;
    l.decode_context_tokens = ctx;
    l.decode_max_batch = (uint32_t)mb;
    if (!l.has_prefill && !l.has_decode) {
        rc = fail(&c, -EINVAL, "prefill_queue_ms: give it or decode_batch / "
                               "decode_context_tokens / decode_max_batch");
        goto out;
    }
    *out = l;
out:
    json_decref(o);
    return rc;
}
