/* crescent-conductor service core: see service.h. */
#include "conductor/service/service.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "common/log.h"
#include "conductor/service/emap.h"
#include "conductor/service/metrics.h"
#include "conductor/service/zsub.h"

#define COMP "conductor"
#define NSLOT CR_COND_MAX_INSTANCES
#define FAR_FUTURE_S 1e9 /* busy_until of slots excluded from a /schedule call */

/* ---- configuration table ------------------------------------------------ */

#define OFF(f) offsetof(cr__csvc_config_t, f)
const cr__cfg_opt_t cr__csvc_cfg_table[] = {
    {"host", "127.0.0.1", "HTTP listen address", CR__CFG_STR, OFF(host)},
    {"port", "8090", "HTTP port (0 = ephemeral)", CR__CFG_INT, OFF(port)},
    {"max_body", "16MB", "largest HTTP request body (413 above)", CR__CFG_SIZE, OFF(max_body)},
    {"max_event_bytes", "4MB", "largest KV event message", CR__CFG_SIZE, OFF(max_event_bytes)},
    {"max_event_objects", "1048576", "msgpack objects in one event batch", CR__CFG_INT,
     OFF(max_event_objects)},
    {"max_events", "65536", "events in one batch", CR__CFG_INT, OFF(max_events)},
    {"max_hashes", "65536", "block hashes in one event or one query", CR__CFG_INT,
     OFF(max_hashes)},
    {"max_tokens", "1048576", "token ids in one event or one query", CR__CFG_INT,
     OFF(max_tokens)},
    {"max_mapped_blocks", "4194304", "engine block hashes remembered per publisher", CR__CFG_INT,
     OFF(max_mapped_blocks)},
    {"zmq_rcvhwm", "100000", "ZMQ receive high-water mark per publisher", CR__CFG_INT,
     OFF(zmq_rcvhwm)},
    {"replay_timeout_ms", "2000",
     "how long a replay of missed batches may hold a publisher's live batches", CR__CFG_INT,
     OFF(replay_timeout_ms)},
    {"block_size", "16", "tokens per block used to hash /schedule prompts", CR__CFG_INT,
     OFF(block_size)},
    {"policy", "global_cache",
     "scheduling policy: random, load_balance, local_cache, global_cache, cost_fetch",
     CR__CFG_STR, OFF(policy)},
    {"ttft_slo_ms", "0", "reject /schedule (429) above this estimated TTFT; 0 = none",
     CR__CFG_DOUBLE, OFF(ttft_slo_ms)},
    {"tbt_slo_ms", "0", "reject /schedule (429) above this estimated TBT; 0 = none",
     CR__CFG_DOUBLE, OFF(tbt_slo_ms)},
    {"balance_threshold", "1.25", "Algorithm 1 kvcache_balancing_threshold", CR__CFG_DOUBLE,
     OFF(balance_threshold)},
    {"chunk_tokens", "0", "chunked-prefill chunk size the engines use (estimates); 0 = none",
     CR__CFG_INT, OFF(chunk_tokens)},
    {"pipeline_min_prefill_ms", "0",
     "cost_fetch: split prefills estimated above this over idle instances; 0 = off",
     CR__CFG_DOUBLE, OFF(pipeline_min_prefill_ms)},
    {"pipeline_max_stages", "4", "cost_fetch: most instances one pipelined prefill uses",
     CR__CFG_INT, OFF(pipeline_max_stages)},
    {"pipeline_idle_ms", "0", "cost_fetch: an instance counts as idle below this queue",
     CR__CFG_DOUBLE, OFF(pipeline_idle_ms)},
    {"pipeline_reserve", "0", "cost_fetch: idle instances kept free for later requests",
     CR__CFG_INT, OFF(pipeline_reserve)},
    {"gpu_capacity_blocks", "0", "GPU-tier blocks tracked per publisher (LRU); 0 = unlimited",
     CR__CFG_INT, OFF(gpu_capacity_blocks)},
    {"dram_capacity_blocks", "0", "CPU-tier blocks tracked per publisher; 0 = unlimited",
     CR__CFG_INT, OFF(dram_capacity_blocks)},
    {"disk_capacity_blocks", "0", "disk-tier blocks tracked per publisher; 0 = unlimited",
     CR__CFG_INT, OFF(disk_capacity_blocks)},
    {"endpoint_prefixes", "",
     "comma-separated prefixes /register endpoints must start with (e.g. "
     "tcp://127.0.0.1:,tcp://10.); empty = any",
     CR__CFG_STR, OFF(endpoint_prefixes)},
    {"port_file", "", "write the bound HTTP port to this file once listening", CR__CFG_STR,
     OFF(port_file)},
};
const size_t cr__csvc_cfg_table_len = sizeof cr__csvc_cfg_table / sizeof cr__csvc_cfg_table[0];

/* ---- state --------------------------------------------------------------- */

typedef struct slot {
    int used;
    uint32_t gen;
    cr__creq_register_t reg;
    uint64_t ns; /* hash namespace of (model, lora, salt, tenant); see ns_of() */
    cr__emap_t map;
    /* loads (seconds on the service clock) */
    double busy_until;
    uint32_t dbatch, dmax;
    uint64_t dctx;
    /* stats */
    uint64_t batches, events, bad_batches, seq_gaps, last_seq;
    int have_seq;
} slot_t;

struct cr__csvc {
    cr__csvc_config_t cfg;
    cr__kvev_limits_t evlim;
    cr__creq_limits_t rqlim;
    cr_cond_policy_t policy;
    uint64_t t0_ns;

    pthread_mutex_t lock;
    slot_t slots[NSLOT];       /* guarded by lock */
    cr_cond_index_t *idx;      /* guarded by lock */
    cr_cond_sched_t *sched;    /* guarded by lock */
    uint64_t *scratch;         /* guarded by lock: max_hashes seq hashes */
    size_t scratch_cap;

    uint64_t m[CR__CSVC_M__COUNT]; /* atomics */
    unsigned logged;               /* atomics: kinds already logged once */

    cr__zsub_t *zsub;
    cr__httpd_t *httpd;
};

static void inc(cr__csvc_t *s, int id, uint64_t n)
{
    __atomic_fetch_add(&s->m[id], n, __ATOMIC_RELAXED);
}

/* Logs a warning the first time a kind of bad input is seen; later ones
 * are only counted. */
enum { ONCE_MSGPACK, ONCE_LIMIT, ONCE_SHAPE, ONCE_FIELD, ONCE_FRAME, ONCE_UNKNOWN, ONCE_MEDIUM,
       ONCE_BLOCKSIZE, ONCE_LORA, ONCE_ORPHAN, ONCE_MAPFULL, ONCE_INDEXFULL, ONCE_GAP,
       ONCE_MOONCAKE, ONCE_DPRANK };
__attribute__((format(printf, 3, 4))) static void log_once(cr__csvc_t *s, int kind,
                                                           const char *fmt, ...)
{
    unsigned bit = 1u << kind;
    if (__atomic_fetch_or(&s->logged, bit, __ATOMIC_RELAXED) & bit)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    CR_LOG_WARN(COMP, "%s (logged once; see /metrics for counts)", msg);
}

static double now_s(const cr__csvc_t *s) { return (double)(cr__now_ns() - s->t0_ns) / 1e9; }

int cr__csvc_medium_tier(const char *m)
{
    static const struct {
        const char *name;
        int tier;
    } tab[] = {{"GPU", CR_COND_TIER_GPU},   {"NPU", CR_COND_TIER_GPU},
               {"HBM", CR_COND_TIER_GPU},   {"DEVICE", CR_COND_TIER_GPU},
               {"CUDA", CR_COND_TIER_GPU},  {"XPU", CR_COND_TIER_GPU},
               {"CPU", CR_COND_TIER_DRAM},  {"DRAM", CR_COND_TIER_DRAM},
               {"HOST", CR_COND_TIER_DRAM}, {"CPU_PINNED", CR_COND_TIER_DRAM},
               {"DISK", CR_COND_TIER_DISK}, {"SSD", CR_COND_TIER_DISK},
               {"NVME", CR_COND_TIER_DISK}, {"3FS", CR_COND_TIER_DISK},
               {"DFS", CR_COND_TIER_DISK},  {"NFS", CR_COND_TIER_DISK}};
    if (!m || !*m)
        return CR_COND_TIER_GPU;
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcasecmp(m, tab[i].name))
            return tab[i].tier;
    return -1;
}

