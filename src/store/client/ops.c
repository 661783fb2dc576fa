/* Store client data paths: put/get (copying, zero-copy), batches, and the
 * small metadata calls.
 *
 * put:  PutStart (allocates every replica, returns the put deadline)
 *       -> TE WRITE of every shard of every replica (memcpy for shards on
 *       this client's own segment) -> PutEnd; PutRevoke on any failure.
 * get:  GetReplicaList (a read lease) -> read one replica (memcpy if it is on
 *       this client's own segment, else TE READ; the next replica on
 *       failure) -> if the lease may have expired meanwhile, Validate the
 *       replica read (protocol.h "stale-read contract"); bytes that cannot
 *       be validated are never returned.
 * Batches use one master round-trip per phase and one TE batch for all
 * keys; every key keeps its own status. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "store/client/client.h"
#include "store/tier/tier.h"
#include "transfer/capability.h"
#include "transfer/checksum.h"

#define COMP "store-client"
#define INLINE_REQS 32

/* ---- small helpers ---------------------------------------------------------- */

typedef struct reqvec {
    cr_xfer_request_t *v;
    const uint8_t **caps; /* per request: the master's grant (NULL: none) */
    size_t n, cap;
    int err; /* sticky -ENOMEM / over bound */
    /* the last segment add_range opened and its handle: a batch's keys
     * mostly share a few segments (a reserved put's: one), so most keys
     * cost a compare instead of the handle cache's lookup under its lock.
     * The name points into the replica list the requests are built from,
     * which outlives the vector. */
    const char *last_seg;
    cr_xfer_segment_t last_h;
    cr_xfer_request_t inl[INLINE_REQS];
    const uint8_t *inl_caps[INLINE_REQS];
} reqvec_t;

static void rv_init(reqvec_t *r)
{
    r->v = r->inl;
    r->caps = r->inl_caps;
    r->n = 0;
    r->cap = INLINE_REQS;
    r->err = 0;
    r->last_seg = NULL;
}

static void rv_free(reqvec_t *r)
{
    if (r->v != r->inl) {
        free(r->v);
        free(r->caps);
    }
}

static int rv_push(reqvec_t *r, const cr_xfer_request_t *q, const uint8_t *cap)
{
    if (r->err)
        return r->err;
    if (r->n == r->cap) {
        size_t nc = r->cap * 2;
        if (nc > CR_XFER_BATCH_MAX)
            return r->err = CR_E_INVALID_PARAMS;
        cr_xfer_request_t *nv = malloc(nc * sizeof *nv);
        const uint8_t **ncaps = malloc(nc * sizeof *ncaps);
        if (!nv || !ncaps) {
            free(nv);
            free(ncaps);
            return r->err = -ENOMEM;
        }
        memcpy(nv, r->v, r->n * sizeof *nv);
        memcpy(ncaps, r->caps, r->n * sizeof *ncaps);
        if (r->v != r->inl) {
            free(r->v);
            free(r->caps);
        }
        r->v = nv;
        r->caps = ncaps;
        r->cap = nc;
    }
    r->caps[r->n] = cap;
    r->v[r->n++] = *q;
    return 0;
}

/* Per-call scratch arrays: on the stack for the usual few keys, one malloc
 * for big batches (no allocation per small operation). */
#define SCRATCH_STACK 4096
typedef struct scratch {
    uint8_t *base;
    size_t used;
    _Alignas(16) uint8_t stack[SCRATCH_STACK];
} scratch_t;

static int scratch_init(scratch_t *sc, size_t need)
{
    sc->used = 0;
    sc->base = need <= SCRATCH_STACK ? sc->stack : malloc(need);
    if (!sc->base)
        return -ENOMEM;
    memset(sc->base, 0, need);
    return 0;
}

/* n bytes (zeroed) of what scratch_init reserved; sizes are rounded to 16
 * here and must be by the caller's total (SCR). */
#define SCR(n) (((size_t)(n) + 15) & ~(size_t)15)
static void *scratch_take(scratch_t *sc, size_t n)
{
    void *p = sc->base + sc->used;
    sc->used += SCR(n);
    return p;
}

static void scratch_fini(scratch_t *sc)
{
    if (sc->base && sc->base != sc->stack)
        free(sc->base);
}

/* Runs reqs as one TE batch and waits; per-request status in st (n
 * entries, 0 or negative errno). Returns 0 if all succeeded, else the first
 * error. cr_xfer_transfer_sync lets the TE run a lone request in this thread
 * (a same-host copy then costs no thread handoff). */
static int run_batch(cr_store_t *s, const reqvec_t *rv, int *st)
{
    const cr_xfer_request_t *reqs = rv->v;
    size_t n = rv->n;
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        st[i] = 0;
    int rc = cr__xfer_transfer_sync_caps(s->te, reqs, rv->caps, n, st);
    if (!rc)
        return 0;
    int first = 0;
    for (size_t i = 0; i < n && !first; i++)
        first = st[i];
    if (!first) /* the batch itself failed (alloc/submit): every request did */
        for (size_t i = 0; i < n; i++)
            st[i] = rc;
    return first ? first : rc;
}

static int map_te_error(int rc)
{
    if (rc == 0 || rc == -ENOMEM)
        return rc;
    return CR_E_TRANSFER_FAIL;
}

/* Checks a replica list from the master: shard lens sum to size, names are
 * set. Returns 0 or CR_E_INVALID_REPLICA. */
static int check_replicas(const cr__rpc_item_t *it)
{
    if (it->n_replicas == 0 || it->n_replicas > CR__RPC_REPLICA_MAX)
        return CR_E_INVALID_REPLICA;
    for (uint32_t r = 0; r < it->n_replicas; r++) {
        const cr__rpc_replica_t *rep = &it->replicas[r];
        uint64_t sum = 0;
        if (rep->n_shards == 0 || !rep->shards)
            return CR_E_INVALID_REPLICA;
        for (uint32_t k = 0; k < rep->n_shards; k++) {
            if (!rep->shards[k].segment || !rep->shards[k].segment[0] ||
                rep->shards[k].len > it->size - sum)
                return CR_E_INVALID_REPLICA;
            sum += rep->shards[k].len;
        }
        if (sum != it->size)
            return CR_E_INVALID_REPLICA;
    }
    return 0;
}

/* Adds the requests moving value bytes [off, off+len) of replica rep
 * from/to local memory at local (which holds exactly those bytes). Shards
 * on this client's own segment are copied right away by memcpy. Returns 0,
 * CR_E_TRANSFER_FAIL (segment cannot be opened) or -ENOMEM. */
static int add_range(cr_store_t *s, reqvec_t *rv, const cr__rpc_replica_t *rep, uint64_t off,
                     uint64_t len, uint8_t *local, cr_xfer_opcode_t op)
{
    uint64_t pos = 0; /* value offset of the current shard */
    for (uint32_t k = 0; k < rep->n_shards && len; k++) {
        const cr__rpc_shard_t *sh = &rep->shards[k];
        uint64_t s_end = pos + sh->len;
        if (s_end > off) {
            uint64_t in = off - pos; /* offset inside the shard */
            uint64_t n = sh->len - in < len ? sh->len - in : len;
            uint64_t taddr = sh->addr + in;
            if (cr__sc_is_local(s, sh->segment, taddr, n)) {
                if (op == CR_XFER_WRITE)
                    memcpy((void *)(uintptr_t)taddr, local, n);
                else
                    memcpy(local, (const void *)(uintptr_t)taddr, n);
            } else {
                cr_xfer_request_t q = {.opcode = op,
                                       .local_addr = local,
                                       .target_addr = taddr,
                                       .length = n};
                if (rv->last_seg &&
                    (rv->last_seg == sh->segment || !strcmp(rv->last_seg, sh->segment))) {
                    q.target = rv->last_h;
                } else {
                    int rc = cr__sc_segment(s, sh->segment, &q.target);
                    if (rc) {
                        /* rate-limited: with a node gone, every read of
                         * its objects lands here */
                        CR_LOG_RL(CR__LOG_WARN, COMP, "segment %s: %s", sh->segment,
                                  cr_strerror(rc));
                        return rc == -ENOMEM ? rc : CR_E_TRANSFER_FAIL;
                    }
                    rv->last_seg = sh->segment;
                    rv->last_h = q.target;
                }
                int rc = rv_push(rv, &q, sh->cap); /* the grant covers the whole shard */
                if (rc)
                    return rc;
            }
            local += n;
            off += n;
            len -= n;
        }
        pos = s_end;
    }
    return 0;
}

/* (client.h) One range of one replica to/from local memory, synchronously. */
int cr__sc_replica_io(cr_store_t *s, const cr__rpc_replica_t *rep, uint64_t off, uint64_t len,
                      void *local, int write)
{
    reqvec_t rv;
    rv_init(&rv);
    int rc = add_range(s, &rv, rep, off, len, local, write ? CR_XFER_WRITE : CR_XFER_READ);
    if (!rc && rv.n) {
        int *st = malloc(rv.n * sizeof *st);
        rc = st ? map_te_error(run_batch(s, &rv, st)) : -ENOMEM;
        free(st);
    }
    rv_free(&rv);
    return rc;
}

/* Replica visiting order: a replica on this client's own segment first,
 * replicas with a shard on a segment that failed lately last (suspect.c). */
static int replica_rank(cr_store_t *s, const cr__rpc_replica_t *rep)
{
    if (s->seg_base && !strcmp(rep->shards[0].segment, s->seg_name))
        return 0;
    for (uint32_t k = 0; k < rep->n_shards; k++)
        if (cr__sc_suspect(s, rep->shards[k].segment))
            return 2;
    return 1;
}

static void replica_order(cr_store_t *s, const cr__rpc_item_t *it, uint32_t *order)
{
    uint8_t rank[CR__RPC_REPLICA_MAX];
    for (uint32_t r = 0; r < it->n_replicas; r++)
        rank[r] = (uint8_t)replica_rank(s, &it->replicas[r]);
    uint32_t n = 0;
    for (int want = 0; want <= 2; want++)
        for (uint32_t r = 0; r < it->n_replicas; r++)
            if (rank[r] == want)
                order[n++] = r;
}

/* Remembers the segments of the failed requests (node failures only). */
static void mark_failed(cr_store_t *s, const cr_xfer_request_t *reqs, const int *st, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (st[i])
            cr__sc_suspect_mark(s, reqs[i].target, st[i]);
}

/* Reads value bytes [off, off+len) into dst (registered memory) from the
 * first replica (in order) that delivers them; sets that replica's bit in
 * *used. Replicas whose bit is set in *dead are skipped, and a replica that
 * fails is added to *dead, so the chunks of one get pay for a dead replica
 * once. Returns 0 or CR_E_TRANSFER_FAIL / -ENOMEM. */
static int read_range(cr_store_t *s, const cr__rpc_item_t *it, const uint32_t *order,
                      uint32_t n_order, uint64_t off, uint64_t len, uint8_t *dst, uint32_t *used,
                      uint32_t *dead)
{
    int last = CR_E_TRANSFER_FAIL;
    for (uint32_t i = 0; i < n_order; i++) {
        uint32_t r = order[i];
        if (*dead & (1u << r))
            continue;
        if (cr__tier_is_disk(it->replicas[r].shards[0].segment)) {
            const cr__rpc_replica_t *rp = &it->replicas[r];
            cr__sc_tier_rd_t q = {.segment = rp->shards[0].segment, .key = it->key,
                                  .key_len = it->key_len, .version = it->version,
                                  .size = it->size, .disk_off = rp->shards[0].addr,
                                  .roff = off, .rlen = len, .dst = dst};
            int trc = cr__sc_tier_read_batch(s, &q, 1);
            if (trc == 0) {
                *used |= 1u << r;
                return 0;
            }
            *dead |= 1u << r;
            last = trc;
            continue;
        }
        reqvec_t rv;
        rv_init(&rv);
        int rc = add_range(s, &rv, &it->replicas[r], off, len, dst, CR_XFER_READ);
        if (!rc && rv.n) {
            int stack_st[INLINE_REQS];
            int *st = rv.n <= INLINE_REQS ? stack_st : malloc(rv.n * sizeof *st);
            if (!st)
                rc = -ENOMEM;
            else {
                rc = map_te_error(run_batch(s, &rv, st));
                if (rc)
                    mark_failed(s, rv.v, st, rv.n);
                if (st != stack_st)
                    free(st);
            }
        }
        rv_free(&rv);
        if (rc == 0) {
            *used |= 1u << r;
            return 0;
        }
        CR_LOG_INFO(COMP, "read of %s replica %u failed (%s), trying the next", it->key, r,
                    cr_strerror(rc));
        if (rc != -ENOMEM)
            *dead |= 1u << r;
        last = rc;
        if (rc == -ENOMEM)
            break;
    }
    return last;
}

/* Remaining time until deadline (ms, monotonic), 0 if past. */
static int64_t remaining_ms(uint64_t deadline_ms)
{
    uint64_t now = cr__now_ms();
    return now >= deadline_ms ? 0 : (int64_t)(deadline_ms - now);
}

struct keyed;

/* Work done while a keyed batch's transfers run (keyed_start ..
 * keyed_finish), so that on more than one core the end-to-end checksum
 * costs no wall time of its own. A keyed batch with an overlap asks the TE
 * for the crc32c of every request (transfer/checksum.h): a transport whose
 * own threads copy (shm) hashes each piece right after moving it, while it
 * is in cache, instead of the caller reading every byte again; for the
 * others (tcp, kd_key_te_hashes() == 0) the caller hashes. start(arg, n,
 * kd), if set, runs once right after the transfers started (kd->st holds
 * nothing yet: do not read it); fn(arg, k0, k1, kd) runs for each part of
 * the batch (keys [k0, k1)) once that part's transfers finished, kd->st
 * then being the statuses of its requests (indexed like rv) and
 * kd_key_crc() the TE's checksums. Neither is called for keys whose
 * transfers did not start. */
typedef struct overlap {
    void (*start)(void *arg, size_t n, const struct keyed *kd);
    void (*fn)(void *arg, size_t k0, size_t k1, const struct keyed *kd);
    void *arg;
} overlap_t;

#define OVERLAP_PARTS 4 /* a get batch runs as up to this many TE batches, checked in turn */

#define TE_CRC_KNOWN (1ull << 32)  /* keyed_t.crc: the TE's crc32c is in the low bits */
#define TE_CRC_WANTED (1ull << 33) /* keyed_t.crc: the TE hashes this request */

/* Waits for batch b (submitted) and frees it, writing its requests'
 * statuses to st and, when crc is not NULL, their checksums (TE_CRC_KNOWN |
 * crc; TE_CRC_WANTED is kept). */
static void batch_collect(cr_xfer_batch_t *b, size_t n, int *st, uint64_t *crc)
{
    cr_xfer_status_t all;
    while (cr_xfer_batch_wait(b, -1) == -ETIMEDOUT && cr_xfer_batch_status_all(b, &all) == 0 &&
           all.state == CR_XFER_STATE_WAITING)
        ; /* the engine's deadlines end every request; the wait is only a safety net */
    for (size_t i = 0; i < n; i++) {
        cr_xfer_status_t x;
        st[i] = cr_xfer_batch_status(b, i, &x) ? -EIO : x.error;
        uint32_t c;
        if (crc && cr__xfer_batch_crc(b, i, &c) == 0)
            crc[i] = (crc[i] & TE_CRC_WANTED) | TE_CRC_KNOWN | c;
    }
    cr_xfer_batch_free(b);
}

/* The requests of rv (key i's are [first[i], first[i+1])) in flight as up
 * to OVERLAP_PARTS TE batches over key ranges: keyed_start submits them
 * and returns, keyed_finish waits. Between the two the caller may do
 * anything else (the pipelined batches' master calls); rv, first, ov and
 * results must stay valid until keyed_finish. */
typedef struct keyed {
    const reqvec_t *rv;
    const size_t *first;
    size_t n;
    const overlap_t *ov;
    int failed_start; /* the batch never started: nothing to collect */
    int busy;         /* counted in cr__sc_te_busy until keyed_finish */
    int *st;
    int stack_st[INLINE_REQS];
    uint64_t *crc; /* per request: TE_CRC_WANTED, TE_CRC_KNOWN | its crc32c; NULL without ov */
    uint64_t stack_crc[INLINE_REQS];
    size_t parts;
    size_t k[OVERLAP_PARTS + 1];
    cr_xfer_batch_t *b[OVERLAP_PARTS];
} keyed_t;

/* Starts rv's requests as `parts` TE batches (1 when ov is NULL or runs
 * before the data). A lone request runs here, in this thread (the TE may
 * copy it without a handoff). Keys still without an error (results[i] ==
 * 0) get the reason the batch could not start: rv's sticky error, -ENOMEM,
 * or CR_E_LEASE_EXPIRED when a deadline (0 = none) has passed: never start
 * writes into space the master may reclaim. */
