/* Store client: lifecycle, heartbeat/remount thread, registrations, the TE
 * segment handle cache and the master connection pool. */
#include "store/client/client.h"
#include "transfer/capability.h"
#include "transfer/engine_info.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/mem_avail.h"
#include "common/net.h"
#include "common/tls/tls.h"
#include "store/master/ha/elect.h"

#define COMP "store-client"
#define SEG_ALIGN 4096ull

static void copy_str(char *dst, size_t cap, const char *src, const char *def)
{
    snprintf(dst, cap, "%s", src ? src : def);
}

int cr__sc_check_key(const char *key)
{
    if (!key || !key[0])
        return CR_E_INVALID_KEY;
    if (strnlen(key, CR_STORE_KEY_MAX + 1) > CR_STORE_KEY_MAX)
        return CR_E_INVALID_KEY;
    return 0;
}

/* Each calling thread keeps one connection (threads are numbered on their
 * first call, round-robin), so up to CR__SC_RPC_CONNS threads never queue
 * behind each other's calls; a per-call round-robin would let two threads
 * pick the same connection while others sit idle. slot_users counts the
 * live threads numbered onto each connection slot (the same slot in every
 * client of the process); a thread's exit gives its slot back (slot_exit,
 * a thread-specific key's destructor). */
static atomic_uint slot_users[CR__SC_RPC_CONNS];
static pthread_key_t slot_key;
static int slot_key_ok;
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;
static __thread unsigned tid_plus1;

static void slot_exit(void *v)
{
    atomic_fetch_sub(&slot_users[(uintptr_t)v - 1], 1);
}

static void slot_key_init(void)
{
    slot_key_ok = pthread_key_create(&slot_key, slot_exit) == 0; /* never deleted */
}

static unsigned rpc_slot(void)
{
    if (!tid_plus1) {
        static atomic_uint next_tid;
        tid_plus1 = atomic_fetch_add_explicit(&next_tid, 1, memory_order_relaxed) + 1;
        unsigned slot = (tid_plus1 - 1) % CR__SC_RPC_CONNS;
        atomic_fetch_add(&slot_users[slot], 1);
        pthread_once(&slot_once, slot_key_init);
        /* without the key the count is never given back: the slot stays
         * "shared", which only costs speculation (cr__sc_rpc_shared) */
        if (slot_key_ok)
            pthread_setspecific(slot_key, (void *)(uintptr_t)(slot + 1));
    }
    return (tid_plus1 - 1) % CR__SC_RPC_CONNS;
}

cr__rpc_client_t *cr__sc_rpc(cr_store_t *s)
{
    return s->rpc[rpc_slot()];
}

int cr__sc_rpc_shared(void)
{
    return atomic_load_explicit(&slot_users[rpc_slot()], memory_order_relaxed) > 1;
}

#define HA_RETRY_MS 10000 /* a failover (lease expiry + election + takeover) fits in it */
/* a restored master's nodes remount within two heartbeats of a ping */
#define RESTORE_RETRY_MS 10000

int cr__sc_resolve(cr_store_t *s)
{
    if (!s->ha)
        return 0;
    pthread_mutex_lock(&s->ha_mu);
    uint64_t now = cr__now_ms();
    if (now - s->last_resolve_ms < 50) {
        pthread_mutex_unlock(&s->ha_mu);
        return 0;
    }
    s->last_resolve_ms = now;
    char addr[CR__SC_STR];
    uint32_t epoch = 0;
    int rc = cr__ha_leader_lookup(s->etcd, s->cluster_id, addr, sizeof addr, &epoch);
    if (rc == 0 && epoch < atomic_load(&s->epoch))
        rc = -ESTALE; /* the key still names a deposed leader */
    if (rc == 0 && strcmp(addr, s->leader)) {
        for (size_t i = 0; i < CR__SC_RPC_CONNS; i++)
            cr__rpc_client_set_addr(s->rpc[i], addr);
        if (s->hb_rpc)
            cr__rpc_client_set_addr(s->hb_rpc, addr);
        CR_LOG_INFO(COMP, "master leader is %s (epoch %u)", addr, epoch);
        snprintf(s->leader, sizeof s->leader, "%s", addr);
        rc = 1;
    }
    pthread_mutex_unlock(&s->ha_mu);
    return rc;
}

__thread unsigned cr__sc_te_busy;

int cr__sc_call_during(cr_store_t *s, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                       void (*during)(void *), void *arg)
{
    int rc = cr__rpc_client_call_flags(cr__sc_rpc(s), req, reply, during, arg,
                                       cr__sc_te_busy ? CR__RPC_CALL_NOSPIN : 0);
    if (rc == -ENOMEM || rc == 0)
        return rc;
    return rc == -EINVAL ? CR_E_INVALID_PARAMS : CR_E_RPC_FAIL;
}

int cr__sc_call_copying(cr_store_t *s, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                        void (*start)(void *), void *arg)
{
    int rc = cr__rpc_client_call_flags(cr__sc_rpc(s), req, reply, start, arg,
                                       CR__RPC_CALL_NOSPIN);
    if (rc == -ENOMEM || rc == 0)
        return rc;
    return rc == -EINVAL ? CR_E_INVALID_PARAMS : CR_E_RPC_FAIL;
}

static int call_once(cr_store_t *s, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply)
{
    return cr__sc_call_during(s, req, reply, NULL, NULL);
}

