/* Master-internal header: the records and the state struct shared by the
 * files of src/store/master/. Nothing outside this folder includes it; the
 * master's interface is master.h.
 *
 * Files, one job each:
 *   master.c     create/destroy, defaults, the periodic tick
 *   objmap.c     key index (open addressing over record pointers)
 *   space.c      freeing space: quarantine, block release, object delete
 *   placement.c  where a new object's replicas go; its replica list
 *   segments.c   clients (heartbeats) and mounted segments
 *   objects.c    object operations: two-phase put, get, remove, validate
 *   eviction.c   the glue between the master and store/eviction/policy
 *   dispatch.c   serving one decoded rpc request (single or batch)
 *   report.c     stats snapshot, Prometheus text, JSON views
 *   durable.c    op records of durable changes, rebuild from a shadow
 *                index, snapshot dump (ha/: journal, records, shadow)
 *   tier.c       the disk tier: offload/demote tasks, node reports
 *   rtask.c      replica copy/move tasks, per-replica clear
 *   admin.c      HTTP admin endpoints (admin.h; uses master.h only)
 *   checksum.c   end-to-end value checksums: PutEnd's crc kept with the object
 *   caps.c       per-object capabilities: segment keys, grants in replica lists
 *   fs.c         the shared-file-system tier (--root_fs_dir): the fs replica
 *   reserve.c    client space reservations: RESERVE, PUT_COMMIT (one-round-trip put)
 *
 * Lock discipline: one mutex, m->mu, guards every field of struct
 * cr__master except cfg, ev and master_id (written once by
 * cr__master_create, read-only after). Every cr__m_* function below is
 * called with m->mu held; the ones named *_locked are the operations
 * (what a public call or one rpc item does under the lock), the others are
 * helpers. The public cr__master_* calls take the lock themselves.
 */
#ifndef CR_STORE_MASTER_MASTER_PRIV_H
#define CR_STORE_MASTER_MASTER_PRIV_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <xxhash.h>

#include "store/allocator/offset_alloc.h"
#include "store/eviction/policy.h"
#include "store/master/ha/record.h"
#include "store/master/ha/shadow.h"
#include "store/master/master.h"

/* ---- records ------------------------------------------------------------ */

#define OF_COMPLETE 0x1
#define OF_HARD_PIN 0x2
#define OF_SOFT_PIN 0x4
#define OF_OFFLOADING 0x8 /* a tier OFFLOAD task of this object is queued or running */
#define OF_HIT1 0x10       /* read from disk once (promotion admits the second hit) */
#define OF_PROMOTING 0x20  /* a tier PROMOTE task of this object is queued or running */
#define OF_CRC 0x40        /* crc holds the writer's end-to-end checksum (checksum.c) */
#define OF_FS 0x80         /* a file on the shared-file-system tier holds it (fs.c) */
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
    uint64_t size : 40;   /* <= CR__RPC_VALUE_MAX */
    uint64_t wcap : 24;   /* capabilities on: until when a WRITE grant over its space
                             (PutStart's, its reservation's, a copy task's) verifies, in
                             seconds modulo WCAP_MOD, + 1; 0 = none (obj_wcap_until) */
    uint64_t until_ms;    /* complete: lease expiry; pending: put deadline */
    uint32_t pin_until_s; /* soft pin expiry (now_ms / 1000 scale) */
    uint16_t key_len;
    uint8_t flags;
    uint8_t n_rep;
    uint32_t crc;         /* crc32c of the value when flags has OF_CRC (checksum.c) */
    uint32_t fs_until_s;  /* shared-FS tier: its file is being written until then (now_ms /
                             1000 scale): not evicted before (fs.c); 0 = none */
} obj_t;
_Static_assert(sizeof(obj_t) == 56, "compact object header");

_Static_assert(CR__RPC_VALUE_MAX < (1ull << 40), "an object's size fits its 40 bits");

/* The WRITE grant stamp (a grant cannot be recalled: the object's space is
 * not reused, nor the object evicted, before the grants over it expire;
 * space.c). 24 bits hold it as seconds modulo WCAP_MOD (194 days): a
 * stamp is only ever set less than WCAP_WINDOW_S ahead of the master's
 * clock, so one WCAP_WINDOW_S or less ahead of now is live, and an expired
 * stamp reads as live again only for WCAP_WINDOW_S in every 194 days,
 * which holds its space a little longer, never shorter. */
#define WCAP_MOD ((1u << 24) - 1u)
#define WCAP_WINDOW_S 900u /* > the longest grant: CR__CAP_TTL_MAX_MS / 2 (5 min) + 1 s */

/* Records that a WRITE grant over o's space verifies until until_ms (the
 * grant is minted a moment later in the same locked handler: the stamp is
 * up to a second past it). Keeps the later of two stamps. */