static void keyed_start(cr_store_t *s, keyed_t *kd, const reqvec_t *rv, const size_t *first,
                        size_t n, uint64_t deadline, const overlap_t *ov, size_t parts,
                        int *results)
{
    memset(kd, 0, sizeof *kd);
    kd->rv = rv;
    kd->first = first;
    kd->n = n;
    kd->ov = ov;
    kd->st = kd->stack_st; /* stack_st[0] = 0: "nothing failed" when rv is empty */
    int err = rv->err;
    if (!err && rv->n > INLINE_REQS && !(kd->st = malloc(rv->n * sizeof *kd->st)))
        err = -ENOMEM;
    else if (!err && rv->n && deadline && remaining_ms(deadline) == 0)
        err = CR_E_LEASE_EXPIRED;
    if (!err && ov && rv->n > 1) /* the TE's checksums of a multi-request batch */
        kd->crc = rv->n <= INLINE_REQS ? kd->stack_crc : calloc(rv->n, sizeof *kd->crc);
    if (!err && ov && rv->n > 1 && !kd->crc)
        err = -ENOMEM;
    if (err) {
        if (kd->st != kd->stack_st)
            free(kd->st);
        kd->st = NULL;
        kd->failed_start = 1;
        for (size_t i = 0; i < n; i++)
            if (!results[i])
                results[i] = err;
        return;
    }
    for (size_t q = 0; q < rv->n; q++)
        kd->st[q] = 0;
    if (rv->n == 1) {
        run_batch(s, rv, kd->st); /* a lone request: the TE may run it in this thread */
    } else if (rv->n > 1) {
        kd->busy = 1; /* copies in flight until keyed_finish */
        cr__sc_te_busy++;
        if (!ov || parts < 1)
            parts = 1;
        if (parts > OVERLAP_PARTS)
            parts = OVERLAP_PARTS;
        if (parts > n)
            parts = n;
        kd->parts = parts;
        for (size_t j = 0; j <= parts; j++)
            kd->k[j] = n * j / parts;
        for (size_t j = 0; j < parts; j++) {
            size_t q0 = first[kd->k[j]], nq = first[kd->k[j + 1]] - q0;
            if (!nq)
                continue;
            int rc = cr_xfer_batch_alloc(s->te, nq, &kd->b[j]);
            if (!rc && kd->crc)
                cr__xfer_batch_want_crc(kd->b[j]);
            if (!rc && (rc = cr__xfer_batch_submit_caps(kd->b[j], rv->v + q0, rv->caps + q0,
                                                        nq)) != 0)
                cr_xfer_batch_free(kd->b[j]);
            if (rc) { /* the part itself failed: every request of it did */
                kd->b[j] = NULL;
                for (size_t q = q0; q < q0 + nq; q++)
                    kd->st[q] = rc;
            }
            for (size_t q = q0; kd->crc && !rc && q < q0 + nq; q++)
                kd->crc[q] = cr__xfer_batch_crc_wanted(kd->b[j], q - q0) ? TE_CRC_WANTED : 0;
        }
    }
    if (ov && ov->start)
        ov->start(ov->arg, n, kd);
}

/* Waits for what keyed_start started; every key still without an error
 * gets CR_E_TRANSFER_FAIL if one of its requests failed. */
static void keyed_finish(cr_store_t *s, keyed_t *kd, int *results)
{
    if (kd->failed_start)
        return;
    if (kd->busy) {
        kd->busy = 0;
        cr__sc_te_busy--;
    }
    const reqvec_t *rv = kd->rv;
    const overlap_t *ov = kd->ov;
    int after = ov != NULL;
    for (size_t j = 0; j < kd->parts; j++) {
        size_t q0 = kd->first[kd->k[j]];
        if (kd->b[j])
            batch_collect(kd->b[j], kd->first[kd->k[j + 1]] - q0, kd->st + q0,
                          kd->crc ? kd->crc + q0 : NULL);
        kd->b[j] = NULL; /* freed */
        if (after)
            ov->fn(ov->arg, kd->k[j], kd->k[j + 1], kd);
    }
    if (after && !kd->parts) /* a lone request, or every byte copied in place */
        ov->fn(ov->arg, 0, kd->n, kd);
    int failed = 0;
    for (size_t i = 0; i < kd->n; i++)
        for (size_t q = kd->first[i]; q < kd->first[i + 1] && !results[i]; q++)
            if (kd->st[q]) {
                results[i] = CR_E_TRANSFER_FAIL;
                failed = 1;
            }
    if (failed)
        mark_failed(s, rv->v, kd->st, rv->n);
    if (kd->st != kd->stack_st)
        free(kd->st);
    if (kd->crc != kd->stack_crc)
        free(kd->crc);
}

/* Key i's requests all moved ([first[i], first[i+1]) of kd): 1 if so. */
static int kd_key_moved(const keyed_t *kd, size_t i)
{
    for (size_t q = kd->first[i]; q < kd->first[i + 1]; q++)
        if (kd->st[q])
            return 0;
    return 1;
}

/* 1 if the TE hashes every request of key i (cr__xfer_batch_crc_wanted:
 * its transport hashes what it moves, noted at submit); fixed from then. */
static int kd_key_te_hashes(const keyed_t *kd, size_t i)
{
    if (!kd->crc || kd->first[i] == kd->first[i + 1])
        return 0;
    for (size_t q = kd->first[i]; q < kd->first[i + 1]; q++)
        if (!(kd->crc[q] & TE_CRC_WANTED))
            return 0;
    return 1;
}

/* The crc32c of key i's value [base, base + size) from the TE's checksums
 * of its requests: those whose local ranges tile the value in order from
 * base (later ones, e.g. another replica's writes of the same bytes, are
 * not needed). Returns 1 and *out, or 0 when the TE's checksums do not
 * cover the value (the caller then hashes it itself). */
static int kd_key_crc(const keyed_t *kd, size_t i, const void *base, uint64_t size, uint32_t *out)
{
    if (!kd->crc)
        return 0;
    uint64_t pos = 0;
    uint32_t c = 0;
    for (size_t q = kd->first[i]; q < kd->first[i + 1] && pos < size; q++) {
        const cr_xfer_request_t *r = &kd->rv->v[q];
        if (!(kd->crc[q] & TE_CRC_KNOWN) || (const char *)r->local_addr != (const char *)base + pos ||
            r->length > size - pos)
            return 0;
        c = pos ? cr__crc32c_combine(c, (uint32_t)kd->crc[q], r->length) : (uint32_t)kd->crc[q];
        pos += r->length;
    }
    if (pos != size)
        return 0;
    *out = c;
    return 1;
}

/* A read that took elapsed_ms under a lease of lease_ms needs validation
 * when it may have outlived the lease (with a safety margin for clock
 * granularity and the master's reply travel). */
static int needs_validation(uint64_t elapsed_ms, uint64_t lease_ms)
{
    uint64_t margin = 10 + lease_ms / 10;
    return lease_ms <= margin || elapsed_ms >= lease_ms - margin;
}

/* ---- RPC message builders ------------------------------------------------- */

/* Builds an object-op request of n items (keys) of single or batch type. */
static int build_items(cr__rpc_msg_t *req, uint16_t single_type, const char *const *keys, size_t n)
{
    memset(req, 0, sizeof *req);
    req->type = n == 1 ? single_type : (uint16_t)(single_type + CR__RPC_BATCH_OFFSET);
    req->n_items = (uint32_t)n;
    req->items = cr__rpc_msg_alloc(req, n * sizeof *req->items);
    if (!req->items)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        req->items[i].key = keys[i];
        req->items[i].key_len = (uint32_t)strlen(keys[i]);
    }
    return 0;
}

/* A call's result rc and its reply rep: 0 when rep has n items (the
 * caller frees it), else the error (rep freed). */
static int items_answered(int rc, cr__rpc_msg_t *rep, size_t n)
{
    if (rc)
        return rc;
    if (rep->n_items != n) {
        rc = rep->status ? rep->status : CR_E_RPC_FAIL;
        cr__rpc_msg_free(rep);
        return rc;
    }
    return 0;
}

/* Calls (req freed) and checks the reply has n items: 0 (the caller frees
 * *rep) or the error. */
static int call_items(cr_store_t *s, cr__rpc_msg_t *req, cr__rpc_msg_t *rep, size_t n)
{
    int rc = cr__sc_call(s, req, rep);
    cr__rpc_msg_free(req);
    return items_answered(rc, rep, n);
}

/* The fields of c that its field_mask selects (store.h), defaults for the
 * others. */
static cr_store_replicate_config_t cfg_effective(const cr_store_replicate_config_t *c)
{
    cr_store_replicate_config_t e = {.field_mask = CR_STORE_REPL_V1};
    if (!c)
        return e;
    uint64_t m = c->field_mask ? c->field_mask : CR_STORE_REPL_V1;
    if (m & CR_STORE_REPL_REPLICA_NUM)
        e.replica_num = c->replica_num;
    if (m & CR_STORE_REPL_PREFERRED_SEGMENTS) {
        e.preferred_segments = c->preferred_segments;
        e.n_preferred = c->n_preferred;
    }
    if (m & CR_STORE_REPL_SOFT_PIN)
        e.soft_pin = c->soft_pin;
    if (m & CR_STORE_REPL_HARD_PIN)
        e.hard_pin = c->hard_pin;
    if (m & CR_STORE_REPL_UPSERT)
        e.upsert = c->upsert;
    return e;
}

static void cfg_to_rpc(const cr_store_replicate_config_t *config, cr__rpc_repl_cfg_t *o)
{
    cr_store_replicate_config_t c = cfg_effective(config);
    memset(o, 0, sizeof *o);
    o->replica_num = c.replica_num ? c.replica_num : 1;
    o->flags = (c.soft_pin ? CR__RPC_CFG_SOFT_PIN : 0) | (c.hard_pin ? CR__RPC_CFG_HARD_PIN : 0) |
               (c.upsert ? CR__RPC_CFG_UPSERT : 0);
    o->n_preferred = (uint32_t)c.n_preferred;
    o->preferred = (const char **)c.preferred_segments;
}

static int check_cfg(const cr_store_replicate_config_t *config)
{
    if (config && (config->field_mask & ~(CR_STORE_REPL_V1 | CR_STORE_REPL_UPSERT)))
        return CR_E_INVALID_PARAMS; /* a bit this library does not know */
    cr_store_replicate_config_t c = cfg_effective(config);
    if (c.replica_num > CR_STORE_REPLICA_MAX || c.n_preferred > CR_STORE_PREFERRED_MAX ||
        (c.n_preferred && !c.preferred_segments))
        return CR_E_INVALID_PARAMS;
    for (size_t i = 0; i < c.n_preferred; i++)
        if (!c.preferred_segments[i] ||
            strnlen(c.preferred_segments[i], CR_XFER_NAME_MAX) >= CR_XFER_NAME_MAX)
            return CR_E_INVALID_PARAMS;
    return 0;
}

/* PutEnd (ok != 0) or PutRevoke for the keys with mask[i] set. Writes the
 * master's per-key verdict to results[i] for PutEnd. */
static void put_finish(cr_store_t *s, const char *const *keys, const cr__rpc_item_t *started,
                       size_t n, const uint8_t *mask, int end, const uint32_t *crcs,
                       int *results)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += mask[i] != 0;
    if (!m)
        return;
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = m == 1 ? (end ? CR__RPC_PUT_END : CR__RPC_PUT_REVOKE)
                      : (end ? CR__RPC_BATCH_PUT_END : CR__RPC_BATCH_PUT_REVOKE);
    req.items = cr__rpc_msg_alloc(&req, m * sizeof *req.items);
    scratch_t sc;
    size_t *idx = scratch_init(&sc, SCR(m * sizeof *idx)) ? NULL : scratch_take(&sc, m * sizeof *idx);
    int rc = -ENOMEM;
    if (req.items && idx) {
        size_t j = 0;
        for (size_t i = 0; i < n; i++) {
            if (!mask[i])
                continue;
            idx[j] = i;
            req.items[j].key = keys[i];
            req.items[j].key_len = (uint32_t)strlen(keys[i]);
            req.items[j].version = started[i].version;
            if (end && crcs) {
                req.items[j].flags = CR__RPC_F_CRC;
                req.items[j].crc = crcs[i];
            }
            j++;
        }
        req.n_items = (uint32_t)m;
        rc = call_items(s, &req, &rep, m);
    } else {
        cr__rpc_msg_free(&req);
    }
    if (rc == 0) {
        for (size_t j = 0; j < m; j++) {
            if (end) /* not found: the put outlived its deadline and was reclaimed */
                results[idx[j]] = rep.items[j].status == CR_E_OBJECT_NOT_FOUND
                                      ? CR_E_LEASE_EXPIRED
                                      : rep.items[j].status;
            else if (rep.items[j].status && rep.items[j].status != CR_E_OBJECT_NOT_FOUND)
                CR_LOG_WARN(COMP, "PutRevoke(%s): %s", keys[idx[j]],
                            cr_strerror(rep.items[j].status));
        }
        cr__rpc_msg_free(&rep);
    } else {
        /* An unanswered PutEnd is reported as the RPC error. The master may
         * still have applied it (reply lost): then the key is visible and a
         * retried put gets OBJECT_ALREADY_EXISTS; if not, the put expires at
         * its deadline and the key never becomes visible. */
        CR_LOG_WARN(COMP, "%s of %zu keys failed: %s", end ? "PutEnd" : "PutRevoke", m,
                    cr_strerror(rc));
        if (end)
            for (size_t i = 0; i < n; i++)
                if (mask[i])
                    results[i] = rc;
    }
    scratch_fini(&sc);
}

/* ---- put ------------------------------------------------------------------ */

/* PutStart for n keys of lens[i] bytes. Returns 0 (*rep: one item per
 * key, each with its own status; the caller frees it) or the RPC error
 * (then written to every results[i]). */
static int put_start(cr_store_t *s, const char *const *keys, const size_t *lens, size_t n,
                     const cr_store_replicate_config_t *cfg, cr__rpc_msg_t *rep, int *results)
{
    cr__rpc_msg_t req;
    int rc = build_items(&req, CR__RPC_PUT_START, keys, n);
    if (rc)
        return rc;
    cr__rpc_repl_cfg_t rcfg;
    cfg_to_rpc(cfg, &rcfg);
    for (size_t i = 0; i < n; i++) {
        req.items[i].size = lens[i];
        req.items[i].cfg = rcfg;
    }
    /* the suspect segments, for the master to place elsewhere (suspect.c;
     * a master that reads them said so in its PING reply) */
    if (atomic_load_explicit(&s->master_excl, memory_order_relaxed))
        req.n_exclude = cr__sc_suspect_names(s, &req, &req.exclude);
    rc = call_items(s, &req, rep, n);
    if (rc)
        for (size_t i = 0; i < n; i++)
            results[i] = rc;
    return rc;
}

/* Takes PutStart's answers: results[i] = the key's status (or
 * CR_E_INVALID_REPLICA for a malformed replica list), started[i] = 1 for
 * every key PutStart allocated (to be ended or revoked). Returns the
 * earliest put deadline (monotonic ms) of the keys to write. */
static uint64_t put_started(cr__rpc_msg_t *rep, const char *const *keys, const size_t *lens,
                            size_t n, uint64_t t0, uint8_t *started, int *results)
{
    uint64_t deadline = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        cr__rpc_item_t *it = &rep->items[i];
        results[i] = it->status;
        if (it->status)
            continue;
        started[i] = 1;
        it->size = lens[i]; /* PutStart's reply carries no size */
        if (check_replicas(it)) {
            CR_LOG_ERROR(COMP, "PutStart(%s): malformed replica list", keys[i]);
            results[i] = CR_E_INVALID_REPLICA;
            continue;
        }
        uint64_t dl = t0 + it->lease_ms;
        if (dl < deadline)
            deadline = dl;
    }
    return deadline;
}

/* Direct put (registered sources): the requests of every replica of every
 * started key into rv (key i's are [first[i], first[i+1]); first: n + 1
 * entries); a key whose put deadline passed already gets
 * CR_E_LEASE_EXPIRED (never a write, also the memcpy into our own segment,
 * into space the master may reclaim). */
static void put_direct_build(cr_store_t *s, const cr__rpc_msg_t *rep, const void *const *srcs,
                             const size_t *lens, size_t n, const uint8_t *started, size_t *first,
                             uint64_t deadline, reqvec_t *rv, int *results)
{
    int late = remaining_ms(deadline) == 0;
    for (size_t i = 0; i < n; i++) {
        first[i] = rv->n;
        if (!started[i] || results[i])
            continue;
        if (late) {
            results[i] = CR_E_LEASE_EXPIRED;
            continue;
        }
        const cr__rpc_item_t *it = &rep->items[i];
        for (uint32_t r = 0; r < it->n_replicas && !results[i]; r++)
            results[i] = add_range(s, rv, &it->replicas[r], 0, lens[i],
                                   (uint8_t *)(uintptr_t)srcs[i], CR_XFER_WRITE);
    }
    first[n] = rv->n;
}

/* Staged put (any source memory, one key in practice): chunks copied
 * through the staging buffer, each written to every replica before the
 * next; stops at the put deadline. */