static const char *const k_tier_key[CR_COND_TIER_COUNT] = {"GPU", "CPU", "DISK"};

/* Hash namespace of an identity. The index stores every rolling hash XORed
 * with the namespace of the publisher that reported it, and every query
 * XORs its hashes with its own namespace, so blocks of another model, LoRA,
 * salt or tenant never match, even in /schedule's cluster-wide search for a
 * prefix to fetch (models sharing a tokenizer share token prefixes). */
static uint64_t ns_of(const cr__creq_ident_t *id)
{
    char buf[4 * CR__CREQ_NAME_MAX + 4];
    size_t n = 0;
    const char *parts[4] = {id->model, id->lora_name, id->salt, id->tenant_id};
    for (int i = 0; i < 4; i++) {
        size_t l = strnlen(parts[i], CR__CREQ_NAME_MAX - 1);
        memcpy(buf + n, parts[i], l);
        n += l;
        buf[n++] = 0;
    }
    return cr__kvev_fold_bytes(buf, n);
}

static void ns_apply(uint64_t *h, size_t n, uint64_t ns)
{
    for (size_t i = 0; i < n; i++)
        h[i] ^= ns;
}

/* ---- lifecycle ------------------------------------------------------------ */

static void on_zmq_message(void *user, uint32_t slot, uint32_t gen, int has_seq, uint64_t seq,
                           const void *payload, size_t len, int bad_frame);

static int slot_reset_locked(cr__csvc_t *s, uint32_t i)
{
    slot_t *sl = &s->slots[i];
    cr_cond_index_remove_instance(s->idx, i);
    cr__emap_clear(&sl->map);
    uint32_t gen = sl->gen + 1;
    memset(sl, 0, sizeof *sl);
    sl->gen = gen;
    cr__emap_init(&sl->map, (size_t)s->cfg.max_mapped_blocks);
    return 0;
}

int cr__csvc_create(const cr__csvc_config_t *cfg, cr__csvc_t **out, char *err, size_t errlen)
{
    if (!cfg || !out)
        return -EINVAL;
#define BAD(...)                                                                                \
    do {                                                                                        \
        snprintf(err, errlen, __VA_ARGS__);                                                     \
        return -EINVAL;                                                                         \
    } while (0)
    if (cfg->port < 0 || cfg->port > 65535)
        BAD("port: %" PRId64 " out of range 0..65535", cfg->port);
    if (cfg->block_size < 1 || cfg->block_size > CR_COND_MAX_BLOCK_TOKENS)
        BAD("block_size: %" PRId64 " out of range 1..%d", cfg->block_size,
            CR_COND_MAX_BLOCK_TOKENS);
    if (cfg->max_hashes < 1 || cfg->max_hashes > (1 << 24) || cfg->max_tokens < 1 ||
        cfg->max_tokens > (1 << 26) || cfg->max_events < 1 || cfg->max_events > (1 << 24) ||
        cfg->max_event_objects < 16 || cfg->max_event_objects > (1 << 26))
        BAD("max_hashes / max_tokens / max_events / max_event_objects: out of range");
    if (cfg->max_event_bytes < 16 || cfg->max_event_bytes > (1ull << 30) ||
        cfg->max_body < 64 || cfg->max_body > (1ull << 30))
        BAD("max_event_bytes / max_body: out of range");
    if (cfg->max_mapped_blocks < 1 || cfg->zmq_rcvhwm < 1 || cfg->zmq_rcvhwm > (1 << 30))
        BAD("max_mapped_blocks / zmq_rcvhwm: must be positive");
    if (cfg->replay_timeout_ms < 1 || cfg->replay_timeout_ms > 600000)
        BAD("replay_timeout_ms: %" PRId64 " out of range 1..600000", cfg->replay_timeout_ms);
    if (cfg->ttft_slo_ms < 0 || cfg->tbt_slo_ms < 0 || cfg->balance_threshold < 1)
        BAD("ttft_slo_ms / tbt_slo_ms must be >= 0 and balance_threshold >= 1");
    if (cfg->chunk_tokens < 0 || cfg->chunk_tokens > (1 << 24) ||
        cfg->pipeline_min_prefill_ms < 0 || cfg->pipeline_max_stages < 1 ||
        cfg->pipeline_max_stages > NSLOT || cfg->pipeline_idle_ms < 0 ||
        cfg->pipeline_reserve < 0 || cfg->pipeline_reserve > NSLOT)
        BAD("chunk_tokens / pipeline_*: out of range");
    if (cfg->gpu_capacity_blocks < 0 || cfg->dram_capacity_blocks < 0 ||
        cfg->disk_capacity_blocks < 0)
        BAD("*_capacity_blocks: must be >= 0");
    cr_cond_policy_t pol;
    if (cr_cond_policy_parse(cfg->policy, &pol))
        BAD("policy: unknown '%s'", cfg->policy);
#undef BAD

    cr__csvc_t *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->cfg = *cfg;
    s->policy = pol;
    s->t0_ns = cr__now_ns();
    s->evlim = (cr__kvev_limits_t){.max_bytes = cfg->max_event_bytes,
                                   .max_objects = (uint32_t)cfg->max_event_objects,
                                   .max_events = (uint32_t)cfg->max_events,
                                   .max_hashes = (uint32_t)cfg->max_hashes,
                                   .max_tokens = (uint32_t)cfg->max_tokens,
                                   .max_block_size = CR_COND_MAX_BLOCK_TOKENS};
    s->rqlim = (cr__creq_limits_t){.max_tokens = (uint32_t)cfg->max_tokens,
                                   .max_hashes = (uint32_t)cfg->max_hashes,
                                   .max_block_size = CR_COND_MAX_BLOCK_TOKENS};
    pthread_mutex_init(&s->lock, NULL);
    /* a query hashes at most max_tokens tokens into blocks of >= 1 token */
    s->scratch_cap = (size_t)(cfg->max_tokens > cfg->max_hashes ? cfg->max_tokens
                                                                  : cfg->max_hashes);
    s->scratch = malloc(s->scratch_cap * sizeof *s->scratch);
    int rc = -ENOMEM;
    if (!s->scratch)
        goto fail;
    cr_cond_index_params_t ip = {
        .field_mask = CR_COND_INDEX_PARAM_MAX_INSTANCES | CR_COND_INDEX_PARAM_DEFAULT_CAPACITY,
        .max_instances = NSLOT,
        .default_capacity = {(uint64_t)cfg->gpu_capacity_blocks,
                             (uint64_t)cfg->dram_capacity_blocks,
                             (uint64_t)cfg->disk_capacity_blocks}};
    if ((rc = cr_cond_index_create(&ip, &s->idx)))
        goto fail;
    cr_cond_sched_params_t sp;
    memset(&sp, 0, sizeof sp);
    sp.field_mask = CR_COND_SCHED_PARAM_POLICY | CR_COND_SCHED_PARAM_BLOCK_TOKENS |
                    CR_COND_SCHED_PARAM_BALANCE_THRESHOLD | CR_COND_SCHED_PARAM_TTFT_SLO |
                    CR_COND_SCHED_PARAM_TBT_SLO | CR_COND_SCHED_PARAM_CHUNK_TOKENS |
                    CR_COND_SCHED_PARAM_PIPELINE;
    sp.chunk_tokens = (uint32_t)cfg->chunk_tokens;
    sp.pipeline_min_prefill_s = cfg->pipeline_min_prefill_ms / 1e3;
    sp.pipeline_max_stages = (uint32_t)cfg->pipeline_max_stages;
    sp.pipeline_idle_s = cfg->pipeline_idle_ms / 1e3;
    sp.pipeline_reserve = (uint32_t)cfg->pipeline_reserve;
    sp.policy = pol;
    sp.block_tokens = (uint32_t)cfg->block_size;
    sp.balance_threshold = cfg->balance_threshold;
    sp.ttft_slo_s = cfg->ttft_slo_ms / 1e3;
    sp.tbt_slo_s = cfg->tbt_slo_ms / 1e3;
    if ((rc = cr_cond_sched_create(&sp, s->idx, NSLOT, NSLOT, &s->sched)))
        goto fail;
    for (uint32_t i = 0; i < NSLOT; i++)
        cr__emap_init(&s->slots[i].map, (size_t)cfg->max_mapped_blocks);
    if ((rc = cr__zsub_start(on_zmq_message, s, cfg->max_event_bytes, (int)cfg->zmq_rcvhwm,
                             (unsigned)cfg->replay_timeout_ms, &s->zsub)))
        goto fail;
    *out = s;
    return 0;
fail:
    snprintf(err, errlen, "cannot create the conductor service: %s", cr_strerror(rc));
    cr_cond_sched_destroy(s->sched);
    cr_cond_index_destroy(s->idx);
    free(s->scratch);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return rc;
}