static inline void obj_wcap_until(obj_t *o, uint64_t now, uint64_t until_ms)
{
    uint64_t s = until_ms / 1000 + 1, now_s = now / 1000;
    if (s <= now_s)
        return;
    if (s - now_s > WCAP_WINDOW_S)
        s = now_s + WCAP_WINDOW_S; /* cannot happen: grants are shorter */
    if (o->wcap) {
        uint64_t cur = (o->wcap - 1 + WCAP_MOD - now_s % WCAP_MOD) % WCAP_MOD;
        if (cur <= WCAP_WINDOW_S && now_s + cur >= s)
            return; /* a later stamp is live */
    }
    o->wcap = s % WCAP_MOD + 1;
}

/* Until when (ms) a WRITE grant over o's space may verify, or 0. */
static inline uint64_t obj_wcap_ms(const obj_t *o, uint64_t now)
{
    if (!o->wcap)
        return 0;
    uint64_t now_s = now / 1000;
    uint64_t ahead = (o->wcap - 1 + WCAP_MOD - now_s % WCAP_MOD) % WCAP_MOD;
    return ahead && ahead <= WCAP_WINDOW_S ? (now_s + ahead) * 1000 : 0;
}

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
    uint64_t held_until;     /* parts of its memory held until then (held.c) */
    /* restored from a journal and not mounted again yet (client ==
     * NONE32): only its owner (same client id, base, size) may attach it,
     * before orphan_awake + client ttl on the awake clock (durable.c) */
    cr__rpc_client_id_t owner;
    uint64_t orphan_awake;
    uint8_t tier;            /* 0 DRAM, 1 node disk (tier.c; never counted in capacity) */
    /* allocation window (window.c): [win_cur, win_end) is block win_blk,
     * carved from win_start; none while win_end == 0 */
    uint32_t win_blk;
    uint64_t win_start, win_cur, win_end, win_gen;
} seg_t;

/* Byte ranges of a dropped segment that a reader or writer may still
 * touch, each until when (held.c). `whole`: the list could not be kept
 * (too many ranges, no memory, a disk segment): the whole segment waits. */
typedef struct held_range {
    uint64_t off, len, until; /* off: from the dropped segment's base */
} held_range_t;
typedef struct held_set {
    held_range_t *v;
    uint32_t n, cap;
    int whole;
} held_set_t;
/* Ranges kept per held name at most (more: the whole segment waits). */
#define HELD_RANGES_MAX 65536u

/* A segment name dropped while its space could still be read (live
 * leases) or written (pending puts, reservations, copy targets, its
 * quarantine): if the same memory is mounted again under that name (the
 * same client, or a range overlapping the dropped one), the ranges in rg
 * are reserved in the new allocator and quarantined until their time;
 * with rg.whole, nothing is allocated there before `until` (held.c). */
#define HELD_MAX 64
_Static_assert(HELD_MAX <= CR__HA_HELDS_MAX, "a standby's shadow keeps every held name");
typedef struct held {
    char name[CR__RPC_SEGMENT_NAME_MAX];
    uint64_t until; /* the latest of rg's times (or the whole hold) */
    /* the dropped segment's owner and memory: only the same memory coming
     * back (the same client, or a range that overlaps it) waits for
     * `until`; another client's memory that merely got the same name (its
     * Transfer Engine reused the host:port) is usable at once */
    cr__rpc_client_id_t owner;
    uint64_t base, size;
    held_set_t rg;
} held_t;

typedef struct client {
    cr__rpc_client_id_t id;
    uint64_t last_ms; /* last heartbeat, on the awake clock (segments.c) */
    int live;
} client_t;

typedef struct qent {
    uint32_t seg, gen, blk;
    uint64_t bytes;
    uint64_t release_ms;
} qent_t;

