/* Store master state (master.h). */
#include "store/master/master.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "common/log.h"
#include "store/allocator/offset_alloc.h"
#include "store/eviction/policy.h"

/* ---- records ------------------------------------------------------------ */

#define OF_COMPLETE 0x1
#define OF_HARD_PIN 0x2
#define OF_SOFT_PIN 0x4
#define REP_DEAD 0x80
#define NONE32 UINT32_MAX
/* replica index needs 3 bits: CR__RPC_REPLICA_MAX == 8 */
#define REPLICA_ID(version, idx) (((uint64_t)(version) << 3) | (uint64_t)(idx))
_Static_assert(CR__RPC_REPLICA_MAX <= 8, "replica index in 3 bits");

typedef struct shard {
    uint32_t seg; /* index into m->segs (interned segment id) */
    uint32_t blk; /* block handle in that segment's allocator */
} shard_t;

/* One object, one malloc: header, then uint8_t nsh[n_rep] (shards of each
 * replica, | REP_DEAD once dropped), padding to 4, shard_t shards[], key. */
typedef struct obj {
    struct obj *prev, *next; /* LRU list (complete) or pending list */
    uint64_t version;
    uint64_t size;
    uint64_t until_ms;    /* complete: lease expiry; pending: put deadline */
    uint32_t pin_until_s; /* soft pin expiry (now_ms / 1000 scale) */
    uint16_t key_len;
    uint8_t flags;
    uint8_t n_rep;
} obj_t;
_Static_assert(sizeof(obj_t) == 48, "compact object header");

static inline uint8_t *obj_nsh(obj_t *o) { return (uint8_t *)(o + 1); }
static inline shard_t *obj_shards(obj_t *o)
{
    return (shard_t *)((uint8_t *)(o + 1) + ((o->n_rep + 3u) & ~3u));
}
static inline uint32_t obj_total_shards(obj_t *o)
{
    uint32_t t = 0;
    for (uint32_t r = 0; r < o->n_rep; r++)
        t += obj_nsh(o)[r] & 0x7f;
    return t;
}
static inline char *obj_key(obj_t *o) { return (char *)(obj_shards(o) + obj_total_shards(o)); }

typedef struct seg {
    char name[CR__RPC_SEGMENT_NAME_MAX];
    uint64_t base, size;
    cr__oalloc_t *alloc;
    uint32_t client; /* index into m->clients */
    uint32_t gen;    /* bumped at unmount: stale quarantine entries skip */
    int live;
    uint64_t alloc_after_ms; /* no allocation before (remount of a dropped name) */
} seg_t;

/* A segment name dropped while its space could still be read (live
 * leases) or written (pending puts): if the same memory is mounted again
 * under that name, nothing is allocated there before `until`. */
#define HELD_MAX 64
typedef struct held {
    char name[CR__RPC_SEGMENT_NAME_MAX];
    uint64_t until;
} held_t;

typedef struct client {
    cr__rpc_client_id_t id;
    uint64_t last_ms; /* last heartbeat, on the awake clock (awake_locked) */
    int live;
} client_t;

typedef struct qent {
    uint32_t seg, gen, blk;
    uint64_t bytes;
    uint64_t release_ms;
} qent_t;

struct cr__master {
    pthread_mutex_t mu; /* guards everything below */
    cr__master_cfg_t cfg;
    cr__evict_cfg_t ev;
    uint64_t master_id, next_version;
    /* open addressing, linear probing, backward-shift deletion */
    obj_t **slots;
    uint32_t *tags; /* low 32 bits of the key hash */
    uint64_t cap, count;
    obj_t lru;     /* sentinel: lru.next = most recent, lru.prev = oldest */
    obj_t pending; /* sentinel: FIFO by start time (= by deadline) */
    seg_t *segs;
    uint32_t n_segs, cap_segs, seg_cursor;
    client_t *clients;
    uint32_t n_clients, cap_clients, live_clients, live_segs;
    qent_t *q;
    size_t q_head, q_len, q_cap;
    uint64_t capacity, allocated, quarantine_bytes;
    uint64_t n_complete, n_pending;
    held_t held[HELD_MAX];
    /* A step that evicted nothing stays futile until something changes
     * (space freed, an object completed or was touched) or time moves:
     * skip repeating it (a 4096-key batch on a pinned-full pool would
     * otherwise walk the LRU 4096 times). */
    uint64_t state_seq, futile_seq, futile_now;
    int futile;
    uint32_t *order; /* scratch: candidate segments of one placement */
    uint32_t cap_order;
    /* The awake clock: time the master was able to run. It follows now_ms
     * but a gap between two observations longer than STALL_CREDIT_MS (the
     * process stopped, the VM paused, the machine starved it) counts as
     * STALL_CREDIT_MS only: a master that could not read heartbeats does
     * not count that time against its clients. */
    uint64_t awake_ms, seen_ms;
    int clock_started;
    uint64_t counters[CR__MM_COUNT];
};

#define CNT(m, name) ((m)->counters[CR__MM_##name])

/* ---- lists -------------------------------------------------------------- */

static void list_init(obj_t *s) { s->prev = s->next = s; }
static void list_unlink(obj_t *o)
{
    o->prev->next = o->next;
    o->next->prev = o->prev;
    o->prev = o->next = NULL;
}
static void list_push_front(obj_t *s, obj_t *o)
{
    o->next = s->next;
    o->prev = s;
    s->next->prev = o;
    s->next = o;
}
static void list_push_back(obj_t *s, obj_t *o)
{
    o->prev = s->prev;
    o->next = s;
    s->prev->next = o;
    s->prev = o;
}

/* ---- hash map ----------------------------------------------------------- */

static uint64_t key_hash(const char *k, size_t l) { return XXH3_64bits(k, l); }

static int key_ok(const char *k, size_t l)
{
    return k && l >= 1 && l <= CR__RPC_KEY_MAX && !memchr(k, 0, l);
}

static int64_t map_find(cr__master_t *m, const char *k, size_t l, uint64_t h)
{
    uint64_t mask = m->cap - 1, i = h & mask;
    uint32_t tag = (uint32_t)h;
    for (;;) {
        obj_t *o = m->slots[i];
        if (!o)
            return -1;
        if (m->tags[i] == tag && o->key_len == l && !memcmp(obj_key(o), k, l))
            return (int64_t)i;
        i = (i + 1) & mask;
    }
}

static int map_grow(cr__master_t *m)
{
    uint64_t ncap = m->cap ? m->cap * 2 : 1024;
    obj_t **ns = calloc(ncap, sizeof *ns);
    uint32_t *nt = malloc(ncap * sizeof *nt);
    if (!ns || !nt) {
        free(ns);
        free(nt);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < m->cap; i++) {
        if (!m->slots[i])
            continue;
        /* tags hold only 32 bits: rehash from the key when the table is
         * larger than 2^32 slots (never in practice) */
        uint64_t h = ncap > (1ull << 32) ? key_hash(obj_key(m->slots[i]), m->slots[i]->key_len)
                                         : m->tags[i];
        uint64_t j = h & (ncap - 1);
        while (ns[j])
            j = (j + 1) & (ncap - 1);
        ns[j] = m->slots[i];
        nt[j] = m->tags[i];
    }
    free(m->slots);
    free(m->tags);
    m->slots = ns;
    m->tags = nt;
    m->cap = ncap;
    return 0;
}

