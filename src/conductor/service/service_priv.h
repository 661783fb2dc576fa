/* crescent-conductor service internals: the state struct and the calls
 * shared by the files of src/conductor/service/ that make up cr__csvc_t
 * (service.h is the interface). Nothing outside this folder includes it.
 *
 * Files, one job each:
 *   service.c        config table, create/listen/destroy, publisher slots,
 *                    hash namespaces, log-once
 *   events.c         applying KV-event batches to the maps and the index
 *   http.c           routing, JSON replies, GET /health /metrics /instances
 *   http_register.c  POST /register, /unregister
 *   http_query.c     POST /query, /query_by_hash (+ hashing for /schedule)
 *   http_schedule.c  POST /schedule, /load
 *   http_report.c    POST /report (actual times for the predictor)
 *
 * Lock discipline: s->lock guards slots, idx, sched and scratch (the
 * mutable state); cfg, limits, policy and t0_ns are immutable after
 * create; counters (m, logged) are atomics. Functions named *_locked are
 * called with s->lock held; everything else takes it itself (only after a
 * request or batch is fully parsed).
 */
#ifndef CR_CONDUCTOR_SERVICE_SERVICE_PRIV_H
#define CR_CONDUCTOR_SERVICE_SERVICE_PRIV_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/clock.h"
#include "common/log.h"
#include "conductor/service/emap.h"
#include "conductor/service/metrics.h"
#include "conductor/service/service.h"
#include "conductor/service/zsub.h"

#define COMP "conductor"
#define NSLOT CR_COND_MAX_INSTANCES
#define FAR_FUTURE_S 1e9 /* busy_until of slots excluded from a /schedule call */

/* Bounds cr__csvc_create accepts for the configuration (service.h). */
#define CSVC_MAX_HASHES_MAX (1 << 24)        /* block hashes in one event / query */
#define CSVC_MAX_TOKENS_MAX (1 << 26)        /* token ids in one event / query */
#define CSVC_MAX_EVENTS_MAX (1 << 24)        /* events in one batch */
#define CSVC_EVENT_OBJECTS_MIN 16            /* msgpack objects in one batch.. */
#define CSVC_EVENT_OBJECTS_MAX (1 << 26)     /* ..at most */
#define CSVC_EVENT_BYTES_MIN 16              /* one KV-event message.. */
#define CSVC_BYTES_MAX (1ull << 30)          /* ..and one HTTP body: at most 1 GiB */
#define CSVC_BODY_MIN 64                     /* smallest max_body */
#define CSVC_ZMQ_HWM_MAX (1 << 30)
#define CSVC_REPLAY_TIMEOUT_MAX_MS 600000    /* a replay may hold live batches 10 min */
#define CSVC_CHUNK_TOKENS_MAX (1 << 24)

typedef struct slot {
    int used;
    uint32_t gen;
    cr__creq_register_t reg;
    uint64_t ns; /* hash namespace of (model, lora, salt, tenant); see cr__csvc_ns_of() */
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
    cr__csvc_config_t cfg;   /* immutable after create */
    cr__kvev_limits_t evlim; /* immutable after create */
    cr__creq_limits_t rqlim; /* immutable after create */
    cr_cond_policy_t policy; /* immutable after create */
    uint64_t t0_ns;          /* immutable after create: origin of now_s() */

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
    cr__auth_t *auth; /* NULL = security off; freed by destroy */
    cr__tls_t *tls;   /* NULL = plain HTTP; freed by destroy */
};

static inline void inc(cr__csvc_t *s, int id, uint64_t n)
{
    __atomic_fetch_add(&s->m[id], n, __ATOMIC_RELAXED);
}

/* Seconds on the service clock. */
static inline double now_s(const cr__csvc_t *s)
{
    return (double)(cr__now_ns() - s->t0_ns) / 1e9;
}

/* Index keys of the tiers in JSON replies ("GPU", "CPU", "DISK"). */
extern const char *const cr__csvc_tier_key[CR_COND_TIER_COUNT];

/* Logs a warning the first time a kind of bad input is seen; later ones
 * are only counted. */
enum { ONCE_MSGPACK, ONCE_LIMIT, ONCE_SHAPE, ONCE_FIELD, ONCE_FRAME, ONCE_UNKNOWN, ONCE_MEDIUM,
       ONCE_BLOCKSIZE, ONCE_LORA, ONCE_ORPHAN, ONCE_MAPFULL, ONCE_INDEXFULL, ONCE_GAP,
       ONCE_MOONCAKE, ONCE_DPRANK };
__attribute__((format(printf, 3, 4))) void cr__csvc_log_once(cr__csvc_t *s, int kind,
                                                             const char *fmt, ...);
#define log_once(s, kind, ...) cr__csvc_log_once(s, kind, __VA_ARGS__)

/* ---- service.c ----------------------------------------------------------- */

/* Hash namespace of an identity (model, LoRA, salt, tenant). */
uint64_t cr__csvc_ns_of(const cr__creq_ident_t *id);
static inline void ns_apply(uint64_t *h, size_t n, uint64_t ns)
{
    for (size_t i = 0; i < n; i++)
        h[i] ^= ns;
}
/* Frees slot i (index entries, hash map) and bumps its generation. */
int cr__csvc_slot_reset_locked(cr__csvc_t *s, uint32_t i);

/* ---- events.c ------------------------------------------------------------ */

/* cr__zsub_msg_fn: a message of publisher slot (generation gen). */
void cr__csvc_on_zmq_message(void *user, uint32_t slot, uint32_t gen, int has_seq, uint64_t seq,
                             const void *payload, size_t len, int bad_frame);

/* ---- http.c -------------------------------------------------------------- */

/* Sends j (taken) as the JSON body with status. */
void cr__csvc_reply_json(cr__http_resp_t *resp, int status, json_t *j);
/* {"error": msg, "field": <text before the first ':'>}; counts 4xx. */
void cr__csvc_reply_error(cr__csvc_t *s, cr__http_resp_t *resp, int status, const char *msg);
/* HTTP status of a request parser's error. */
int cr__csvc_parse_status(int rc);
/* Does registration reg match query identity q (empty fields match all)? */
int cr__csvc_ident_matches(const cr__creq_ident_t *reg, const cr__creq_ident_t *q);
json_t *cr__csvc_slot_json(const slot_t *sl);
void cr__csvc_h_instances(cr__csvc_t *s, cr__http_resp_t *resp);
void cr__csvc_h_metrics(cr__csvc_t *s, cr__http_resp_t *resp);

/* ---- http_register.c ----------------------------------------------------- */

void cr__csvc_h_register(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp);
void cr__csvc_h_unregister(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp);

/* ---- http_query.c -------------------------------------------------------- */

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

/* Namespaces the query and hashes its tokens for block size bs (0: none)
 * before the lock. Returns 0 or -ENOMEM; the caller frees qh->pre. */
int cr__csvc_qhash_pre(cr__creq_query_t *q, uint32_t bs, qhash_t *qh);
/* The query's hashes for block size bs in *out (pre-hashed, or computed
 * into s->scratch); returns their count. */
size_t cr__csvc_qhash_get_locked(cr__csvc_t *s, const cr__creq_query_t *q, qhash_t *qh,
                                 uint32_t bs, const uint64_t **out);
void cr__csvc_h_query(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp,
                      int by_hash);

/* ---- http_schedule.c ----------------------------------------------------- */

void cr__csvc_h_schedule(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp);
void cr__csvc_h_load(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp);
/* POST /report (http_report.c): actual times for the predictor */
void cr__csvc_h_report(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp);

#endif