struct cr__master {
    pthread_mutex_t mu; /* guards every field below except cfg, ev, master_id */
    cr__master_cfg_t cfg; /* immutable after create */
    cr__evict_cfg_t ev;   /* immutable after create */
    uint64_t master_id;   /* immutable after create */
    uint64_t next_version;
    /* key index (objmap.c): open addressing, linear probing, backward-shift
     * deletion */
    obj_t **slots;
    uint32_t *tags; /* low 32 bits of the key hash */
    uint64_t cap, count;
    uint64_t key_bytes; /* sum of key_len over the index (the metadata cap) */
    obj_t lru;     /* sentinel: lru.next = most recent, lru.prev = oldest */
    obj_t pending; /* sentinel: FIFO by start time (= by deadline) */
    obj_t ssd_lru; /* sentinel: complete objects with no live DRAM replica (tier.c) */
    struct cr__mtier *tier; /* tier state (tier.c), NULL until a disk segment mounts */
    struct cr__mrtask *rtask; /* replica tasks (rtask.c), NULL until the first one */
    struct cr__mcaps *caps;   /* capabilities (caps.c), NULL = off */
    /* clients and segments (segments.c) */
    seg_t *segs;
    uint32_t n_segs, cap_segs, seg_cursor;
    client_t *clients;
    uint32_t n_clients, cap_clients, live_clients, live_segs;
    held_t held[HELD_MAX];
    uint32_t held_ranges_max; /* HELD_RANGES_MAX (tests lower it) */
    /* space accounting and the quarantine, a min-heap on release_ms (space.c) */
    qent_t *q;
    size_t q_len, q_cap;
    uint64_t capacity, allocated, quarantine_bytes;
    uint64_t n_complete, n_pending;
    /* eviction (eviction.c). A step that evicted nothing stays futile
     * until something changes (space freed, an object completed or was
     * touched) or time moves: skip repeating it (a 4096-key batch on a
     * pinned-full pool would otherwise walk the LRU 4096 times). */
    uint64_t state_seq, futile_seq, futile_now;
    int futile;
    /* the same for a step making room outside a PutStart's exclusion
     * list, whose segment indices hash to futile_x_key */
    uint64_t futile_x_seq, futile_x_now, futile_x_key;
    int futile_x;
    /* placement scratch (placement.c): candidate segments of one placement */
    uint32_t *order;
    uint32_t cap_order;
    /* The awake clock (segments.c): time the master was able to run. It
     * follows now_ms but a gap between two observations longer than
     * STALL_CREDIT_MS (the process stopped, the VM paused, the machine
     * starved it) counts as STALL_CREDIT_MS only: a master that could not
     * read heartbeats does not count that time against its clients. */
    uint64_t awake_ms, seen_ms;
    int clock_started;
    /* op records of every durable change, in state order (durable.c) */
    cr__master_journal_fn jfn;
    void *juser;
    cr__ha_buf_t jbuf;
    cr__ha_rec_t jrec;
    uint64_t counters[CR__MM_COUNT]; /* metrics list of master.h */
    /* allocation windows (window.c): on while an HA leader serves; a
     * window is confirmed (on every in-sync standby) once win_gen <=
     * win_confirmed; jr_lazy: the record being emitted needs no wait */
    int win_on, jr_lazy;
    uint64_t win_gen, win_confirmed;
    /* shared-file-system tier (fs.c): NULL = off; fs_lru holds complete
     * objects whose only copy is their file (never evicted) */
    struct cr__mfs *fs;
    obj_t fs_lru;
    /* client space reservations (reserve.c): NULL until the first one;
     * resv_on: RESERVE is served (on by default) */
    struct cr__mresv *resv;
    int resv_on;
    uint64_t resv_free; /* bytes of open reservations not committed yet (allocated) */
};

/* Bytes the eviction watermark counts: allocated space minus the
 * quarantine (freed, waiting) and the free part of open client
 * reservations (space, not data: no object is evicted to keep it). */
static inline uint64_t m_used(const struct cr__master *m)
{
    return m->allocated - m->quarantine_bytes - m->resv_free;
}

#define CNT(m, name) ((m)->counters[CR__MM_##name])

/* ---- lists (LRU of complete objects, FIFO of pending puts) --------------- */

static inline void list_init(obj_t *s) { s->prev = s->next = s; }
static inline void list_unlink(obj_t *o)
{
    o->prev->next = o->next;
    o->next->prev = o->prev;
    o->prev = o->next = NULL;
}
static inline void list_push_front(obj_t *s, obj_t *o)
{
    o->next = s->next;
    o->prev = s;
    s->next->prev = o;
    s->next = o;
}
static inline void list_push_back(obj_t *s, obj_t *o)
{
    o->prev = s->prev;
    o->next = s;
    s->prev->next = o;
    s->prev = o;
}

/* ---- keys --------------------------------------------------------------- */

static inline uint64_t key_hash(const char *k, size_t l) { return XXH3_64bits(k, l); }

static inline int key_ok(const char *k, size_t l)
{
    return k && l >= 1 && l <= CR__RPC_KEY_MAX && !memchr(k, 0, l);
}

/* ---- objmap.c: key index ------------------------------------------------ */