int cr__csvc_listen(cr__csvc_t *s)
{
    return cr__httpd_start(s->cfg.host, (uint16_t)s->cfg.port, (size_t)s->cfg.max_body,
                           cr__csvc_handle, s, &s->httpd);
}

uint16_t cr__csvc_port(const cr__csvc_t *s) { return s->httpd ? cr__httpd_port(s->httpd) : 0; }

void cr__csvc_destroy(cr__csvc_t *s)
{
    if (!s)
        return;
    cr__httpd_stop(s->httpd); /* no handler runs after this */
    cr__zsub_stop(s->zsub);   /* no event callback runs after this */
    for (uint32_t i = 0; i < NSLOT; i++)
        cr__emap_clear(&s->slots[i].map);
    cr_cond_sched_destroy(s->sched);
    cr_cond_index_destroy(s->idx);
    free(s->scratch);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* ---- applying events --------------------------------------------------- */

/* bh: H(block_i) of e's blocks, computed before the lock (NULL: compute). */
static void apply_stored_locked(cr__csvc_t *s, uint32_t si, const cr__kvev_t *e, int tier,
                                const uint64_t *bh)
{
    slot_t *sl = &s->slots[si];
    uint32_t bs = sl->reg.id.block_size;
    uint64_t *seq = s->scratch;
    size_t n = e->n_hashes;
    if (n > s->scratch_cap)
        n = s->scratch_cap; /* cannot happen: the decoder bounds n_hashes */
    if (e->n_tokens) {
        uint64_t prev = 0;
        int have_prev = 0;
        if (e->has_parent) {
            const cr__emap_ent_t *pe = cr__emap_get(&sl->map, e->parent);
            if (!pe) {
                inc(s, CR__CSVC_M_ORPHAN_BLOCKS, n);
                log_once(s, ONCE_ORPHAN,
                         "instance %s: BlockStored with unknown parent_block_hash %" PRIu64
                         "; its blocks are skipped",
                         sl->reg.id.instance_id, e->parent);
                return;
            }
            prev = pe->seq;
            have_prev = 1;
        }
        for (size_t i = 0; i < n; i++) {
            uint64_t b = bh ? bh[i] : cr_cond_hash_block(e->tokens + i * bs, bs);
            prev = have_prev ? cr_cond_hash_chain(prev, b) : b;
            have_prev = 1;
            seq[i] = prev;
        }
    } else {
        /* no tokens: the publisher uses the standard rolling hash already */
        memcpy(seq, e->hashes, n * sizeof *seq);
    }
    size_t mapped = 0;
    for (; mapped < n; mapped++) {
        int rc = cr__emap_put(&sl->map, e->hashes[mapped], seq[mapped], 1u << tier);
        if (rc) {
            inc(s, CR__CSVC_M_MAP_FULL, n - mapped);
            log_once(s, ONCE_MAPFULL,
                     "instance %s: engine hash map full (%zu entries, max_mapped_blocks); "
                     "further blocks are not indexed",
                     sl->reg.id.instance_id, sl->map.n);
            break;
        }
    }
    ns_apply(seq, mapped, sl->ns); /* the map keeps chainable hashes, the index ns'd ones */
    uint64_t evicted = 0;
    int rc = cr_cond_index_insert(s->idx, si, (cr_cond_tier_t)tier, seq, mapped, &evicted);
    if (rc == -ENOSPC) {
        inc(s, CR__CSVC_M_INDEX_FULL, 1);
        log_once(s, ONCE_INDEXFULL, "prefix index entry bound reached; inserts are refused");
    }
    inc(s, CR__CSVC_M_BLOCKS_STORED, mapped);
    inc(s, CR__CSVC_M_EVICTIONS, evicted);
}

/* Mooncake Store events: a mooncake_key names one block; its replicas say on
 * which tiers it is. The key is remembered (salted into the engine-hash map,
 * with the block hash as aux) so that BlockUpdateEvent can move it. */
#define MC_KEY_SALT 0x9e3779b97f4a7c15ull

static unsigned replica_tiers(unsigned replicas)
{
    unsigned m = 0;
    if (replicas & CR__KVEV_REPLICA_MEMORY)
        m |= 1u << CR_COND_TIER_DRAM;
    if (replicas & CR__KVEV_REPLICA_DISK)
        m |= 1u << CR_COND_TIER_DISK;
    return m;
}

static void apply_mc_store_locked(cr__csvc_t *s, uint32_t si, const cr__kvev_t *e,
                                  const uint64_t *bh)
{
    slot_t *sl = &s->slots[si];
    unsigned tiers = replica_tiers(e->replicas);
    if (!e->n_hashes || !tiers || (e->model[0] && strcmp(e->model, sl->reg.id.model)) ||
        e->block_size != sl->reg.id.block_size) {
        inc(s, CR__CSVC_M_SKIPPED_EVENTS, 1);
        log_once(s, ONCE_MOONCAKE,
                 "instance %s: BlockStoreEvent skipped (no block hash, no memory/disk replica, "
                 "model '%s' or block_size %u not as registered)",
                 sl->reg.id.instance_id, e->model, e->block_size);
        return;
    }
    for (int t = 0; t < CR_COND_TIER_COUNT; t++)
        if (tiers & (1u << t))
            apply_stored_locked(s, si, e, t, bh);
    const cr__emap_ent_t *be = cr__emap_get(&sl->map, e->hashes[0]);
    if (!be)
        return; /* orphan or map full: counted by apply_stored_locked */
    if (cr__emap_set(&sl->map, e->key ^ MC_KEY_SALT, be->seq, tiers, e->hashes[0]))
        inc(s, CR__CSVC_M_MAP_FULL, 1);
}

static void apply_mc_update_locked(cr__csvc_t *s, uint32_t si, const cr__kvev_t *e)
{
    slot_t *sl = &s->slots[si];
    const cr__emap_ent_t *ke = cr__emap_get(&sl->map, e->key ^ MC_KEY_SALT);
    if (!ke) {
        inc(s, CR__CSVC_M_SKIPPED_EVENTS, 1);
        log_once(s, ONCE_MOONCAKE, "instance %s: BlockUpdateEvent for an unknown mooncake_key",
                 sl->reg.id.instance_id);
        return;
    }
    uint64_t seq = ke->seq, block = ke->aux, iseq = seq ^ sl->ns;
    unsigned old = ke->mask, now = replica_tiers(e->replicas);
    for (int t = 0; t < CR_COND_TIER_COUNT; t++) {
        unsigned bit = 1u << t;
        if ((old & bit) && !(now & bit)) {
            cr_cond_index_remove(s->idx, si, (cr_cond_tier_t)t, &iseq, 1);
            inc(s, CR__CSVC_M_BLOCKS_REMOVED, 1);
        } else if (!(old & bit) && (now & bit)) {
            uint64_t ev = 0;
            if (cr_cond_index_insert(s->idx, si, (cr_cond_tier_t)t, &iseq, 1, &ev) == 0)
                inc(s, CR__CSVC_M_BLOCKS_STORED, 1);
            inc(s, CR__CSVC_M_EVICTIONS, ev);
        }
    }
    cr__emap_set(&sl->map, e->key ^ MC_KEY_SALT, seq, now, block);
    if (!now) /* no replica left: forget the block hash too */
        cr__emap_set(&sl->map, block, 0, 0, 0);
    else
        cr__emap_set(&sl->map, block, seq, now, 0);
}

static void apply_removed_locked(cr__csvc_t *s, uint32_t si, const cr__kvev_t *e, int tier)
{
    slot_t *sl = &s->slots[si];
    size_t m = 0;
    for (size_t i = 0; i < e->n_hashes; i++) {
        uint64_t seq;
        if (cr__emap_drop(&sl->map, e->hashes[i], 1u << tier, &seq))
            s->scratch[m++] = seq ^ sl->ns;
    }
    cr_cond_index_remove(s->idx, si, (cr_cond_tier_t)tier, s->scratch, m);
    inc(s, CR__CSVC_M_BLOCKS_REMOVED, m);
}

/* H(block) of every block that carries tokens, in event order, so that the
 * hashing is done before the service lock. NULL if none or out of memory
 * (then hashed under the lock). */
static uint64_t *block_hashes(const cr__kvev_batch_t *b)
{
    size_t total = 0;
    for (uint32_t k = 0; k < b->n_events; k++)
        if ((b->events[k].type == CR__KVEV_STORED || b->events[k].type == CR__KVEV_MC_STORE) &&
            b->events[k].n_tokens)
            total += b->events[k].n_hashes;
    uint64_t *bh = total ? malloc(total * sizeof *bh) : NULL;
    if (!bh)
        return NULL;
    size_t o = 0;
    for (uint32_t k = 0; k < b->n_events; k++) {
        const cr__kvev_t *e = &b->events[k];
        if ((e->type != CR__KVEV_STORED && e->type != CR__KVEV_MC_STORE) || !e->n_tokens)
            continue;
        for (uint32_t i = 0; i < e->n_hashes; i++)
            bh[o++] = cr_cond_hash_block(e->tokens + (size_t)i * e->block_size, e->block_size);
    }
    return bh;
}

static void apply_batch_locked(cr__csvc_t *s, uint32_t si, const cr__kvev_batch_t *b,
                               const uint64_t *bh)
{
    slot_t *sl = &s->slots[si];
    size_t bo = 0; /* offset of the current event's blocks in bh */
    for (uint32_t k = 0; k < b->n_events; k++) {
        const cr__kvev_t *e = &b->events[k];
        const uint64_t *ebh = NULL;
            if ((e->type == CR__KVEV_STORED || e->type == CR__KVEV_MC_STORE) && e->n_tokens) {
            ebh = bh ? bh + bo : NULL;
            bo += e->n_hashes;
        }
        if (e->type == CR__KVEV_CLEARED) {
            cr_cond_index_remove_instance(s->idx, si);
            cr__emap_clear(&sl->map);
            inc(s, CR__CSVC_M_CLEARS, 1);
            continue;
        }
        if (e->type == CR__KVEV_MC_STORE) {
            apply_mc_store_locked(s, si, e, ebh);
            continue;
        }
        if (e->type == CR__KVEV_MC_UPDATE) {
            apply_mc_update_locked(s, si, e);
            continue;
        }
        /* events without a medium are on the registration's default one */
        int tier = cr__csvc_medium_tier(e->medium[0] ? e->medium : sl->reg.medium);
        if (tier < 0) {
            inc(s, CR__CSVC_M_SKIPPED_EVENTS, 1);
            log_once(s, ONCE_MEDIUM, "instance %s: event with unknown medium '%s' skipped",
                     sl->reg.id.instance_id, e->medium);
            continue;
        }
        if (e->type == CR__KVEV_REMOVED) {
            apply_removed_locked(s, si, e, tier);
            continue;
        }
        if (e->block_size != sl->reg.id.block_size) {
            inc(s, CR__CSVC_M_SKIPPED_EVENTS, 1);
            log_once(s, ONCE_BLOCKSIZE,
                     "instance %s: BlockStored with block_size %u but registered with %u; "
                     "skipped",
                     sl->reg.id.instance_id, e->block_size, sl->reg.id.block_size);
            continue;
        }
        /* the event's LoRA: its lora_name, else the deprecated lora_id as
         * "lora_id:N" (the name /register and /query give a lora_id) */
        char lora[CR__KVEV_LORA_MAX];
        if (e->lora_name[0])
            snprintf(lora, sizeof lora, "%s", e->lora_name);
        else if (e->has_lora_id && e->lora_id >= 0)
            snprintf(lora, sizeof lora, "lora_id:%lld", (long long)e->lora_id);
        else
            lora[0] = 0; /* base model, or a publisher that does not say */
        if (lora[0] && strcmp(lora, sl->reg.id.lora_name)) {
            inc(s, CR__CSVC_M_SKIPPED_EVENTS, 1);
            log_once(s, ONCE_LORA,
                     "instance %s: BlockStored for LoRA '%s' but registered for '%s'; skipped",
                     sl->reg.id.instance_id, lora, sl->reg.id.lora_name);
            continue;
        }
        apply_stored_locked(s, si, e, tier, ebh);
    }
    if (b->has_dp_rank && (uint64_t)b->dp_rank != sl->reg.id.dp_rank)
        log_once(s, ONCE_DPRANK,
                 "instance %s: batch says data_parallel_rank %lld but it was registered as dp_rank "
                 "%u (events applied to the registered rank)",
                 sl->reg.id.instance_id, (long long)b->dp_rank, sl->reg.id.dp_rank);
    sl->batches++;
    sl->events += b->n_events;
    inc(s, CR__CSVC_M_BATCHES, 1);
    inc(s, CR__CSVC_M_EVENTS, b->n_events);
    if (b->n_unknown) {
        inc(s, CR__CSVC_M_UNKNOWN_EVENTS, b->n_unknown);
        log_once(s, ONCE_UNKNOWN, "instance %s: %u event(s) with an unknown tag skipped",
                 sl->reg.id.instance_id, b->n_unknown);
    }
}

static int ingest(cr__csvc_t *s, uint32_t si, uint32_t gen, int check_gen, int has_seq,
                  uint64_t seq, const void *payload, size_t len)
{
    cr__kvev_batch_t *b = NULL;
    cr__kvev_err_t kind = CR__KVEV_OK;
    char err[256];
    int rc = cr__kvev_decode(payload, len, &s->evlim, &b, &kind, err, sizeof err);
    uint64_t *bh = rc ? NULL : block_hashes(b);
    pthread_mutex_lock(&s->lock);
    slot_t *sl = &s->slots[si];
    if (!sl->used || (check_gen && sl->gen != gen)) {
        pthread_mutex_unlock(&s->lock);
        free(bh);
        cr__kvev_batch_free(b);
        return -ENOENT; /* unregistered meanwhile */
    }
    if (has_seq) {
        if (sl->have_seq && seq > sl->last_seq + 1) {
            sl->seq_gaps += seq - sl->last_seq - 1;
            inc(s, CR__CSVC_M_SEQ_GAPS, seq - sl->last_seq - 1);
            log_once(s, ONCE_GAP,
                     "instance %s: missed %" PRIu64 " event batch(es) (seq %" PRIu64
                     " after %" PRIu64 ")",
                     sl->reg.id.instance_id, seq - sl->last_seq - 1, seq, sl->last_seq);
        }
        sl->have_seq = 1;
        sl->last_seq = seq;
    }
    if (rc) {
        sl->bad_batches++;
        char inst[CR__CREQ_NAME_MAX];
        memcpy(inst, sl->reg.id.instance_id, sizeof inst);
        pthread_mutex_unlock(&s->lock);
        static const int metric[CR__KVEV_ERR__COUNT] = {
            [CR__KVEV_ERR_MSGPACK] = CR__CSVC_M_BAD_MSGPACK,
            [CR__KVEV_ERR_LIMIT] = CR__CSVC_M_BAD_LIMIT,
            [CR__KVEV_ERR_SHAPE] = CR__CSVC_M_BAD_SHAPE,
            [CR__KVEV_ERR_FIELD] = CR__CSVC_M_BAD_FIELD};
        static const int once[CR__KVEV_ERR__COUNT] = {
            [CR__KVEV_ERR_MSGPACK] = ONCE_MSGPACK, [CR__KVEV_ERR_LIMIT] = ONCE_LIMIT,
            [CR__KVEV_ERR_SHAPE] = ONCE_SHAPE, [CR__KVEV_ERR_FIELD] = ONCE_FIELD};
        if (kind <= CR__KVEV_OK || kind >= CR__KVEV_ERR__COUNT)
            kind = CR__KVEV_ERR_LIMIT; /* -ENOMEM */
        inc(s, metric[kind], 1);
        log_once(s, once[kind], "instance %s: bad KV event batch (%s): %s", inst,
                 cr__kvev_err_name(kind), err[0] ? err : cr_strerror(rc));
        return rc;
    }
    apply_batch_locked(s, si, b, bh);
    pthread_mutex_unlock(&s->lock);
    free(bh);
    cr__kvev_batch_free(b);
    return 0;
}

static void on_zmq_message(void *user, uint32_t slot, uint32_t gen, int has_seq, uint64_t seq,
                           const void *payload, size_t len, int bad_frame)
{
    cr__csvc_t *s = user;
    if (bad_frame) {
        inc(s, CR__CSVC_M_BAD_FRAMES, 1);
        log_once(s, ONCE_FRAME,
                 "KV event message with unrecognised framing (expected [topic, seq, payload])");
        return;
    }
    ingest(s, slot, gen, 1, has_seq, seq, payload, len);
}

int cr__csvc_ingest(cr__csvc_t *s, uint32_t slot, const void *payload, size_t len)
{
    if (!s || slot >= NSLOT)
        return -EINVAL;
    return ingest(s, slot, 0, 0, 0, 0, payload, len);
}

/* ---- HTTP helpers --------------------------------------------------------- */

static void reply_json(cr__http_resp_t *resp, int status, json_t *j)
{
    char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!txt) {
        cr__http_resp_printf(resp, 500, "out of memory\n");
        return;
    }
    free(resp->body);
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = txt;
    resp->body_len = strlen(txt);
}