static void put_write_staged(cr_store_t *s, const cr__rpc_msg_t *rep, const void *const *srcs,
                             const size_t *lens, size_t n, const uint8_t *started,
                             uint64_t deadline, int *results)
{
    size_t chunk = s->staging.size / 4;
    if (chunk < CR__STAGING_ALIGN)
        chunk = s->staging.size;
    reqvec_t rv;
    rv_init(&rv);
    for (size_t i = 0; i < n; i++) {
        if (!started[i] || results[i])
            continue;
        const cr__rpc_item_t *it = &rep->items[i];
        const uint8_t *src = srcs[i];
        for (uint64_t off = 0; off < lens[i] && !results[i];) {
            size_t c = lens[i] - off < chunk ? (size_t)(lens[i] - off) : chunk;
            int64_t rem = remaining_ms(deadline);
            int wait_ms =
                (int)(rem > CR__SC_STAGING_WAIT_MAX_MS ? CR__SC_STAGING_WAIT_MAX_MS : rem);
            uint8_t *stg = rem ? cr__staging_alloc(&s->staging, c, wait_ms) : NULL;
            if (!stg) {
                results[i] = CR_E_LEASE_EXPIRED;
                break;
            }
            memcpy(stg, src + off, c);
            rv.n = 0;
            for (uint32_t r = 0; r < it->n_replicas && !results[i]; r++)
                results[i] = add_range(s, &rv, &it->replicas[r], off, c, stg, CR_XFER_WRITE);
            if (!results[i] && rv.err)
                results[i] = rv.err;
            if (!results[i] && rv.n) {
                int stack_st[INLINE_REQS];
                int *st = rv.n <= INLINE_REQS ? stack_st : malloc(rv.n * sizeof *st);
                if (!st)
                    results[i] = -ENOMEM;
                else if (remaining_ms(deadline) == 0)
                    results[i] = CR_E_LEASE_EXPIRED;
                else if (run_batch(s, &rv, st)) {
                    results[i] = CR_E_TRANSFER_FAIL;
                    mark_failed(s, rv.v, st, rv.n);
                }
                if (st && st != stack_st)
                    free(st);
            }
            cr__staging_free(&s->staging, stg, c);
            off += c;
        }
    }
    rv_free(&rv);
}

/* The end-to-end checksums of the values written (the caller owns the
 * sources until the put returns, so these are the bytes sent): a key the
 * TE does not hash is hashed by put_crc_start while its data moves; the
 * others get the TE's checksums once their data moved (put_crc_fn), or one
 * pass over the source if the TE's do not cover the value. */
typedef struct put_crc {
    const void *const *srcs;
    const size_t *lens;
    const uint8_t *started;
    const int *results;
    uint32_t *crcs;
} put_crc_t;

static void put_crc_start(void *arg, size_t n, const keyed_t *kd)
{
    put_crc_t *pc = arg;
    for (size_t i = 0; i < n; i++)
        if (pc->started[i] && !pc->results[i] && !kd_key_te_hashes(kd, i))
            pc->crcs[i] = cr__crc32c(0, pc->srcs[i], pc->lens[i]);
}

static void put_crc_fn(void *arg, size_t k0, size_t k1, const keyed_t *kd)
{
    put_crc_t *pc = arg;
    for (size_t i = k0; i < k1; i++)
        if (pc->started[i] && !pc->results[i] && kd_key_te_hashes(kd, i) && kd_key_moved(kd, i) &&
            !kd_key_crc(kd, i, pc->srcs[i], pc->lens[i], &pc->crcs[i]))
            pc->crcs[i] = cr__crc32c(0, pc->srcs[i], pc->lens[i]);
}

/* A put that may place again (do_put): a key the master placed on a
 * segment that failed a transfer lately (suspect.c) is not written; it gets
 * CR_E_TRANSFER_FAIL now, is revoked with the keys that failed, and do_put
 * asks for another placement. Writing to a frozen node would cost the TE's
 * stall time and fail anyway. */
static void skip_suspect_placements(cr_store_t *s, const cr__rpc_msg_t *rep, size_t n,
                                    const uint8_t *started, int *results)
{
    if (!cr__sc_any_suspect(s))
        return;
    for (size_t i = 0; i < n; i++) {
        const cr__rpc_item_t *it = &rep->items[i];
        for (uint32_t r = 0; started[i] && !results[i] && r < it->n_replicas; r++)
            for (uint32_t k = 0; k < it->replicas[r].n_shards && !results[i]; k++)
                if (cr__sc_suspect(s, it->replicas[r].shards[k].segment))
                    results[i] = CR_E_TRANSFER_FAIL;
    }
}

/* One PUT_COMMIT of a reserved chunk: the keys [k0, k1) written (ok[i]).
 * idx[j] is the chunk index of the request's item j. */
typedef struct resv_cmt {
    cr__rpc_msg_t req;
    size_t *idx;
    size_t m;
    const uint8_t *ok; /* the keys [k0, k1) with ok[i] */
    size_t k0, k1;
    /* resv_remember_warm: the location cache's entries of the m keys
     * (versions unknown, key NULL: not to be kept) and their hashes */
    cr__lc_put_t *lv;
    uint64_t *lh;
} resv_cmt_t;


/* One chunk of a put: keys [0, n) of the arrays it points at (a view into
 * the call's). put_chunk_begin sends PutStart and starts the writes (a
 * direct put's writes run in the background, their checksums computed
 * meanwhile); put_chunk_end finishes the writes (a staged put's run here),
 * then sends PutEnd for the keys written and PutRevoke for the others. A
 * chunk must not move between the two (its scratch and keyed_t point into
 * it). */
typedef struct put_chunk {
    const char *const *keys;
    const void *const *srcs; /* registered memory unless staged */
    const size_t *lens;
    size_t n;
    int *results;
    int staged;
    int avoid_suspects; /* keys placed on a suspect segment are revoked unwritten */
    int resv; /* a reserved put: carved from a reservation, then PutCommit */
    int rc; /* PutStart failed (results hold why): nothing to end */
    uint64_t deadline;
    cr__rpc_msg_t rep;
    scratch_t sc;
    uint8_t *started; /* [0,n): PutStart ok; [n,2n): data written */
    size_t *first;
    uint32_t *crcs;
    reqvec_t rv;
    put_crc_t pc;
    overlap_t ov;
    keyed_t kd;
    /* a reserved chunk's commit, pipelined (resv_chunk_send) */
    resv_cmt_t q;
    cr__rpc_msg_t qrep;
    int qrc;  /* building it failed (-ENOMEM), or the call's result */
    int qans; /* -1 outstanding in the pipe, 1 answered, 0 not */
} put_chunk_t;

/* ---- reserved put: one master round trip -----------------------------------
 *
 * A small value (<= RESV_VALUE_MAX; from unregistered memory: a single put,
 * through one staging copy) put with the default config is carved
 * out of a space reservation this client holds (RESERVE: a range of one
 * segment, its lease and a WRITE grant over it; store/master/reserve.c),
 * written with the TE, and made visible by one PUT_COMMIT (key, segment,
 * address, size, crc32c). No write starts within a margin (a quarter of
 * the lease) of the reservation's expiry, measured from before the
 * RESERVE was sent. A commit the master refuses (CR_E_INVALID_WRITE:
 * reservation expired, reclaimed, unknown to a new leader, out of order)
 * or a write that failed leaves nothing visible: that key is put again the
 * two-phase way (PutStart, write, PutEnd). Any other answer is final
 * (OBJECT_ALREADY_EXISTS exactly as PutStart would say it).
 * A reservation the client leaves (its next value did not fit, it is too
 * close to expiry, a commit into it was refused) is handed back with the
 * next RESERVE: its id and the carve cursor, above which nothing of this
 * client is written (every carve lies below it, made under resv_mu), so
 * the master frees that tail at once instead of quarantining it. A client
 * whose reservation sat idle for a heartbeat (no carve, no reserved put in
 * flight: resv_busy) gives it back (RESERVE of 0 bytes, cr__sc_resv_idle),
 * so an idle client holds no space a big put may need.
 * On by default; CRESCENT_PUT_RESERVE=0 at cr_store_create turns it off. */
#define RESV_VALUE_MAX (1u << 20)
/* Asked per reservation (the master may give less): RESV_WANT_MIN, doubled
 * up to RESV_WANT_MAX each time a client fills a reservation within
 * RESV_GROW_MS of its grant (a streaming writer: a 256 x 16 KiB batch fills
 * 16 MiB every fourth call, and each RESERVE stalls that call's data behind
 * its earlier commits and one more round trip), back to RESV_WANT_MIN when
 * its reservations go back idle (cr__sc_resv_idle), and when the master
 * refused a RESERVE or a commit into one (memory pressure closes every
 * open reservation, and their rest waits out a quarantine: a big one
 * would hold more of a full pool). */
#define RESV_WANT_MIN (16ull << 20)
#define RESV_WANT_MAX (64ull << 20)
#define RESV_GROW_MS 1000
#define RESV_RETRY_MS 1000      /* after a failed RESERVE, no other before */

static int resv_cfg_ok(const cr_store_replicate_config_t *config)
{
    cr_store_replicate_config_t c = cfg_effective(config);
    return c.replica_num <= 1 && !c.n_preferred && !c.soft_pin && !c.hard_pin && !c.upsert;
}

/* RESERVE into s->resv. Caller holds resv_mu. Returns 0 or an error. */
static int resv_get_locked(cr_store_t *s)
{
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = CR__RPC_RESERVE;
    req.client_id = s->id;
    uint64_t now = cr__now_ms();
    if (!s->resv_want)
        s->resv_want = RESV_WANT_MIN;
    if (s->resv.id && s->resv_grant_len >= s->resv_want &&
        (s->resv.cur - (s->resv.end - s->resv_grant_len)) / 4 * 5 >= s->resv_grant_len &&
        now - s->resv.granted_ms < RESV_GROW_MS && s->resv_want < RESV_WANT_MAX)
        s->resv_want *= 2; /* a full one (4/5 carved), given what was asked, filled quickly */
    req.size = s->resv_want;
    if (s->resv.id) { /* left: its uncarved tail goes back */
        s->resv_back_id = s->resv.id;
        s->resv_back_cur = s->resv.cur;
    }
    req.count = s->resv_back_id;
    req.base = s->resv_back_cur;
    /* items[].key: the suspect segments, where this client would not
     * carve (an older master ignores a RESERVE's items) */
    const char **sus = NULL;
    uint32_t n_sus = cr__sc_suspect_names(s, &req, &sus);
    req.items = n_sus ? cr__rpc_msg_alloc(&req, n_sus * sizeof *req.items) : NULL;
    for (uint32_t i = 0; req.items && i < n_sus; i++) {
        req.items[i].key = sus[i];
        req.items[i].key_len = (uint32_t)strlen(sus[i]);
    }
    req.n_items = req.items ? n_sus : 0;
    s->resv_back_id = 0; /* once: a lost hand-back only leaves the tail to the quarantine */
    uint64_t t0 = now;
    s->resv.id = 0;
    int rc = cr__sc_call(s, &req, &rep);
    cr__rpc_msg_free(&req);
    if (!rc) {
        const cr__rpc_item_t *it = rep.n_items == 1 ? &rep.items[0] : NULL;
        const cr__rpc_shard_t *sh =
            it && it->n_replicas == 1 && it->replicas[0].n_shards == 1 ? &it->replicas[0].shards[0]
                                                                      : NULL;
        rc = rep.status;
        if (!rc && (!sh || !sh->segment || strlen(sh->segment) >= sizeof s->resv.seg ||
                    !sh->len || !it->version || !it->replica_id ||
                    (it->replica_id & (it->replica_id - 1)) || rep.count < 4 ||
                    sh->addr + sh->len < sh->addr))
            rc = CR_E_INVALID_REPLICA;
        if (!rc) {
            snprintf(s->resv.seg, sizeof s->resv.seg, "%s", sh->segment);
            s->resv.cur = sh->addr;
            s->resv.end = sh->addr + sh->len;
            s->resv.granule = it->replica_id;
            s->resv.write_until_ms = t0 + rep.count - rep.count / 4;
            s->resv.has_cap = sh->cap != NULL;
            if (sh->cap)
                memcpy(s->resv.cap, sh->cap, CR__RPC_CAP_LEN);
            s->resv.id = it->version;
            s->resv_grant_len = sh->len;
            s->resv.granted_ms = t0;
        }
        cr__rpc_msg_free(&rep);
    }
    if (rc) {
        s->resv_retry_ms = cr__now_ms() + RESV_RETRY_MS;
        s->resv_want = RESV_WANT_MIN;
    }
    return rc;
}

void cr__sc_resv_idle(cr_store_t *s, cr__rpc_client_t *c)
{
    pthread_mutex_lock(&s->resv_mu);
    if ((s->resv.id || s->resv_back_id) && !s->resv_used && !atomic_load(&s->resv_busy)) {
        /* nothing of ours in flight (busy counts from before the carve to
         * after the commit) and none can start: we hold resv_mu */
        cr__rpc_msg_t req = {0}, rep = {0};
        req.type = CR__RPC_RESERVE;
        req.client_id = s->id;
        if (cr__rpc_client_call(c, &req, &rep) == 0) {
            if (rep.status == 0) {
                s->resv.id = 0;
                s->resv_back_id = 0;
                s->resv_want = RESV_WANT_MIN; /* a writer that paused starts small again */
            }
            cr__rpc_msg_free(&rep);
        }
    }
    s->resv_used = 0;
    pthread_mutex_unlock(&s->resv_mu);
}

/* Leaves reservation id (the master refused a commit into it): handed
 * back with the next RESERVE. */
static void resv_drop(cr_store_t *s, uint64_t id)
{
    pthread_mutex_lock(&s->resv_mu);
    if (s->resv.id == id) {
        s->resv_back_id = id;
        s->resv_back_cur = s->resv.cur;
        s->resv.id = 0;
    }
    /* a reservation the master closed (pressure: it reclaims them all, its
     * rest waits out a quarantine) or forgot: ask for little again */
    s->resv_want = RESV_WANT_MIN;
    pthread_mutex_unlock(&s->resv_mu);
}

/* Bytes a value of len takes from a reservation (whole granules; the
 * current reservation's, or none yet: the value itself). Caller holds
 * resv_mu. */
static uint64_t rl_of(const cr_store_t *s, uint64_t len)
{
    uint64_t g = s->resv.granule ? s->resv.granule : 1;
    return (len + g - 1) / g * g;
}

/* The chunk's "PutStart": every key carved from a reservation (at most one
 * RESERVE per call: a client holds few, store/master/reserve.c) gets an
 * item like a PutStart's (version = the reservation id, lease_ms = until
 * the last moment a write may start, one replica of one shard with the
 * reservation's grant); the others CR_E_INVALID_WRITE (put two-phase).
 * Returns 0 or -ENOMEM. */
static int resv_start(cr_store_t *s, put_chunk_t *c)
{
    size_t n = c->n;
    cr__rpc_msg_t *rep = &c->rep;
    rep->items = cr__rpc_msg_alloc(rep, n * sizeof *rep->items);
    cr__rpc_replica_t *reps = cr__rpc_msg_alloc(rep, n * sizeof *reps);
    cr__rpc_shard_t *shs = cr__rpc_msg_alloc(rep, n * sizeof *shs);
    if (!rep->items || !reps || !shs)
        return -ENOMEM;
    rep->n_items = (uint32_t)n;
    const char *seg = NULL;
    const uint8_t *cap = NULL;
    uint64_t seg_id = 0;
    int fetched = 0;
    pthread_mutex_lock(&s->resv_mu);
    s->resv_used = 1;
    /* one clock read for the chunk (and one after a RESERVE): a carve
     * judged a few microseconds early gets a lease that long too generous,
     * and that cannot matter: its deadline is measured from the chunk's
     * start (put_chunk_begin's t0, earlier still), so it ends no later
     * than the reservation's last moment for a write */
    uint64_t now = cr__now_ms();
    /* no write into a reservation on a segment that failed a transfer
     * lately (it would wait out a stall): it is left like an expired one,
     * handed back with the next RESERVE, which names the suspect segments */
    int sus = s->resv.id && cr__sc_suspect(s, s->resv.seg);
    for (size_t i = 0; i < n; i++) {
        cr__rpc_item_t *it = &rep->items[i];
        it->status = CR_E_INVALID_WRITE;
        if (c->lens[i] > RESV_VALUE_MAX)
            continue;
        for (;;) {
            if (s->resv.id && !sus && now < s->resv.write_until_ms) {
                uint64_t rl = rl_of(s, c->lens[i]);
                if (rl <= s->resv.end - s->resv.cur) {
                    if (seg_id != s->resv.id) { /* this reservation's name and grant */
                        char *nm = cr__rpc_msg_strdup(rep, s->resv.seg, strlen(s->resv.seg));
                        uint8_t *cp = s->resv.has_cap ? cr__rpc_msg_alloc(rep, CR__RPC_CAP_LEN)
                                                      : NULL;
                        if (!nm || (s->resv.has_cap && !cp))
                            break;
                        if (cp)
                            memcpy(cp, s->resv.cap, CR__RPC_CAP_LEN);
                        seg = nm;
                        cap = cp;
                        seg_id = s->resv.id;
                    }
                    shs[i] = (cr__rpc_shard_t){seg, s->resv.cur, c->lens[i], cap};
                    reps[i] = (cr__rpc_replica_t){.n_shards = 1, .shards = &shs[i]};
                    it->status = 0;
                    it->version = s->resv.id;
                    uint64_t left = s->resv.write_until_ms - now;
                    it->lease_ms = left > UINT32_MAX ? UINT32_MAX : (uint32_t)left;
                    it->n_replicas = 1;
                    it->replicas = &reps[i];
                    s->resv.cur += rl;
                    break;
                }
            }
            /* a value larger than the master grants (a reservation is at
             * most 1/16 of a segment) goes two-phase without asking: each
             * RESERVE would take space, and under pressure the master
             * closes open reservations into the quarantine */
            if (fetched || now < s->resv_retry_ms ||
                (s->resv_grant_len && rl_of(s, c->lens[i]) > s->resv_grant_len) ||
                resv_get_locked(s))
                break;
            fetched = 1;
            now = cr__now_ms();
            sus = cr__sc_suspect(s, s->resv.seg);
        }
    }
    pthread_mutex_unlock(&s->resv_mu);
    return 0;
}