/* Slot index of key k (hash h), or -1. */
int64_t cr__m_map_find(cr__master_t *m, const char *k, size_t l, uint64_t h);
/* Doubles the table (first call: 1024 slots). Returns 0 or -ENOMEM. */
int cr__m_map_grow(cr__master_t *m);
/* Inserts o (hash h), growing past load 0.7. Returns 0 or -ENOMEM. */
int cr__m_map_insert(cr__master_t *m, obj_t *o, uint64_t h);
void cr__m_map_erase(cr__master_t *m, uint64_t i);
/* Starts loading the index slots of items[0..n)'s keys, then the records
 * they hold, into cache: a batch's lookups then overlap their cache
 * misses instead of taking them one after the other. Only a hint. */
void cr__m_map_prefetch(const cr__master_t *m, const cr__rpc_item_t *items, uint32_t n);
/* The record of key (any state), or NULL. */
obj_t *cr__m_lookup(cr__master_t *m, const char *key, size_t len);
/* The record of key if complete, or NULL. */
obj_t *cr__m_lookup_complete(cr__master_t *m, const char *key, size_t key_len);

/* ---- exclusion lists (placement.c resolves them) ----------------------- */

/* The segments a placement avoids: a PutStart's exclusion list (the
 * client's suspect segments), resolved to segment indices once per
 * request; names the master does not have mounted are left out. NULL or
 * n == 0: none. */
typedef struct excl {
    uint32_t n;
    uint32_t seg[CR__RPC_EXCLUDE_MAX];
} excl_t;

static inline int excl_has(const excl_t *ex, uint32_t s)
{
    for (uint32_t i = 0; ex && i < ex->n; i++)
        if (ex->seg[i] == s)
            return 1;
    return 0;
}

/* ---- space.c: freeing and quarantine ------------------------------------ */

/* Frees a block without marking the state changed (undoing a placement
 * that just allocated it). */
void cr__m_block_unalloc(cr__master_t *m, uint32_t seg, uint32_t blk);
/* Frees a block now or, if it may still be accessed until release_ms, later. */
void cr__m_block_release(cr__master_t *m, uint32_t seg, uint32_t blk, uint64_t release_ms,
                         uint64_t now);
/* Releases due quarantine entries; at most max of them. */
void cr__m_quarantine_release(cr__master_t *m, uint64_t now, size_t max);
/* Until when the space of o may still be accessed (lease, or put deadline
 * plus one more put timeout). */
uint64_t cr__m_obj_release_ms(cr__master_t *m, obj_t *o, uint64_t now);
/* DRAM bytes held by o's live replicas; _outside: those on segments not
 * in ex only (NULL: all). */
uint64_t cr__m_obj_bytes(cr__master_t *m, obj_t *o);
uint64_t cr__m_obj_bytes_outside(cr__master_t *m, obj_t *o, const excl_t *ex);
/* Releases o's space (quarantined until release_ms), unlinks it from its
 * list and the index, and frees it. */
void cr__m_obj_delete(cr__master_t *m, obj_t *o, uint64_t release_ms, uint64_t now);

/* ---- placement.c: where replicas go ------------------------------------- */

/* ex = the live segments among names[0..n) (at most CR__RPC_EXCLUDE_MAX). */
void cr__m_excl_resolve(cr__master_t *m, const char *const *names, uint32_t n, excl_t *ex);

/* The shards of one object being placed (on the stack of put_start). */
typedef struct placing {
    uint32_t n_rep;
    uint32_t n_lazy; /* replicas carved from confirmed windows (window.c) */
    uint8_t nsh[CR__RPC_REPLICA_MAX];
    shard_t sh[CR__RPC_REPLICA_MAX * CR__RPC_SHARD_MAX];
    uint64_t len[CR__RPC_REPLICA_MAX * CR__RPC_SHARD_MAX];
    uint32_t n_sh;
    uint32_t used_segs[CR__RPC_REPLICA_MAX * CR__RPC_SHARD_MAX];
    uint32_t n_used;
} placing_t;

/* Places n_rep replicas of size bytes, each on segments no other replica
 * uses, none on a segment of ex. Returns 0, or -1 with nothing allocated. */
int cr__m_place_all(cr__master_t *m, placing_t *p, uint64_t size, uint32_t n_rep,
                    const cr__rpc_repl_cfg_t *cfg, const excl_t *ex, uint64_t now);
/* 1 if n_rep replicas of size bytes could be placed were every live DRAM
 * segment outside ex empty and allocatable (enough distinct segments,
 * enough capacity in all); 0 if not, when evicting would free space for
 * nothing. */
int cr__m_place_possible(const cr__master_t *m, uint64_t size, uint32_t n_rep, const excl_t *ex);
/* Frees every block of p (a placement not turned into an object). */
void cr__m_placing_rollback(cr__master_t *m, placing_t *p);
/* Fills it->replicas with the live replicas of o (names copied into the
 * arena of msg). Returns 0 or -ENOMEM. */
int cr__m_fill_replicas(cr__master_t *m, obj_t *o, cr__rpc_msg_t *msg, cr__rpc_item_t *it);