/* One call, and in HA mode its retries at the leader (below). */
static int call_ha(cr_store_t *s, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply)
{
    int rc = call_once(s, req, reply);
    if (!s->ha)
        return rc;
    /* HA: the master failed or is not (or no longer) the leader. A refused
     * request was not applied; a failed one is retried at the leader
     * (PutEnd and the reads are idempotent; a PutStart that did land
     * answers OBJECT_ALREADY_EXISTS, its space reclaimed at the deadline). */
    uint64_t deadline = cr__now_ms() + HA_RETRY_MS;
    while ((rc == CR_E_RPC_FAIL || (rc == 0 && reply->status == CR_E_UNAVAILABLE_IN_CURRENT_MODE)) &&
           cr__now_ms() < deadline) {
        if (rc == 0)
            cr__rpc_msg_free(reply);
        if (cr__sc_resolve(s) <= 0) {
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
        rc = call_once(s, req, reply);
    }
    return rc;
}

int cr__sc_call(cr_store_t *s, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply)
{
    int rc = call_ha(s, req, reply);
    uint16_t t = req->type & (uint16_t)~CR__RPC_REPLY;
    if (t != CR__RPC_PUT_START && t != CR__RPC_BATCH_PUT_START)
        return rc;
    if (rc == 0 && req->n_exclude && reply->status == CR_E_INVALID_PARAMS && !reply->n_items) {
        /* refused undecoded: a master that does not read exclusion lists
         * (an older leader took over since its PING said otherwise) */
        CR_LOG_WARN(COMP, "master %s refused PutStart's exclusion list: sent without it",
                    s->master_addr);
        atomic_store(&s->master_excl, 0);
        cr__rpc_msg_free(reply);
        cr__rpc_msg_t plain = *req;
        plain.n_exclude = 0;
        plain.exclude = NULL;
        return cr__sc_call(s, &plain, reply);
    }
    /* a master restored from its records (HA takeover, restart) refuses
     * PutStart as a whole, nothing applied, until a node is back to place
     * on (dispatch.c): ~1 s, as long as a node's remount takes */
    for (uint64_t until = cr__now_ms() + RESTORE_RETRY_MS;
         rc == 0 && reply->status == CR_E_UNAVAILABLE_IN_CURRENT_STATUS && cr__now_ms() < until;) {
        cr__rpc_msg_free(reply);
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
        rc = call_ha(s, req, reply);
    }
    return rc;
}

/* ---- registrations -------------------------------------------------------- */

int cr__sc_is_registered(cr_store_t *s, const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    int ok = 0;
    pthread_rwlock_rdlock(&s->reg_lock);
    for (size_t i = 0; i < s->n_regs; i++) {
        const cr__sc_reg_t *r = &s->regs[i];
        if (a >= r->addr && len <= r->len && a - r->addr <= r->len - len) {
            ok = 1;
            break;
        }
    }
    pthread_rwlock_unlock(&s->reg_lock);
    return ok;
}

int cr__sc_is_local(const cr_store_t *s, const char *segment, uint64_t addr, uint64_t len)
{
    if (!s->seg_base || strcmp(segment, s->seg_name) != 0)
        return 0;
    uint64_t b = (uint64_t)(uintptr_t)s->seg_base;
    return addr >= b && len <= s->seg_size && addr - b <= s->seg_size - len;
}

int cr_store_register_buffer(cr_store_t *s, void *addr, size_t len)
{
    if (!s || !addr || len == 0 || (uintptr_t)addr + len < (uintptr_t)addr)
        return CR_E_INVALID_PARAMS;
    uintptr_t a = (uintptr_t)addr;
    pthread_rwlock_wrlock(&s->reg_lock);
    int rc = 0;
    if (s->n_regs >= CR__SC_REGS_MAX)
        rc = CR_E_INVALID_PARAMS;
    for (size_t i = 0; !rc && i < s->n_regs; i++)
        if (a < s->regs[i].addr + s->regs[i].len && s->regs[i].addr < a + len)
            rc = CR_E_INVALID_PARAMS; /* overlap */
    if (!rc) {
        rc = cr_xfer_mem_register(s->te, addr, len, "cpu:0");
        if (rc == -EEXIST || rc == -EINVAL)
            rc = CR_E_INVALID_PARAMS;
    }
    if (!rc) {
        s->regs[s->n_regs].addr = a;
        s->regs[s->n_regs].len = len;
        s->n_regs++;
    }
    pthread_rwlock_unlock(&s->reg_lock);
    if (rc)
        CR_LOG_WARN(COMP, "register_buffer(%p, %zu): %s", addr, len, cr_strerror(rc));
    return rc;
}

int cr_store_unregister_buffer(cr_store_t *s, void *addr)
{
    if (!s || !addr)
        return CR_E_INVALID_PARAMS;
    pthread_rwlock_wrlock(&s->reg_lock);
    int rc = CR_E_INVALID_PARAMS;
    for (size_t i = 0; i < s->n_regs; i++) {
        if (s->regs[i].addr == (uintptr_t)addr) {
            rc = cr_xfer_mem_unregister(s->te, addr);
            if (rc == -ENOENT)
                rc = CR_E_INVALID_PARAMS;
            s->regs[i] = s->regs[--s->n_regs];
            break;
        }
    }
    pthread_rwlock_unlock(&s->reg_lock);
    return rc;
}

/* ---- segment handle cache ------------------------------------------------- */

int cr__sc_segment(cr_store_t *s, const char *segment, cr_xfer_segment_t *out)
{
    char name[CR_XFER_NAME_MAX]; /* an extra segment lives in its client's TE segment */
    cr__sc_te_name(segment, name, sizeof name);
    pthread_mutex_lock(&s->seg_mu);
    for (size_t i = 0; i < s->n_segs; i++) {
        if (!strcmp(s->segs[i].name, name)) {
            *out = s->segs[i].handle;
            pthread_mutex_unlock(&s->seg_mu);
            return 0;
        }
    }
    pthread_mutex_unlock(&s->seg_mu);
    /* open outside the lock: it may do a metadata lookup */
    cr_xfer_segment_t h;
    int rc = cr_xfer_segment_open(s->te, name, &h);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->seg_mu);
    for (size_t i = 0; i < s->n_segs; i++) {
        if (!strcmp(s->segs[i].name, name)) { /* raced with another opener */
            *out = s->segs[i].handle;
            pthread_mutex_unlock(&s->seg_mu);
            cr_xfer_segment_close(s->te, h);
            return 0;
        }
    }
    if (s->n_segs == CR__SC_SEG_CACHE) { /* bounded: drop the oldest */
        cr_xfer_segment_close(s->te, s->segs[0].handle);
        memmove(&s->segs[0], &s->segs[1], (CR__SC_SEG_CACHE - 1) * sizeof s->segs[0]);
        s->n_segs--;
    }
    snprintf(s->segs[s->n_segs].name, sizeof s->segs[0].name, "%s", name);
    s->segs[s->n_segs].handle = h;
    s->n_segs++;
    *out = h;
    pthread_mutex_unlock(&s->seg_mu);
    return 0;
}