/* {"error": msg, "field": <text before the first ':'>} */
static void reply_error(cr__csvc_t *s, cr__http_resp_t *resp, int status, const char *msg)
{
    json_t *j = json_object();
    json_object_set_new(j, "error", json_string(msg));
    const char *colon = strchr(msg, ':');
    if (colon && colon > msg && (size_t)(colon - msg) < 128 && !memchr(msg, ' ', (size_t)(colon - msg)))
        json_object_set_new(j, "field", json_stringn(msg, (size_t)(colon - msg)));
    if (status >= 400 && status < 500)
        inc(s, CR__CSVC_M_HTTP_CLIENT_ERRORS, 1);
    reply_json(resp, status, j);
}

static int parse_status(int rc) { return rc == -E2BIG ? 413 : rc == -ENOMEM ? 503 : 400; }

static int ident_matches(const cr__creq_ident_t *reg, const cr__creq_ident_t *q)
{
    if (q->model[0] && strcmp(q->model, reg->model))
        return 0;
    if (strcmp(q->tenant_id, reg->tenant_id))
        return 0;
    if (strcmp(q->lora_name, reg->lora_name))
        return 0;
    if (strcmp(q->salt, reg->salt))
        return 0;
    if (q->instance_id[0] && strcmp(q->instance_id, reg->instance_id))
        return 0;
    if (q->block_size && q->block_size != reg->block_size)
        return 0;
    return 1;
}