/* What resv_remember does for commit q, started before its answer is
 * waited for (put_drain): the location cache's entries of its keys built
 * (versions still unknown) and hashed, and the cache lines they go to
 * loading (cr__lc_warm) while the master works. Keys with a grant
 * (security on) or in this client's own segment are not kept. Without
 * memory, nothing: the keys are then not remembered. */
static void resv_remember_warm(cr_store_t *s, const put_chunk_t *c, resv_cmt_t *q)
{
    if (!s->lc.on || !q->m || q->lv)
        return;
    cr__lc_put_t *v = cr__rpc_msg_alloc(&q->req, q->m * sizeof *v);
    uint64_t *h = cr__rpc_msg_alloc(&q->req, q->m * sizeof *h);
    if (!v || !h)
        return;
    for (size_t j = 0; j < q->m; j++) {
        const cr__rpc_shard_t *sh = &c->rep.items[q->idx[j]].replicas[0].shards[0];
        int keep = !sh->cap && !cr__sc_is_local(s, sh->segment, sh->addr, sh->len);
        v[j] = (cr__lc_put_t){keep ? c->keys[q->idx[j]] : NULL, sh->segment, 0, 0, sh->addr,
                              sh->len};
    }
    cr__lc_warm(&s->lc, v, q->m, h);
    q->lv = v;
    q->lh = h;
}

/* The keys of reserved chunk c that its commit q stored (rep: the
 * master's answer, versions in order) into the location cache
 * (loccache.h), for a later get of them to read before the master answers
 * (spec_get_one, spec_batch_t): one lock for the commit. Replica id 0: the
 * master names it at the first get. */
static void resv_remember(cr_store_t *s, const put_chunk_t *c, resv_cmt_t *q,
                          const cr__rpc_msg_t *rep)
{
    resv_remember_warm(s, c, q); /* unless put_drain did, while it waited */
    if (!q->lv)
        return;
    for (size_t j = 0; j < q->m; j++)
        if (rep->items[j].status)
            q->lv[j].key = NULL;
        else
            q->lv[j].version = rep->items[j].version;
    cr__lc_set_hashed(&s->lc, q->lv, q->lh, q->m);
}

/* Builds q for the keys of [k0, k1) with ok[i]. Returns 0 (q->m = 0:
 * nothing to commit) or -ENOMEM (q->m keys, nothing to send). */
static int resv_cmt_build(cr_store_t *s, const put_chunk_t *c, const uint8_t *ok, size_t k0,
                          size_t k1, resv_cmt_t *q)
{
    memset(q, 0, sizeof *q);
    q->ok = ok;
    q->k0 = k0;
    q->k1 = k1;
    for (size_t i = k0; i < k1; i++)
        q->m += ok[i] != 0;
    if (!q->m)
        return 0;
    size_t m = q->m;
    cr__rpc_msg_t *req = &q->req;
    req->type = CR__RPC_PUT_COMMIT;
    req->client_id = s->id;
    req->items = cr__rpc_msg_alloc(req, m * sizeof *req->items);
    cr__rpc_replica_t *reps = cr__rpc_msg_alloc(req, m * sizeof *reps);
    cr__rpc_shard_t *shs = cr__rpc_msg_alloc(req, m * sizeof *shs);
    q->idx = cr__rpc_msg_alloc(req, m * sizeof *q->idx);
    if (!req->items || !reps || !shs || !q->idx)
        return -ENOMEM;
    size_t j = 0;
    for (size_t i = k0; i < k1; i++) {
        if (!ok[i])
            continue;
        const cr__rpc_item_t *st = &c->rep.items[i];
        cr__rpc_item_t *it = &req->items[j];
        q->idx[j] = i;
        it->key = c->keys[i];
        it->key_len = (uint32_t)strlen(c->keys[i]);
        it->size = c->lens[i];
        it->version = st->version;
        if (s->crc_on) {
            it->flags = CR__RPC_F_CRC;
            it->replica_id = c->crcs[i];
        }
        shs[j] = st->replicas[0].shards[0];
        shs[j].cap = NULL; /* the grant stays here */
        reps[j] = (cr__rpc_replica_t){.n_shards = 1, .shards = &shs[j]};
        it->n_replicas = 1;
        it->replicas = &reps[j];
        j++;
    }
    req->n_items = (uint32_t)m;
    return 0;
}

/* The master's answer to q (rc: the call's result; rep: its reply when rc
 * is 0, freed here): results[i] = the master's verdict, the item's version
 * set to the object's. An unanswered commit is reported as the RPC error
 * (the master may have applied it: a retried put would then see the key).
 * Frees q. */
static void resv_cmt_apply(cr_store_t *s, put_chunk_t *c, resv_cmt_t *q, int rc,
                           cr__rpc_msg_t *rep)
{
    size_t m = q->m;
    if (!m) { /* nothing was to be committed */
        cr__rpc_msg_free(&q->req);
        return;
    }
    if (rc == 0 && rep->n_items != m) {
        rc = rep->status ? rep->status : CR_E_RPC_FAIL;
        cr__rpc_msg_free(rep);
    }
    if (rc == 0) {
        for (size_t j = 0; j < m; j++) {
            size_t i = q->idx[j];
            c->results[i] = rep->items[j].status;
            if (rep->items[j].status == CR_E_INVALID_WRITE)
                resv_drop(s, c->rep.items[i].version);
            else if (rep->items[j].status == 0)
                c->rep.items[i].version = rep->items[j].version;
        }
        resv_remember(s, c, q, rep);
        cr__rpc_msg_free(rep);
    } else {
        CR_LOG_WARN(COMP, "PutCommit of %zu keys failed: %s", m, cr_strerror(rc));
        for (size_t i = q->k0; i < q->k1; i++)
            if (q->ok[i])
                c->results[i] = rc;
    }
    cr__rpc_msg_free(&q->req);
}

/* The chunk's "PutEnd": one PUT_COMMIT for the keys written (ok[i]). */
static void resv_commit(cr_store_t *s, put_chunk_t *c, const uint8_t *ok)
{
    resv_cmt_t q;
    int rc = resv_cmt_build(s, c, ok, 0, c->n, &q);
    cr__rpc_msg_t rep = {0};
    if (q.m && !rc)
        rc = cr__sc_call(s, &q.req, &rep);
    resv_cmt_apply(s, c, &q, rc, &rep);
}

/* A reserved put's key that left nothing visible: put it two-phase. */
static int resv_fallback(int status)
{
    return status == CR_E_INVALID_WRITE || status == CR_E_TRANSFER_FAIL ||
           status == CR_E_LEASE_EXPIRED;
}

static void put_chunk_begin(cr_store_t *s, put_chunk_t *c, const cr_store_replicate_config_t *cfg,
                            int first_chunk)
{
    size_t n = c->n;
    uint64_t t0 = cr__now_ms();
    memset(&c->rep, 0, sizeof c->rep);
    if (c->resv) {
        c->rc = resv_start(s, c);
        if (c->rc) {
            cr__rpc_msg_free(&c->rep);
            for (size_t i = 0; i < n; i++)
                c->results[i] = c->rc;
            return;
        }
    } else {
        c->rc = put_start(s, c->keys, c->lens, n, cfg, &c->rep, c->results);
    }
    if (c->rc)
        return;
    if (first_chunk && s->test_hooks.after_put_start) /* tests: a writer stuck before its writes */
        s->test_hooks.after_put_start(s->test_hooks.user, c->rep.items[0].status);
    c->started = NULL;
    if (scratch_init(&c->sc, SCR(2 * n) + SCR((n + 1) * sizeof *c->first) +
                                 SCR(n * sizeof *c->crcs)) == 0) {
        c->started = scratch_take(&c->sc, 2 * n);
        c->first = scratch_take(&c->sc, (n + 1) * sizeof *c->first);
        c->crcs = scratch_take(&c->sc, n * sizeof *c->crcs);
    }
    if (!c->started && c->resv) { /* nothing written: nothing to give back */
        cr__rpc_msg_free(&c->rep);
        for (size_t i = 0; i < n; i++)
            c->results[i] = -ENOMEM;
        c->rc = -ENOMEM;
        return;
    }
    if (!c->started) {
        /* nothing transferred: revoke whatever was started */
        uint8_t *mask = calloc(n, 1);
        for (size_t i = 0; mask && i < n; i++)
            mask[i] = c->rep.items[i].status == 0;
        if (mask)
            put_finish(s, c->keys, c->rep.items, n, mask, 0, NULL, c->results);
        free(mask);
        cr__rpc_msg_free(&c->rep);
        for (size_t i = 0; i < n; i++)
            c->results[i] = -ENOMEM;
        c->rc = -ENOMEM;
        return;
    }
    c->deadline = put_started(&c->rep, c->keys, c->lens, n, t0, c->started, c->results);
    if (c->avoid_suspects)
        skip_suspect_placements(s, &c->rep, n, c->started, c->results);
    rv_init(&c->rv);
    if (c->staged)
        return;
    c->pc = (put_crc_t){c->srcs, c->lens, c->started, c->results, c->crcs};
    c->ov = (overlap_t){put_crc_start, put_crc_fn, &c->pc};
    put_direct_build(s, &c->rep, c->srcs, c->lens, n, c->started, c->first, c->deadline, &c->rv,
                     c->results);
    /* a key not started has its PutStart error in results[i] */
    keyed_start(s, &c->kd, &c->rv, c->first, n, c->deadline, s->crc_on ? &c->ov : NULL, 1,
                c->results);
}

/* The end of every chunk: the keys stored (ok[i]) to the shared-FS tier,
 * then the chunk's memory. */
static void put_chunk_release(cr_store_t *s, put_chunk_t *c, const uint8_t *ok)
{
    if (atomic_load(&s->fs_state) >= 0) /* the shared-FS tier (tier_fs.c) */
        cr__sc_fs_persist(s, c->keys, c->srcs, c->lens, c->rep.items, ok, c->results, c->n);
    cr__rpc_msg_free(&c->rep);
    scratch_fini(&c->sc);
}

/* ---- a reserved batch's commits, pipelined ----------------------------------
 *
 * A reserved direct batch of several chunks (put_once) sends its commits
 * over one master connection without waiting for each answer
 * (cr__rpc_pipe_t, store/rpc/client.h), in carve order, as the master
 * requires. Chunk j's commit goes out once its writes are done, while
 * chunk j + 1's move, and is received before chunk j + 2 begins (which
 * reuses its state); the last two chunks' commits are received together at
 * the end, so the master answers them back to back instead of waiting for
 * this thread between them. Nothing else goes over the connection while
 * commits are in flight (a chunk's RESERVE is made only after every
 * earlier commit was received). A commit the pipe got no answer to (the
 * connection failed, or an HA master is not the leader) is sent again the
 * ordinary way, in order, once the pipe is closed: a commit the master
 * already applied is recognised (reserve.c, commit_one), one it refuses
 * leaves its keys to the two-phase put. */

/* Waits for chunk c's writes, then sends its commit. */
static void resv_chunk_send(cr_store_t *s, put_chunk_t *c, cr__rpc_pipe_t *p)
{
    if (c->rc)
        return;
    uint8_t *ok = c->started + c->n;
    keyed_finish(s, &c->kd, c->results); /* the crcs too (put_crc_fn) */
    rv_free(&c->rv);
    for (size_t i = 0; i < c->n; i++)
        ok[i] = c->started[i] && c->results[i] == 0;
    memset(&c->qrep, 0, sizeof c->qrep);
    c->qrc = resv_cmt_build(s, c, ok, 0, c->n, &c->q);
    c->qans = !c->qrc && c->q.m && cr__rpc_pipe_send(p, &c->q.req) == 0 ? -1 /* outstanding */
                                                                         : 0;
}

/* Receives chunk c's outstanding answer (busy-polled for unless copies
 * of this thread are in flight). */
static void resv_chunk_collect(cr_store_t *s, put_chunk_t *c, cr__rpc_pipe_t *p)
{
    if (c->rc || c->qans != -1)
        return;
    int r = cr__rpc_pipe_recv(p, &c->qrep, cr__sc_te_busy ? CR__RPC_CALL_NOSPIN : 0);
    if (!r && ((s->ha && c->qrep.status == CR_E_UNAVAILABLE_IN_CURRENT_MODE) ||
               (s->test_hooks.commit_answer_lost &&
                s->test_hooks.commit_answer_lost(s->test_hooks.user)))) {
        cr__rpc_msg_free(&c->qrep);
        r = CR_E_RPC_FAIL;
    }
    c->qans = r == 0;
}

/* After the pipe is closed: the commit again if unanswered (cr__sc_call),
 * its verdicts into results, then what put_chunk_end does after PutEnd. */
static void resv_chunk_finish(cr_store_t *s, put_chunk_t *c)
{
    if (c->rc)
        return;
    uint8_t *ok = c->started + c->n;
    if (!c->qrc && c->q.m && !c->qans)
        c->qrc = cr__sc_call(s, &c->q.req, &c->qrep);
    resv_cmt_apply(s, c, &c->q, c->qrc, &c->qrep);
    for (size_t i = 0; i < c->n; i++)
        ok[i] = ok[i] && c->results[i] == 0;
    put_chunk_release(s, c, ok);
}

static void put_chunk_end(cr_store_t *s, put_chunk_t *c)
{
    if (c->rc)
        return;
    size_t n = c->n;
    uint8_t *started = c->started, *ok = started + n;
    if (!c->staged)
        keyed_finish(s, &c->kd, c->results);
    else
        put_write_staged(s, &c->rep, c->srcs, c->lens, n, started, c->deadline, c->results);
    rv_free(&c->rv);
    for (size_t i = 0; i < n; i++)
        ok[i] = started[i] && c->results[i] == 0;
    for (size_t i = 0; i < n; i++)
        started[i] = started[i] && !ok[i]; /* now: to revoke */
    /* the end-to-end checksum of each value written, fixed at PutEnd: a
     * direct put computed them while its writes ran */
    for (size_t i = 0; s->crc_on && c->staged && i < n; i++)
        if (ok[i])
            c->crcs[i] = cr__crc32c(0, c->srcs[i], c->lens[i]);
    if (c->resv) { /* space carved and not committed is the master's to reclaim */
        resv_commit(s, c, ok);
        for (size_t i = 0; i < n; i++)
            ok[i] = ok[i] && c->results[i] == 0;
    } else {
        put_finish(s, c->keys, c->rep.items, n, ok, 1, s->crc_on ? c->crcs : NULL, c->results);
        put_finish(s, c->keys, c->rep.items, n, started, 0, NULL, c->results);
    }
    put_chunk_release(s, c, ok);
}

/* Chunks of a pipelined batch of n keys: a batch of at least 2 * keys
 * runs as chunks of about `keys` keys (PIPE_KEYS for puts,
 * s->get_chunk_keys for gets: CR__SC_DEFAULT_GET_CHUNK_KEYS), two in flight,
 * so that each chunk's master round trips (PutStart of the next chunk and
 * PutEnd of the previous one; GetReplicaList of the next) overlap another
 * chunk's data. Only the first chunk's PutStart / GetReplicaList and the
 * last one's PutEnd are not overlapped. Every chunk costs its own master
 * calls and TE batch (thread wakeups): 64-key chunks cost more client CPU
 * per key than they saved on this 2-core machine (a 256 x 16 KiB batch:
 * ~12 against ~7-8 us per key over tcp), 128-key chunks did not
 * (docs/benchmarks.md, issue 16, session of 03:51). A 256-key get is one
 * chunk since the session of 2026-11-30 12:08 (client.h). */
#define PIPE_KEYS 128
static size_t pipe_chunks(size_t n, size_t keys)
{
    return n < 2 * keys ? 1 : n / keys;
}

/* 1 if reserved chunk c (begun) holds a carve outside this client's
 * current reservation. The master keeps two reservations open per client
 * and closes the oldest for a third: a RESERVE made by the next chunk
 * could then close the one c carved from and refuse c's commits (its keys
 * would go two-phase, their carved space to the quarantine). put_once
 * commits such a chunk before starting the next. */
static int resv_chunk_spans(cr_store_t *s, const put_chunk_t *c)
{
    if (c->rc || !c->resv)
        return 0;
    pthread_mutex_lock(&s->resv_mu);
    uint64_t cur = s->resv.id;
    pthread_mutex_unlock(&s->resv_mu);
    for (size_t i = 0; i < c->n; i++)
        if (c->rep.items[i].status == 0 && c->rep.items[i].version != cur)
            return 1;
    return 0;
}