/* ---- mount + heartbeat ---------------------------------------------------- */

/* (client.h) A MountSegment reply with capabilities on carries this
 * client's capability key: from now on our engine serves only the grants
 * this master mints (transfer/capability.h). */
void cr__sc_cap_install(cr_store_t *s, const cr__rpc_msg_t *rep)
{
    if (rep->blob_len != 8 + CR__CAP_KEY_LEN + 8)
        return;
    uint64_t seg_id = 0, mid = 0;
    for (int i = 7; i >= 0; i--) {
        seg_id = (seg_id << 8) | rep->blob[i];
        mid = (mid << 8) | rep->blob[8 + CR__CAP_KEY_LEN + i];
    }
    cr__xfer_cap_key_set(s->te, rep->blob + 8, seg_id, rep->epoch);
    atomic_store(&s->cap_master_id, mid);
}

/* *held_ms (may be NULL): how long the master still holds the name for
 * the readers of a dropped segment of the same name (0 = none). */
static int mount_segment(cr_store_t *s, cr__rpc_client_t *c, uint64_t *held_ms)
{
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = CR__RPC_MOUNT_SEGMENT;
    req.client_id = s->id;
    req.segment = s->seg_name;
    req.base = (uint64_t)(uintptr_t)s->seg_base;
    req.size = s->seg_size;
    int rc = cr__rpc_client_call(c, &req, &rep);
    if (rc)
        return rc == -ENOMEM ? rc : CR_E_RPC_FAIL;
    rc = rep.status;
    if (!rc)
        cr__sc_cap_install(s, &rep);
    if (held_ms)
        *held_ms = rc ? 0 : rep.count;
    cr__rpc_msg_free(&rep);
    return rc;
}

static int unmount_segment(cr_store_t *s, cr__rpc_client_t *c)
{
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = CR__RPC_UNMOUNT_SEGMENT;
    req.client_id = s->id;
    req.segment = s->seg_name;
    int rc = cr__rpc_client_call(c, &req, &rep);
    if (rc)
        return rc == -ENOMEM ? rc : CR_E_RPC_FAIL;
    rc = rep.status;
    cr__rpc_msg_free(&rep);
    return rc;
}

/* Returns 0 and *flags, or an error. A master other than the one whose
 * capability key we hold (restart, failover) sets NEED_REMOUNT: the mount
 * reply carries its key. */
static int ping(cr_store_t *s, cr__rpc_client_t *c, uint32_t *flags)
{
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = CR__RPC_PING;
    req.client_id = s->id;
    /* name a segment we hold mounted: a master that dropped it says so */
    char extra[CR_XFER_NAME_MAX];
    if (s->seg_base && atomic_load(&s->mounted)) {
        req.segment = s->seg_name;
    } else if (atomic_load(&s->mounted)) {
        cr__sc_extra_first(s, extra, sizeof extra);
        if (extra[0])
            req.segment = extra;
    }
    int rc = cr__rpc_client_call(c, &req, &rep);
    if (rc)
        return rc == -ENOMEM ? rc : CR_E_RPC_FAIL;
    rc = rep.status;
    *flags = rep.flags;
    if (!rc) /* a master that takes PutStart's exclusion list says so (each leader anew) */
        atomic_store(&s->master_excl, (rep.flags & CR__RPC_F_EXCLUDE) != 0);
    if (!rc && s->auth) {
        int caps = (rep.flags & CR__RPC_F_CAPS) != 0;
        if (!caps && cr__xfer_cap_enforced(s->te)) {
            CR_LOG_WARN(COMP, "master %s grants no capabilities: any member may read and "
                              "write this client's registered memory", s->master_addr);
            cr__xfer_cap_disable(s->te);
            atomic_store(&s->cap_master_id, 0);
        } else if (caps && !cr__xfer_cap_enforced(s->te) && cr__xfer_cap_deny_all(s->te) == 0) {
            *flags |= CR__RPC_F_NEED_REMOUNT; /* the mount reply carries our key */
        }
    }
    uint64_t cap_mid = atomic_load(&s->cap_master_id);
    if (!rc && cap_mid && rep.master_id != cap_mid)
        *flags |= CR__RPC_F_NEED_REMOUNT;
    if (!rc)
        cr__xfer_cap_epoch_seen(s->te, atomic_load(&s->epoch));
    cr__rpc_msg_free(&rep);
    return rc;
}