/* ---- segments.c: clients and segments ----------------------------------- */

/* Index of the live client id / live segment name, or NONE32. */
uint32_t cr__m_client_find(cr__master_t *m, cr__rpc_client_id_t id);
uint32_t cr__m_seg_find(cr__master_t *m, const char *name);

/* caps.c (no-ops while capabilities are off) */
/* A MountSegment reply for segment name: its capability key in blob. */
int cr__m_caps_mount_reply_locked(cr__master_t *m, const char *name, cr__rpc_msg_t *reply);
/* Grants in every replica list of reply (type: the request's type). */
int cr__m_caps_mint_locked(cr__master_t *m, uint16_t type, cr__rpc_msg_t *reply);
void cr__m_caps_free(cr__master_t *m);
/* How long a grant minted for lease_ms lives (0 while capabilities are off). */
uint64_t cr__m_caps_ttl_ms(const cr__master_t *m, uint32_t lease_ms);
/* The operations of master.h's cr__master_ping/mount/unmount. */
int cr__m_ping_locked(cr__master_t *m, cr__rpc_client_id_t id, uint64_t now, uint32_t *flags);
int cr__m_mount_locked(cr__master_t *m, cr__rpc_client_id_t id, const char *name, uint64_t base,
                       uint64_t size, uint64_t now);
int cr__m_unmount_locked(cr__master_t *m, cr__rpc_client_id_t id, const char *name,
                         uint64_t now);
/* The awake clock at now (see struct cr__master). */
uint64_t cr__m_awake_locked(cr__master_t *m, uint64_t now);
/* Unmounts every segment of clients silent longer than client_ttl_ms. */
void cr__m_expire_clients_locked(cr__master_t *m, uint64_t now);

/* ---- held.c: names of dropped segments, remount of the same memory ------ */

/* Adds [off, off+len) of a dropped segment, touched until `until`, to hs
 * (nothing if until <= now); past m->held_ranges_max ranges or on ENOMEM
 * hs becomes whole (its ranges are freed). */
void cr__m_held_add(cr__master_t *m, held_set_t *hs, uint64_t off, uint64_t len,
                    uint64_t until, uint64_t now);
/* Remembers dropped segment sg's name until hold with the ranges of hs
 * (taken over: hs is left empty), but for what a live entry of that name
 * already holds as long; journals the entry (HELD). */
void cr__m_held_remember(cr__master_t *m, const seg_t *sg, held_set_t *hs, uint64_t hold,
                         uint64_t now);
/* Takes a held name of a shadow index (a journal, a former leader) as
 * held from now for the times it had left; not journaled. */
void cr__m_held_restore(cr__master_t *m, const cr__ha_held_t *h, uint64_t now);
/* The held ranges of segment s's memory for a mount by id: clipped to it,
 * rounded out to granules, ascending, overlaps merged (the later time
 * holds), in *out (malloc'd, the caller frees it; may be NULL when none)
 * and *n. Returns the latest hold that matched (0: none); *whole: a list
 * that was not kept or could not be built (all of s waits until then). */
uint64_t cr__m_held_ranges(cr__master_t *m, uint32_t s, cr__rpc_client_id_t id, uint64_t now,
                           held_range_t **out, size_t *n, int *whole);
/* Segment s was just mounted by client id with a fresh allocator: the
 * held ranges of the same memory are reserved and quarantined until their
 * time. Returns the time before which nothing may be allocated on s (0, or
 * the whole hold when a list could not be kept or applied). */
/* Sets segs[s].held_until to the end of any hold that matched (whole or
 * in ranges); returns the time before which nothing is allocated there. */
uint64_t cr__m_held_apply(cr__master_t *m, uint32_t s, cr__rpc_client_id_t id, uint64_t now);
/* Ends the entries whose time has passed (HELDEND) and frees their ranges. */
void cr__m_held_expire(cr__master_t *m, uint64_t now);
/* Frees every entry's ranges (destroy). */
void cr__m_held_free(cr__master_t *m);

/* ---- objects.c: object operations (master.h documents each) ------------- */

/* cr__master_put_start, placing around the segments of ex (NULL: none):
 * on them only if nothing fits elsewhere even after eviction there
 * (cr__m_pending_create_locked). */
int cr__m_put_start_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t size,
                           const cr__rpc_repl_cfg_t *cfg, const excl_t *ex, uint64_t now,
                           cr__rpc_msg_t *msg, cr__rpc_item_t *it);
/* The metadata cap (--max_objects, --max_key_bytes) before a new key of
 * key_len bytes: 0, or CR_E_KEYS_ULTRA_LIMIT counted and logged (rate
 * limited) naming what was refused. */