static int map_insert(cr__master_t *m, obj_t *o, uint64_t h)
{
    if ((m->count + 1) * 10 > m->cap * 7 && map_grow(m))
        return -ENOMEM;
    uint64_t mask = m->cap - 1, i = h & mask;
    while (m->slots[i])
        i = (i + 1) & mask;
    m->slots[i] = o;
    m->tags[i] = (uint32_t)h;
    m->count++;
    return 0;
}

static void map_erase(cr__master_t *m, uint64_t i)
{
    uint64_t mask = m->cap - 1, j = i;
    m->slots[i] = NULL;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->slots[j])
            break;
        uint64_t k = m->tags[j] & mask; /* home slot */
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays)
            continue;
        m->slots[i] = m->slots[j];
        m->tags[i] = m->tags[j];
        m->slots[j] = NULL;
        i = j;
    }
    m->count--;
}

/* ---- space -------------------------------------------------------------- */

static void q_push(cr__master_t *m, uint32_t seg, uint32_t blk, uint64_t bytes, uint64_t rel)
{
    if (m->q_head + m->q_len == m->q_cap) {
        if (m->q_head > m->q_cap / 2) {
            memmove(m->q, m->q + m->q_head, m->q_len * sizeof *m->q);
            m->q_head = 0;
        } else {
            size_t nc = m->q_cap ? m->q_cap * 2 : 256;
            qent_t *nq = realloc(m->q, nc * sizeof *nq);
            if (!nq) {
                /* cannot remember it: leak the block (never reuse) rather
                 * than risk handing out space a reader may still read */
                CR_LOG_ERROR("master", "quarantine full (ENOMEM): %" PRIu64 " bytes leaked",
                             bytes);
                return;
            }
            m->q = nq;
            m->q_cap = nc;
        }
    }
    m->q[m->q_head + m->q_len++] =
        (qent_t){.seg = seg, .gen = m->segs[seg].gen, .blk = blk, .bytes = bytes, .release_ms = rel};
    m->quarantine_bytes += bytes;
    CNT(m, quarantined_bytes_total) += bytes;
}

/* Frees a block without marking the state changed (undoing a placement
 * that just allocated it). */
static void block_unalloc(cr__master_t *m, uint32_t seg, uint32_t blk)
{
    seg_t *s = &m->segs[seg];
    uint64_t b = cr__oalloc_block_size(s->alloc, blk);
    if (cr__oalloc_free(s->alloc, blk) == 0)
        m->allocated -= b;
}

static void block_free(cr__master_t *m, uint32_t seg, uint32_t blk)
{
    block_unalloc(m, seg, blk);
    m->state_seq++;
}

/* Frees a block now or, if it may still be accessed until release_ms, later. */
static void block_release(cr__master_t *m, uint32_t seg, uint32_t blk, uint64_t release_ms,
                          uint64_t now)
{
    if (release_ms > now)
        q_push(m, seg, blk, cr__oalloc_block_size(m->segs[seg].alloc, blk), release_ms);
    else
        block_free(m, seg, blk);
}

/* Releases due quarantine entries; bounded by max entries. */
static void q_release(cr__master_t *m, uint64_t now, size_t max)
{
    while (m->q_len && max--) {
        qent_t *e = &m->q[m->q_head];
        if (e->release_ms > now)
            break;
        if (e->seg != NONE32 && m->segs[e->seg].live && m->segs[e->seg].gen == e->gen) {
            block_free(m, e->seg, e->blk);
            m->quarantine_bytes -= e->bytes;
        }
        m->q_head++;
        m->q_len--;
    }
    if (!m->q_len)
        m->q_head = 0;
}

/* When the space of o may be accessed until: readers up to the lease
 * expiry; for a pending put, its writer until the deadline plus another
 * put timeout. */
static uint64_t obj_release_ms(cr__master_t *m, obj_t *o, uint64_t now)
{
    if (o->flags & OF_COMPLETE)
        return o->until_ms;
    uint64_t d = o->until_ms > now ? o->until_ms : now;
    return d + m->cfg.put_timeout_ms;
}

/* Frees every live replica's blocks (skipping segment skip_seg, whose
 * allocator is going away) and marks the replicas dead. */
static void obj_release_space(cr__master_t *m, obj_t *o, uint64_t release_ms, uint64_t now,
                              uint32_t skip_seg)
{
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD))
            for (uint32_t s = 0; s < n; s++)
                if (sh[s].seg != skip_seg)
                    block_release(m, sh[s].seg, sh[s].blk, release_ms, now);
        nsh[r] |= REP_DEAD;
        sh += n;
    }
}

static uint64_t obj_bytes(cr__master_t *m, obj_t *o)
{
    uint64_t b = 0;
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD))
            for (uint32_t s = 0; s < n; s++)
                b += cr__oalloc_block_size(m->segs[sh[s].seg].alloc, sh[s].blk);
        sh += n;
    }
    return b;
}

/* Removes o from lists and map and frees it. Its space must already be
 * released (or is released here with release_ms). */
static void obj_delete(cr__master_t *m, obj_t *o, uint64_t release_ms, uint64_t now)
{
    obj_release_space(m, o, release_ms, now, NONE32);
    int64_t i = map_find(m, obj_key(o), o->key_len, key_hash(obj_key(o), o->key_len));
    if (i >= 0)
        map_erase(m, (uint64_t)i);
    list_unlink(o);
    if (o->flags & OF_COMPLETE)
        m->n_complete--;
    else
        m->n_pending--;
    free(o);
}

/* ---- lifecycle ---------------------------------------------------------- */

void cr__master_cfg_default(cr__master_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    c->lease_ttl_ms = 5000;
    c->soft_pin_ttl_ms = 30 * 60 * 1000;
    c->client_ttl_ms = 10000;
    c->put_timeout_ms = 30000;
    c->high_watermark = 0.90;
    c->eviction_ratio = 0.05;
    c->evict_max_visit = 65536;
    c->granule_shift = 6;
    c->min_stripe = 1u << 20;
    c->evict_soft_pinned = 1;
    c->max_clients = 65536;
    c->max_segments = 65536;
}

