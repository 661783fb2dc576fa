/* crescent-conductor service core (internal): the state behind the HTTP API.
 *
 * One cr__csvc_t holds the registered KV-event publishers ("slots", one per
 * (tenant_id, instance_id, dp_rank); at most CR_COND_MAX_INSTANCES), cond-sim's
 * global prefix index (cr_cond_index_t, slot number = index instance id) and
 * scheduler (cr_cond_sched_t), a ZMQ subscriber thread (zsub.h), and the
 * counters behind /metrics.
 *
 * Threads: MHD threads call cr__csvc_handle(); the ZMQ thread applies event
 * batches. Everything mutable (slots, index, scheduler, loads) is guarded by
 * one mutex, taken only after a request or batch is fully parsed; counters
 * are atomics.
 *
 * HTTP API (JSON in and out; errors are {"error": "<field>: <why>", "field": ...}):
 *   GET  /health, /metrics (Prometheus text), /instances
 *   POST /register, /unregister, /query, /query_by_hash, /schedule, /load
 * see docs/architecture/conductor-service.md for the shapes.
 */
#ifndef CR_CONDUCTOR_SERVICE_SERVICE_H
#define CR_CONDUCTOR_SERVICE_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "common/auth/auth_opts.h"
#include "common/config.h"
#include "common/httpd.h"
#include "conductor/service/kv_events.h"
#include "conductor/service/requests.h"
#include "crescent/conductor.h"

typedef struct cr__csvc cr__csvc_t;

/* Configuration; also the tool's config table (cr__csvc_cfg_table). */
typedef struct cr__csvc_config {
    char host[CR__CFG_STR_MAX];
    int64_t port;
    uint64_t max_body;         /* HTTP body bound (bytes) */
    uint64_t max_event_bytes;  /* one ZMQ message */
    int64_t max_event_objects; /* msgpack objects in one batch */
    int64_t max_events;        /* events in one batch */
    int64_t max_hashes;        /* block hashes in one event / one query */
    int64_t max_tokens;        /* token ids in one event / one query */
    int64_t max_mapped_blocks; /* engine->seq hash entries per publisher */
    int64_t zmq_rcvhwm;
    int64_t replay_timeout_ms; /* a replay may hold live batches this long */
    int64_t block_size;        /* tokens per block for /schedule hashing */
    char policy[CR__CFG_STR_MAX];
    double ttft_slo_ms;        /* 0 = none */
    double tbt_slo_ms;         /* 0 = none */
    double balance_threshold;
    int64_t chunk_tokens;          /* chunked-prefill chunk size of the engines, 0 = none */
    double pipeline_min_prefill_ms; /* cost_fetch: pipeline prefills above this, 0 = off */
    int64_t pipeline_max_stages;
    double pipeline_idle_ms;
    int64_t pipeline_reserve;
    int64_t gpu_capacity_blocks;  /* per publisher, 0 = unlimited */
    int64_t dram_capacity_blocks;
    int64_t disk_capacity_blocks;
    char endpoint_prefixes[CR__CFG_STR_MAX]; /* comma-separated allowed endpoint
                                                prefixes for /register; "" = any */
    char port_file[CR__CFG_STR_MAX]; /* tool: write the bound port here */
    CR__AUTH_CFG_FIELDS; /* security: HTTP callers must sign (docs/security.md) */
} cr__csvc_config_t;

extern const cr__cfg_opt_t cr__csvc_cfg_table[];
extern const size_t cr__csvc_cfg_table_len;

/* Creates the service (index, scheduler, ZMQ thread; no HTTP server).
 * Returns 0 and *out, -EINVAL (bad config, message in err) or -ENOMEM. */
int cr__csvc_create(const cr__csvc_config_t *cfg, cr__csvc_t **out, char *err, size_t errlen);

/* Starts the HTTP server on cfg->host:cfg->port; with a cluster key every
 * request must carry a valid X-Crescent-Auth signature (401 otherwise).
 * Returns 0, -EPERM/-EINVAL/-ENOENT/-ENOTSUP (unusable key) or -errno. */
int cr__csvc_listen(cr__csvc_t *s);
/* Bound HTTP port (after cr__csvc_listen). */
uint16_t cr__csvc_port(const cr__csvc_t *s);
/* The security mode line (common/auth/auth.h cr__auth_mode_line) of the
 * HTTP API, after cr__csvc_listen. */
const char *cr__csvc_security(const cr__csvc_t *s);

/* Stops HTTP and ZMQ, frees everything. NULL is a no-op. */
void cr__csvc_destroy(cr__csvc_t *s);

/* The HTTP handler (cr__http_handler_fn); user is the cr__csvc_t. Usable
 * directly by tests without a server. */
void cr__csvc_handle(void *user, const cr__http_req_t *req, cr__http_resp_t *resp);

/* Registers a publisher without subscribing to it (tests feed its events
 * through cr__csvc_ingest). Returns the slot (>= 0) or -errno. */
int cr__csvc_register_local(cr__csvc_t *s, const cr__creq_register_t *reg);

/* Decodes and applies one msgpack batch for slot, as the ZMQ thread does.
 * Returns 0, or the decoder's error (the batch is counted as bad). */
int cr__csvc_ingest(cr__csvc_t *s, uint32_t slot, const void *payload, size_t len);

/* Medium name ("GPU", "cpu", "DISK", "NPU", ...) to tier; -1 if unknown.
 * Empty means GPU (vLLM's default medium). */
int cr__csvc_medium_tier(const char *medium);

#endif
