/* crescent-conductor service: configuration table, state lifecycle
 * (create/listen/destroy), publisher slots, namespaces, log-once (service.h;
 * the files of this job are listed in service_priv.h). */
#include "conductor/service/service_priv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
     "pipelining (global_cache, cost_fetch, late): split prefills estimated above this over "
     "idle instances; 0 = off",
     CR__CFG_DOUBLE, OFF(pipeline_min_prefill_ms)},
    {"pipeline_max_stages", "4", "pipelining: most instances one pipelined prefill uses",
     CR__CFG_INT, OFF(pipeline_max_stages)},
    {"pipeline_idle_ms", "0", "pipelining: an instance counts as idle below this queue",
     CR__CFG_DOUBLE, OFF(pipeline_idle_ms)},
    {"pipeline_reserve", "0", "pipelining: idle instances kept free for later requests",
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
    CR__AUTH_CFG_OPTS(cr__csvc_config_t),
};
const size_t cr__csvc_cfg_table_len = sizeof cr__csvc_cfg_table / sizeof cr__csvc_cfg_table[0];

/* ---- state --------------------------------------------------------------- */

const char *const cr__csvc_tier_key[CR_COND_TIER_COUNT] = {"GPU", "CPU", "DISK"};

void cr__csvc_log_once(cr__csvc_t *s, int kind, const char *fmt, ...)
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

/* Hash namespace of an identity. The index stores every rolling hash XORed
 * with the namespace of the publisher that reported it, and every query
 * XORs its hashes with its own namespace, so blocks of another model, LoRA,
 * salt or tenant never match, even in /schedule's cluster-wide search for a
 * prefix to fetch (models sharing a tokenizer share token prefixes). */
uint64_t cr__csvc_ns_of(const cr__creq_ident_t *id)
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

/* ---- lifecycle ------------------------------------------------------------ */

int cr__csvc_slot_reset_locked(cr__csvc_t *s, uint32_t i)
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
    if (cfg->max_hashes < 1 || cfg->max_hashes > CSVC_MAX_HASHES_MAX || cfg->max_tokens < 1 ||
        cfg->max_tokens > CSVC_MAX_TOKENS_MAX || cfg->max_events < 1 ||
        cfg->max_events > CSVC_MAX_EVENTS_MAX || cfg->max_event_objects < CSVC_EVENT_OBJECTS_MIN ||
        cfg->max_event_objects > CSVC_EVENT_OBJECTS_MAX)
        BAD("max_hashes / max_tokens / max_events / max_event_objects: out of range");
    if (cfg->max_event_bytes < CSVC_EVENT_BYTES_MIN || cfg->max_event_bytes > CSVC_BYTES_MAX ||
        cfg->max_body < CSVC_BODY_MIN || cfg->max_body > CSVC_BYTES_MAX)
        BAD("max_event_bytes / max_body: out of range");
    if (cfg->max_mapped_blocks < 1 || cfg->zmq_rcvhwm < 1 || cfg->zmq_rcvhwm > CSVC_ZMQ_HWM_MAX)
        BAD("max_mapped_blocks / zmq_rcvhwm: must be positive");
    if (cfg->replay_timeout_ms < 1 || cfg->replay_timeout_ms > CSVC_REPLAY_TIMEOUT_MAX_MS)
        BAD("replay_timeout_ms: %" PRId64 " out of range 1..%d", cfg->replay_timeout_ms,
            CSVC_REPLAY_TIMEOUT_MAX_MS);
    if (cfg->ttft_slo_ms < 0 || cfg->tbt_slo_ms < 0 || cfg->balance_threshold < 1)
        BAD("ttft_slo_ms / tbt_slo_ms must be >= 0 and balance_threshold >= 1");
    if (cfg->chunk_tokens < 0 || cfg->chunk_tokens > CSVC_CHUNK_TOKENS_MAX ||
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
    if ((rc = cr__zsub_start(cr__csvc_on_zmq_message, s, cfg->max_event_bytes, (int)cfg->zmq_rcvhwm,
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
    int rc = cr__auth_load(&CR__AUTH_CFG_OF(s->cfg), &s->auth);
    if (!rc)
        rc = CR__TLS_LOAD_OF(s->cfg, &s->tls);
    if (rc)
        return rc;
    cr__httpd_params_t hp = {.host = s->cfg.host,
                             .port = (uint16_t)s->cfg.port,
                             .max_body = (size_t)s->cfg.max_body,
                             .fn = cr__csvc_handle,
                             .user = s,
                             .auth = s->auth,
                             .tls = s->tls,
                             .name = "conductor HTTP API"};
    return cr__httpd_start_ex(&hp, &s->httpd);
}

uint16_t cr__csvc_port(const cr__csvc_t *s) { return s->httpd ? cr__httpd_port(s->httpd) : 0; }

const char *cr__csvc_security(const cr__csvc_t *s)
{
    return cr__auth_mode_line(s->auth != NULL, s->tls != NULL);
}

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
    cr__auth_free(s->auth);
    cr__tls_free(s->tls);
    free(s);
}