/* ---- /register, /unregister -------------------------------------------- */

static int same_key(const cr__creq_ident_t *a, const cr__creq_ident_t *b)
{
    return !strcmp(a->instance_id, b->instance_id) && !strcmp(a->tenant_id, b->tenant_id) &&
           a->dp_rank == b->dp_rank;
}

/* Allocates a slot for reg. Returns the slot, -EEXIST (*existing set), or -ENOSPC. */
static int alloc_slot_locked(cr__csvc_t *s, const cr__creq_register_t *reg, int *existing)
{
    int free_slot = -1;
    for (int i = 0; i < NSLOT; i++) {
        if (s->slots[i].used && same_key(&s->slots[i].reg.id, &reg->id)) {
            *existing = i;
            return -EEXIST;
        }
        if (!s->slots[i].used && free_slot < 0)
            free_slot = i;
    }
    if (free_slot < 0)
        return -ENOSPC;
    slot_t *sl = &s->slots[free_slot];
    sl->used = 1;
    sl->reg = *reg;
    sl->ns = ns_of(&reg->id);
    return free_slot;
}

int cr__csvc_register_local(cr__csvc_t *s, const cr__creq_register_t *reg)
{
    int existing = -1;
    pthread_mutex_lock(&s->lock);
    int rc = alloc_slot_locked(s, reg, &existing);
    pthread_mutex_unlock(&s->lock);
    if (rc >= 0)
        inc(s, CR__CSVC_M_REGISTERS, 1);
    return rc;
}

/* Is ep allowed by --endpoint_prefixes? */
static int endpoint_allowed(const cr__csvc_t *s, const char *ep)
{
    const char *p = s->cfg.endpoint_prefixes;
    if (!*p)
        return 1;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l && !strncmp(ep, p, l))
            return 1;
        p += l + (e ? 1 : 0);
    }
    return 0;
}

static void h_register(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    char err[512];
    cr__creq_register_t r;
    int rc = cr__creq_parse_register(req->body, req->body_len, &s->rqlim, &r, err, sizeof err);
    if (rc)
        return reply_error(s, resp, parse_status(rc), err);
    if (cr__csvc_medium_tier(r.medium) < 0) {
        snprintf(err, sizeof err, "medium: unknown '%s' (GPU, NPU, CPU, DRAM, DISK, SSD, ...)",
                 r.medium);
        return reply_error(s, resp, 400, err);
    }
    if (!endpoint_allowed(s, r.endpoint) ||
        (r.replay_endpoint[0] && !endpoint_allowed(s, r.replay_endpoint)))
        return reply_error(s, resp, 403,
                           !endpoint_allowed(s, r.endpoint)
                               ? "endpoint: not allowed by --endpoint_prefixes"
                               : "replay_endpoint: not allowed by --endpoint_prefixes");
    int existing = -1;
    pthread_mutex_lock(&s->lock);
    int slot = alloc_slot_locked(s, &r, &existing);
    uint32_t gen = slot >= 0 ? s->slots[slot].gen : 0;
    const cr__creq_register_t *o = existing >= 0 ? &s->slots[existing].reg : NULL;
    int same = o && !strcmp(o->endpoint, r.endpoint) &&
               !strcmp(o->replay_endpoint, r.replay_endpoint) && !strcmp(o->id.model, r.id.model) &&
               !strcmp(o->id.lora_name, r.id.lora_name) && !strcmp(o->id.salt, r.id.salt) &&
               o->id.block_size == r.id.block_size && o->role == r.role &&
               !strcmp(o->medium, r.medium);
    pthread_mutex_unlock(&s->lock);
    if (slot == -EEXIST) {
        if (!same)
            return reply_error(s, resp, 409,
                               "instance_id: already registered with other settings (endpoint, "
                               "model, LoRA, salt, block_size, role or medium); unregister it "
                               "first");
        json_t *j = json_pack("{s:s,s:s}", "status", "already registered", "instance_id",
                              r.id.instance_id);
        return reply_json(resp, 200, j);
    }
    if (slot < 0)
        return reply_error(s, resp, 503,
                           "instance_id: no free publisher slot (at most 64 registrations)");
    rc = cr__zsub_add(s->zsub, (uint32_t)slot, gen, r.endpoint, r.replay_endpoint, err,
                      sizeof err);
    if (rc) {
        pthread_mutex_lock(&s->lock);
        slot_reset_locked(s, (uint32_t)slot);
        pthread_mutex_unlock(&s->lock);
        return reply_error(s, resp, rc == -EINVAL ? 400 : 500,
                           err[0] ? err : "endpoint: cannot subscribe");
    }
    /* an /unregister may have freed the slot while we subscribed */
    pthread_mutex_lock(&s->lock);
    int current = s->slots[slot].used && s->slots[slot].gen == gen;
    pthread_mutex_unlock(&s->lock);
    if (!current) {
        cr__zsub_remove(s->zsub, (uint32_t)slot, gen);
        return reply_error(s, resp, 409, "instance_id: unregistered while registering");
    }
    inc(s, CR__CSVC_M_REGISTERS, 1);
    CR_LOG_INFO(COMP, "registered %s|%s|%u (%s, block_size %u) at %s as slot %d",
                r.id.instance_id, r.id.tenant_id, r.id.dp_rank, r.id.model, r.id.block_size,
                r.endpoint, slot);
    json_t *j = json_pack("{s:s,s:s}", "status", "registered successfully", "instance_id",
                          r.id.instance_id);
    reply_json(resp, 200, j);
}