int cr__master_create(const cr__master_cfg_t *cfg, cr__master_t **out)
{
    if (!cfg || !out || cfg->granule_shift < 6 || cfg->granule_shift > 30 ||
        cfg->high_watermark <= 0 || cfg->high_watermark > 1 || cfg->eviction_ratio < 0 ||
        cfg->eviction_ratio > 1)
        return -EINVAL;
    cr__master_t *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    pthread_mutex_init(&m->mu, NULL);
    m->cfg = *cfg;
    if (!m->cfg.evict_max_visit)
        m->cfg.evict_max_visit = 65536;
    if (!m->cfg.max_clients)
        m->cfg.max_clients = 65536;
    if (!m->cfg.max_segments)
        m->cfg.max_segments = 65536;
    m->ev = (cr__evict_cfg_t){.high_watermark = cfg->high_watermark,
                              .ratio = cfg->eviction_ratio,
                              .max_visit = m->cfg.evict_max_visit};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* realtime ms << 16: 65536 versions per ms of uptime before a restarted
     * master could catch up with an old version (puts run at ~1 M/s), and
     * version << 3 fits in 64 bits until the year 2500 */
    m->master_id = ((uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000) << 16;
    m->next_version = m->master_id;
    list_init(&m->lru);
    list_init(&m->pending);
    if (map_grow(m)) {
        free(m);
        return -ENOMEM;
    }
    *out = m;
    return 0;
}

void cr__master_destroy(cr__master_t *m)
{
    if (!m)
        return;
    for (uint64_t i = 0; i < m->cap; i++)
        free(m->slots[i]);
    free(m->slots);
    free(m->tags);
    for (uint32_t i = 0; i < m->n_segs; i++)
        cr__oalloc_destroy(m->segs[i].alloc);
    free(m->segs);
    free(m->clients);
    free(m->q);
    free(m->order);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

uint64_t cr__master_id(const cr__master_t *m) { return m->master_id; }

/* ---- clients and segments ----------------------------------------------- */

/* The longest gap between two observations of the clock (ticks every
 * ~100 ms, heartbeats) that is believed to be time the master was running. */
#define STALL_CREDIT_MS 500

static uint64_t awake_locked(cr__master_t *m, uint64_t now)
{
    if (!m->clock_started) {
        m->clock_started = 1;
        m->seen_ms = now;
        m->awake_ms = now;
        return now;
    }
    if (now > m->seen_ms) {
        uint64_t gap = now - m->seen_ms;
        if (gap > STALL_CREDIT_MS) {
            CNT(m, stalls_total)++;
            CNT(m, stalled_ms_total) += gap - STALL_CREDIT_MS;
            CR_LOG_WARN("master", "did not run for %" PRIu64 " ms (stopped or starved): "
                        "that time does not count against client heartbeats", gap);
            gap = STALL_CREDIT_MS;
        }
        m->awake_ms += gap;
        m->seen_ms = now;
    }
    return m->awake_ms;
}

static int id_eq(cr__rpc_client_id_t a, cr__rpc_client_id_t b)
{
    return a.hi == b.hi && a.lo == b.lo;
}

static uint32_t client_find(cr__master_t *m, cr__rpc_client_id_t id)
{
    for (uint32_t i = 0; i < m->n_clients; i++)
        if (m->clients[i].live && id_eq(m->clients[i].id, id))
            return i;
    return NONE32;
}

#define CLIENTS_FULL (NONE32 - 1)

/* Returns the new index, NONE32 (ENOMEM) or CLIENTS_FULL. */
static uint32_t client_add(cr__master_t *m, cr__rpc_client_id_t id, uint64_t now)
{
    uint32_t i;
    if (m->live_clients >= m->cfg.max_clients)
        return CLIENTS_FULL;
    for (i = 0; i < m->n_clients; i++)
        if (!m->clients[i].live)
            break;
    if (i == m->n_clients) {
        if (m->n_clients == m->cap_clients) {
            uint32_t nc = m->cap_clients ? m->cap_clients * 2 : 16;
            client_t *n = realloc(m->clients, nc * sizeof *n);
            if (!n)
                return NONE32;
            m->clients = n;
            m->cap_clients = nc;
        }
        m->n_clients++;
    }
    m->clients[i] = (client_t){.id = id, .last_ms = awake_locked(m, now), .live = 1};
    m->live_clients++;
    return i;
}

static uint32_t seg_find(cr__master_t *m, const char *name)
{
    for (uint32_t i = 0; i < m->n_segs; i++)
        if (m->segs[i].live && !strcmp(m->segs[i].name, name))
            return i;
    return NONE32;
}

static int ping_locked(cr__master_t *m, cr__rpc_client_id_t id, uint64_t now, uint32_t *flags)
{
    uint32_t c = client_find(m, id);
    *flags = 0;
    if (c == NONE32) {
        c = client_add(m, id, now);
        if (c == CLIENTS_FULL)
            return CR_E_UNAVAILABLE_IN_CURRENT_STATUS;
        if (c == NONE32)
            return -ENOMEM;
        *flags = CR__RPC_F_NEED_REMOUNT;
    } else {
        m->clients[c].last_ms = awake_locked(m, now);
    }
    return 0;
}

int cr__master_ping(cr__master_t *m, cr__rpc_client_id_t id, uint64_t now, uint32_t *flags)
{
    pthread_mutex_lock(&m->mu);
    int rc = ping_locked(m, id, now, flags);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int mount_locked(cr__master_t *m, cr__rpc_client_id_t id, const char *name, uint64_t base,
                        uint64_t size, uint64_t now)
{
    if (!name || !*name || strnlen(name, CR__RPC_SEGMENT_NAME_MAX) >= CR__RPC_SEGMENT_NAME_MAX ||
        base + size < base || size < (1ull << m->cfg.granule_shift))
        return CR_E_INVALID_PARAMS;
    uint32_t c = client_find(m, id);
    uint32_t s = seg_find(m, name);
    if (s != NONE32) {
        seg_t *sg = &m->segs[s];
        if (c != NONE32 && sg->client == c && sg->base == base && sg->size == size) {
            m->clients[c].last_ms = awake_locked(m, now);
            return 0;
        }
        return CR_E_SEGMENT_ALREADY_EXISTS;
    }
    if (m->live_segs >= m->cfg.max_segments)
        return CR_E_UNAVAILABLE_IN_CURRENT_STATUS;
    if (c == NONE32) {
        c = client_add(m, id, now);
        if (c == CLIENTS_FULL)
            return CR_E_UNAVAILABLE_IN_CURRENT_STATUS;
        if (c == NONE32)
            return -ENOMEM;
    }
    m->clients[c].last_ms = awake_locked(m, now);
    for (s = 0; s < m->n_segs; s++)
        if (!m->segs[s].live)
            break;
    if (s == m->n_segs) {
        if (m->n_segs == m->cap_segs) {
            uint32_t nc = m->cap_segs ? m->cap_segs * 2 : 16;
            seg_t *n = realloc(m->segs, nc * sizeof *n);
            if (!n)
                return -ENOMEM;
            m->segs = n;
            m->cap_segs = nc;
        }
        memset(&m->segs[s], 0, sizeof m->segs[s]);
        m->n_segs++;
    }
    seg_t *sg = &m->segs[s];
    cr__oalloc_t *a;
    int rc = cr__oalloc_create(size, m->cfg.granule_shift, &a);
    if (rc)
        return rc == -ENOMEM ? -ENOMEM : CR_E_INVALID_PARAMS;
    snprintf(sg->name, sizeof sg->name, "%s", name);
    sg->base = base;
    sg->size = size;
    sg->alloc = a;
    sg->client = c;
    sg->live = 1;
    m->live_segs++;
    sg->alloc_after_ms = 0;
    for (int h = 0; h < HELD_MAX; h++)
        if (m->held[h].until > now && !strcmp(m->held[h].name, name))
            sg->alloc_after_ms = m->held[h].until;
    m->capacity += cr__oalloc_capacity(a);
    CR_LOG_INFO("master", "mounted segment %s base 0x%" PRIx64 " size %" PRIu64, name, base, size);
    return 0;
}

int cr__master_mount(cr__master_t *m, cr__rpc_client_id_t id, const char *name, uint64_t base,
                     uint64_t size, uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    int rc = mount_locked(m, id, name, base, size, now);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Drops every replica with a shard on segment s, deletes objects left
 * without replicas, and frees the segment. O(objects). */
static void seg_drop_locked(cr__master_t *m, uint32_t s, uint64_t now)
{
    seg_t *sg = &m->segs[s];
    obj_t **dead = NULL;
    size_t n_dead = 0, cap_dead = 0;
    uint64_t hold = sg->alloc_after_ms;
    for (uint64_t i = 0; i < m->cap; i++) {
        obj_t *o = m->slots[i];
        if (!o)
            continue;
        uint8_t *nsh = obj_nsh(o);
        shard_t *sh = obj_shards(o);
        int live = 0, hit = 0;
        for (uint32_t r = 0; r < o->n_rep; r++) {
            uint32_t n = nsh[r] & 0x7f;
            if (!(nsh[r] & REP_DEAD)) {
                int on = 0;
                for (uint32_t k = 0; k < n; k++)
                    on |= sh[k].seg == s;
                if (on) {
                    hit = 1;
                    uint64_t rel = obj_release_ms(m, o, now);
                    if (rel > hold)
                        hold = rel;
                    for (uint32_t k = 0; k < n; k++)
                        if (sh[k].seg != s)
                            block_release(m, sh[k].seg, sh[k].blk, rel, now);
                    nsh[r] |= REP_DEAD;
                    CNT(m, replicas_dropped_total)++;
                } else {
                    live++;
                }
            }
            sh += n;
        }
        /* a pending put that lost a replica cannot complete: drop it all */
        if (hit && (!live || !(o->flags & OF_COMPLETE))) {
            if (n_dead == cap_dead) {
                size_t nc = cap_dead ? cap_dead * 2 : 64;
                obj_t **nd = realloc(dead, nc * sizeof *nd);
                if (!nd) {
                    /* keep the record (no live replica is harmless: it is
                     * reported as a miss by every reader); retry later */
                    continue;
                }
                dead = nd;
                cap_dead = nc;
            }
            dead[n_dead++] = o;
        }
    }
    for (size_t i = 0; i < n_dead; i++) {
        obj_t *o = dead[i];
        if (o->flags & OF_COMPLETE)
            CNT(m, objects_lost_total)++;
        obj_delete(m, o, obj_release_ms(m, o, now), now);
    }
    free(dead);
    /* quarantine entries of this segment die with it */
    for (size_t i = 0; i < m->q_len; i++) {
        qent_t *e = &m->q[m->q_head + i];
        if (e->seg == s && e->gen == sg->gen) {
            if (e->release_ms > hold)
                hold = e->release_ms;
            m->quarantine_bytes -= e->bytes;
            e->seg = NONE32;
        }
    }
    if (hold > now) {
        /* remember the name: the same memory may come back (a client that
         * was only partitioned remounts), and must not be reused while a
         * reader or writer of the dropped replicas may still touch it */
        int slot = -1, victim = 0;
        for (int h = 0; h < HELD_MAX && slot < 0; h++)
            if (!strcmp(m->held[h].name, sg->name))
                slot = h;
        for (int h = 0; h < HELD_MAX && slot < 0; h++) {
            if (m->held[h].until <= now) {
                slot = h;
                m->held[h].until = 0;
            } else if (m->held[h].until < m->held[victim].until) {
                victim = h;
            }
        }
        if (slot < 0) {
            slot = victim;
            m->held[slot].until = 0;
        }
        snprintf(m->held[slot].name, sizeof m->held[slot].name, "%s", sg->name);
        if (hold > m->held[slot].until)
            m->held[slot].until = hold;
    }
    m->capacity -= cr__oalloc_capacity(sg->alloc);
    m->allocated -= cr__oalloc_used(sg->alloc);
    cr__oalloc_destroy(sg->alloc);
    sg->alloc = NULL;
    sg->live = 0;
    m->live_segs--;
    sg->gen++;
    CR_LOG_INFO("master", "unmounted segment %s (%zu objects lost)", sg->name, n_dead);
}

int cr__master_unmount(cr__master_t *m, cr__rpc_client_id_t id, const char *name, uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    int rc = CR_E_SEGMENT_NOT_FOUND;
    uint32_t c = client_find(m, id);
    uint32_t s = name ? seg_find(m, name) : NONE32;
    if (s != NONE32 && c != NONE32 && m->segs[s].client == c) {
        m->clients[c].last_ms = awake_locked(m, now);
        seg_drop_locked(m, s, now);
        rc = 0;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Expires clients silent for client_ttl on the awake clock: only time
 * in which the master could have read their heartbeats counts. */
static void expire_clients_locked(cr__master_t *m, uint64_t now)
{
    uint64_t awake = awake_locked(m, now);
    for (uint32_t c = 0; c < m->n_clients; c++) {
        client_t *cl = &m->clients[c];
        if (!cl->live || awake - cl->last_ms <= m->cfg.client_ttl_ms || awake < cl->last_ms)
            continue;
        for (uint32_t s = 0; s < m->n_segs; s++)
            if (m->segs[s].live && m->segs[s].client == c) {
                CR_LOG_WARN("master", "client silent for %" PRIu64 " ms: unmounting %s",
                            awake - cl->last_ms, m->segs[s].name);
                seg_drop_locked(m, s, now);
            }
        cl->live = 0;
        m->live_clients--;
        CNT(m, clients_expired_total)++;
    }
}

/* ---- allocation --------------------------------------------------------- */

typedef struct placing {
    uint32_t n_rep;
    uint8_t nsh[CR__RPC_REPLICA_MAX];
    shard_t sh[CR__RPC_REPLICA_MAX * CR__RPC_SHARD_MAX];
    uint64_t len[CR__RPC_REPLICA_MAX * CR__RPC_SHARD_MAX];
    uint32_t n_sh;
    uint32_t used_segs[CR__RPC_REPLICA_MAX * CR__RPC_SHARD_MAX];
    uint32_t n_used;
} placing_t;

static int seg_used(const placing_t *p, uint32_t s)
{
    for (uint32_t i = 0; i < p->n_used; i++)
        if (p->used_segs[i] == s)
            return 1;
    return 0;
}

static void placing_rollback(cr__master_t *m, placing_t *p)
{
    for (uint32_t i = 0; i < p->n_sh; i++)
        block_unalloc(m, p->sh[i].seg, p->sh[i].blk);
    p->n_sh = 0;
    p->n_rep = 0;
    p->n_used = 0;
}

/* Candidate order into m->order: preferred (mounted) names, then every
 * live segment from a rotating cursor. Returns the count. */
static uint32_t candidates(cr__master_t *m, const cr__rpc_repl_cfg_t *cfg, uint64_t now)
{
    uint32_t need = m->n_segs + CR__RPC_PREFERRED_MAX;
    if (need > m->cap_order) {
        uint32_t *o = realloc(m->order, need * sizeof *o);
        if (!o)
            return 0;
        m->order = o;
        m->cap_order = need;
    }
    uint32_t *order = m->order, n = 0, n_pref;
    for (uint32_t i = 0; cfg && cfg->preferred && i < cfg->n_preferred && i < CR__RPC_PREFERRED_MAX;
         i++) {
        uint32_t s = cfg->preferred[i] ? seg_find(m, cfg->preferred[i]) : NONE32;
        if (s != NONE32 && m->segs[s].alloc_after_ms > now)
            continue;
        int dup = 0;
        for (uint32_t k = 0; k < n; k++)
            dup |= order[k] == s;
        if (s != NONE32 && !dup)
            order[n++] = s;
    }
    n_pref = n;
    uint32_t start = m->n_segs ? m->seg_cursor++ % m->n_segs : 0;
    for (uint32_t k = 0; k < m->n_segs; k++) {
        uint32_t s = (start + k) % m->n_segs;
        if (!m->segs[s].live || m->segs[s].alloc_after_ms > now)
            continue;
        int dup = 0;
        for (uint32_t j = 0; j < n_pref; j++)
            dup |= order[j] == s;
        if (!dup)
            order[n++] = s;
    }
    return n;
}

/* Places one replica of size bytes, contiguous if any candidate fits, else
 * striped over several unused candidates (shards >= min_stripe except the
 * last). Returns 0 or -1 (nothing changed). */
static int place_replica(cr__master_t *m, placing_t *p, uint64_t size, uint32_t n_cand)
{
    const uint32_t *order = m->order;
    for (uint32_t k = 0; k < n_cand; k++) {
        uint32_t s = order[k];
        if (seg_used(p, s))
            continue;
        uint64_t off;
        uint32_t b = cr__oalloc_alloc(m->segs[s].alloc, size, &off);
        if (b == CR__OALLOC_NONE)
            continue;
        m->allocated += cr__oalloc_block_size(m->segs[s].alloc, b);
        p->sh[p->n_sh] = (shard_t){.seg = s, .blk = b};
        p->len[p->n_sh++] = size;
        p->used_segs[p->n_used++] = s;
        p->nsh[p->n_rep++] = 1;
        return 0;
    }
    /* striping */
    uint32_t first = p->n_sh, used0 = p->n_used;
    uint64_t left = size;
    for (uint32_t k = 0; k < n_cand && left && p->n_sh - first < CR__RPC_SHARD_MAX; k++) {
        uint32_t s = order[k];
        if (seg_used(p, s))
            continue;
        cr__oalloc_t *a = m->segs[s].alloc;
        uint64_t chunk = cr__oalloc_max_alloc(a);
        if (chunk >= left)
            chunk = left;
        else if (chunk < m->cfg.min_stripe)
            continue;
        uint64_t off;
        uint32_t b = cr__oalloc_alloc(a, chunk, &off);
        if (b == CR__OALLOC_NONE)
            continue;
        m->allocated += cr__oalloc_block_size(a, b);
        p->sh[p->n_sh] = (shard_t){.seg = s, .blk = b};
        p->len[p->n_sh++] = chunk;
        p->used_segs[p->n_used++] = s;
        left -= chunk;
    }
    if (left) {
        for (uint32_t i = first; i < p->n_sh; i++)
            block_unalloc(m, p->sh[i].seg, p->sh[i].blk);
        p->n_sh = first;
        p->n_used = used0;
        return -1;
    }
    p->nsh[p->n_rep++] = (uint8_t)(p->n_sh - first);
    return 0;
}

static int place_all(cr__master_t *m, placing_t *p, uint64_t size, uint32_t n_rep,
                     const cr__rpc_repl_cfg_t *cfg, uint64_t now)
{
    memset(p, 0, offsetof(placing_t, sh));
    p->n_sh = p->n_used = 0;
    uint32_t n_cand = candidates(m, cfg, now);
    if (n_cand < n_rep)
        return -1;
    for (uint32_t r = 0; r < n_rep; r++)
        if (place_replica(m, p, size, n_cand)) {
            placing_rollback(m, p);
            return -1;
        }
    return 0;
}

/* Fills it->replicas with the live replicas of o (names copied into the
 * arena of msg). Returns 0 or -ENOMEM. */
static int fill_replicas(cr__master_t *m, obj_t *o, cr__rpc_msg_t *msg, cr__rpc_item_t *it)
{
    uint8_t *nsh = obj_nsh(o);
    uint32_t live = 0;
    for (uint32_t r = 0; r < o->n_rep; r++)
        live += !(nsh[r] & REP_DEAD);
    it->n_replicas = 0;
    it->replicas = live ? cr__rpc_msg_alloc(msg, live * sizeof *it->replicas) : NULL;
    if (live && !it->replicas)
        return -ENOMEM;
    shard_t *sh = obj_shards(o);
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD)) {
            cr__rpc_replica_t *rp = &it->replicas[it->n_replicas++];
            rp->replica_id = REPLICA_ID(o->version, r);
            rp->n_shards = n;
            rp->shards = cr__rpc_msg_alloc(msg, n * sizeof *rp->shards);
            if (!rp->shards)
                return -ENOMEM;
            uint64_t left = o->size;
            for (uint32_t k = 0; k < n; k++) {
                seg_t *sg = &m->segs[sh[k].seg];
                uint64_t bs = cr__oalloc_block_size(sg->alloc, sh[k].blk);
                uint64_t len = k + 1 == n ? left : (bs < left ? bs : left);
                rp->shards[k].segment = cr__rpc_msg_strdup(msg, sg->name, strlen(sg->name));
                if (!rp->shards[k].segment)
                    return -ENOMEM;
                rp->shards[k].addr = sg->base + cr__oalloc_block_offset(sg->alloc, sh[k].blk);
                rp->shards[k].len = len;
                left -= len;
            }
        }
        sh += n;
    }
    return 0;
}

static obj_t *lookup(cr__master_t *m, const char *key, size_t len)
{
    int64_t i = map_find(m, key, len, key_hash(key, len));
    return i < 0 ? NULL : m->slots[i];
}

static uint64_t evict_locked(cr__master_t *m, uint64_t need, uint64_t now);

static int put_start_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t size,
                            const cr__rpc_repl_cfg_t *cfg, uint64_t now, cr__rpc_msg_t *msg,
                            cr__rpc_item_t *it)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    uint32_t n_rep = cfg && cfg->replica_num ? cfg->replica_num : 1;
    if (size == 0 || size > CR__RPC_VALUE_MAX || n_rep > CR__RPC_REPLICA_MAX)
        return CR_E_INVALID_PARAMS;
    uint64_t h = key_hash(key, key_len);
    int64_t i = map_find(m, key, key_len, h);
    if (i >= 0) {
        obj_t *o = m->slots[i];
        if ((o->flags & OF_COMPLETE) || o->until_ms > now)
            return CR_E_OBJECT_ALREADY_EXISTS;
        /* a dead writer's put past its deadline: reclaim it now */
        CNT(m, puts_timed_out_total)++;
        obj_delete(m, o, obj_release_ms(m, o, now), now);
    }
    placing_t p;
    if (place_all(m, &p, size, n_rep, cfg, now)) {
        q_release(m, now, SIZE_MAX);
        evict_locked(m, size * n_rep, now);
        if (place_all(m, &p, size, n_rep, cfg, now)) {
            CNT(m, alloc_failures_total)++;
            return CR_E_NO_AVAILABLE_HANDLE;
        }
    }
    size_t nsh_bytes = (n_rep + 3u) & ~3u;
    obj_t *o = malloc(sizeof *o + nsh_bytes + p.n_sh * sizeof(shard_t) + key_len);
    if (!o) {
        placing_rollback(m, &p);
        return -ENOMEM;
    }
    memset(o, 0, sizeof *o);
    o->version = m->next_version++;
    o->size = size;
    o->until_ms = now + m->cfg.put_timeout_ms;
    o->key_len = (uint16_t)key_len;
    o->n_rep = (uint8_t)n_rep;
    if (cfg && (cfg->flags & CR__RPC_CFG_HARD_PIN))
        o->flags |= OF_HARD_PIN;
    if (cfg && (cfg->flags & CR__RPC_CFG_SOFT_PIN))
        o->flags |= OF_SOFT_PIN;
    memcpy(obj_nsh(o), p.nsh, n_rep);
    memcpy(obj_shards(o), p.sh, p.n_sh * sizeof(shard_t));
    memcpy(obj_key(o), key, key_len);
    if (map_insert(m, o, h)) {
        placing_rollback(m, &p);
        free(o);
        return -ENOMEM;
    }
    list_push_back(&m->pending, o);
    m->n_pending++;
    it->version = o->version;
    it->size = size;
    it->lease_ms = (uint32_t)(m->cfg.put_timeout_ms > UINT32_MAX ? UINT32_MAX
                                                                 : m->cfg.put_timeout_ms);
    int rc = fill_replicas(m, o, msg, it);
    if (rc) {
        obj_delete(m, o, 0, now);
        return rc;
    }
    if (cr__evict_over_watermark(&m->ev, m->allocated - m->quarantine_bytes, m->capacity))
        evict_locked(m, 0, now);
    return 0;
}

int cr__master_put_start(cr__master_t *m, const char *key, size_t key_len, uint64_t size,
                         const cr__rpc_repl_cfg_t *cfg, uint64_t now, cr__rpc_msg_t *msg,
                         cr__rpc_item_t *it)
{
    pthread_mutex_lock(&m->mu);
    int rc = put_start_locked(m, key, key_len, size, cfg, now, msg, it);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int put_end_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                          uint64_t now)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    obj_t *o = lookup(m, key, key_len);
    if (!o || o->version != version)
        return CR_E_OBJECT_NOT_FOUND;
    if (o->flags & OF_COMPLETE)
        return 0;
    if (o->until_ms <= now) { /* past its deadline: reclaim, refuse */
        CNT(m, puts_timed_out_total)++;
        obj_delete(m, o, obj_release_ms(m, o, now), now);
        return CR_E_OBJECT_NOT_FOUND;
    }
    list_unlink(o);
    m->n_pending--;
    o->flags |= OF_COMPLETE;
    o->until_ms = 0; /* no lease yet */
    if (o->flags & OF_SOFT_PIN) {
        uint64_t until = (now + m->cfg.soft_pin_ttl_ms + 999) / 1000;
        o->pin_until_s = until > UINT32_MAX ? UINT32_MAX : (uint32_t)until;
    }
    list_push_front(&m->lru, o);
    m->n_complete++;
    m->state_seq++;
    CNT(m, puts_completed_total)++;
    return 0;
}