/* put_once's pipe: open or not, and the chunks whose commits it sent
 * (oldest first) and which are not finished yet. */
typedef struct put_pipe {
    cr__rpc_pipe_t p;
    int open;
    size_t pend[2], n;
} put_pipe_t;

/* Sends chunk k's commit through pp (opened first if need be). */
static void put_send(cr_store_t *s, put_chunk_t *c, size_t k, put_pipe_t *pp)
{
    if (!pp->open) {
        cr__rpc_pipe_begin(cr__sc_rpc(s), &pp->p);
        pp->open = 1;
    }
    resv_chunk_send(s, &c[k & 1], &pp->p);
    pp->pend[pp->n++] = k;
}

/* Receives the pending chunks' answers, closes the pipe, then finishes
 * them in order. */
static void put_drain(cr_store_t *s, put_chunk_t *c, put_pipe_t *pp)
{
    for (size_t k = 0; k < pp->n; k++) { /* the wait for the answers loads the cache's lines */
        put_chunk_t *ck = &c[pp->pend[k] & 1];
        if (!ck->rc && ck->qans == -1)
            resv_remember_warm(s, ck, &ck->q);
    }
    for (size_t k = 0; k < pp->n; k++)
        resv_chunk_collect(s, &c[pp->pend[k] & 1], &pp->p);
    if (pp->open)
        cr__rpc_pipe_end(&pp->p);
    pp->open = 0;
    for (size_t k = 0; k < pp->n; k++)
        resv_chunk_finish(s, &c[pp->pend[k] & 1]);
    pp->n = 0;
}

/* Core of put / put_from / batch_put_from: PutStart, the writes (direct
 * from registered memory, or staged), then PutEnd for the keys written
 * and PutRevoke for the others; a big direct batch as pipelined chunks
 * (pipe_chunks). With resv (direct only), each chunk is carved from the
 * reservation and committed with one PUT_COMMIT instead ("reserved put"):
 * chunk j's commit then overlaps chunk j + 1's data, and commits stay in
 * carve order (chunk j's carves lie below chunk j + 1's), as the master
 * requires. srcs[i] is the value of keys[i] (registered memory when
 * !staged). Every key gets its own result; returns the first error in key
 * order (0 if none). */
static int put_once(cr_store_t *s, const char *const *keys, const void *const *srcs,
                    const size_t *lens, size_t n, const cr_store_replicate_config_t *cfg,
                    int staged, int avoid_suspects, int resv, int *results)
{
    size_t nch = staged ? 1 : pipe_chunks(n, PIPE_KEYS);
    /* a reserved direct batch of several chunks commits through a pipe
     * (above) */
    int piped = s->pipe_on && resv && !staged && nch > 1;
    put_chunk_t c[2];
    put_pipe_t pp = {.open = 0, .n = 0};
    for (size_t j = 0; j <= nch; j++) {
        if (pp.n && j < nch) /* chunk j reuses chunk j - 2's state: finish it */
            put_drain(s, c, &pp);
        int ended = 0;
        if (j > 0 && j < nch && resv_chunk_spans(s, &c[(j - 1) & 1])) {
            if (piped) {
                put_send(s, c, j - 1, &pp);
                put_drain(s, c, &pp);
            } else {
                put_chunk_end(s, &c[(j - 1) & 1]);
            }
            ended = 1;
        }
        if (j < nch) { /* start chunk j while chunk j - 1's data moves */
            size_t k0 = n * j / nch, k1 = n * (j + 1) / nch;
            put_chunk_t *cj = &c[j & 1];
            cj->keys = keys + k0;
            cj->srcs = srcs + k0;
            cj->lens = lens + k0;
            cj->n = k1 - k0;
            cj->results = results + k0;
            cj->staged = staged;
            cj->avoid_suspects = avoid_suspects;
            cj->resv = resv;
            put_chunk_begin(s, cj, cfg, j == 0);
        }
        if (j > 0 && !ended) { /* then end chunk j - 1 while chunk j's data moves */
            if (piped)
                put_send(s, c, j - 1, &pp);
            else
                put_chunk_end(s, &c[(j - 1) & 1]);
        }
    }
    if (pp.n)
        put_drain(s, c, &pp);
    int firsterr = 0;
    for (size_t i = 0; i < n && !firsterr; i++)
        firsterr = results[i];
    return firsterr;
}

/* put_once, then again for the keys whose writes failed while a segment is
 * suspect (a node failed a transfer: frozen, dead, unreachable), up to
 * CR__SC_PUT_ATTEMPTS placements: each failed key was revoked, so the
 * master places it anew (its cursor rotates over the segments), and
 * placements on suspect segments are revoked unwritten except in the last
 * attempt (a suspect that recovered still serves then). A put thus fails
 * over to the other nodes instead of failing with its frozen replica.
 * Same contract as put_once. */
static int do_put(cr_store_t *s, const char *const *keys, const void *const *srcs,
                  const size_t *lens, size_t n, const cr_store_replicate_config_t *cfg, int staged,
                  int *results)
{
    int rc = put_once(s, keys, srcs, lens, n, cfg, staged, CR__SC_PUT_ATTEMPTS > 1, 0, results);
    if (!rc)
        return 0;
    const char *k1;
    const void *s1;
    size_t l1, i1;
    int r1;
    const char **rk = n == 1 ? &k1 : NULL;
    const void **rs = n == 1 ? &s1 : NULL;
    size_t *rl = n == 1 ? &l1 : NULL, *ri = n == 1 ? &i1 : NULL;
    int *rr = n == 1 ? &r1 : NULL;
    for (int attempt = 1; attempt < CR__SC_PUT_ATTEMPTS && cr__sc_any_suspect(s); attempt++) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            m += results[i] == CR_E_TRANSFER_FAIL;
        if (!m)
            break;
        if (!rk) { /* a batch: the failed keys, compacted (once) */
            rk = malloc(n * sizeof *rk);
            rs = malloc(n * sizeof *rs);
            rl = malloc(n * sizeof *rl);
            ri = malloc(n * sizeof *ri);
            rr = malloc(n * sizeof *rr);
            if (!rk || !rs || !rl || !ri || !rr)
                break; /* keep the first attempt's results */
        }
        m = 0;
        for (size_t i = 0; i < n; i++)
            if (results[i] == CR_E_TRANSFER_FAIL) {
                rk[m] = keys[i];
                rs[m] = srcs[i];
                rl[m] = lens[i];
                ri[m++] = i;
            }
        put_once(s, rk, rs, rl, m, cfg, staged, attempt + 1 < CR__SC_PUT_ATTEMPTS, 0, rr);
        for (size_t j = 0; j < m; j++)
            results[ri[j]] = rr[j];
    }
    if (n > 1) {
        free(rk);
        free(rs);
        free(rl);
        free(ri);
        free(rr);
    }
    rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = results[i];
    return rc;
}

/* do_put, with the small keys of a default-config put first tried through
 * a reservation (one master round trip, "reserved put" above); the keys
 * that path left unwritten or uncommitted, and the others, go through
 * do_put. Same contract as do_put. */
static int put_any(cr_store_t *s, const char *const *keys, const void *const *srcs,
                   const size_t *lens, size_t n, const cr_store_replicate_config_t *cfg, int staged,
                   int *results)
{
    if (n == 1) /* a new version goes elsewhere (a batch's old entries: spec_batch_match) */
        cr__lc_drop(&s->lc, keys[0]);
    if (!s->resv_on || !resv_cfg_ok(cfg))
        return do_put(s, keys, srcs, lens, n, cfg, staged, results);
    if (staged) {
        /* a small value from unregistered memory (cr_store_put, the Python
         * put): one staging extent holds the copy the TE writes from (the
         * two-phase staged put makes the same copy) */
        void *stg = n == 1 && lens[0] <= RESV_VALUE_MAX && lens[0] <= s->staging.size / 4
                        ? cr__staging_alloc(&s->staging, lens[0], 0)
                        : NULL;
        if (!stg)
            return do_put(s, keys, srcs, lens, n, cfg, staged, results);
        memcpy(stg, srcs[0], lens[0]);
        const void *src = stg;
        int rc = put_any(s, keys, &src, lens, 1, cfg, 0, results);
        cr__staging_free(&s->staging, stg, lens[0]);
        return rc;
    }
    atomic_fetch_add(&s->resv_busy, 1); /* before the carve: cr__sc_resv_idle */
    put_once(s, keys, srcs, lens, n, cfg, 0, 0, 1, results);
    atomic_fetch_sub(&s->resv_busy, 1);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += resv_fallback(results[i]);
    if (m == n)
        return do_put(s, keys, srcs, lens, n, cfg, 0, results);
    if (m) {
        const char **rk = malloc(m * sizeof *rk);
        const void **rs = malloc(m * sizeof *rs);
        size_t *rl = malloc(m * sizeof *rl), *ri = malloc(m * sizeof *ri);
        int *rr = malloc(m * sizeof *rr);
        if (rk && rs && rl && ri && rr) {
            size_t j = 0;
            for (size_t i = 0; i < n; i++)
                if (resv_fallback(results[i])) {
                    rk[j] = keys[i];
                    rs[j] = srcs[i];
                    rl[j] = lens[i];
                    ri[j++] = i;
                }
            do_put(s, rk, rs, rl, m, cfg, 0, rr);
            for (size_t k = 0; k < m; k++)
                results[ri[k]] = rr[k];
        } else {
            for (size_t i = 0; i < n; i++)
                if (resv_fallback(results[i]))
                    results[i] = -ENOMEM;
        }
        free(rk);
        free(rs);
        free(rl);
        free(ri);
        free(rr);
    }
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = results[i];
    return rc;
}

static int check_value(const void *v, size_t len)
{
    if (!v || len == 0 || len > CR_STORE_VALUE_MAX)
        return CR_E_INVALID_PARAMS;
    return 0;
}

int cr_store_put(cr_store_t *s, const char *key, const void *value, size_t len,
                 const cr_store_replicate_config_t *config)
{
    if (!s)
        return CR_E_INVALID_PARAMS;
    int rc = cr__sc_check_key(key);
    if (!rc)
        rc = check_value(value, len);
    if (!rc)
        rc = check_cfg(config);
    if (rc)
        return rc;
    /* A registered source needs no staging. */
    int staged = !cr__sc_is_registered(s, value, len);
    int res;
    return put_any(s, &key, &value, &len, 1, config, staged, &res);
}

int cr_store_put_from(cr_store_t *s, const char *key, const void *buf, size_t len,
                      const cr_store_replicate_config_t *config)
{
    if (!s)
        return CR_E_INVALID_PARAMS;
    int rc = cr__sc_check_key(key);
    if (!rc)
        rc = check_value(buf, len);
    if (!rc)
        rc = check_cfg(config);
    if (!rc && !cr__sc_is_registered(s, buf, len))
        rc = CR_E_INVALID_PARAMS;
    if (rc)
        return rc;
    int res;
    return put_any(s, &key, &buf, &len, 1, config, 0, &res);
}

/* Duplicate keys of one batch: an open-addressing set of indices into
 * keys[] (slots hold index + 1), sized to at least twice the keys, so a
 * batch of n keys costs n hashes instead of n^2 / 2 string compares. */
typedef struct keyset {
    uint16_t *slot;
    size_t mask;
} keyset_t;

_Static_assert(CR_STORE_BATCH_MAX < UINT16_MAX, "keyset slots hold a batch index + 1");

static int keyset_init(keyset_t *ks, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    ks->slot = calloc(cap, sizeof *ks->slot);
    ks->mask = cap - 1;
    return ks->slot ? 0 : -ENOMEM;
}

/* Adds keys[i] unless an equal key is in the set already (returns 1). */
static int keyset_add(keyset_t *ks, const char *const *keys, size_t i)
{
    size_t len = strlen(keys[i]);
    for (size_t h = (size_t)XXH3_64bits(keys[i], len) & ks->mask;; h = (h + 1) & ks->mask) {
        if (!ks->slot[h]) {
            ks->slot[h] = (uint16_t)(i + 1);
            return 0;
        }
        if (!strcmp(keys[ks->slot[h] - 1], keys[i]))
            return 1;
    }
}

int cr_store_batch_put_from(cr_store_t *s, const char *const *keys, const void *const *bufs,
                            const size_t *lens, size_t n,
                            const cr_store_replicate_config_t *config, int *results)
{
    if (!s || !keys || !bufs || !lens || !results || n == 0 || n > CR_STORE_BATCH_MAX ||
        check_cfg(config))
        return CR_E_INVALID_PARAMS;
    /* Keys with bad input get their own error; the others go ahead. */
    const char **k2 = malloc(n * sizeof *k2);
    const void **b2 = malloc(n * sizeof *b2);
    size_t *l2 = malloc(n * sizeof *l2);
    size_t *idx = malloc(n * sizeof *idx);
    int *r2 = malloc(n * sizeof *r2);
    keyset_t seen = {0};
    int rc = -ENOMEM;
    if (!k2 || !b2 || !l2 || !idx || !r2 || keyset_init(&seen, n))
        goto out;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int e = cr__sc_check_key(keys[i]);
        if (!e)
            e = check_value(bufs[i], lens[i]);
        if (!e && !cr__sc_is_registered(s, bufs[i], lens[i]))
            e = CR_E_INVALID_PARAMS;
        if (!e && keyset_add(&seen, keys, i))
            e = CR_E_OBJECT_ALREADY_EXISTS; /* duplicate key in one batch */
        results[i] = e;
        if (e)
            continue;
        k2[m] = keys[i];
        b2[m] = bufs[i];
        l2[m] = lens[i];
        idx[m] = i;
        m++;
    }
    if (m)
        put_any(s, k2, b2, l2, m, config, 0, r2);
    for (size_t j = 0; j < m; j++)
        results[idx[j]] = r2[j];
    rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = results[i];
out:
    free(seen.slot);
    free(k2);
    free(b2);
    free(l2);
    free(idx);
    free(r2);
    return rc;
}

/* ---- get ------------------------------------------------------------------ */

/* Validates (key, version, replica) for the given items; results[i] set to
 * CR_E_LEASE_EXPIRED for a key whose bytes cannot be proven good. */
static void validate(cr_store_t *s, const cr__rpc_item_t *items, const uint32_t *used,
                     const size_t *which, size_t m, int *results)
{
    size_t total = 0;
    for (size_t j = 0; j < m; j++)
        total += (size_t)__builtin_popcount(used[j]);
    if (!total)
        return;
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = total == 1 ? CR__RPC_VALIDATE : CR__RPC_BATCH_VALIDATE;
    req.items = cr__rpc_msg_alloc(&req, total * sizeof *req.items);
    size_t *owner = malloc(total * sizeof *owner);
    int rc = -ENOMEM;
    if (req.items && owner && total <= CR__RPC_BATCH_MAX) {
        size_t t = 0;
        for (size_t j = 0; j < m; j++) {
            const cr__rpc_item_t *it = &items[j];
            for (uint32_t r = 0; r < it->n_replicas; r++) {
                if (!(used[j] & (1u << r)))
                    continue;
                req.items[t].key = it->key;
                req.items[t].key_len = it->key_len;
                req.items[t].version = it->version;
                req.items[t].replica_id = it->replicas[r].replica_id;
                owner[t++] = j;
            }
        }
        req.n_items = (uint32_t)total;
        rc = call_items(s, &req, &rep, total);
    } else {
        cr__rpc_msg_free(&req);
    }
    if (rc == 0) {
        for (size_t t = 0; t < total; t++)
            if (rep.items[t].status) {
                CR_LOG_INFO(COMP, "read of %s outlived its lease and failed validation (%s)",
                            items[owner[t]].key, cr_strerror(rep.items[t].status));
                results[which[owner[t]]] = CR_E_LEASE_EXPIRED;
            }
        cr__rpc_msg_free(&rep);
    } else {
        for (size_t t = 0; t < total; t++)
            results[which[owner ? owner[t] : 0]] = CR_E_LEASE_EXPIRED;
    }
    free(owner);
}

/* Takes GetReplicaList's answers: sets each item's key (replies carry
 * none; Validate and the logs need it), results[i] = the key's status, or
 * CR_E_BUFFER_OVERFLOW / CR_E_INVALID_REPLICA, and the replica visiting
 * order of the readable keys. */
static void get_located(cr_store_t *s, cr__rpc_msg_t *rep, const char *const *keys,
                        const size_t *caps, size_t n, uint32_t *orders, int *results)
{
    for (size_t i = 0; i < n; i++) {
        cr__rpc_item_t *it = &rep->items[i];
        it->key = keys[i];
        it->key_len = (uint32_t)strlen(keys[i]);
        results[i] = it->status;
        if (it->status)
            continue;
        if (it->size > caps[i]) {
            results[i] = CR_E_BUFFER_OVERFLOW;
            continue;
        }
        results[i] = check_replicas(it);
        if (results[i]) {
            CR_LOG_ERROR(COMP, "GetReplicaList(%s): malformed replica list", keys[i]);
            continue;
        }
        replica_order(s, it, &orders[i * CR__RPC_REPLICA_MAX]);
    }
}

/* Checks each part of a direct get against its end-to-end checksum as soon
 * as that part landed, while the next parts are still moving (keyed_finish's
 * overlap): checked[i] = 1 for a key whose first-choice read delivered bytes
 * that match; get_verify checks the others (and re-reads bad ones). */