/* Republishes this client's TE segment descriptor. A restarted master with
 * the embedded metadata server has lost every descriptor; the TE publishes
 * on each (un)registration, so registering and unregistering one spare page
 * puts the full descriptor back without touching the segment itself. */
static void republish(cr_store_t *s)
{
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return;
    int rc = cr_xfer_mem_register(s->te, page, 4096, "cpu:0");
    if (rc == 0)
        rc = cr_xfer_mem_unregister(s->te, page);
    if (rc)
        CR_LOG_WARN(COMP, "republishing segment %s: %s", s->seg_name, cr_strerror(rc));
    munmap(page, 4096);
}

static void *hb_main(void *arg)
{
    cr_store_t *s = arg;
    int failing = 0;
    pthread_mutex_lock(&s->hb_mu);
    while (!s->hb_stop) {
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        uint64_t ns = (uint64_t)dl.tv_nsec + (uint64_t)s->hb_ms * 1000000ull;
        dl.tv_sec += (time_t)(ns / 1000000000ull);
        dl.tv_nsec = (long)(ns % 1000000000ull);
        while (!s->hb_stop && pthread_cond_timedwait(&s->hb_cv, &s->hb_mu, &dl) != ETIMEDOUT)
            ;
        if (s->hb_stop)
            break;
        pthread_mutex_unlock(&s->hb_mu);

        uint32_t flags = 0;
        int rc = ping(s, s->hb_rpc, &flags);
        if (rc && s->ha && cr__sc_resolve(s) == 1)
            rc = ping(s, s->hb_rpc, &flags); /* a new leader: at once */
        if (rc) {
            if (!failing)
                CR_LOG_WARN(COMP, "heartbeat to %s failed: %s", s->master_addr, cr_strerror(rc));
            failing = 1;
            atomic_store(&s->mounted, 0);
        } else {
            if (failing)
                CR_LOG_INFO(COMP, "master %s reachable again", s->master_addr);
            failing = 0;
            cr__sc_resv_idle(s, s->hb_rpc); /* an idle reservation goes back */
            if ((flags & CR__RPC_F_NEED_REMOUNT) || !atomic_load(&s->mounted)) {
                if (s->seg_base) {
                    republish(s);
                    rc = mount_segment(s, s->hb_rpc, NULL);
                    if (rc == 0) {
                        atomic_store(&s->mounted, 1);
                        atomic_fetch_add(&s->remounts, 1);
                        CR_LOG_INFO(COMP, "remounted segment %s at %s", s->seg_name,
                                    s->master_addr);
                    } else {
                        CR_LOG_WARN(COMP, "remount of %s failed: %s", s->seg_name,
                                    cr_strerror(rc));
                    }
                } else {
                    char extra[CR_XFER_NAME_MAX];
                    cr__sc_extra_first(s, extra, sizeof extra);
                    if (extra[0])
                        republish(s); /* a pure client that mounted extra segments */
                    atomic_store(&s->mounted, 1);
                }
                cr__sc_extra_sync(s, s->hb_rpc, 1);
            }
        }
        pthread_mutex_lock(&s->hb_mu);
    }
    pthread_mutex_unlock(&s->hb_mu);
    return NULL;
}

/* ---- create / destroy ----------------------------------------------------- */

static void random_id(cr__rpc_client_id_t *id)
{
    uint64_t v[2] = {0, 0};
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(v, sizeof v, 1, f) != 1)
            v[0] = 0;
        fclose(f);
    }
    if (!v[0] && !v[1]) {
        v[0] = cr__now_ns() ^ ((uint64_t)getpid() << 32);
        v[1] = (uint64_t)(uintptr_t)id;
    }
    id->hi = v[0];
    id->lo = v[1];
}

/* Anonymous memory, 2 MiB-aligned and advised for transparent huge pages
 * (fewer pages to pin per transfer), every page touched now so no transfer
 * ever faults in fresh memory. len must be a multiple of 4 KiB; unmap with
 * munmap(p, len). */
#define HUGE_2M (2ull << 20)
static void *map_prefaulted(size_t len)
{
    size_t span = len + HUGE_2M;
    uint8_t *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    size_t tail = (size_t)(raw + span - (p + len));
    if (tail)
        munmap(p + len, tail);
    madvise(p, len, MADV_HUGEPAGE); /* best effort */
    for (size_t off = 0; off < len; off += 4096)
        ((volatile uint8_t *)p)[off] = 0;
    return p;
}

static int protocol_to_transports(const char *proto, char *out, size_t cap)
{
    static const char *ok[] = {"tcp", "shm", "tcp,shm", "shm,tcp"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        if (!strcmp(proto, ok[i])) {
            snprintf(out, cap, "%s", ok[i]);
            return 0;
        }
    }
    return CR_E_INVALID_PARAMS;
}