static void h_unregister(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    char err[512];
    cr__creq_ident_t id;
    int rc = cr__creq_parse_unregister(req->body, req->body_len, &s->rqlim, &id, err, sizeof err);
    if (rc)
        return reply_error(s, resp, parse_status(rc), err);
    int removed[NSLOT], nr = 0;
    uint32_t removed_gen[NSLOT];
    json_t *names = json_array();
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < NSLOT; i++) {
        const slot_t *sl = &s->slots[i];
        if (!sl->used || strcmp(sl->reg.id.instance_id, id.instance_id) ||
            strcmp(sl->reg.id.tenant_id, id.tenant_id) ||
            (id.has_dp_rank && sl->reg.id.dp_rank != id.dp_rank))
            continue;
        char name[3 * CR__CREQ_NAME_MAX + 16];
        snprintf(name, sizeof name, "%s|%s|%u", sl->reg.id.instance_id, sl->reg.id.tenant_id,
                 sl->reg.id.dp_rank);
        json_array_append_new(names, json_string(name));
        removed_gen[nr] = sl->gen;
        removed[nr++] = i;
        slot_reset_locked(s, (uint32_t)i);
    }
    pthread_mutex_unlock(&s->lock);
    for (int k = 0; k < nr; k++)
        cr__zsub_remove(s->zsub, (uint32_t)removed[k], removed_gen[k]); /* -ENOENT: local */
    if (!nr) {
        json_decref(names);
        return reply_error(s, resp, 404, "instance_id: not registered");
    }
    inc(s, CR__CSVC_M_UNREGISTERS, (uint64_t)nr);
    json_t *j = json_object();
    json_object_set_new(j, "status", json_string("unregistered successfully"));
    json_object_set_new(j, "removed_instances", names);
    reply_json(resp, 200, j);
}

/* ---- /query, /query_by_hash -------------------------------------------- */

typedef struct qres {
    int slots[NSLOT];
    int n_slots;
    uint32_t block_size;
    uint32_t longest;                  /* blocks */
    uint32_t tier[CR_COND_TIER_COUNT]; /* blocks */
    uint32_t dp_blocks[NSLOT];         /* per slot */
} qres_t;

/* Rolling hashes of a query's prompt. Tokens are hashed before the service
 * lock is taken for the block size known in advance (pre), and under it
 * (into s->scratch, reused while the block size repeats) for others. */
typedef struct qhash {
    uint64_t ns;       /* the query's namespace, applied to every hash */
    uint32_t pre_bs;   /* 0: no pre-hashed array */
    uint64_t *pre;     /* malloc'd */
    size_t pre_n;
    uint32_t scratch_bs; /* block size held in s->scratch, 0 = none */
    size_t scratch_n;
} qhash_t;

static int qhash_pre(cr__creq_query_t *q, uint32_t bs, qhash_t *qh)
{
    memset(qh, 0, sizeof *qh);
    qh->ns = ns_of(&q->id);
    if (q->by_hash) {
        ns_apply(q->hashes, q->n_hashes, qh->ns); /* ours: parsed from the body */
        return 0;
    }
    if (!bs)
        return 0;
    size_t cap = q->n_tokens / bs;
    qh->pre = malloc((cap ? cap : 1) * sizeof *qh->pre);
    if (!qh->pre)
        return -ENOMEM;
    if (cr_cond_hash_tokens(q->tokens, q->n_tokens, bs, qh->pre, cap ? cap : 1, &qh->pre_n))
        qh->pre_n = 0;
    ns_apply(qh->pre, qh->pre_n, qh->ns);
    qh->pre_bs = bs;
    return 0;
}

static size_t qhash_get_locked(cr__csvc_t *s, const cr__creq_query_t *q, qhash_t *qh,
                               uint32_t bs, const uint64_t **out)
{
    if (q->by_hash) {
        *out = q->hashes;
        return q->n_hashes;
    }
    if (qh->pre && qh->pre_bs == bs) {
        *out = qh->pre;
        return qh->pre_n;
    }
    if (qh->scratch_bs != bs) {
        size_t n = 0;
        if (cr_cond_hash_tokens(q->tokens, q->n_tokens, bs, s->scratch, s->scratch_cap, &n))
            n = 0;
        ns_apply(s->scratch, n, qh->ns);
        qh->scratch_bs = bs;
        qh->scratch_n = n;
    }
    *out = s->scratch;
    return qh->scratch_n;
}

static void h_query(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp,
                    int by_hash)
{
    char err[512];
    cr__creq_query_t q;
    int rc = cr__creq_parse_query(req->body, req->body_len, &s->rqlim, by_hash, &q, err,
                                  sizeof err);
    if (rc)
        return reply_error(s, resp, parse_status(rc), err);
    qres_t *res = calloc(NSLOT, sizeof *res);
    qhash_t qh;
    if (!res || qhash_pre(&q, q.id.block_size, &qh)) {
        free(res);
        cr__creq_query_free(&q);
        return reply_error(s, resp, 503, "out of memory");
    }
    int ng = 0;
    char names[NSLOT][2][CR__CREQ_NAME_MAX]; /* tenant, instance of each group */
    uint32_t dp_rank[NSLOT];
    pthread_mutex_lock(&s->lock);
    /* group the matching slots by (tenant, instance) */
    for (int i = 0; i < NSLOT; i++) {
        const slot_t *sl = &s->slots[i];
        if (!sl->used || !ident_matches(&sl->reg.id, &q.id))
            continue;
        dp_rank[i] = sl->reg.id.dp_rank;
        int g = 0;
        for (; g < ng; g++)
            if (!strcmp(names[g][0], sl->reg.id.tenant_id) &&
                !strcmp(names[g][1], sl->reg.id.instance_id))
                break;
        if (g == ng) {
            memcpy(names[g][0], sl->reg.id.tenant_id, CR__CREQ_NAME_MAX);
            memcpy(names[g][1], sl->reg.id.instance_id, CR__CREQ_NAME_MAX);
            res[g].block_size = sl->reg.id.block_size;
            ng++;
        }
        res[g].slots[res[g].n_slots++] = i;
    }
    for (int g = 0; g < ng; g++) {
        qres_t *r = &res[g];
        const uint64_t *h;
        size_t n = qhash_get_locked(s, &q, &qh, r->block_size, &h);
        /* per DP rank: each slot's own longest prefix */
        for (int k = 0; k < r->n_slots; k++) {
            cr_cond_match_t m;
            if (r->slots[k] >= 0 && s->slots[r->slots[k]].reg.id.block_size == r->block_size &&
                !cr_cond_index_match(s->idx, (uint32_t)r->slots[k], h, n, &m))
                r->dp_blocks[r->slots[k]] = m.blocks;
        }
        /* instance: a block counts if any of its slots holds it on any tier;
         * per medium: blocks of that prefix held on the medium */
        for (size_t i = 0; i < n; i++) {
            unsigned any = 0;
            for (int k = 0; k < r->n_slots; k++)
                if (s->slots[r->slots[k]].reg.id.block_size == r->block_size)
                    any |= cr_cond_index_lookup(s->idx, (uint32_t)r->slots[k], h[i]);
            if (!any)
                break;
            r->longest++;
            for (int t = 0; t < CR_COND_TIER_COUNT; t++)
                if (any & (1u << t))
                    r->tier[t]++;
        }
    }
    pthread_mutex_unlock(&s->lock);

    json_t *root = json_object();
    for (int g = 0; g < ng; g++) {
        const qres_t *r = &res[g];
        json_t *ten = json_object_get(root, names[g][0]);
        if (!ten) {
            ten = json_object();
            json_object_set_new(root, names[g][0], ten);
        }
        json_t *inst = json_object();
        uint64_t bs = r->block_size;
        json_object_set_new(inst, "longest_matched", json_integer((json_int_t)(r->longest * bs)));
        for (int t = 0; t < CR_COND_TIER_COUNT; t++)
            json_object_set_new(inst, k_tier_key[t], json_integer((json_int_t)(r->tier[t] * bs)));
        json_t *dp = json_object();
        for (int k = 0; k < r->n_slots; k++) {
            char key[16];
            snprintf(key, sizeof key, "%u", dp_rank[r->slots[k]]);
            json_object_set_new(dp, key,
                                json_integer((json_int_t)(r->dp_blocks[r->slots[k]] * bs)));
        }
        json_object_set_new(inst, "DP", dp);
        json_object_set_new(ten, names[g][1], inst);
    }
    free(res);
    free(qh.pre);
    cr__creq_query_free(&q);
    inc(s, CR__CSVC_M_QUERIES, 1);
    reply_json(resp, 200, root);
}