int cr__master_put_end(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                       uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    int rc = put_end_locked(m, key, key_len, version, now);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int put_revoke_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                             uint64_t now)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    obj_t *o = lookup(m, key, key_len);
    if (!o || o->version != version)
        return CR_E_OBJECT_NOT_FOUND;
    if (o->flags & OF_COMPLETE)
        return CR_E_INVALID_PARAMS;
    /* The writer gave up, but a transfer it timed out on may still have
     * slices in flight toward this space (TE requests cannot be recalled):
     * quarantine it like a put that missed its deadline, so no new object's
     * bytes can be overwritten by the abandoned write. The client keeps its
     * transfer timeout below the put timeout, so that long is enough. */
    obj_delete(m, o, now + m->cfg.put_timeout_ms, now);
    CNT(m, puts_revoked_total)++;
    return 0;
}

int cr__master_put_revoke(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                          uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    int rc = put_revoke_locked(m, key, key_len, version, now);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static obj_t *lookup_complete(cr__master_t *m, const char *key, size_t key_len)
{
    obj_t *o = lookup(m, key, key_len);
    return o && (o->flags & OF_COMPLETE) ? o : NULL;
}

static int get_replicas_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t now,
                               cr__rpc_msg_t *msg, cr__rpc_item_t *it)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    obj_t *o = lookup_complete(m, key, key_len);
    if (!o) {
        CNT(m, misses_total)++;
        return CR_E_OBJECT_NOT_FOUND;
    }
    int rc = fill_replicas(m, o, msg, it);
    if (rc)
        return rc;
    uint64_t until = now + m->cfg.lease_ttl_ms;
    if (o->until_ms < until)
        o->until_ms = until;
    list_unlink(o);
    list_push_front(&m->lru, o);
    m->state_seq++;
    it->version = o->version;
    it->size = o->size;
    it->lease_ms = (uint32_t)(m->cfg.lease_ttl_ms > UINT32_MAX ? UINT32_MAX : m->cfg.lease_ttl_ms);
    CNT(m, hits_total)++;
    return 0;
}