static void teardown(cr_store_t *s)
{
    cr__sc_fs_close(s); /* persists what is queued while the master is still reachable */
    if (s->hb_started) {
        pthread_mutex_lock(&s->hb_mu);
        s->hb_stop = 1;
        pthread_cond_broadcast(&s->hb_cv);
        pthread_mutex_unlock(&s->hb_mu);
        pthread_join(s->hb_thread, NULL);
    }
    if (s->seg_base && atomic_load(&s->mounted) && s->hb_rpc) {
        int rc = unmount_segment(s, s->hb_rpc);
        if (rc && rc != CR_E_SEGMENT_NOT_FOUND)
            CR_LOG_WARN(COMP, "unmount of %s failed: %s", s->seg_name, cr_strerror(rc));
    }
    if (s->hb_rpc)
        cr__sc_extra_sync(s, s->hb_rpc, 0);
    if ((s->resv.id || s->resv_back_id) && s->hb_rpc) { /* our reservations go back (ops.c) */
        cr__rpc_msg_t req = {0}, rep = {0};
        req.type = CR__RPC_RESERVE;
        req.client_id = s->id;
        if (cr__rpc_client_call(s->hb_rpc, &req, &rep) == 0)
            cr__rpc_msg_free(&rep);
    }
    for (size_t i = 0; i < CR__SC_RPC_CONNS; i++)
        cr__rpc_client_destroy(s->rpc[i]);
    cr__rpc_client_destroy(s->hb_rpc);
    /* the engine goes first: it stops serving remote accesses to the memory */
    cr_xfer_engine_destroy(s->te);
    if (s->lbuf) {
        cr__staging_fini(&s->staging);
        munmap(s->lbuf, s->lbuf_size);
    }
    if (s->seg_base && s->seg_shared)
        cr_xfer_mem_free_shared(s->seg_base);
    else if (s->seg_base)
        munmap(s->seg_base, s->seg_size);
    cr__sc_tier_close_all(s);
    pthread_mutex_destroy(&s->tier_mu);
    pthread_mutex_destroy(&s->fs_mu);
    pthread_cond_destroy(&s->fs_cv);
    cr__meta_close(s->etcd);
    pthread_mutex_destroy(&s->ha_mu);
    pthread_rwlock_destroy(&s->reg_lock);
    pthread_mutex_destroy(&s->seg_mu);
    pthread_mutex_destroy(&s->sus_mu);
    cr__lc_fini(&s->lc);
    pthread_mutex_destroy(&s->resv_mu);
    pthread_mutex_destroy(&s->hb_mu);
    pthread_mutex_destroy(&s->extra_mu);
    pthread_cond_destroy(&s->hb_cv);
    cr__auth_free(s->auth);
    cr__tls_free(s->tls);
    free(s);
}

/* Step 1: locks and condition variable (never fails). */
static void create_sync(cr_store_t *s)
{
    pthread_rwlock_init(&s->reg_lock, NULL);
    pthread_mutex_init(&s->seg_mu, NULL);
    pthread_mutex_init(&s->sus_mu, NULL);
    cr__lc_init(&s->lc, 0);
    pthread_mutex_init(&s->resv_mu, NULL);
    pthread_mutex_init(&s->tier_mu, NULL);
    pthread_mutex_init(&s->fs_mu, NULL);
    pthread_cond_init(&s->fs_cv, NULL);
    pthread_mutex_init(&s->hb_mu, NULL);
    pthread_mutex_init(&s->ha_mu, NULL);
    pthread_mutex_init(&s->extra_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->hb_cv, &ca);
    pthread_condattr_destroy(&ca);
}

/* A numeric setting from the environment (cr__cfg_parse_value's syntax:
 * CR__CFG_SIZE "8MiB", CR__CFG_INT "50"), within [lo, hi]; def when unset.
 * A bad value is refused loudly and def used. */
static uint64_t env_setting(const char *name, cr__cfg_type_t type, int64_t lo, int64_t hi,
                            int64_t def)
{
    const char *e = getenv(name);
    if (!e || !*e)
        return (uint64_t)def;
    int64_t v = 0; /* CR__CFG_SIZE writes a uint64_t: the bounds below keep it in range */
    if (cr__cfg_parse_value(type, e, &v) || v < lo || v > hi) {
        CR_LOG_WARN(COMP, "%s=%s is not a %s in %lld..%lld: using %lld", name, e,
                    type == CR__CFG_SIZE ? "size in bytes" : "number", (long long)lo,
                    (long long)hi, (long long)def);
        return (uint64_t)def;
    }
    return (uint64_t)v;
}

/* Step 2: the configuration from p (defaults for fields not in its
 * field_mask), checked; transports gets the TE's transport list. Returns 0
 * or CR_E_INVALID_PARAMS (logged). */