int cr__m_meta_full_locked(cr__master_t *m, size_t key_len, const char *what);
/* Creates a pending object (placement, index, journal, reply replicas)
 * under key[0..key_len) whose hash is h; the caller checked the key.
 * replace: key's object is unreachable (cr__m_put_over_locked returned 1)
 * and is replaced once the new one is placed (kept if placing fails). */
int cr__m_pending_create_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t h,
                                uint64_t size, const cr__rpc_repl_cfg_t *cfg, int replace,
                                const excl_t *ex, uint64_t now, cr__rpc_msg_t *msg,
                                cr__rpc_item_t *it);
/* 1 if a reader can reach o now: a pending put, a complete object with a
 * live replica whose every shard is on an attached segment, or with its
 * shared-FS file; 0 for a complete object whose replicas all wait on
 * segments restored from a journal (or a takeover) that their node has
 * not mounted again (docs/architecture/store-ha.md, "Puts of keys whose
 * bytes are unreachable"). */
int cr__m_obj_reachable(const cr__master_t *m, obj_t *o);
/* A new put (PutStart, PutCommit) of key finds o: 0 when o was a put past
 * its deadline,
 * reclaimed now; 1 when o is complete and unreachable, replaced by the new
 * object (cr__m_put_replace_locked once that is placed); else
 * CR_E_OBJECT_ALREADY_EXISTS. */
int cr__m_put_over_locked(cr__master_t *m, obj_t *o, uint64_t now);
/* Deletes key's (hash h) unreachable object for the new put replacing it,
 * its space released as by a Remove (quarantined until its lease ends). */
void cr__m_put_replace_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t h,
                              uint64_t now);

/* ---- upsert.c: replacing a complete object ------------------------------- */

/* PutStart with CR__RPC_CFG_UPSERT of a key that has a complete object: the
 * new version is written as a pending object under a shadow name no user
 * key can have; readers keep seeing the old version. */
int cr__m_upsert_start_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t size,
                              const cr__rpc_repl_cfg_t *cfg, const excl_t *ex, uint64_t now,
                              cr__rpc_msg_t *msg, cr__rpc_item_t *it);
/* checksum.c: records item's crc (PutEnd request) on the pending object
 * (key, version) it is about to complete, plain or upsert shadow. */
void cr__m_put_end_crc_locked(cr__master_t *m, const cr__rpc_item_t *item);
/* upsert.c: the pending shadow of (key, version), or NULL. */
obj_t *cr__m_upsert_shadow_find(cr__master_t *m, const char *key, size_t key_len,
                                uint64_t version);
/* PutEnd / PutRevoke of (key, version) when key's own object has another
 * version: finish or drop the pending replacement, else OBJECT_NOT_FOUND. */
int cr__m_upsert_end_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                            uint64_t now);
int cr__m_upsert_revoke_locked(cr__master_t *m, const char *key, size_t key_len,
                               uint64_t version, uint64_t now);

int cr__m_put_end_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                         uint64_t now);
int cr__m_put_revoke_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                            uint64_t now);
int cr__m_get_replicas_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t now,
                              cr__rpc_msg_t *msg, cr__rpc_item_t *it);
/* 0 if key is complete and reachable (with lease: leased from now and most
 * recent, as by GetReplicaList), CR_E_OBJECT_NOT_FOUND or CR_E_INVALID_KEY. */
int cr__m_exist_locked(cr__master_t *m, const char *key, size_t key_len, int lease, uint64_t now);
int cr__m_get_size_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t *size);
int cr__m_remove_locked(cr__master_t *m, const char *key, size_t key_len, int force,
                        uint64_t now);
int cr__m_remove_all_locked(cr__master_t *m, int force, uint64_t now, uint64_t *count);
int cr__m_validate_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                          uint64_t replica_id);

/* ---- durable.c: op records, restore, dump -------------------------------- */

/* Journal the object as it is now (OBJ), a key event (END, DEL), a
 * segment event (SEG, SEGDROP); no-ops without a journal function. */
void cr__m_jr_obj(cr__master_t *m, obj_t *o);
/* Frames m->jrec and hands it to the journal function. */
void cr__m_jr_emit(cr__master_t *m);
/* The request is answered "done" for a change an earlier request made (a
 * PutEnd or a PUT_COMMIT retried after its reply was lost): the reply must
 * wait for every record produced so far, since that earlier change's record
 * may not be on the standbys yet (cr__master_wait_prior). */
void cr__m_jr_wait_prior(void);
void cr__m_jr_key(cr__master_t *m, uint8_t type, obj_t *o);
void cr__m_jr_seg(cr__master_t *m, uint8_t type, seg_t *sg);
/* HELD: held name hd as it is at now (its ranges over several records
 * when they do not fit one); HELDEND: hd is over. */