int cr__master_get_replicas(cr__master_t *m, const char *key, size_t key_len, uint64_t now,
                            cr__rpc_msg_t *msg, cr__rpc_item_t *it)
{
    pthread_mutex_lock(&m->mu);
    int rc = get_replicas_locked(m, key, key_len, now, msg, it);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int exist_locked(cr__master_t *m, const char *key, size_t key_len)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    return lookup_complete(m, key, key_len) ? 0 : CR_E_OBJECT_NOT_FOUND;
}

int cr__master_exist(cr__master_t *m, const char *key, size_t key_len, uint64_t now)
{
    (void)now;
    pthread_mutex_lock(&m->mu);
    int rc = exist_locked(m, key, key_len);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int get_size_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t *size)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    obj_t *o = lookup_complete(m, key, key_len);
    if (!o)
        return CR_E_OBJECT_NOT_FOUND;
    *size = o->size;
    return 0;
}

int cr__master_get_size(cr__master_t *m, const char *key, size_t key_len, uint64_t now,
                        uint64_t *size)
{
    (void)now;
    pthread_mutex_lock(&m->mu);
    int rc = get_size_locked(m, key, key_len, size);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int remove_locked(cr__master_t *m, const char *key, size_t key_len, int force,
                         uint64_t now)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    obj_t *o = lookup_complete(m, key, key_len);
    if (!o)
        return CR_E_OBJECT_NOT_FOUND;
    if (o->until_ms > now && !force)
        return CR_E_OBJECT_HAS_LEASE;
    obj_delete(m, o, obj_release_ms(m, o, now), now);
    CNT(m, removed_objects_total)++;
    return 0;
}