static int create_config(cr_store_t *s, const cr_store_params_t *p, char *transports, size_t cap)
{
    uint64_t m = p->field_mask;
    copy_str(s->hostname, sizeof s->hostname,
             (m & CR_STORE_PARAM_LOCAL_HOSTNAME) ? p->local_hostname : NULL, "127.0.0.1");
    copy_str(s->metadata_uri, sizeof s->metadata_uri,
             (m & CR_STORE_PARAM_METADATA_URI) ? p->metadata_uri : NULL, "p2p");
    copy_str(s->master_addr, sizeof s->master_addr,
             (m & CR_STORE_PARAM_MASTER_ADDR) ? p->master_addr : NULL, CR__SC_DEFAULT_MASTER);
    copy_str(s->protocol, sizeof s->protocol, (m & CR_STORE_PARAM_PROTOCOL) ? p->protocol : NULL,
             "tcp");
    copy_str(s->devices, sizeof s->devices,
             (m & CR_STORE_PARAM_DEVICE_NAMES) && p->device_names && p->device_names[0]
                 ? p->device_names
                 : NULL,
             s->hostname);
    s->seg_size = (m & CR_STORE_PARAM_GLOBAL_SEGMENT_SIZE) ? p->global_segment_size : 0;
    s->lbuf_size =
        (m & CR_STORE_PARAM_LOCAL_BUFFER_SIZE) ? p->local_buffer_size : CR__SC_DEFAULT_LBUF_SIZE;
    s->rpc_timeout_ms =
        (m & CR_STORE_PARAM_RPC_TIMEOUT_MS) ? p->rpc_timeout_ms : CR__SC_DEFAULT_RPC_TIMEOUT_MS;
    s->xfer_timeout_ms = (m & CR_STORE_PARAM_TRANSFER_TIMEOUT_MS) ? p->transfer_timeout_ms
                                                                  : CR__SC_DEFAULT_XFER_TIMEOUT_MS;
    s->hb_ms = (m & CR_STORE_PARAM_HEARTBEAT_MS) ? p->heartbeat_ms : CR__SC_DEFAULT_HEARTBEAT_MS;
    const char *ck = getenv("CRESCENT_STORE_CHECKSUM");
    s->crc_on = !(ck && !strcmp(ck, "0"));
    /* the checksum's one-time set-up (its tables, and timing which
     * implementation is fastest: 0.4-0.7 ms on the machine of
     * docs/benchmarks.md) here, not in the first put or get */
    if (s->crc_on) {
        (void)cr__crc32c_hw();
        (void)cr__crc32c_shift(0, 0); /* its table of powers */
    }
    /* gets that read from where a key was last found while they ask the
     * master (ops.c, "speculative get"), on unless CRESCENT_LOCATION_CACHE=0 */
    const char *lcv = getenv("CRESCENT_LOCATION_CACHE");
    s->lc.on = !(lcv && !strcmp(lcv, "0"));
    /* one-round-trip small puts (ops.c), on unless CRESCENT_PUT_RESERVE=0 */
    const char *pr = getenv("CRESCENT_PUT_RESERVE");
    s->resv_on = !(pr && !strcmp(pr, "0"));
    /* keys per chunk of a pipelined get batch (ops.c, pipe_chunks) */
    s->get_chunk_keys = (size_t)env_setting("CRESCENT_GET_CHUNK_KEYS", CR__CFG_INT, 16, 4096,
                                            CR__SC_DEFAULT_GET_CHUNK_KEYS);
    /* a reserved batch's commits pipelined (ops.c), on unless CRESCENT_PUT_PIPE=0 */
    const char *pp = getenv("CRESCENT_PUT_PIPE");
    s->pipe_on = !(pp && !strcmp(pp, "0"));
    /* busy-poll budget of a master reply, µs (rpc/client.h) */
    s->rpc_spin_us = (unsigned)env_setting("CRESCENT_RPC_SPIN_US", CR__CFG_INT, 0, 10000,
                                           CR__SC_DEFAULT_RPC_SPIN_US);
    const char *tl = getenv("CRESCENT_TIER_LOCAL"); /* same-host disk reads (tier_local.c) */
    s->tier_local_on = !(tl && !strcmp(tl, "0"));
    /* value bytes a batch of same-host or shared-FS reads keeps in flight */
    s->tier_read_window = env_setting("CRESCENT_TIER_READ_WINDOW", CR__CFG_SIZE, 4096, 1 << 30,
                                      8 << 20);
    s->te_port = (m & CR_STORE_PARAM_TE_PORT) ? p->te_port : 0;
    s->fresh_name = (m & CR_STORE_PARAM_FRESH_NAME) && p->fresh_name;
    copy_str(s->key_file, sizeof s->key_file,
             (m & CR_STORE_PARAM_CLUSTER_KEY_FILE) ? p->cluster_key_file : NULL, "");
    copy_str(s->tls_cert, sizeof s->tls_cert, (m & CR_STORE_PARAM_TLS) ? p->tls_cert : NULL, "");
    copy_str(s->tls_key, sizeof s->tls_key, (m & CR_STORE_PARAM_TLS) ? p->tls_key : NULL, "");
    copy_str(s->tls_ca, sizeof s->tls_ca, (m & CR_STORE_PARAM_TLS) ? p->tls_ca : NULL, "");

    const char *why = NULL;
    if (!s->hostname[0])
        why = "empty local_hostname";
    else if (protocol_to_transports(s->protocol, transports, cap))
        why = "protocol must be tcp, shm or tcp,shm";
    else if (s->seg_size > CR__SC_SEG_SIZE_MAX)
        why = "global_segment_size over 1 TiB";
    else if (s->lbuf_size < CR__SC_LBUF_SIZE_MIN || s->lbuf_size > CR__SC_LBUF_SIZE_MAX)
        why = "local_buffer_size must be 64 KiB..64 GiB";
    else if (!s->rpc_timeout_ms || !s->xfer_timeout_ms || !s->hb_ms ||
             s->rpc_timeout_ms > CR__SC_TIMEOUT_MAX_MS ||
             s->xfer_timeout_ms > CR__SC_TIMEOUT_MAX_MS || s->hb_ms > CR__SC_TIMEOUT_MAX_MS)
        why = "timeouts must be 1 ms..1 h";
    else if (!strncmp(s->master_addr, "etcd://", 7)) {
        char uri[CR__SC_STR + 8];
        if (cr__ha_parse_master_uri(s->master_addr, uri, sizeof uri, s->cluster_id,
                                    sizeof s->cluster_id) ||
            cr__meta_open(uri, (int)(s->rpc_timeout_ms < 2000 ? s->rpc_timeout_ms : 2000),
                          &s->etcd))
            why = "master_addr etcd://host:port[;host:port...][/cluster_id] is malformed";
        else
            s->ha = 1;
    } else {
        char h[CR__HOST_MAX];
        uint16_t port;
        if (cr__net_split_hostport(s->master_addr, h, &port, 0))
            why = "master_addr must be host:port or etcd://host:port[;host:port...]";
    }
    if (!why && cr__auth_load_key_file(s->key_file, &s->auth))
        why = "cluster key file unusable (see the line above)";
    if (!why && cr__tls_load(s->tls_cert, s->tls_key, s->tls_ca, &s->tls))
        why = "TLS certificate, key or CA unusable (see the line above)";
    if (!why && s->etcd)
        cr__meta_set_tls(s->etcd, s->tls);
    if (why) {
        CR_LOG_ERROR(COMP, "cr_store_create: %s", why);
        return CR_E_INVALID_PARAMS;
    }
    s->seg_size = (s->seg_size + SEG_ALIGN - 1) & ~(SEG_ALIGN - 1);
    s->lbuf_size = (s->lbuf_size + SEG_ALIGN - 1) & ~(SEG_ALIGN - 1);
    random_id(&s->id);
    return 0;
}