void cr__m_jr_held(cr__master_t *m, const held_t *hd, uint64_t now);
void cr__m_jr_heldend(cr__master_t *m, const held_t *hd);
/* 1 if a restored segment still waits for its owner. */
int cr__m_any_detached(const cr__master_t *m);
/* 1 while restored DRAM segments wait for their owners and no DRAM
 * segment takes allocations (a takeover or restart before any node is
 * back): PutStart is refused then (dispatch.c). */
int cr__m_restoring_locked(const cr__master_t *m, uint64_t now);

/* ---- eviction.c ---------------------------------------------------------- */

/* One eviction step freeing at least need bytes (or the policy's step);
 * returns objects evicted. With ex (not NULL, n > 0), room outside ex:
 * only bytes on other segments count, and an object with none there is
 * skipped (evicting it would make no room there). */
uint64_t cr__m_evict_locked(cr__master_t *m, uint64_t need, const excl_t *ex, uint64_t now);

/* ---- tier.c: disk tier (docs/architecture/store-tiers.md) ---------------- */

/* 1 if o has a live replica on a disk segment / on a DRAM segment. */
int cr__m_obj_on_disk(cr__master_t *m, obj_t *o);
int cr__m_obj_in_dram(cr__master_t *m, obj_t *o);
/* The list o belongs on when complete: m->lru, or m->ssd_lru if disk only. */
obj_t *cr__m_obj_list(cr__master_t *m, obj_t *o);
/* Eviction of a DRAM candidate o when a disk tier exists: 1 if o was
 * demoted (its DRAM replicas dropped, *freed += bytes), 2 if it is being
 * (or was just queued to be) offloaded and must be skipped for now, 0 if
 * the tier cannot take it (evict as before). */
int cr__m_tier_evict_candidate(cr__master_t *m, obj_t *o, uint64_t now, uint64_t *freed);
/* A block of a disk segment is being freed for good: queue its erase. */
void cr__m_tier_block_freed(cr__master_t *m, uint32_t seg, uint32_t blk);
/* Disk segment s is going away: its tasks die with it. */
void cr__m_tier_seg_dropped(cr__master_t *m, uint32_t s, uint64_t now);
/* DRAM segment s is being dropped: PROMOTE tasks into it that were not
 * handed out end; the DRAM blocks of handed ones go into hs until their
 * node can no longer write them. Returns that time, 0 if none. */
uint64_t cr__m_tier_dram_seg_dropped(cr__master_t *m, uint32_t s, uint64_t now, held_set_t *hs);
/* Periodic: offload ahead of eviction, disk watermark, task timeouts. */
void cr__m_tier_tick(cr__master_t *m, uint64_t now);
/* The tier rpcs (CR__RPC_TIER_*). Returns the reply status. */
int cr__m_tier_handle_locked(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                             uint64_t now);
void cr__m_tier_destroy(cr__master_t *m);
/* Fills the tier gauges of the metrics list. */
void cr__m_tier_stats_locked(cr__master_t *m, uint64_t *counters);
/* A get served o from disk: admission (second hit, DRAM below the offload
 * watermark) and then a PROMOTE task. o is not moved or freed. */
void cr__m_tier_disk_hit(cr__master_t *m, obj_t *o, uint64_t now);
/* Write-through (offload_watermark 0): queue the offload of a new object. */
void cr__m_tier_put_completed(cr__master_t *m, obj_t *o, uint64_t now);
/* A copy of o with one more replica (one shard seg/blk); the index slot
 * and list links move to the copy and o is freed. NULL (o unchanged) when
 * o already has CR__RPC_REPLICA_MAX replicas or on ENOMEM. */
obj_t *cr__m_obj_add_replica(cr__master_t *m, obj_t *o, uint32_t seg, uint32_t blk);

/* ---- fs.c: shared-file-system tier (docs/architecture/store-tiers.md) ---- */

/* FS_INFO / FS_SYNC, called WITHOUT m->mu: the file I/O runs outside it
 * (the lock is taken around each record step). Returns the reply status. */
int cr__master_fs_handle(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                         uint64_t now);
/* o (OF_FS) is being deleted: its file goes too. */
void cr__m_fs_obj_gone(cr__master_t *m, obj_t *o);
/* Drops o's live replicas on DRAM segments (only_seg == NONE32) or on
 * segment only_seg, keeping the record (its file holds it): space released
 * after the lease, o moved to the list it now belongs on, journaled.
 * Returns the bytes of the replicas dropped. o must have OF_FS. */