int cr__master_remove(cr__master_t *m, const char *key, size_t key_len, int force, uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    int rc = remove_locked(m, key, key_len, force, now);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int remove_all_locked(cr__master_t *m, int force, uint64_t now, uint64_t *count)
{
    uint64_t n = 0;
    obj_t *o = m->lru.next;
    while (o != &m->lru) {
        obj_t *next = o->next;
        if (force || o->until_ms <= now) {
            obj_delete(m, o, obj_release_ms(m, o, now), now);
            n++;
        }
        o = next;
    }
    CNT(m, removed_objects_total) += n;
    *count = n;
    return 0;
}

int cr__master_remove_all(cr__master_t *m, int force, uint64_t now, uint64_t *count)
{
    pthread_mutex_lock(&m->mu);
    int rc = remove_all_locked(m, force, now, count);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int validate_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                           uint64_t replica_id)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    obj_t *o = lookup_complete(m, key, key_len);
    int rc = 0;
    if (!o || o->version != version || (replica_id >> 3) != version)
        rc = CR_E_OBJECT_NOT_FOUND;
    else if ((replica_id & 7) >= o->n_rep || (obj_nsh(o)[replica_id & 7] & REP_DEAD))
        rc = CR_E_REPLICA_IS_GONE;
    if (rc)
        CNT(m, validate_failures_total)++;
    return rc;
}