/* ---- /schedule, /load --------------------------------------------------- */

static json_t *slot_json(const slot_t *sl)
{
    return json_pack("{s:s,s:s,s:I,s:s}", "instance_id", sl->reg.id.instance_id, "tenant_id",
                     sl->reg.id.tenant_id, "dp_rank", (json_int_t)sl->reg.id.dp_rank, "endpoint",
                     sl->reg.endpoint);
}

static void h_schedule(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    char err[512];
    cr__creq_schedule_t r;
    int rc = cr__creq_parse_schedule(req->body, req->body_len, &s->rqlim, &r, err, sizeof err);
    if (rc)
        return reply_error(s, resp, parse_status(rc), err);
    uint32_t bs = (uint32_t)s->cfg.block_size;
    if (r.q.id.block_size && r.q.id.block_size != bs) {
        cr__creq_query_free(&r.q);
        snprintf(err, sizeof err, "block_size: /schedule hashes with the service block_size %u",
                 bs);
        return reply_error(s, resp, 400, err);
    }
    r.q.id.block_size = 0; /* candidates of any block size; hashes only match their own */
    if (r.q.by_hash && !r.input_len)
        r.input_len = (uint64_t)r.q.n_hashes * bs;

    qhash_t qh;
    if (qhash_pre(&r.q, bs, &qh)) {
        cr__creq_query_free(&r.q);
        return reply_error(s, resp, 503, "out of memory");
    }
    pthread_mutex_lock(&s->lock);
    double now = now_s(s);
    int pc[NSLOT], dc[NSLOT], npc = 0, ndc = 0;
    for (int i = 0; i < NSLOT; i++) {
        const slot_t *sl = &s->slots[i];
        int ok = sl->used && ident_matches(&sl->reg.id, &r.q.id);
        pc[i] = ok && (sl->reg.role & CR__ROLE_PREFILL);
        dc[i] = ok && (sl->reg.role & CR__ROLE_DECODE);
        npc += pc[i];
        ndc += dc[i];
        /* slots that are no candidate look infinitely busy / full */
        cr_cond_sched_set_prefill_load(s->sched, (uint32_t)i,
                                       pc[i] ? sl->busy_until : now + FAR_FUTURE_S);
        if (dc[i])
            cr_cond_sched_set_decode_load(s->sched, (uint32_t)i, sl->dbatch, sl->dctx, sl->dmax);
        else
            cr_cond_sched_set_decode_load(s->sched, (uint32_t)i, 1u << 30, 1ull << 40, 1);
    }
    if (!npc || !ndc) {
        pthread_mutex_unlock(&s->lock);
        free(qh.pre);
        cr__creq_query_free(&r.q);
        return reply_error(s, resp, 503,
                           !npc ? "model: no prefill instance registered for this request"
                                : "model: no decode instance registered for this request");
    }
    const uint64_t *h;
    size_t n = qhash_get_locked(s, &r.q, &qh, bs, &h);
    cr_cond_request_t creq = {.block_hashes = h,
                              .n_blocks = n,
                              .input_len = r.input_len,
                              .output_len = r.output_len,
                              .now = now};
    cr_cond_decision_t d;
    rc = cr_cond_sched_schedule(s->sched, &creq, &d);
    uint64_t pmask = 0;
    for (int i = 0; i < NSLOT; i++)
        if (pc[i])
            pmask |= 1ull << i;
#define BAD_PICK(d) (!pc[(d).prefill] || !dc[(d).decode] || ((d).pipeline_mask & ~pmask))
    /* the random policy may draw an excluded slot: draw again (bounded) */
    for (int tries = 0; !rc && BAD_PICK(d) && tries < 256; tries++)
        rc = cr_cond_sched_schedule(s->sched, &creq, &d);
    if (!rc && BAD_PICK(d))
        rc = -EAGAIN;
#undef BAD_PICK
    free(qh.pre); /* the hashes are not needed after the decision */
    if (rc) {
        pthread_mutex_unlock(&s->lock);
        cr__creq_query_free(&r.q);
        return reply_error(s, resp, 500, "scheduler: no decision could be made");
    }
    int rej = d.rejected;
    const char *why = d.rejected ? "service SLO" : NULL;
    if (r.ttft_slo_ms > 0 && d.est_ttft_s * 1e3 > r.ttft_slo_ms) {
        rej = 1;
        why = "ttft_slo_ms";
    }
    if (r.tbt_slo_ms > 0 && d.est_tbt_s * 1e3 > r.tbt_slo_ms) {
        rej = 1;
        why = why ? why : "tbt_slo_ms";
    }
    slot_t *ps = &s->slots[d.prefill];
    uint64_t stages = d.pipeline_mask ? d.pipeline_mask : 1ull << d.prefill;
    if (!rej && !r.dry_run) {
        /* account the decision until the next /load report: every stage of
         * a pipelined prefill is busy for its duration */
        for (int i = 0; i < NSLOT; i++) {
            if (!(stages & (1ull << i)))
                continue;
            slot_t *st = &s->slots[i];
            double start = st->busy_until > now ? st->busy_until : now;
            st->busy_until = start + d.est_transfer_s + d.est_prefill_s;
        }
    }
    json_t *j = json_object();
    json_object_set_new(j, "prefill", slot_json(ps));
    if (d.pipeline_stages > 1) {
        json_t *pl = json_array();
        for (int i = 0; i < NSLOT; i++)
            if ((stages & (1ull << i)) && s->slots[i].used)
                json_array_append_new(pl, slot_json(&s->slots[i]));
        json_object_set_new(j, "pipeline", pl);
    }
    json_object_set_new(j, "decode", slot_json(&s->slots[d.decode]));
    json_object_set_new(j, "fetch_from",
                        d.fetch_from >= 0 && s->slots[d.fetch_from].used
                            ? slot_json(&s->slots[d.fetch_from])
                            : json_null());
    pthread_mutex_unlock(&s->lock);
    json_object_set_new(j, "policy", json_string(cr_cond_policy_name(s->policy)));
    json_object_set_new(j, "block_size", json_integer(bs));
    json_object_set_new(j, "prompt_blocks", json_integer((json_int_t)n));
    json_object_set_new(j, "local_prefix_tokens",
                        json_integer((json_int_t)((uint64_t)d.local_prefix_blocks * bs)));
    json_object_set_new(j, "reused_tokens", json_integer((json_int_t)d.reused_tokens));
    json_object_set_new(j, "est_queue_ms", json_real(d.est_queue_s * 1e3));
    json_object_set_new(j, "est_transfer_ms", json_real(d.est_transfer_s * 1e3));
    json_object_set_new(j, "est_prefill_ms", json_real(d.est_prefill_s * 1e3));
    json_object_set_new(j, "est_ttft_ms", json_real(d.est_ttft_s * 1e3));
    json_object_set_new(j, "est_tbt_ms", json_real(d.est_tbt_s * 1e3));
    json_object_set_new(j, "rejected", json_boolean(rej));
    cr__creq_query_free(&r.q);
    if (rej) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s: the request would miss its SLO", why);
        json_object_set_new(j, "error", json_string(msg));
        json_object_set_new(j, "field", json_string(why));
        inc(s, CR__CSVC_M_SCHEDULE_REJECTS, 1);
        return reply_json(resp, 429, j);
    }
    inc(s, CR__CSVC_M_SCHEDULES, 1);
    reply_json(resp, 200, j);
}