typedef struct get_crc {
    const cr__rpc_msg_t *rep;
    void *const *dsts;
    const int *results;
    uint8_t *checked;
} get_crc_t;

static void get_crc_fn(void *arg, size_t k0, size_t k1, const keyed_t *kd)
{
    get_crc_t *gc = arg;
    for (size_t i = k0; i < k1; i++) {
        const cr__rpc_item_t *it = &gc->rep->items[i];
        if (gc->results[i] || !(it->flags & CR__RPC_F_CRC) || !kd_key_moved(kd, i))
            continue;
        uint32_t c;
        if (!kd_key_crc(kd, i, gc->dsts[i], it->size, &c))
            c = cr__crc32c(0, gc->dsts[i], it->size);
        gc->checked[i] = c == it->crc;
    }
}

/* Direct get (registered destinations): the requests reading the
 * first-choice replica of every key into rv (key i's are [first[i],
 * first[i+1]); first: n + 1 entries); used[i] gets the replica read. */
static void get_direct_build(cr_store_t *s, const cr__rpc_msg_t *rep, void *const *dsts, size_t n,
                             const uint32_t *orders, uint32_t *used, size_t *first, reqvec_t *rv,
                             int *results)
{
    for (size_t i = 0; i < n; i++) {
        first[i] = rv->n;
        if (results[i])
            continue;
        const cr__rpc_item_t *it = &rep->items[i];
        uint32_t r = orders[i * CR__RPC_REPLICA_MAX];
        results[i] = add_range(s, rv, &it->replicas[r], 0, it->size, dsts[i], CR_XFER_READ);
        if (!results[i])
            used[i] = 1u << r;
    }
    first[n] = rv->n;
}

/* After a direct get's first reads: the other replicas of the keys whose
 * first choice failed, one key at a time. */
static void get_direct_failover(cr_store_t *s, const cr__rpc_msg_t *rep, void *const *dsts,
                                size_t n, const uint32_t *orders, uint32_t *used, int *results)
{
    for (size_t i = 0; i < n; i++) {
        if (results[i] != CR_E_TRANSFER_FAIL || rep->items[i].n_replicas < 2)
            continue;
        const cr__rpc_item_t *it = &rep->items[i];
        used[i] = 0;
        uint32_t dead = 0;
        results[i] = read_range(s, it, &orders[i * CR__RPC_REPLICA_MAX + 1], it->n_replicas - 1,
                                0, it->size, dsts[i], &used[i], &dead);
    }
}

/* Keys whose first-choice replica is on a node's disk tier: read from the
 * nodes straight into the callers' buffers (any memory; pipelined per
 * node), the other replicas if that fails. A key read here gets results[i]
 * = DISK_DONE so the TE paths skip it (get_read_disk_done turns it into 0). */
#define DISK_DONE 1
static void get_read_disk(cr_store_t *s, const cr__rpc_msg_t *rep, void *const *dsts, size_t n,
                          const uint32_t *orders, uint32_t *used, uint8_t *checked, int *results)
{
    memset(checked, 0, n);
    size_t nd = 0;
    for (size_t i = 0; i < n; i++)
        if (!results[i] &&
            cr__tier_is_disk(rep->items[i].replicas[orders[i * CR__RPC_REPLICA_MAX]].shards[0].segment))
            nd++;
    if (!nd)
        return;
    cr__sc_tier_rd_t *rd = calloc(nd, sizeof *rd);
    size_t *idx = calloc(nd, sizeof *idx);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (results[i] ||
            !cr__tier_is_disk(rep->items[i].replicas[orders[i * CR__RPC_REPLICA_MAX]].shards[0].segment))
            continue;
        if (!rd || !idx) {
            results[i] = -ENOMEM;
            continue;
        }
        const cr__rpc_item_t *it = &rep->items[i];
        const cr__rpc_replica_t *rp = &it->replicas[orders[i * CR__RPC_REPLICA_MAX]];
        idx[k] = i;
        rd[k++] = (cr__sc_tier_rd_t){.segment = rp->shards[0].segment, .key = it->key,
                                     .key_len = it->key_len, .version = it->version,
                                     .size = it->size, .disk_off = rp->shards[0].addr,
                                     .roff = 0, .rlen = it->size, .dst = dsts[i]};
    }
    if (k)
        cr__sc_tier_read_batch(s, rd, k);
    for (size_t j = 0; j < k; j++) {
        size_t i = idx[j];
        const cr__rpc_item_t *it = &rep->items[i];
        uint32_t r = orders[i * CR__RPC_REPLICA_MAX];
        int rc = rd[j].result;
        if (rc == 0) {
            used[i] = 1u << r;
            /* read and checksummed in this process (same-host path): the
             * end-to-end check below need not hash the value again */
            checked[i] = rd[j].crc_known && (it->flags & CR__RPC_F_CRC) && rd[j].crc == it->crc;
        } else if (it->n_replicas > 1) {
            uint32_t dead = 1u << r;
            used[i] = 0;
            rc = read_range(s, it, &orders[i * CR__RPC_REPLICA_MAX], it->n_replicas, 0, it->size,
                            dsts[i], &used[i], &dead);
        }
        results[i] = rc ? rc : DISK_DONE;
    }
    free(rd);
    free(idx);
}

static void get_read_disk_done(size_t n, int *results)
{
    for (size_t i = 0; i < n; i++)
        if (results[i] == DISK_DONE)
            results[i] = 0;
}

/* The bytes of the staging buffer one read takes at most: a quarter, so
 * that concurrent copying calls share it. */
static size_t staged_chunk(const cr_store_t *s)
{
    size_t chunk = s->staging.size / 4;
    return chunk < CR__STAGING_ALIGN ? s->staging.size : chunk;
}

/* Reads the value of it into dst (any memory) through the staging buffer,
 * each chunk from the first replica in order not in *dead that delivers
 * it. Returns 0 or CR_E_TRANSFER_FAIL / -ENOMEM. */
static int read_staged_one(cr_store_t *s, const cr__rpc_item_t *it, const uint32_t *order,
                           uint8_t *dst, uint32_t *used, uint32_t *dead)
{
    size_t chunk = staged_chunk(s);
    int rc = 0;
    for (uint64_t off = 0; off < it->size && !rc;) {
        size_t c = it->size - off < chunk ? (size_t)(it->size - off) : chunk;
        uint8_t *stg = cr__staging_alloc(&s->staging, c, (int)s->xfer_timeout_ms);
        if (!stg)
            return CR_E_TRANSFER_FAIL;
        rc = read_range(s, it, order, it->n_replicas, off, c, stg, used, dead);
        if (!rc)
            memcpy(dst + off, stg, c);
        cr__staging_free(&s->staging, stg, c);
        off += c;
    }
    return rc;
}

/* One extent of a staged get: keys [k0, k1), whose values fit in one
 * staging chunk together (total bytes), read as one TE batch from their
 * first-choice replicas and copied out to dsts. A key whose read failed
 * is left with results[i] = 0 and used[i] = 0 for get_read_staged to read
 * again from its other replicas. first: k1 - k0 + 1 entries of scratch. */
static void read_staged_extent(cr_store_t *s, const cr__rpc_msg_t *rep, void *const *dsts,
                               size_t k0, size_t k1, size_t total, const uint32_t *orders,
                               uint32_t *used, size_t *first, int *results)
{
    uint8_t *stg = cr__staging_alloc(&s->staging, total, (int)s->xfer_timeout_ms);
    if (!stg) {
        for (size_t i = k0; i < k1; i++)
            if (!results[i])
                results[i] = CR_E_TRANSFER_FAIL;
        return;
    }
    reqvec_t rv;
    rv_init(&rv);
    size_t off = 0;
    for (size_t i = k0; i < k1; i++) {
        first[i - k0] = rv.n;
        if (results[i])
            continue;
        const cr__rpc_item_t *it = &rep->items[i];
        uint32_t r = orders[i * CR__RPC_REPLICA_MAX];
        if (!add_range(s, &rv, &it->replicas[r], 0, it->size, stg + off, CR_XFER_READ))
            used[i] = 1u << r; /* else 0: read again below */
        off += (size_t)it->size;
    }
    first[k1 - k0] = rv.n;
    int stack_st[INLINE_REQS];
    int *st = rv.n <= INLINE_REQS ? stack_st : malloc(rv.n * sizeof *st);
    if (st && run_batch(s, &rv, st))
        mark_failed(s, rv.v, st, rv.n);
    off = 0;
    for (size_t i = k0; i < k1; i++) {
        int ok = !results[i] && used[i];
        for (size_t q = first[i - k0]; ok && q < first[i - k0 + 1]; q++)
            ok = st && !st[q];
        if (ok)
            memcpy(dsts[i], stg + off, (size_t)rep->items[i].size);
        else
            used[i] = 0;
        off += results[i] ? 0 : (size_t)rep->items[i].size;
    }
    if (st != stack_st)
        free(st);
    rv_free(&rv);
    cr__staging_free(&s->staging, stg, total);
}

/* Staged get (any destination memory): the values that fit in a staging
 * chunk are packed into extents, each read as one TE batch and copied out
 * (read_staged_extent); a bigger value, or one whose first-choice read
 * failed, is read alone in chunks, each from the first replica that
 * delivers it. first: n + 1 entries of scratch. */
static void get_read_staged(cr_store_t *s, const cr__rpc_msg_t *rep, void *const *dsts, size_t n,
                            const uint32_t *orders, uint32_t *used, size_t *first, int *results)
{
    size_t chunk = staged_chunk(s);
    for (size_t k0 = 0, k1; k0 < n; k0 = k1) {
        size_t total = 0;
        for (k1 = k0; k1 < n; k1++) {
            uint64_t sz = results[k1] ? 0 : rep->items[k1].size;
            if (sz > chunk - total)
                break;
            total += (size_t)sz;
        }
        if (total)
            read_staged_extent(s, rep, dsts, k0, k1, total, orders, used, first, results);
        if (k1 == k0)
            k1++; /* a value bigger than a chunk: read alone below */
    }
    for (size_t i = 0; i < n; i++) {
        if (results[i] || used[i])
            continue;
        const uint32_t *ord = &orders[i * CR__RPC_REPLICA_MAX];
        uint32_t dead = rep->items[i].size > chunk ? 0 : 1u << ord[0];
        results[i] = read_staged_one(s, &rep->items[i], ord, dsts[i], &used[i], &dead);
    }
}

/* End-to-end checksum (cr_store_checksum_errors): every key read with a
 * crc from PutEnd is checked; bytes that fail are read again from a
 * replica not read yet, and with none left the key is a miss. */
static void get_verify(cr_store_t *s, const cr__rpc_msg_t *rep, void *const *dsts, size_t n,
                       const uint32_t *orders, uint32_t *used, const uint8_t *checked, int staged,
                       int *results)
{
    for (size_t i = 0; s->crc_on && i < n; i++) {
        const cr__rpc_item_t *it = &rep->items[i];
        if (results[i] || !(it->flags & CR__RPC_F_CRC) || checked[i])
            continue;
        uint32_t tried = 0;
        while (cr__crc32c(0, dsts[i], it->size) != it->crc) {
            atomic_fetch_add(&s->crc_errors, 1);
            tried |= used[i];
            CR_LOG_RL(CR__LOG_WARN, COMP,
                      "%s: the bytes read (replica mask %#x) fail the value's checksum", it->key,
                      (unsigned)used[i]);
            const uint32_t *ord = &orders[i * CR__RPC_REPLICA_MAX];
            uint32_t dead = tried, left = 0;
            for (uint32_t k = 0; k < it->n_replicas; k++)
                left += !(tried & (1u << ord[k]));
            used[i] = 0;
            int rc = !left ? CR_E_OBJECT_NOT_FOUND
                     : staged ? read_staged_one(s, it, ord, dsts[i], &used[i], &dead)
                              : read_range(s, it, ord, it->n_replicas, 0, it->size, dsts[i],
                                           &used[i], &dead);
            if (rc || !used[i] || (used[i] & tried)) {
                results[i] = CR_E_OBJECT_NOT_FOUND; /* never the bytes that failed */
                break;
            }
        }
    }
}

/* The replica of replica list item it that lc can keep (loccache.h): one
 * shard, in DRAM (not a disk tier's), no capability. Returns its index or
 * -1. */
static int cacheable_replica(const cr__rpc_item_t *it, uint32_t r)
{
    const cr__rpc_replica_t *rp = &it->replicas[r];
    if (rp->n_shards != 1 || rp->shards[0].cap || cr__tier_is_disk(rp->shards[0].segment))
        return -1;
    return (int)r;
}

/* Remembers where each key read was found (loccache.h), for the next get
 * of it to read before the master answers (spec_get_one, spec_batch_t):
 * one lock for the call. A batch whose keys were all read speculatively
 * (n_spec == n) has nothing new to remember. */
static void get_remember(cr_store_t *s, const cr__rpc_msg_t *rep, size_t n, const uint32_t *used,
                         const int *results, size_t n_spec)
{
    if (!s->lc.on || n_spec >= n)
        return;
    cr__lc_put_t stack_v[64], *v = n <= 64 ? stack_v : malloc(n * sizeof *v);
    if (!v)
        return;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const cr__rpc_item_t *it = &rep->items[i];
        if (results[i] || !used[i] || (used[i] & (used[i] - 1)))
            continue;
        uint32_t r = (uint32_t)__builtin_ctz(used[i]);
        if (r >= it->n_replicas || cacheable_replica(it, r) < 0)
            continue;
        const cr__rpc_shard_t *sh = &it->replicas[r].shards[0];
        v[k++] = (cr__lc_put_t){it->key, sh->segment, it->version, it->replicas[r].replica_id,
                                sh->addr, it->size};
    }
    if (k)
        cr__lc_set_many(&s->lc, v, k);
    if (v != stack_v)
        free(v);
}

/* The stale-read contract: Validate the reads that may have outlived
 * their lease (started at t0), then report each good key's length. Uses
 * rep->items, used and which as scratch (compacted). */
static void get_validate(cr_store_t *s, cr__rpc_msg_t *rep, uint64_t t0, size_t n, uint32_t *used,
                         size_t *which, uint64_t *sizes, size_t *lens, int *results)
{
    for (size_t i = 0; i < n; i++)
        sizes[i] = rep->items[i].size;
    size_t m = 0;
    uint64_t elapsed = cr__now_ms() - t0;
    for (size_t i = 0; i < n; i++) {
        if (results[i] || !needs_validation(elapsed, rep->items[i].lease_ms))
            continue;
        rep->items[m] = rep->items[i]; /* compact (shallow; arena owns data) */
        used[m] = used[i];
        which[m] = i;
        m++;
    }
    if (m)
        validate(s, rep->items, used, which, m, results);
    for (size_t i = 0; i < n; i++)
        if (!results[i])
            lens[i] = (size_t)sizes[i];
}

/* ---- speculative batch get ----------------------------------------------------
 *
 * The batch form of spec_get_one (below): a direct get of several keys
 * sends GetReplicaList, then, while the master works on it, starts
 * reading every key this client knows a place of (loccache.h: its
 * reserved puts and single gets fill it), so that the master's round trip
 * overlaps the bytes instead of preceding them. A key's bytes are kept on
 * spec_get_one's terms: the answer names the same version at the same
 * place, the read moved every byte and they match the value's checksum
 * (hashed by the TE as it copies, where it can). Every other key, and one
 * whose read failed or whose bytes do not match, is read the usual way
 * from the same answer: speculation never costs a second round trip. Same
 * conditions as spec_get_one (checksums and the cache on; neither this
 * client's own segment nor a suspect one is read), and the same Validate
 * after a read that may have outlived its lease (get_validate). */
typedef struct spec_batch {
    cr_store_t *s;
    const char *const *keys;
    void *const *dsts;
    const size_t *caps;
    size_t n;
    int started; /* spec_batch_run ran: kd holds batches (or none: hits == 0) */
    size_t hits;
    cr__lc_hit_t *hit; /* per key; hit[i].size == 0: not read speculatively */
    uint8_t *good;     /* per key: its read moved every byte, crc[i] is theirs */
    uint8_t *fate;     /* per key, from the answer (spec_batch_match): SPEC_* */
    uint32_t *crc;
    size_t *first;
    int *st;
    reqvec_t rv;
    overlap_t ov;
    keyed_t kd;
} spec_batch_t;

static void spec_batch_free(spec_batch_t *sb)
{
    if (!sb)
        return;
    free(sb->hit);
    free(sb->good);
    free(sb->fate);
    free(sb->crc);
    free(sb->first);
    free(sb->st);
    free(sb);
}

/* A direct get of keys [0, n) into dsts (registered; caps: their sizes)
 * that may read speculatively, or NULL. */