int cr__master_validate(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                        uint64_t replica_id, uint64_t now)
{
    (void)now;
    pthread_mutex_lock(&m->mu);
    int rc = validate_locked(m, key, key_len, version, replica_id);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* ---- eviction ----------------------------------------------------------- */

static cr__evict_verdict_t verdict(cr__master_t *m, obj_t *o, uint64_t now)
{
    cr__evict_view_t v = {
        .complete = (o->flags & OF_COMPLETE) != 0,
        .hard_pinned = (o->flags & OF_HARD_PIN) != 0,
        .soft_pinned = (o->flags & OF_SOFT_PIN) && (uint64_t)o->pin_until_s * 1000 > now,
        .lease_until_ms = o->until_ms,
    };
    (void)m;
    return cr__evict_classify(&v, now);
}

static uint64_t evict_locked(cr__master_t *m, uint64_t need, uint64_t now)
{
    uint64_t target = cr__evict_target(&m->ev, m->allocated, m->capacity, need);
    if (!target)
        return 0;
    if (m->futile && m->futile_now == now && m->futile_seq == m->state_seq)
        return 0;
    CNT(m, eviction_steps_total)++;
    uint64_t freed = 0, n = 0;
    int passes = m->cfg.evict_soft_pinned ? 2 : 1;
    for (int pass = 0; pass < passes && freed < target; pass++) {
        cr__evict_verdict_t want = pass == 0 ? CR__EVICT_NOW : CR__EVICT_LAST;
        uint32_t visited = 0;
        obj_t *o = m->lru.prev;
        while (o != &m->lru && freed < target && visited++ < m->ev.max_visit) {
            obj_t *prev = o->prev;
            if (verdict(m, o, now) == want) {
                uint64_t b = obj_bytes(m, o);
                obj_delete(m, o, 0, now);
                freed += b;
                n++;
                CNT(m, evicted_bytes_total) += b;
            }
            o = prev;
        }
    }
    CNT(m, evictions_total) += n;
    m->futile = n == 0;
    m->futile_now = now;
    m->futile_seq = m->state_seq;
    if (n)
        CR_LOG_INFO("master", "evicted %" PRIu64 " objects, %" PRIu64 " bytes (target %" PRIu64
                    ")", n, freed, target);
    return n;
}

uint64_t cr__master_evict(cr__master_t *m, uint64_t need, uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    uint64_t n = evict_locked(m, need, now);
    pthread_mutex_unlock(&m->mu);
    return n;
}

void cr__master_tick(cr__master_t *m, uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    q_release(m, now, 100000);
    expire_clients_locked(m, now);
    for (int k = 0; k < 100000 && m->pending.next != &m->pending; k++) {
        obj_t *o = m->pending.next;
        if (o->until_ms > now)
            break;
        CNT(m, puts_timed_out_total)++;
        CR_LOG_INFO("master", "put of '%.*s' not ended by its deadline: reclaimed",
                    o->key_len > 64 ? 64 : (int)o->key_len, obj_key(o));
        obj_delete(m, o, obj_release_ms(m, o, now), now);
    }
    if (cr__evict_over_watermark(&m->ev, m->allocated - m->quarantine_bytes, m->capacity))
        evict_locked(m, 0, now);
    pthread_mutex_unlock(&m->mu);
}

/* ---- rpc dispatch ------------------------------------------------------- */

static int item_locked(cr__master_t *m, uint16_t bt, const cr__rpc_item_t *in,
                       cr__rpc_item_t *out, cr__rpc_msg_t *reply, uint64_t now)
{
    switch (bt) {
    case CR__RPC_PUT_START:
        CNT(m, rpc_put_start_total)++;
        return put_start_locked(m, in->key, in->key_len, in->size, &in->cfg, now, reply, out);
    case CR__RPC_PUT_END:
        CNT(m, rpc_put_end_total)++;
        return put_end_locked(m, in->key, in->key_len, in->version, now);
    case CR__RPC_PUT_REVOKE:
        CNT(m, rpc_put_revoke_total)++;
        return put_revoke_locked(m, in->key, in->key_len, in->version, now);
    case CR__RPC_GET_REPLICA_LIST:
        CNT(m, rpc_get_replica_list_total)++;
        return get_replicas_locked(m, in->key, in->key_len, now, reply, out);
    case CR__RPC_EXIST:
        CNT(m, rpc_exist_total)++;
        return exist_locked(m, in->key, in->key_len);
    case CR__RPC_GET_SIZE:
        CNT(m, rpc_get_size_total)++;
        return get_size_locked(m, in->key, in->key_len, &out->size);
    case CR__RPC_REMOVE:
        CNT(m, rpc_remove_total)++;
        return remove_locked(m, in->key, in->key_len, (in->flags & CR__RPC_F_FORCE) != 0, now);
    case CR__RPC_VALIDATE:
        CNT(m, rpc_validate_total)++;
        return validate_locked(m, in->key, in->key_len, in->version, in->replica_id);
    default:
        return CR_E_INVALID_PARAMS;
    }
}

void cr__master_handle(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                       uint64_t now)
{
    uint16_t type = req->type & (uint16_t)~CR__RPC_REPLY;
    reply->status = 0;
    if (cr__rpc_type_has_items(type)) {
        uint16_t bt = type >= CR__RPC_BATCH_PUT_START ? (uint16_t)(type - CR__RPC_BATCH_OFFSET)
                                                      : type;
        reply->items = req->n_items ? cr__rpc_msg_alloc(reply, req->n_items * sizeof *reply->items)
                                    : NULL;
        if (req->n_items && !reply->items) {
            reply->status = CR_E_INTERNAL_ERROR;
            return;
        }
        reply->n_items = req->n_items;
        pthread_mutex_lock(&m->mu);
        if (type != bt)
            CNT(m, rpc_batch_requests_total)++;
        for (uint32_t i = 0; i < req->n_items; i++) {
            cr__rpc_item_t *out = &reply->items[i];
            int rc = item_locked(m, bt, &req->items[i], out, reply, now);
            if (rc == -ENOMEM)
                rc = CR_E_INTERNAL_ERROR;
            if (rc) {
                /* a failed item carries no data */
                memset(out, 0, sizeof *out);
                CNT(m, rpc_errors_total)++;
            }
            out->status = rc;
        }
        pthread_mutex_unlock(&m->mu);
        if (type == bt && reply->n_items == 1)
            reply->status = reply->items[0].status;
        return;
    }
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    switch (type) {
    case CR__RPC_PING:
        CNT(m, rpc_ping_total)++;
        rc = ping_locked(m, req->client_id, now, &reply->flags);
        /* a heartbeat naming the segment its sender believes mounted: if
         * the master dropped it (expiry, restart), the sender remounts */
        if (!rc && req->segment) {
            uint32_t s = seg_find(m, req->segment);
            if (s == NONE32 || m->segs[s].client != client_find(m, req->client_id))
                reply->flags |= CR__RPC_F_NEED_REMOUNT;
        }
        reply->master_id = m->master_id;
        reply->count = m->cfg.client_ttl_ms;
        break;
    case CR__RPC_MOUNT_SEGMENT:
        CNT(m, rpc_mount_segment_total)++;
        rc = mount_locked(m, req->client_id, req->segment, req->base, req->size, now);
        break;
    case CR__RPC_UNMOUNT_SEGMENT: {
        CNT(m, rpc_unmount_segment_total)++;
        uint32_t c = client_find(m, req->client_id);
        uint32_t s = req->segment ? seg_find(m, req->segment) : NONE32;
        if (s != NONE32 && c != NONE32 && m->segs[s].client == c) {
            m->clients[c].last_ms = awake_locked(m, now);
            seg_drop_locked(m, s, now);
        } else {
            rc = CR_E_SEGMENT_NOT_FOUND;
        }
        break;
    }
    case CR__RPC_REMOVE_ALL:
        CNT(m, rpc_remove_all_total)++;
        rc = remove_all_locked(m, (req->flags & CR__RPC_F_FORCE) != 0, now, &reply->count);
        break;
    default:
        rc = CR_E_INVALID_PARAMS;
    }
    if (rc == -ENOMEM)
        rc = CR_E_INTERNAL_ERROR;
    if (rc)
        CNT(m, rpc_errors_total)++;
    pthread_mutex_unlock(&m->mu);
    reply->status = rc;
}

/* ---- stats, metrics, admin ---------------------------------------------- */

void cr__master_stats(cr__master_t *m, cr__master_stats_t *st)
{
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&m->mu);
    memcpy(st->counters, m->counters, sizeof st->counters);
    st->keys = m->n_complete;
    st->pending_puts = m->n_pending;
    for (uint32_t i = 0; i < m->n_segs; i++)
        st->segments += m->segs[i].live != 0;
    for (uint32_t i = 0; i < m->n_clients; i++)
        st->clients += m->clients[i].live != 0;
    st->capacity_bytes = m->capacity;
    st->allocated_bytes = m->allocated;
    st->quarantine_bytes = m->quarantine_bytes;
    pthread_mutex_unlock(&m->mu);
    st->counters[CR__MM_keys] = st->keys;
    st->counters[CR__MM_pending_puts] = st->pending_puts;
    st->counters[CR__MM_segments] = st->segments;
    st->counters[CR__MM_clients] = st->clients;
    st->counters[CR__MM_capacity_bytes] = st->capacity_bytes;
    st->counters[CR__MM_allocated_bytes] = st->allocated_bytes;
    st->counters[CR__MM_quarantine_bytes] = st->quarantine_bytes;
}