/* Step 3: the transfer engine. Returns 0 or its error (-EINVAL as
 * CR_E_INVALID_PARAMS). */
static int create_engine(cr_store_t *s, const char *transports)
{
    cr_xfer_params_t xp = {0};
    xp.field_mask = CR_XFER_PARAM_METADATA_URI | CR_XFER_PARAM_TRANSPORTS | CR_XFER_PARAM_NICS |
                    CR_XFER_PARAM_PORT | CR_XFER_PARAM_TIMEOUT_MS;
    xp.metadata_uri = s->metadata_uri;
    xp.transports = transports;
    xp.nics = s->devices;
    xp.port = s->te_port;
    xp.timeout_ms = s->xfer_timeout_ms;
    if (s->key_file[0]) {
        xp.field_mask |= CR_XFER_PARAM_CLUSTER_KEY_FILE;
        xp.cluster_key_file = s->key_file;
    }
    if (s->tls) { /* the engine's metadata client: the same certificate */
        xp.field_mask |= CR_XFER_PARAM_TLS;
        xp.tls_cert = cr__tls_cert_path(s->tls);
        xp.tls_key = cr__tls_key_path(s->tls);
        xp.tls_ca = cr__tls_ca_path(s->tls);
    }
    int rc = cr_xfer_engine_create(&xp, &s->te);
    if (rc == -EHOSTUNREACH) /* the engine logged what the service answered */
        CR_LOG_ERROR(COMP, "transfer engine: metadata service %s unusable (the line above says why)",
                     s->metadata_uri);
    else if (rc)
        CR_LOG_ERROR(COMP, "transfer engine: %s", cr_strerror(rc));
    if (rc) {
        return rc == -EINVAL ? CR_E_INVALID_PARAMS : rc;
    }
    snprintf(s->seg_name, sizeof s->seg_name, "%s", cr_xfer_engine_name(s->te));
    s->stall_ms = cr__xfer_stall_ms(s->te);
    /* security on: nothing of ours is served to a remote READ/WRITE until
     * the master gives our segment's capability key (mount_segment) */
    if (s->auth && (rc = cr__xfer_cap_deny_all(s->te)) != 0)
        return rc;
    return 0;
}

/* Step 4: the staging buffer and the contributed segment, mapped,
 * pre-faulted and registered with the engine. Returns 0 or -ENOMEM (also
 * when the host cannot back both: refused before a page is touched) / the
 * registration's error. */
static int create_memory(cr_store_t *s)
{
    char what[128];
    snprintf(what, sizeof what,
             "global_segment_size %" PRIu64 " + local_buffer_size %" PRIu64 " bytes", s->seg_size,
             s->lbuf_size);
    int rc = cr__mem_prefault_check(s->lbuf_size + s->seg_size, what,
                                    s->seg_size ? "global_segment_size or local_buffer_size"
                                                : "local_buffer_size");
    if (rc)
        return rc;
    s->lbuf = map_prefaulted(s->lbuf_size);
    if (!s->lbuf)
        return -ENOMEM;
    cr__staging_init(&s->staging, s->lbuf, s->lbuf_size);
    rc = cr_xfer_mem_register(s->te, s->lbuf, s->lbuf_size, "cpu:0");
    if (rc || !s->seg_size)
        return rc;
    /* same-host clients map shared memory and copy it in user space
     * (docs/architecture/shm.md); anonymous memory (huge pages, a little
     * better for tcp-only clusters) when CRESCENT_SEGMENT_SHARED=0 or as the
     * fallback */
    const char *sh = getenv("CRESCENT_SEGMENT_SHARED");
    int nomem = 0;
    if (!(sh && !strcmp(sh, "0"))) {
        s->seg_base = cr_xfer_mem_alloc_shared(s->seg_size);
        s->seg_shared = s->seg_base != NULL;
        nomem = !s->seg_base && errno == ENOMEM; /* anonymous memory would not fit either */
        if (!s->seg_base && !nomem)
            CR_LOG_INFO(COMP, "shared segment memory: %s; anonymous memory instead",
                        strerror(errno));
    }
    if (!s->seg_base && !nomem)
        s->seg_base = map_prefaulted(s->seg_size);
    if (!s->seg_base) {
        CR_LOG_ERROR(COMP, "cannot map a %llu-byte segment", (unsigned long long)s->seg_size);
        return -ENOMEM;
    }
    return cr_xfer_mem_register(s->te, s->seg_base, s->seg_size, "cpu:0");
}

