/* crescent-conductor HTTP request bodies: strict JSON parsing (internal).
 *
 * Every parser takes the raw body, checks it is one JSON object, rejects
 * unknown and duplicate fields, checks each field's type and range, and on
 * failure writes a message naming the field ("token_ids[3]: expected an
 * integer in 0..4294967295") and returns -EINVAL (or -E2BIG when a list is
 * longer than its limit). Outputs are written only on success. Arrays in the
 * outputs are malloc'd; release them with the matching *_free (safe on a
 * zeroed struct). Field names follow Mooncake's conductor indexer API
 * (docs/source/design/conductor/indexer-api-design.md); crescent's own
 * additions are marked "ext" in docs/architecture/conductor-service.md.
 */
#ifndef CR_CONDUCTOR_SERVICE_REQUESTS_H
#define CR_CONDUCTOR_SERVICE_REQUESTS_H

#include <stddef.h>
#include <stdint.h>

#define CR__CREQ_NAME_MAX 128
#define CR__CREQ_ENDPOINT_MAX 256

enum { CR__ROLE_PREFILL = 1, CR__ROLE_DECODE = 2, CR__ROLE_BOTH = 3 };

typedef struct cr__creq_limits {
    uint32_t max_tokens;     /* token_ids per request; 0 = 1 << 20 */
    uint32_t max_hashes;     /* seq_hashes per request; 0 = 1 << 16 */
    uint32_t max_block_size; /* 0 = 65536 */
} cr__creq_limits_t;

/* Identity shared by register / unregister / query (see Mooncake's
 * "Identity dimensions"). Empty strings mean "not given". */
typedef struct cr__creq_ident {
    char model[CR__CREQ_NAME_MAX];
    char lora_name[CR__CREQ_NAME_MAX];
    char tenant_id[CR__CREQ_NAME_MAX]; /* defaults to "default" */
    char instance_id[CR__CREQ_NAME_MAX];
    char salt[CR__CREQ_NAME_MAX]; /* additionalsalt (register) / cache_salt (query) */
    uint32_t block_size;          /* 0 = not given */
    int has_dp_rank;
    uint32_t dp_rank;
} cr__creq_ident_t;

typedef struct cr__creq_register {
    cr__creq_ident_t id;
    char endpoint[CR__CREQ_ENDPOINT_MAX];
    char replay_endpoint[CR__CREQ_ENDPOINT_MAX];
    char type[32]; /* "vLLM", "SGLang", "Mooncake" */
    int role;      /* ext: CR__ROLE_*, default BOTH */
    char medium[32]; /* ext: medium of events that carry none ("" = GPU) */
} cr__creq_register_t;

typedef struct cr__creq_query {
    cr__creq_ident_t id;
    int by_hash;             /* 1: hashes are seq hashes; 0: tokens */
    uint32_t *tokens;        /* malloc'd, n_tokens */
    size_t n_tokens;
    uint64_t *hashes;        /* malloc'd, n_hashes */
    size_t n_hashes;
} cr__creq_query_t;

typedef struct cr__creq_schedule {
    cr__creq_query_t q;  /* q.id (model/lora/tenant/salt) filters the
                            candidates; token_ids or seq_hashes */
    uint64_t input_len;  /* tokens; default n_tokens (or n_hashes*block_size) */
    uint64_t output_len; /* default 0 */
    double ttft_slo_ms;  /* 0 = service default */
    double tbt_slo_ms;   /* 0 = service default */
    int dry_run;         /* 1: do not account the decision in the loads */
} cr__creq_schedule_t;

typedef struct cr__creq_load {
    cr__creq_ident_t id; /* instance_id required; tenant_id, dp_rank optional */
    int has_prefill;
    double prefill_queue_ms; /* remaining queued prefill work */
    int has_decode;
    uint32_t decode_batch;
    uint64_t decode_context_tokens;
    uint32_t decode_max_batch;
} cr__creq_load_t;

/* Parsers. Return 0 and fill *out, or -EINVAL / -E2BIG / -ENOMEM with err. */
int cr__creq_parse_register(const char *body, size_t len, const cr__creq_limits_t *lim,
                            cr__creq_register_t *out, char *err, size_t errlen);
int cr__creq_parse_unregister(const char *body, size_t len, const cr__creq_limits_t *lim,
                              cr__creq_ident_t *out, char *err, size_t errlen);
/* by_hash selects /query_by_hash (seq_hashes or block_hash) vs /query (token_ids). */
int cr__creq_parse_query(const char *body, size_t len, const cr__creq_limits_t *lim, int by_hash,
                         cr__creq_query_t *out, char *err, size_t errlen);
int cr__creq_parse_schedule(const char *body, size_t len, const cr__creq_limits_t *lim,
                            cr__creq_schedule_t *out, char *err, size_t errlen);
int cr__creq_parse_load(const char *body, size_t len, const cr__creq_limits_t *lim,
                        cr__creq_load_t *out, char *err, size_t errlen);

void cr__creq_query_free(cr__creq_query_t *q);

/* Parses a hash given as a JSON-style text: decimal u64, negative i64 (two's
 * complement), or "0x" hex. Returns 0 or -EINVAL. */
int cr__creq_parse_hash_text(const char *s, uint64_t *out);

#endif