uint64_t cr__m_fs_drop(cr__master_t *m, obj_t *o, uint32_t only_seg, uint64_t now);
/* Appends o's fs replica to it->replicas (room for it reserved by the
 * caller) if o has OF_FS. Returns 0 or -ENOMEM. */
int cr__m_fs_fill(cr__master_t *m, obj_t *o, cr__rpc_msg_t *msg, cr__rpc_item_t *it);
/* The replica index an fs replica is listed under (validate accepts it
 * while OF_FS holds). */
#define FS_REPLICA_IDX 7u
/* A new object's writer has this long to attach its file before DRAM
 * eviction may take the object anyway (a writer that cannot persist). */
#define CR__M_FS_PERSIST_MS 30000
void cr__m_fs_destroy(cr__master_t *m);
/* A journal restore brought back an object with OF_FS (durable.c). */
void cr__m_fs_restored(cr__master_t *m);
/* Fills the shared-FS gauges of the metrics list. */
void cr__m_fs_stats_locked(cr__master_t *m, uint64_t *counters);

/* ---- window.c: allocation windows of an HA leader --------------------------- */

/* Allocates size bytes for one contiguous replica on segment s from its
 * window (opening one, recorded as WIN, when there is none or it is too
 * small). Returns the block (space accounted) or NONE32 when windows are
 * off or the size is not a small one (the caller allocates normally).
 * *confirmed: the window is known to every in-sync standby. */
uint32_t cr__m_win_alloc(cr__master_t *m, uint32_t s, uint64_t size, int *confirmed);
/* Frees the rest of s's window (recorded as WINEND). */
void cr__m_win_close(cr__master_t *m, uint32_t s);
/* WIN records of every open window and replica-task hold (the snapshot). */
void cr__m_jr_wins(cr__master_t *m);
/* A WIN/WINEND record of [off, off+len) on sg: space handed to a writer
 * the index does not describe (a window, a copy task's target block). */
void cr__m_jr_range(cr__master_t *m, uint8_t type, const seg_t *sg, uint64_t off, uint64_t len);
/* Replica tasks and copy targets time out after this (rtask.c); a restored
 * window or hold stays quarantined at least as long. */
#define CR__M_RTASK_TIMEOUT_MS 60000

/* ---- reserve.c: client space reservations ------------------------------- */

/* RESERVE and PUT_COMMIT (protocol.h). Returns the reply status. */
int cr__m_resv_handle_locked(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                             uint64_t now);
/* RESERVE of want bytes, on no segment of ex (NULL: none). */
int cr__m_reserve_locked(cr__master_t *m, cr__rpc_client_id_t id, uint64_t want, const excl_t *ex,
                         uint64_t now, cr__rpc_msg_t *reply);
/* A reservation's lease: min(10 s, put timeout). */
uint64_t cr__m_resv_lease_ms(const cr__master_t *m);
/* Periodic: expired reservations closed, quarantined ones ended (WINEND). */
void cr__m_resv_tick(cr__master_t *m, uint64_t now);
/* Memory pressure: every open reservation closed (its rest quarantined). */
void cr__m_resv_reclaim_all(cr__master_t *m, uint64_t now);
/* Client id's heartbeat lapsed: its open reservations closed. */
void cr__m_resv_client_gone(cr__master_t *m, cr__rpc_client_id_t id, uint64_t now);
/* Segment s is being dropped: its reservations end; returns until when
 * their holders may still write (the name's hold), 0 if none; each
 * reservation's whole range goes into hs with its hold. */
uint64_t cr__m_resv_seg_dropped(cr__master_t *m, uint32_t s, uint64_t now, held_set_t *hs);
/* Fills the reservation gauges of the metrics list. */
void cr__m_resv_stats_locked(cr__master_t *m, uint64_t *counters);
/* WIN records of every reservation (the snapshot). */
void cr__m_resv_jr_all(cr__master_t *m);
void cr__m_resv_destroy(cr__master_t *m);

/* ---- rtask.c: replica copy/move tasks, per-replica clear ----------------- */

/* The CR__RPC_RTASK_* and CR__RPC_REPLICA_CLEAR rpcs. Returns the reply status. */
int cr__m_rtask_handle_locked(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                              uint64_t now);
/* Periodic: tasks not driven to their end in time fail. */
void cr__m_rtask_tick(cr__master_t *m, uint64_t now);
/* WIN records of the target blocks copy tasks hold (the snapshot). */
void cr__m_rtask_jr_holds(cr__master_t *m);
/* Segment s is being dropped: the target blocks tasks hold there go into
 * hs until a copier can no longer write them; returns that time, 0 if
 * none. */
uint64_t cr__m_rtask_seg_dropped(cr__master_t *m, uint32_t s, uint64_t now, held_set_t *hs);
void cr__m_rtask_destroy(cr__master_t *m);

#endif