/* Step 5: the master connections (request pool + the heartbeat's own). */
static int create_rpc(cr_store_t *s)
{
    int rc = 0;
    if (s->ha) {
        /* the leader now (waiting through an election, bounded) */
        uint64_t until = cr__now_ms() + HA_RETRY_MS;
        uint32_t ep = 0;
        while ((rc = cr__ha_leader_lookup(s->etcd, s->cluster_id, s->leader, sizeof s->leader,
                                          &ep)) != 0 &&
               cr__now_ms() < until) {
            struct timespec ts = {0, 100 * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (rc) {
            CR_LOG_ERROR(COMP, "no master leader in %s: %s", s->master_addr,
                         rc == -ENOENT    ? "none elected"
                         : rc == -EBADMSG ? "the election key holds garbage"
                                          : cr_strerror(rc));
            return CR_E_RPC_FAIL;
        }
        atomic_store(&s->epoch, ep);
        s->last_resolve_ms = cr__now_ms();
    } else {
        snprintf(s->leader, sizeof s->leader, "%s", s->master_addr);
    }
    for (size_t i = 0; i < CR__SC_RPC_CONNS && !rc; i++) {
        rc = cr__rpc_client_create(s->leader, (int)s->rpc_timeout_ms, (int)s->rpc_timeout_ms,
                                   &s->rpc[i]);
        if (!rc && s->ha)
            cr__rpc_client_set_epoch(s->rpc[i], &s->epoch);
        if (!rc)
            cr__rpc_client_set_spin(s->rpc[i], s->rpc_spin_us);
    }
    /* HA: a heartbeat to a stopped leader gives up within two periods, so
     * the node finds the new leader before its segment's grace runs out */
    unsigned hbt = s->rpc_timeout_ms;
    if (s->ha && hbt > 2 * s->hb_ms)
        hbt = 2 * s->hb_ms < 500 ? 500 : 2 * s->hb_ms;
    if (!rc)
        rc = cr__rpc_client_create(s->leader, (int)hbt, (int)hbt, &s->hb_rpc);
    if (!rc && s->ha)
        cr__rpc_client_set_epoch(s->hb_rpc, &s->epoch);
    if (!rc && s->auth) {
        for (size_t i = 0; i < CR__SC_RPC_CONNS; i++)
            cr__rpc_client_set_auth(s->rpc[i], s->auth);
        cr__rpc_client_set_auth(s->hb_rpc, s->auth);
    }
    if (!rc && s->tls) {
        for (size_t i = 0; i < CR__SC_RPC_CONNS; i++)
            cr__rpc_client_set_tls(s->rpc[i], s->tls);
        cr__rpc_client_set_tls(s->hb_rpc, s->tls);
    }
    return rc;
}

/* Step 6: joins the cluster: first ping, mount of the contributed
 * segment, heartbeat thread. */
static int create_join(cr_store_t *s)
{
    uint32_t flags;
    int rc = ping(s, s->hb_rpc, &flags);
    /* HA: a leader just elected may still be taking over */
    for (uint64_t until = cr__now_ms() + HA_RETRY_MS; rc && s->ha && cr__now_ms() < until;) {
        if (cr__sc_resolve(s) <= 0) {
            struct timespec ts = {0, 100 * 1000000L};
            nanosleep(&ts, NULL);
        }
        rc = ping(s, s->hb_rpc, &flags);
    }
    if (rc) {
        CR_LOG_ERROR(COMP, "master %s: %s", s->master_addr, cr_strerror(rc));
        return rc;
    }
    uint64_t held_ms = 0;
    if (s->seg_base) {
        rc = mount_segment(s, s->hb_rpc, &held_ms);
        if (rc) {
            CR_LOG_ERROR(COMP, "mount of %s at %s failed: %s", s->seg_name, s->master_addr,
                         cr_strerror(rc));
            return rc;
        }
    }
    atomic_store(&s->mounted, 1);
    if (held_ms && s->fresh_name)
        return -EADDRINUSE; /* the teardown unmounts; the caller picks another port */
    if (held_ms)
        CR_LOG_WARN(COMP,
                    "segment %s: the master holds this name (or the parts of its memory that "
                    "readers and writers of a dropped segment of that name may still touch) "
                    "for %" PRIu64 " ms more; nothing is placed there until then",
                    s->seg_name, held_ms);
    if (pthread_create(&s->hb_thread, NULL, hb_main, s))
        return -ENOMEM;
    s->hb_started = 1;
    return 0;
}

/* Each step leaves what it made in s; teardown() undoes whatever exists,
 * in reverse order, so one unwinding label serves every step. */
int cr_store_create(const cr_store_params_t *p, cr_store_t **out)
{
    if (!p || !out)
        return CR_E_INVALID_PARAMS;
    cr_store_t *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    create_sync(s);
    char transports[64];
    int rc = create_config(s, p, transports, sizeof transports);
    if (rc)
        goto fail;
    if ((rc = create_engine(s, transports)) != 0)
        goto fail;
    if ((rc = create_memory(s)) != 0)
        goto fail;
    if ((rc = create_rpc(s)) != 0)
        goto fail;
    if ((rc = create_join(s)) != 0)
        goto fail;
    *out = s;
    return 0;
fail:
    teardown(s);
    return rc;
}

void cr_store_destroy(cr_store_t *s)
{
    if (s)
        teardown(s);
}

const char *cr_store_segment_name(const cr_store_t *s)
{
    return s ? s->seg_name : "";
}

uint64_t cr__store_test_timeouts_waited(const cr_store_t *s)
{
    return s ? cr__xfer_timeouts_waited(s->te) : 0;
}

void cr__store_set_test_hooks(cr_store_t *s, const cr__store_test_hooks_t *hooks)
{
    if (!s)
        return;
    if (hooks)
        s->test_hooks = *hooks;
    else
        memset(&s->test_hooks, 0, sizeof s->test_hooks);
}