static spec_batch_t *spec_batch_new(cr_store_t *s, const char *const *keys, void *const *dsts,
                                    const size_t *caps, size_t n)
{
    if (!s->crc_on || !s->lc.on || n < 2)
        return NULL;
    spec_batch_t *sb = calloc(1, sizeof *sb);
    if (!sb)
        return NULL;
    *sb = (spec_batch_t){.s = s, .keys = keys, .dsts = dsts, .caps = caps, .n = n};
    sb->hit = malloc(n * sizeof *sb->hit);
    sb->good = calloc(n, 1);
    sb->fate = calloc(n, 1);
    sb->crc = malloc(n * sizeof *sb->crc);
    sb->first = malloc((n + 1) * sizeof *sb->first);
    sb->st = calloc(n, sizeof *sb->st);
    if (!sb->hit || !sb->good || !sb->fate || !sb->crc || !sb->first || !sb->st) {
        spec_batch_free(sb);
        return NULL;
    }
    return sb;
}

static void spec_batch_crc_fn(void *arg, size_t k0, size_t k1, const keyed_t *kd)
{
    spec_batch_t *sb = arg;
    for (size_t i = k0; i < k1; i++) {
        if (!sb->hit[i].size || !kd_key_moved(kd, i))
            continue;
        uint32_t c;
        if (!kd_key_crc(kd, i, sb->dsts[i], sb->hit[i].size, &c))
            c = cr__crc32c(0, sb->dsts[i], sb->hit[i].size);
        sb->crc[i] = c;
        sb->good[i] = 1;
    }
}

/* Starts the speculative reads (run while GetReplicaList is out). */
static void spec_batch_run(void *arg)
{
    spec_batch_t *sb = arg;
    cr_store_t *s = sb->s;
    size_t n = sb->n;
    sb->started = 1;
    rv_init(&sb->rv);
    if (!cr__lc_find_many(&s->lc, sb->keys, n, sb->hit))
        return; /* hits == 0: nothing started */
    const char *seg = NULL; /* the last segment judged, and whether it may be read */
    int seg_ok = 0;
    for (size_t i = 0; i < n; i++) {
        cr__lc_hit_t *e = &sb->hit[i];
        sb->first[i] = sb->rv.n;
        if (!e->size)
            continue;
        if (!seg || strcmp(seg, e->seg)) {
            seg = e->seg;
            seg_ok = !cr__sc_suspect(s, seg);
        }
        if (!seg_ok || e->size > sb->caps[i] || cr__sc_is_local(s, e->seg, e->addr, e->size)) {
            e->size = 0;
            continue;
        }
        cr__rpc_shard_t sh = {e->seg, e->addr, e->size, NULL};
        cr__rpc_replica_t rp = {.n_shards = 1, .shards = &sh};
        if (add_range(s, &sb->rv, &rp, 0, e->size, sb->dsts[i], CR_XFER_READ) ||
            sb->rv.n != sb->first[i] + 1) {
            sb->rv.n = sb->first[i]; /* not this key: it is read the usual way */
            sb->rv.err = 0;
            e->size = 0;
            continue;
        }
        sb->hits++;
    }
    sb->first[n] = sb->rv.n;
    if (!sb->hits)
        return;
    sb->ov = (overlap_t){NULL, spec_batch_crc_fn, sb};
    keyed_start(s, &sb->kd, &sb->rv, sb->first, n, 0, &sb->ov, OVERLAP_PARTS, sb->st);
}

/* What the master's answer makes of a key read speculatively (fate). */
enum {
    SPEC_NONE = 0, /* not read speculatively: the usual read, at once */
    SPEC_MATCH,    /* the answer names the place read: kept if the bytes prove it */
    SPEC_REREAD,   /* the usual read, once the speculative one into the same
                    * destination has ended (it must not land after) */
    SPEC_GONE,     /* nothing to read (not found, too large, ...): dropped */
};

/* Waits for the speculative reads without judging them (the call failed
 * before an answer, or while handling one). */
static void spec_batch_abort(cr_store_t *s, spec_batch_t *sb)
{
    if (!sb->started)
        return;
    if (sb->hits)
        keyed_finish(s, &sb->kd, sb->st);
    rv_free(&sb->rv);
}

/* Judges the speculative reads by rep (GetReplicaList's answer, after
 * get_located: results[i] == 0 for each key to read) while they may still
 * move: a key whose answer names the place read gets results[i] =
 * DISK_DONE and used[i] = that replica (the usual reads skip it) until
 * spec_batch_finish proves its bytes; a key read speculatively from
 * anywhere else is held back the same way, to be read the usual way after
 * its speculative read ended. The other keys' usual reads thus start at
 * once, and a pipelined get's next chunk does not wait for this one's
 * speculative bytes (do_get). */
static void spec_batch_match(cr_store_t *s, spec_batch_t *sb, const cr__rpc_msg_t *rep,
                             uint32_t *used, int *results)
{
    if (!sb->started)
        return;
    for (size_t i = 0; i < sb->n; i++) {
        const cr__lc_hit_t *e = &sb->hit[i];
        if (!e->size)
            continue;
        const cr__rpc_item_t *it = &rep->items[i];
        int m = -1;
        for (uint32_t k = 0; !results[i] && k < it->n_replicas && m < 0; k++) {
            const cr__rpc_shard_t *sh = &it->replicas[k].shards[0];
            if (cacheable_replica(it, k) >= 0 && it->version == e->version &&
                (!e->replica_id || it->replicas[k].replica_id == e->replica_id) &&
                it->size == e->size && sh->addr == e->addr && !strcmp(sh->segment, e->seg))
                m = (int)k;
        }
        if (m < 0 && (!results[i] || it->status == CR_E_OBJECT_NOT_FOUND))
            cr__lc_drop(&s->lc, sb->keys[i]); /* moved or gone */
        if (results[i]) { /* not found, too large, ...: nothing to read */
            sb->fate[i] = SPEC_GONE;
            continue;
        }
        results[i] = DISK_DONE;
        if (m < 0 || !(it->flags & CR__RPC_F_CRC)) {
            sb->fate[i] = SPEC_REREAD;
            continue;
        }
        sb->fate[i] = SPEC_MATCH;
        used[i] = 1u << m;
    }
}

/* Waits for the speculative reads and keeps each SPEC_MATCH key whose read
 * moved every byte and whose bytes match the value's checksum (checked[i]
 * = 1; results[i] stays DISK_DONE); the others are read the usual way from
 * the same answer now (speculation never costs a second round trip), except
 * a key whose read of the first-choice replica failed (a frozen or dead
 * node): it gets CR_E_TRANSFER_FAIL, straight to the other replicas
 * (get_direct_failover), not a second wait on it. Run after the usual
 * reads ended and before their failover. Returns the keys kept. */
static size_t spec_batch_finish(cr_store_t *s, spec_batch_t *sb, const cr__rpc_msg_t *rep,
                                void *const *dsts, const uint32_t *orders, uint32_t *used,
                                uint8_t *checked, int *results)
{
    if (!sb || !sb->started)
        return 0;
    spec_batch_abort(s, sb);
    size_t n = sb->n, rereads = 0;
    uint64_t kept = 0, dropped = 0;
    for (size_t i = 0; i < n; i++) {
        if (sb->fate[i] == SPEC_MATCH) {
            const cr__rpc_item_t *it = &rep->items[i];
            if (sb->good[i] && !sb->st[i] && sb->crc[i] == it->crc) {
                checked[i] = 1;
                kept++;
                continue;
            }
            if (sb->st[i] && used[i] == 1u << orders[i * CR__RPC_REPLICA_MAX]) {
                results[i] = CR_E_TRANSFER_FAIL;
                dropped++;
                continue;
            }
            sb->fate[i] = SPEC_REREAD;
        }
        if (sb->fate[i] == SPEC_REREAD)
            rereads++;
        if (sb->fate[i] == SPEC_REREAD || sb->fate[i] == SPEC_GONE)
            dropped++;
    }
    atomic_fetch_add(&s->spec_kept, kept);
    atomic_fetch_add(&s->spec_dropped, dropped);
    if (!rereads)
        return (size_t)kept;
    /* the usual reads of the keys held back: every other key marked done */
    int *res = malloc(n * sizeof *res);
    size_t *first = malloc((n + 1) * sizeof *first);
    uint8_t *chk = malloc(n);
    if (!res || !first || !chk) {
        for (size_t i = 0; i < n; i++)
            if (sb->fate[i] == SPEC_REREAD)
                results[i] = -ENOMEM;
        free(res);
        free(first);
        free(chk);
        return (size_t)kept;
    }
    for (size_t i = 0; i < n; i++)
        res[i] = sb->fate[i] == SPEC_REREAD ? 0 : DISK_DONE;
    get_read_disk(s, rep, dsts, n, orders, used, chk, res);
    reqvec_t rv;
    rv_init(&rv);
    get_direct_build(s, rep, dsts, n, orders, used, first, &rv, res);
    keyed_t kd;
    keyed_start(s, &kd, &rv, first, n, 0, NULL, 1, res);
    keyed_finish(s, &kd, res);
    rv_free(&rv);
    for (size_t i = 0; i < n; i++) {
        if (sb->fate[i] != SPEC_REREAD)
            continue;
        results[i] = res[i]; /* DISK_DONE from a disk tier: turned into 0 later */
        checked[i] = chk[i];
    }
    free(res);
    free(first);
    free(chk);
    return (size_t)kept;
}

/* call_items, with start(arg) run once while the master works on the
 * request (cr__sc_call_copying). An HA master that failed or is not the
 * leader gets the request again the usual way (call_items). */
static int call_items_copying(cr_store_t *s, cr__rpc_msg_t *req, cr__rpc_msg_t *rep, size_t n,
                              void (*start)(void *), void *arg)
{
    int rc = cr__sc_call_copying(s, req, rep, start, arg);
    if (s->ha &&
        (rc == CR_E_RPC_FAIL || (rc == 0 && rep->status == CR_E_UNAVAILABLE_IN_CURRENT_MODE))) {
        if (rc == 0)
            cr__rpc_msg_free(rep);
        return call_items(s, req, rep, n);
    }
    cr__rpc_msg_free(req);
    return items_answered(rc, rep, n);
}

/* One chunk of a get: keys [0, n) of the arrays it points at (a view into
 * the call's). get_chunk_begin sends GetReplicaList, reads what is on
 * disk tiers and starts the direct reads; get_chunk_end finishes them (a
 * staged get's reads run here), checks the checksums, fails over and
 * validates. dsts[i] is registered memory unless staged (then any memory).
 * With alloc (staged, one chunk), each destination is malloc'd at the size
 * the master reported and returned in alloc[i] on success (dsts unused;
 * caps NULL or bounds): the value read is the version located, whatever
 * its size. A chunk must not move between the two calls. */
typedef struct get_chunk {
    const char *const *keys;
    void *const *dsts;
    const size_t *caps;
    size_t n;
    size_t *lens;
    int *results;
    int staged;
    void **alloc;
    void **abufs;  /* alloc: the buffers (abuf1 for one key, else malloc'd with acaps) */
    size_t *acaps; /* alloc: their sizes */
    void *abuf1;
    size_t acap1;
    int rc; /* GetReplicaList failed (results hold why): nothing to end */
    uint64_t t0;
    cr__rpc_msg_t rep;
    scratch_t sc;
    uint32_t *orders, *used;
    size_t *first, *which;
    uint64_t *sizes;
    uint8_t *checked;
    size_t n_spec; /* keys read speculatively (spec_batch_t) */
    spec_batch_t *sb; /* its speculative reads, judged by get_chunk_end */
    reqvec_t rv;
    get_crc_t gc;
    overlap_t ov;
    keyed_t kd;
} get_chunk_t;

/* An alloc chunk's destinations: a buffer of the located size for each key
 * found whose value is at most caps[i] (caps NULL: any size); dsts/caps
 * then point at them. A key whose buffer cannot be had gets that status in
 * its reply item (get_located reports it). Returns 0, or -ENOMEM when the
 * arrays themselves cannot be allocated. */
static int get_chunk_alloc(get_chunk_t *c)
{
    size_t n = c->n;
    if (n == 1) {
        c->abufs = &c->abuf1;
        c->acaps = &c->acap1;
    } else {
        c->abufs = malloc(n * (sizeof *c->abufs + sizeof *c->acaps));
        if (!c->abufs)
            return -ENOMEM;
        c->acaps = (size_t *)(c->abufs + n);
    }
    for (size_t i = 0; i < n; i++) {
        cr__rpc_item_t *it = &c->rep.items[i];
        c->abufs[i] = NULL;
        c->acaps[i] = 0; /* a value over its bound: BUFFER_OVERFLOW (get_located) */
        if (it->status || (c->caps && it->size > c->caps[i]))
            continue;
        c->acaps[i] = it->size;
        c->abufs[i] = it->size && it->size <= CR_STORE_VALUE_MAX ? malloc(it->size) : NULL;
        if (!c->abufs[i])
            it->status = it->size ? -ENOMEM : CR_E_INVALID_REPLICA;
    }
    c->dsts = c->abufs;
    c->caps = c->acaps;
    return 0;
}

static void get_chunk_begin(cr_store_t *s, get_chunk_t *c, int first_chunk, size_t parts)
{
    size_t n = c->n;
    int *results = c->results;
    c->t0 = cr__now_ms();
    c->orders = NULL;
    c->n_spec = 0;
    c->sb = NULL;
    memset(&c->rep, 0, sizeof c->rep);
    cr__rpc_msg_t req;
    /* a direct batch's known keys start moving while the master answers */
    spec_batch_t *sb = c->staged || c->alloc ? NULL : spec_batch_new(s, c->keys, c->dsts,
                                                                     c->caps, n);
    int rc = build_items(&req, CR__RPC_GET_REPLICA_LIST, c->keys, n);
    if (!rc)
        rc = sb ? call_items_copying(s, &req, &c->rep, n, spec_batch_run, sb)
                : call_items(s, &req, &c->rep, n);
    if (rc) {
        if (sb)
            spec_batch_abort(s, sb);
        spec_batch_free(sb);
        for (size_t i = 0; i < n; i++)
            results[i] = rc;
        c->rc = rc;
        return;
    }
    c->rc = 0;
    if (c->alloc && get_chunk_alloc(c)) {
        cr__rpc_msg_free(&c->rep);
        for (size_t i = 0; i < n; i++)
            results[i] = -ENOMEM;
        c->rc = -ENOMEM;
        return;
    }
    if (first_chunk && s->test_hooks.after_get_replicas) /* tests: a reader stuck before its reads */
        s->test_hooks.after_get_replicas(s->test_hooks.user);
    if (scratch_init(&c->sc, SCR(n * CR__RPC_REPLICA_MAX * sizeof *c->orders) +
                                 SCR(n * sizeof *c->used) + SCR((n + 1) * sizeof *c->first) +
                                 SCR(n * sizeof *c->which) + SCR(n * sizeof *c->sizes) +
                                 SCR(n)) == 0) {
        c->orders = scratch_take(&c->sc, n * CR__RPC_REPLICA_MAX * sizeof *c->orders);
        c->used = scratch_take(&c->sc, n * sizeof *c->used);
        c->first = scratch_take(&c->sc, (n + 1) * sizeof *c->first);
        c->which = scratch_take(&c->sc, n * sizeof *c->which);
        c->sizes = scratch_take(&c->sc, n * sizeof *c->sizes);
        c->checked = scratch_take(&c->sc, n);
    }
    if (!c->orders) {
        if (sb)
            spec_batch_abort(s, sb);
        spec_batch_free(sb);
        for (size_t i = 0; i < n; i++)
            results[i] = -ENOMEM;
        return;
    }
    get_located(s, &c->rep, c->keys, c->caps, n, c->orders, results);
    if (sb)
        spec_batch_match(s, sb, &c->rep, c->used, results);
    c->sb = sb; /* judged once its reads ended (get_chunk_end) */
    get_read_disk(s, &c->rep, c->dsts, n, c->orders, c->used, c->checked, results);
    rv_init(&c->rv);
    if (c->staged)
        return;
    c->gc = (get_crc_t){&c->rep, c->dsts, results, c->checked};
    c->ov = (overlap_t){NULL, get_crc_fn, &c->gc};
    get_direct_build(s, &c->rep, c->dsts, n, c->orders, c->used, c->first, &c->rv, results);
    keyed_start(s, &c->kd, &c->rv, c->first, n, 0, s->crc_on ? &c->ov : NULL, parts, results);
}

static void get_chunk_end(cr_store_t *s, get_chunk_t *c)
{
    if (c->rc)
        return;
    size_t n = c->n;
    int *results = c->results;
    if (c->orders) {
        if (!c->staged) {
            keyed_finish(s, &c->kd, results);
            c->n_spec = spec_batch_finish(s, c->sb, &c->rep, c->dsts, c->orders, c->used,
                                          c->checked, results);
            spec_batch_free(c->sb);
            c->sb = NULL;
            get_direct_failover(s, &c->rep, c->dsts, n, c->orders, c->used, results);
        } else {
            get_read_staged(s, &c->rep, c->dsts, n, c->orders, c->used, c->first, results);
        }
        rv_free(&c->rv);
        get_read_disk_done(n, results);
        get_verify(s, &c->rep, c->dsts, n, c->orders, c->used, c->checked, c->staged, results);
        get_remember(s, &c->rep, n, c->used, results, c->n_spec);
        get_validate(s, &c->rep, c->t0, n, c->used, c->which, c->sizes, c->lens, results);
    }
    scratch_fini(&c->sc);
    cr__rpc_msg_free(&c->rep);
    if (c->alloc) {
        for (size_t i = 0; i < n; i++) {
            if (results[i])
                free(c->abufs[i]);
            else
                c->alloc[i] = c->abufs[i];
        }
        if (c->abufs != &c->abuf1)
            free(c->abufs);
    }
}