static void h_load(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    char err[512];
    cr__creq_load_t l;
    int rc = cr__creq_parse_load(req->body, req->body_len, &s->rqlim, &l, err, sizeof err);
    if (rc)
        return reply_error(s, resp, parse_status(rc), err);
    int n = 0;
    pthread_mutex_lock(&s->lock);
    double now = now_s(s);
    for (int i = 0; i < NSLOT; i++) {
        slot_t *sl = &s->slots[i];
        if (!sl->used || strcmp(sl->reg.id.instance_id, l.id.instance_id) ||
            strcmp(sl->reg.id.tenant_id, l.id.tenant_id) ||
            (l.id.has_dp_rank && sl->reg.id.dp_rank != l.id.dp_rank))
            continue;
        if (l.has_prefill)
            sl->busy_until = now + l.prefill_queue_ms / 1e3;
        if (l.has_decode) {
            sl->dbatch = l.decode_batch;
            sl->dctx = l.decode_context_tokens;
            sl->dmax = l.decode_max_batch;
        }
        n++;
    }
    pthread_mutex_unlock(&s->lock);
    if (!n)
        return reply_error(s, resp, 404, "instance_id: not registered");
    reply_json(resp, 200, json_pack("{s:s,s:i}", "status", "ok", "updated", n));
}

/* ---- GET endpoints ------------------------------------------------------ */

static void h_instances(cr__csvc_t *s, cr__http_resp_t *resp)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&s->lock);
    double now = now_s(s);
    for (int i = 0; i < NSLOT; i++) {
        const slot_t *sl = &s->slots[i];
        if (!sl->used)
            continue;
        static const char *roles[] = {"", "prefill", "decode", "both"};
        json_t *o = slot_json(sl);
        json_object_set_new(o, "model", json_string(sl->reg.id.model));
        json_object_set_new(o, "lora_name", json_string(sl->reg.id.lora_name));
        json_object_set_new(o, "block_size", json_integer(sl->reg.id.block_size));
        json_object_set_new(o, "type", json_string(sl->reg.type));
        json_object_set_new(o, "role", json_string(roles[sl->reg.role & 3]));
        json_object_set_new(o, "batches", json_integer((json_int_t)sl->batches));
        json_object_set_new(o, "events", json_integer((json_int_t)sl->events));
        json_object_set_new(o, "bad_batches", json_integer((json_int_t)sl->bad_batches));
        json_object_set_new(o, "seq_gaps", json_integer((json_int_t)sl->seq_gaps));
        json_object_set_new(o, "last_seq",
                            sl->have_seq ? json_integer((json_int_t)sl->last_seq) : json_null());
        json_object_set_new(o, "mapped_blocks", json_integer((json_int_t)sl->map.n));
        json_t *tiers = json_object();
        for (int t = 0; t < CR_COND_TIER_COUNT; t++)
            json_object_set_new(
                tiers, k_tier_key[t],
                json_integer((json_int_t)cr_cond_index_count(s->idx, (uint32_t)i,
                                                             (cr_cond_tier_t)t)));
        json_object_set_new(o, "blocks", tiers);
        double q = sl->busy_until > now ? sl->busy_until - now : 0;
        json_object_set_new(o, "prefill_queue_ms", json_real(q * 1e3));
        json_array_append_new(arr, o);
    }
    pthread_mutex_unlock(&s->lock);
    reply_json(resp, 200, json_pack("{s:o}", "instances", arr));
}

static void h_metrics(cr__csvc_t *s, cr__http_resp_t *resp)
{
    static const char *const names[] = {
#define X(id, name, help) name,
        CR__CSVC_METRICS(X)
#undef X
    };
    static const char *const helps[] = {
#define X(id, name, help) help,
        CR__CSVC_METRICS(X)
#undef X
    };
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return (void)cr__http_resp_printf(resp, 503, "out of memory\n");
    for (int i = 0; i < CR__CSVC_M__COUNT; i++)
        fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %" PRIu64 "\n", names[i], helps[i],
                names[i], names[i], __atomic_load_n(&s->m[i], __ATOMIC_RELAXED));
    cr_cond_index_stats_t st = {0};
    int ninst = 0;
    pthread_mutex_lock(&s->lock);
    cr_cond_index_stats(s->idx, &st);
    for (int i = 0; i < NSLOT; i++)
        ninst += s->slots[i].used;
    pthread_mutex_unlock(&s->lock);
    const struct {
        const char *name, *help;
        uint64_t v;
    } gauges[] = {
        {"crescent_conductor_instances", "registered publishers", (uint64_t)ninst},
        {"crescent_conductor_index_blocks", "distinct block hashes indexed", st.blocks},
        {"crescent_conductor_index_entries", "(block, instance, tier) entries", st.entries},
        {"crescent_conductor_index_bytes", "heap bytes held by the index", st.bytes},
    };
    for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++)
        fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s %" PRIu64 "\n", gauges[i].name,
                gauges[i].help, gauges[i].name, gauges[i].name, gauges[i].v);
    if (fclose(f) || !buf) {
        free(buf);
        return (void)cr__http_resp_printf(resp, 503, "out of memory\n");
    }
    free(resp->body);
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4";
    resp->body = buf;
    resp->body_len = len;
}

void cr__csvc_handle(void *user, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    cr__csvc_t *s = user;
    inc(s, CR__CSVC_M_HTTP_REQUESTS, 1);
    const char *p = req->path ? req->path : "";
    int get = req->method && !strcmp(req->method, "GET");
    int post = req->method && !strcmp(req->method, "POST");
    static const char *const posts[] = {"/register", "/unregister",    "/query",
                                        "/query_by_hash", "/schedule", "/load"};
    static const char *const gets[] = {"/health", "/metrics", "/instances"};
    for (size_t i = 0; i < sizeof posts / sizeof posts[0]; i++)
        if (!strcmp(p, posts[i])) {
            if (!post)
                return reply_error(s, resp, 405, "method: use POST");
            switch (i) {
            case 0: return h_register(s, req, resp);
            case 1: return h_unregister(s, req, resp);
            case 2: return h_query(s, req, resp, 0);
            case 3: return h_query(s, req, resp, 1);
            case 4: return h_schedule(s, req, resp);
            default: return h_load(s, req, resp);
            }
        }
    for (size_t i = 0; i < sizeof gets / sizeof gets[0]; i++)
        if (!strcmp(p, gets[i])) {
            if (!get)
                return reply_error(s, resp, 405, "method: use GET");
            if (i == 0) {
                int n = 0;
                pthread_mutex_lock(&s->lock);
                for (int k = 0; k < NSLOT; k++)
                    n += s->slots[k].used;
                pthread_mutex_unlock(&s->lock);
                return reply_json(resp, 200,
                                  json_pack("{s:s,s:i}", "status", "ok", "instances", n));
            }
            if (i == 1)
                return h_metrics(s, resp);
            return h_instances(s, resp);
        }
    reply_error(s, resp, 404, "path: no such endpoint");
}