/* growable text buffer */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    int err;
} sbuf_t;

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf_t *b, const char *fmt, ...)
{
    if (b->err)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->err = 1;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t nc = b->cap ? b->cap * 2 : 1024;
        while (nc < b->len + (size_t)n + 1)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->err = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
}

static void sb_json_str(sbuf_t *b, const char *s, size_t len)
{
    sb_printf(b, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            sb_printf(b, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            sb_printf(b, "\\u%04x", c);
        else
            sb_printf(b, "%c", c);
    }
    sb_printf(b, "\"");
}

static int sb_finish(sbuf_t *b, char **out, size_t *len)
{
    if (b->err || !b->p) {
        free(b->p);
        return -ENOMEM;
    }
    *out = b->p;
    if (len)
        *len = b->len;
    return 0;
}

#define METRIC_ROW(name, type, help) {#name, #type, help},
static const struct {
    const char *name, *type, *help;
} metric_rows[] = {CR__MASTER_METRICS(METRIC_ROW)};

int cr__master_metrics_text(cr__master_t *m, char **out, size_t *len)
{
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    sbuf_t b = {0};
    for (int i = 0; i < CR__MM_COUNT; i++)
        sb_printf(&b, "# HELP crescent_master_%s %s\n# TYPE crescent_master_%s %s\ncrescent_master_%s %" PRIu64 "\n",
                  metric_rows[i].name, metric_rows[i].help, metric_rows[i].name,
                  metric_rows[i].type, metric_rows[i].name, st.counters[i]);
    return sb_finish(&b, out, len);
}

int cr__master_query_key_json(cr__master_t *m, const char *key, size_t key_len, uint64_t now,
                              char **out, size_t *len)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    sbuf_t b = {0};
    pthread_mutex_lock(&m->mu);
    obj_t *o = lookup(m, key, key_len);
    if (!o) {
        pthread_mutex_unlock(&m->mu);
        return CR_E_OBJECT_NOT_FOUND;
    }
    int complete = (o->flags & OF_COMPLETE) != 0;
    sb_printf(&b, "{\"key\":");
    sb_json_str(&b, obj_key(o), o->key_len);
    sb_printf(&b,
              ",\"state\":\"%s\",\"version\":%" PRIu64 ",\"size\":%" PRIu64
              ",\"lease_remaining_ms\":%" PRIu64 ",\"put_deadline_ms\":%" PRIu64
              ",\"hard_pin\":%s,\"soft_pin\":%s,\"replicas\":[",
              complete ? "complete" : "pending", o->version, o->size,
              complete && o->until_ms > now ? o->until_ms - now : 0,
              !complete && o->until_ms > now ? o->until_ms - now : 0,
              (o->flags & OF_HARD_PIN) ? "true" : "false",
              (o->flags & OF_SOFT_PIN) ? "true" : "false");
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    int first = 1;
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD)) {
            sb_printf(&b, "%s{\"replica_id\":%" PRIu64 ",\"shards\":[", first ? "" : ",",
                      REPLICA_ID(o->version, r));
            first = 0;
            for (uint32_t k = 0; k < n; k++) {
                seg_t *sg = &m->segs[sh[k].seg];
                sb_printf(&b, "%s{\"segment\":", k ? "," : "");
                sb_json_str(&b, sg->name, strlen(sg->name));
                sb_printf(&b, ",\"addr\":%" PRIu64 ",\"bytes\":%" PRIu64 "}",
                          sg->base + cr__oalloc_block_offset(sg->alloc, sh[k].blk),
                          cr__oalloc_block_size(sg->alloc, sh[k].blk));
            }
            sb_printf(&b, "]}");
        }
        sh += n;
    }
    sb_printf(&b, "]}\n");
    pthread_mutex_unlock(&m->mu);
    return sb_finish(&b, out, len);
}

int cr__master_segments_json(cr__master_t *m, char **out, size_t *len)
{
    sbuf_t b = {0};
    sb_printf(&b, "[");
    pthread_mutex_lock(&m->mu);
    int first = 1;
    for (uint32_t i = 0; i < m->n_segs; i++) {
        seg_t *sg = &m->segs[i];
        if (!sg->live)
            continue;
        cr__rpc_client_id_t id = m->clients[sg->client].id;
        sb_printf(&b, "%s{\"name\":", first ? "" : ",");
        first = 0;
        sb_json_str(&b, sg->name, strlen(sg->name));
        sb_printf(&b,
                  ",\"base\":%" PRIu64 ",\"size\":%" PRIu64 ",\"capacity\":%" PRIu64
                  ",\"used\":%" PRIu64 ",\"client_id\":\"%016" PRIx64 "%016" PRIx64 "\"}",
                  sg->base, sg->size, cr__oalloc_capacity(sg->alloc), cr__oalloc_used(sg->alloc),
                  id.hi, id.lo);
    }
    pthread_mutex_unlock(&m->mu);
    sb_printf(&b, "]\n");
    return sb_finish(&b, out, len);
}