/* Core of the gets: GetReplicaList, the reads (direct into registered
 * memory, or staged), then validation (get_chunk_t); a big direct batch as
 * pipelined chunks (pipe_chunks). Every key gets its own result; returns
 * the first error in key order (0 if none). */
static int do_get(cr_store_t *s, const char *const *keys, void *const *dsts, const size_t *caps,
                  size_t n, size_t *lens, int staged, int *results, void **alloc)
{
    size_t nch = staged || alloc ? 1 : pipe_chunks(n, s->get_chunk_keys);
    get_chunk_t c[2];
    for (size_t j = 0; j <= nch; j++) {
        if (j < nch) { /* locate chunk j and start its reads while chunk j - 1's move */
            size_t k0 = n * j / nch, k1 = n * (j + 1) / nch;
            get_chunk_t *cj = &c[j & 1];
            cj->keys = keys + k0;
            cj->dsts = dsts ? dsts + k0 : NULL;
            cj->caps = caps ? caps + k0 : NULL;
            cj->n = k1 - k0;
            cj->lens = lens + k0;
            cj->results = results + k0;
            cj->staged = staged;
            cj->alloc = alloc;
            /* the last chunk's checksums overlap its own parts; the others' the
             * next chunk's data */
            get_chunk_begin(s, cj, j == 0, j + 1 == nch ? OVERLAP_PARTS : 1);
        }
        if (j > 0) /* then finish chunk j - 1 while chunk j's data moves */
            get_chunk_end(s, &c[(j - 1) & 1]);
    }
    int firsterr = 0;
    for (size_t i = 0; i < n && !firsterr; i++)
        firsterr = results[i];
    return firsterr;
}

uint64_t cr_store_checksum_errors(const cr_store_t *s)
{
    return s ? atomic_load(&((cr_store_t *)s)->crc_errors) : 0;
}

/* ---- speculative get ----------------------------------------------------------
 *
 * A direct get of one key this client found before (loccache.h) starts
 * reading from where it was and asks GetReplicaList while the bytes move:
 * one round trip's wait instead of two when the key has not moved. The
 * bytes are kept only when the master's answer names the same version
 * with the same replica at the same place, and they match the value's
 * checksum. That proves them that version's: the memory of a live object
 * is never reused, so if the version was live when it was remembered and
 * is live at the answer, the read in between saw its bytes; a read that
 * lands after the answer is under its lease. The checksum guards the one
 * case left, a replica dropped and placed again at the very same address
 * with the same id in between. Anything else (moved, replaced, read
 * failed, no checksum) decides nothing: the usual get runs. The read
 * holds this thread's master connection while it runs, so a thread that
 * shares its connection with another live thread (cr__sc_rpc_shared: more
 * threads than connections) does not speculate: a read of a node that
 * froze would stall that thread's calls too, for up to the TE's stall
 * time. Off with CRESCENT_LOCATION_CACHE=0 or CRESCENT_STORE_CHECKSUM=0.
 * Returns 1 when decided (*rc: 0 with *len, or the key's error), else 0. */
typedef struct spec_read {
    cr_store_t *s;
    cr_xfer_request_t q;
    int st;
} spec_read_t;

/* The speculative read, run while GetReplicaList is out: the TE may move
 * a lone request in this thread, so nothing is handed to another. */
static void spec_read_run(void *arg)
{
    spec_read_t *sr = arg;
    sr->st = 0;
    int rc = cr_xfer_transfer_sync(sr->s->te, &sr->q, 1, &sr->st);
    if (rc && !sr->st)
        sr->st = rc;
}

static int spec_get_one(cr_store_t *s, const char *key, void *buf, size_t cap, size_t *len,
                        int *rc)
{
    cr__lc_hit_t e;
    if (!s->crc_on || cr__sc_rpc_shared() || !cr__lc_find(&s->lc, key, &e) || !e.size ||
        e.size > cap || cr__sc_is_local(s, e.seg, e.addr, e.size) || cr__sc_suspect(s, e.seg))
        return 0;
    spec_read_t sr = {.s = s,
                      .q = {.opcode = CR_XFER_READ,
                            .local_addr = buf,
                            .target_addr = e.addr,
                            .length = e.size}};
    if (cr__sc_segment(s, e.seg, &sr.q.target))
        return 0;
    uint64_t t0 = cr__now_ms();
    cr__rpc_msg_t req, rep = {0};
    int r = build_items(&req, CR__RPC_GET_REPLICA_LIST, &key, 1);
    if (r)
        return 0;
    r = cr__sc_call_during(s, &req, &rep, spec_read_run, &sr);
    cr__rpc_msg_free(&req);
    if (!r && rep.n_items != 1) {
        r = rep.status ? rep.status : CR_E_RPC_FAIL;
        cr__rpc_msg_free(&rep);
    }
    if (sr.st)
        cr__sc_suspect_mark(s, sr.q.target, sr.st);
    if (r) /* the usual get asks again (and follows a new leader) */
        return 0;
    cr__rpc_item_t *it = &rep.items[0];
    it->key = key;
    it->key_len = (uint32_t)strlen(key);
    int decided = 1;
    if (it->status) {
        *rc = it->status;
        cr__lc_drop(&s->lc, key);
    } else if (it->size > cap) {
        *rc = CR_E_BUFFER_OVERFLOW;
    } else if (check_replicas(it)) {
        CR_LOG_ERROR(COMP, "GetReplicaList(%s): malformed replica list", key);
        *rc = CR_E_INVALID_REPLICA;
    } else {
        int m = -1;
        for (uint32_t k = 0; k < it->n_replicas && m < 0; k++) {
            const cr__rpc_shard_t *sh = &it->replicas[k].shards[0];
            if (cacheable_replica(it, k) >= 0 && it->version == e.version &&
                (!e.replica_id || it->replicas[k].replica_id == e.replica_id) &&
                it->size == e.size && sh->addr == e.addr && !strcmp(sh->segment, e.seg))
                m = (int)k;
        }
        if (m < 0 || sr.st || !(it->flags & CR__RPC_F_CRC) ||
            cr__crc32c(0, buf, it->size) != it->crc) {
            decided = 0;
            if (m < 0)
                cr__lc_drop(&s->lc, key); /* the usual get remembers the new place */
        } else {
            *rc = 0;
            if (needs_validation(cr__now_ms() - t0, it->lease_ms)) {
                uint32_t used = 1u << m;
                size_t which = 0;
                validate(s, it, &used, &which, 1, rc);
            }
            if (!*rc) {
                *len = (size_t)it->size;
                if (!e.replica_id) /* from a put: the id is known now */
                    cr__lc_set(&s->lc, key, e.version, it->replicas[m].replica_id, e.seg, e.addr,
                               e.size);
            }
        }
    }
    cr__rpc_msg_free(&rep);
    atomic_fetch_add(decided ? &s->spec_kept : &s->spec_dropped, 1);
    return decided;
}

void cr_store_location_cache_stats(const cr_store_t *s, uint64_t *kept, uint64_t *dropped)
{
    if (kept)
        *kept = s ? atomic_load(&((cr_store_t *)s)->spec_kept) : 0;
    if (dropped)
        *dropped = s ? atomic_load(&((cr_store_t *)s)->spec_dropped) : 0;
}

int cr_store_get_into(cr_store_t *s, const char *key, void *buf, size_t cap, size_t *len)
{
    if (!s)
        return CR_E_INVALID_PARAMS;
    int rc = cr__sc_check_key(key);
    if (rc)
        return rc;
    if (!buf || !len || cap == 0 || !cr__sc_is_registered(s, buf, cap))
        return CR_E_INVALID_PARAMS;
    int res;
    size_t l = 0;
    if (spec_get_one(s, key, buf, cap, &l, &rc)) {
        if (!rc)
            *len = l;
        return rc;
    }
    rc = do_get(s, &key, &buf, &cap, 1, &l, 0, &res, NULL);
    if (!rc)
        *len = l;
    return rc;
}

int cr_store_get(cr_store_t *s, const char *key, void *buf, size_t cap, size_t *len)
{
    if (!s)
        return CR_E_INVALID_PARAMS;
    int rc = cr__sc_check_key(key);
    if (rc)
        return rc;
    if (!buf || !len || cap == 0)
        return CR_E_INVALID_PARAMS;
    int staged = !cr__sc_is_registered(s, buf, cap);
    int res;
    size_t l = 0;
    rc = do_get(s, &key, &buf, &cap, 1, &l, staged, &res, NULL);
    if (!rc)
        *len = l;
    return rc;
}

int cr_store_get_alloc(cr_store_t *s, const char *key, void **out, size_t *len)
{
    if (!s || !out || !len)
        return CR_E_INVALID_PARAMS;
    int rc = cr__sc_check_key(key);
    if (rc)
        return rc;
    /* one GetReplicaList: the buffer is sized from the version located, so
     * a value replaced meanwhile (upsert) by a bigger one cannot overflow */
    void *buf = NULL;
    size_t l = 0;
    int res;
    rc = do_get(s, &key, NULL, NULL, 1, &l, 1, &res, &buf);
    if (rc)
        return rc;
    *out = buf;
    *len = l;
    return 0;
}

/* The batch gets: the keys that pass the checks (a valid key; with bufs,
 * a registered destination) as one do_get, direct into bufs or, with
 * outs, into buffers it allocates (values up to max_len, 0 = any);
 * results, lens and outs per key. */
static int batch_get(cr_store_t *s, const char *const *keys, void *const *bufs,
                     const size_t *caps, size_t n, size_t max_len, size_t *lens, int *results,
                     void **outs)
{
    const char **k2 = malloc(n * sizeof *k2);
    void **b2 = malloc(n * sizeof *b2); /* destinations, or the buffers allocated */
    size_t *c2 = malloc(n * sizeof *c2);
    size_t *l2 = malloc(n * sizeof *l2);
    size_t *idx = malloc(n * sizeof *idx);
    int *r2 = malloc(n * sizeof *r2);
    int rc = -ENOMEM;
    if (!k2 || !b2 || !c2 || !l2 || !idx || !r2)
        goto out;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int e = cr__sc_check_key(keys[i]);
        if (!e && bufs && (!bufs[i] || caps[i] == 0 || !cr__sc_is_registered(s, bufs[i], caps[i])))
            e = CR_E_INVALID_PARAMS;
        results[i] = e;
        if (e)
            continue;
        k2[m] = keys[i];
        b2[m] = bufs ? bufs[i] : NULL;
        c2[m] = bufs ? caps[i] : max_len ? max_len : SIZE_MAX;
        idx[m] = i;
        m++;
    }
    if (m)
        do_get(s, k2, outs ? NULL : b2, c2, m, l2, outs != NULL, r2, outs ? b2 : NULL);
    for (size_t j = 0; j < m; j++) {
        results[idx[j]] = r2[j];
        if (r2[j])
            continue;
        lens[idx[j]] = l2[j];
        if (outs)
            outs[idx[j]] = b2[j];
    }
    rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = results[i];
out:
    free(k2);
    free(b2);
    free(c2);
    free(l2);
    free(idx);
    free(r2);
    return rc;
}

int cr_store_batch_get_into(cr_store_t *s, const char *const *keys, void *const *bufs,
                            const size_t *caps, size_t n, size_t *lens, int *results)
{
    if (!s || !keys || !bufs || !caps || !lens || !results || n == 0 || n > CR_STORE_BATCH_MAX)
        return CR_E_INVALID_PARAMS;
    return batch_get(s, keys, bufs, caps, n, 0, lens, results, NULL);
}

int cr_store_batch_get_alloc(cr_store_t *s, const char *const *keys, size_t n, size_t max_len,
                             void **outs, size_t *lens, int *results)
{
    if (!s || !keys || !outs || !lens || !results || n == 0 || n > CR_STORE_BATCH_MAX)
        return CR_E_INVALID_PARAMS;
    return batch_get(s, keys, NULL, NULL, n, max_len, lens, results, outs);
}

/* ---- metadata calls ------------------------------------------------------- */

static int single_item(cr_store_t *s, uint16_t type, const char *key, uint32_t flags,
                       cr__rpc_msg_t *rep)
{
    int rc = cr__sc_check_key(key);
    if (rc)
        return rc;
    cr__rpc_msg_t req;
    rc = build_items(&req, type, &key, 1);
    if (rc)
        return rc;
    req.items[0].flags = flags;
    return call_items(s, &req, rep, 1);
}

int cr_store_get_size(cr_store_t *s, const char *key, uint64_t *size)
{
    if (!s || !size)
        return CR_E_INVALID_PARAMS;
    cr__rpc_msg_t rep = {0};
    int rc = single_item(s, CR__RPC_GET_SIZE, key, 0, &rep);
    if (rc)
        return rc;
    rc = rep.items[0].status;
    if (!rc)
        *size = rep.items[0].size;
    cr__rpc_msg_free(&rep);
    return rc;
}

static int exist_batch(cr_store_t *s, const char *const *keys, size_t n, int *results,
                       uint32_t hflags);

int cr_store_exist(cr_store_t *s, const char *key)
{
    if (!s)
        return CR_E_INVALID_PARAMS;
    int r;
    int rc = exist_batch(s, &key, 1, &r, CR__RPC_HF_LEASE);
    return rc ? rc : r;
}

int cr_store_remove(cr_store_t *s, const char *key, int force)
{
    if (!s)
        return CR_E_INVALID_PARAMS;
    cr__rpc_msg_t rep = {0};
    if (key)
        cr__lc_drop(&s->lc, key);
    int rc = single_item(s, CR__RPC_REMOVE, key, force ? CR__RPC_F_FORCE : 0, &rep);
    if (rc)
        return rc;
    rc = rep.items[0].status;
    cr__rpc_msg_free(&rep);
    return rc;
}

/* One BATCH_REMOVE of the valid keys among keys[0..n); an invalid key gets
 * CR_E_INVALID_KEY in its result and is not sent, so that it fails alone. */
int cr_store_batch_remove(cr_store_t *s, const char *const *keys, size_t n, int force,
                          int *results)
{
    if (!s || !keys || !results || n == 0 || n > CR_STORE_BATCH_MAX)
        return CR_E_INVALID_PARAMS;
    const char **ok = malloc(n * sizeof *ok);
    size_t *at = malloc(n * sizeof *at);
    size_t m = 0;
    int rc = ok && at ? 0 : CR_E_INTERNAL_ERROR;
    for (size_t i = 0; i < n; i++) {
        results[i] = rc ? rc : cr__sc_check_key(keys[i]) ? CR_E_INVALID_KEY : 0;
        if (results[i])
            continue;
        cr__lc_drop(&s->lc, keys[i]);
        at[m] = i;
        ok[m++] = keys[i];
    }
    cr__rpc_msg_t req, rep = {0};
    if (m) {
        rc = build_items(&req, CR__RPC_REMOVE, ok, m);
        for (size_t j = 0; !rc && j < m; j++)
            req.items[j].flags = force ? CR__RPC_F_FORCE : 0;
        if (!rc)
            rc = call_items(s, &req, &rep, m);
        if (rc == -ENOMEM)
            rc = CR_E_INTERNAL_ERROR;
        for (size_t j = 0; j < m; j++) /* a call that failed fails each key */
            results[at[j]] = rc ? rc : rep.items[j].status;
        if (!rc)
            cr__rpc_msg_free(&rep);
    }
    free(ok);
    free(at);
    for (size_t i = 0; i < n; i++)
        if (results[i])
            return results[i];
    return 0;
}

int cr_store_remove_all(cr_store_t *s, uint64_t *removed)
{
    return cr_store_remove_all_force(s, 0, removed); /* desc.c */
}

/* Exist for n keys (checked) with header flags hflags: results[i] = 1, 0
 * or the key's error. */
static int exist_batch(cr_store_t *s, const char *const *keys, size_t n, int *results,
                       uint32_t hflags)
{
    for (size_t i = 0; i < n; i++)
        if (cr__sc_check_key(keys[i]))
            return CR_E_INVALID_KEY;
    cr__rpc_msg_t req, rep = {0};
    int rc = build_items(&req, CR__RPC_EXIST, keys, n);
    if (rc)
        return rc;
    req.hflags = hflags;
    rc = call_items(s, &req, &rep, n);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        int st = rep.items[i].status;
        results[i] = st == 0 ? 1 : st == CR_E_OBJECT_NOT_FOUND ? 0 : st;
    }
    cr__rpc_msg_free(&rep);
    return 0;
}

int cr_store_batch_is_exist(cr_store_t *s, const char *const *keys, size_t n, int *results)
{
    if (!s || !keys || !results || n == 0 || n > CR_STORE_BATCH_MAX)
        return CR_E_INVALID_PARAMS;
    return exist_batch(s, keys, n, results, CR__RPC_HF_LEASE);
}

int cr_store_batch_probe(cr_store_t *s, const char *const *keys, size_t n, int *results)
{
    if (!s || !keys || !results || n == 0 || n > CR_STORE_BATCH_MAX)
        return CR_E_INVALID_PARAMS;
    return exist_batch(s, keys, n, results, 0);
}
