/* KV-cache event decoder: vLLM / SGLang msgpack event batches (internal).
 *
 * Wire layout (vllm/distributed/kv_events.py, msgspec, array_like structs,
 * omit_defaults so trailing default-valued fields may be absent):
 *
 *   EventBatch    = [ts: float|int, events: [event...], dp_rank: int|nil?]
 *   BlockStored   = ["BlockStored", block_hashes: [hash...],
 *                    parent_block_hash: hash|nil, token_ids: [int...],
 *                    block_size: int, lora_id: int|nil?, medium: str|nil?,
 *                    lora_name: str|nil?, ...ignored trailing fields]
 *   BlockRemoved  = ["BlockRemoved", block_hashes: [hash...], medium: str|nil?, ...]
 *   AllBlocksCleared = ["AllBlocksCleared", ...]
 *   hash          = int (u64 or negative i64, taken as its two's complement
 *                   u64) | bytes (folded to u64 with XXH3-64, seed 0)
 *
 * Mooncake Store publishers (G2/G3 tiers; Mooncake's kv-event subscriber
 * guide) use the same batch and framing with these events:
 *   BlockStoreEvent  = ["BlockStoreEvent", mooncake_key: str,
 *                       replicas: [[type: str, location: str]...],
 *                       model_name: str, block_size: int, block_hash: str,
 *                       parent_block_hash: str ("" = none), token_ids: [int]]
 *   BlockUpdateEvent = ["BlockUpdateEvent", mooncake_key: str, replicas]
 *   RemoveAllEvent   = ["RemoveAllEvent"]            (decoded as CLEARED)
 * Replica types "memory" -> CR__KVEV_REPLICA_MEMORY, "disk" / "local_disk"
 * / "ssd" -> CR__KVEV_REPLICA_DISK (others are ignored). Hash strings are
 * "0x" hex or decimal u64, anything else is folded with XXH3-64.
 *
 * Newer vLLM encodes the same structs as maps ({"ts":..,"events":[..],
 * "data_parallel_rank":..} and {"type":"BlockStored","block_hashes":..});
 * both shapes are accepted. SGLang's attn_dp_rank is the same third field.
 *
 * A batch is decoded completely or not at all: any malformed part rejects
 * the whole batch with an error message naming the field
 * (e.g. "events[2].token_ids[5]: expected a non-negative int < 2^32").
 * Events with an unknown tag are skipped and counted (n_unknown), so a newer
 * publisher does not break an older conductor.
 *
 * Memory is bounded before msgpack-c allocates anything: a validating pre-pass
 * checks every declared array/map length against the remaining input and the
 * total object count against limits->max_objects (msgpack-c would otherwise
 * allocate count*24 bytes for a 5-byte array header).
 */
#ifndef CR_CONDUCTOR_SERVICE_KV_EVENTS_H
#define CR_CONDUCTOR_SERVICE_KV_EVENTS_H

#include <stddef.h>
#include <stdint.h>

typedef enum cr__kvev_type {
    CR__KVEV_STORED = 1,
    CR__KVEV_REMOVED = 2,
    CR__KVEV_CLEARED = 3,   /* AllBlocksCleared, RemoveAllEvent */
    CR__KVEV_MC_STORE = 4,  /* Mooncake BlockStoreEvent */
    CR__KVEV_MC_UPDATE = 5, /* Mooncake BlockUpdateEvent */
} cr__kvev_type_t;

enum { CR__KVEV_REPLICA_MEMORY = 1u << 0, CR__KVEV_REPLICA_DISK = 1u << 1 };

/* Why a batch was rejected; used to count and to log once per kind. */
typedef enum cr__kvev_err {
    CR__KVEV_OK = 0,
    CR__KVEV_ERR_MSGPACK, /* not well-formed msgpack, trailing bytes */
    CR__KVEV_ERR_LIMIT,   /* larger than a configured bound */
    CR__KVEV_ERR_SHAPE,   /* well-formed, but not an event batch */
    CR__KVEV_ERR_FIELD,   /* a field has the wrong type or value */
    CR__KVEV_ERR__COUNT
} cr__kvev_err_t;

/* Static name of an error kind ("msgpack", "limit", "shape", "field"). */
const char *cr__kvev_err_name(cr__kvev_err_t e);

#define CR__KVEV_MEDIUM_MAX 32
#define CR__KVEV_LORA_MAX 128

typedef struct cr__kvev {
    cr__kvev_type_t type;
    uint32_t n_hashes;
    const uint64_t *hashes; /* engine block hashes, n_hashes (inside the batch);
                               MC_STORE: its block_hash (0 or 1 of them) */
    int has_parent;
    uint64_t parent;          /* parent_block_hash when has_parent */
    uint32_t n_tokens;        /* 0 when token_ids was empty */
    const uint32_t *tokens;   /* n_tokens == n_hashes * block_size when non-zero */
    uint32_t block_size;      /* 0 when absent (BlockRemoved / Cleared) */
    int has_lora_id;
    int64_t lora_id;
    char medium[CR__KVEV_MEDIUM_MAX]; /* as sent, "" when nil/absent */
    char lora_name[CR__KVEV_LORA_MAX]; /* "" when nil/absent */
    /* Mooncake events: */
    uint64_t key;       /* mooncake_key folded with XXH3-64 */
    unsigned replicas;  /* CR__KVEV_REPLICA_* of the replica list */
    char model[CR__KVEV_LORA_MAX]; /* model_name, "" when empty */
} cr__kvev_t;

typedef struct cr__kvev_batch {
    double ts;
    int has_dp_rank;
    int64_t dp_rank;
    uint32_t n_events;   /* decoded events (unknown tags excluded) */
    uint32_t n_unknown;  /* events skipped for an unknown tag */
    cr__kvev_t *events;
    /* all arrays live in one allocation owned by the batch */
} cr__kvev_batch_t;

typedef struct cr__kvev_limits {
    size_t max_bytes;     /* payload size; 0 = 4 MiB */
    uint32_t max_objects; /* msgpack objects in one batch; 0 = 1<<20 */
    uint32_t max_events;  /* events in one batch; 0 = 65536 */
    uint32_t max_hashes;  /* block hashes in one event; 0 = 16384 */
    uint32_t max_tokens;  /* token ids in one event; 0 = 1<<20 */
    uint32_t max_block_size; /* 0 = 65536 */
} cr__kvev_limits_t;

/* Decodes one msgpack payload. limits may be NULL (defaults). On success
 * returns 0 and *out (free with cr__kvev_batch_free). On failure returns
 * -EINVAL (malformed) or -E2BIG (a limit), writes a message naming the field
 * into err (if errlen > 0) and the kind into *kind (if non-NULL), and leaves
 * *out untouched. -ENOMEM on allocation failure. */
int cr__kvev_decode(const void *buf, size_t len, const cr__kvev_limits_t *limits,
                    cr__kvev_batch_t **out, cr__kvev_err_t *kind, char *err, size_t errlen);

/* Frees a batch from cr__kvev_decode. NULL is a no-op. */
void cr__kvev_batch_free(cr__kvev_batch_t *b);

/* Folds a bytes hash (e.g. vLLM's 32-byte sha256 block hash) to the u64 the
 * conductor uses: XXH3-64 with seed 0. Exposed so /query_by_hash and tests
 * apply the same rule. */
uint64_t cr__kvev_fold_bytes(const void *p, size_t n);

#endif
