/* Internal structure of the store client (include/crescent/store.h).
 *
 * Files: client.c (create/destroy, heartbeat + remount thread, registered
 * buffers, TE segment handle cache, RPC pool), ops.c (put/get/batch data
 * paths), staging.c (allocator over the local staging buffer), suspect.c
 * (segments that failed a transfer lately: their replicas are read last),
 * mount.c (extra segments: Mooncake's mount_segment),
 * test_hooks.h (test-only interface).
 *
 * Locks (never nested except as noted):
 *   reg_lock (rwlock)  guards regs/n_regs (user registrations)
 *   seg_mu             guards the segment handle cache
 *   sus_mu             guards suspects[] (suspect.c; never held with seg_mu; taken
 *                      last: under resv_mu by ops.c's reserved put)
 *   hb_mu              guards hb_stop, mounted (heartbeat thread state)
 *   extra_mu           guards the extra segments (mount.c); never taken with hb_mu
 *   each cr__rpc_client_t serialises its own calls internally
 */
#ifndef CR_STORE_CLIENT_CLIENT_H
#define CR_STORE_CLIENT_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/auth/auth.h"
#include "crescent/store.h"
#include "crescent/transfer.h"
#include "store/client/loccache.h"
#include "store/client/staging.h"
#include "store/client/test_hooks.h"
#include "store/rpc/client.h"
#include "store/rpc/protocol.h"
#include "transfer/metadata/metadata.h"

#define CR__SC_RPC_CONNS 8       /* master connections for requests */
#define CR__SC_SEG_CACHE 1024    /* cached TE segment handles */
#define CR__SC_REGS_MAX 4096     /* user registrations */
#define CR__SC_STR 256
#define CR__SC_TIER_CONNS 32     /* idle disk-tier read connections kept */
#define CR__SC_TIER_LOCAL 16     /* same-host disk tiers remembered (tier_local.c) */
#define CR__SC_TIER_RINGS 8      /* idle io_uring rings kept for local disk reads */
#define CR__SC_SUSPECT_MAX 16    /* segments remembered as failing (suspect.c) */
#define CR__SC_FS_QUEUE_BYTES (256ull << 20) /* puts waiting to be persisted (tier_fs.c) */
#define CR__SC_SUSPECT_MS 5000   /* how long their replicas are read last */
#define CR__SC_PUT_ATTEMPTS 8    /* placements a put tries around suspect segments (ops.c) */

/* Defaults of cr_store_params_t fields left out of its field_mask, and
 * the bounds create checks (store.h documents them). */
#define CR__SC_DEFAULT_MASTER "127.0.0.1:50051"
#define CR__SC_DEFAULT_LBUF_SIZE (16ull << 20)      /* local staging buffer */
#define CR__SC_DEFAULT_RPC_TIMEOUT_MS 5000
#define CR__SC_DEFAULT_RPC_SPIN_US 50 /* busy-poll budget for a master reply (rpc/client.h) */
/* keys per chunk of a pipelined get (ops.c): a 256-key call is one chunk,
 * whose reads run as 4 TE batches checked in turn; it took 6-14 % less
 * time per call than two chunks of 128 over shm on the 2-vCPU machine (docs/benchmarks.md,
 * issue 16, session of 2026-11-30 12:08) */
#define CR__SC_DEFAULT_GET_CHUNK_KEYS 256
#define CR__SC_DEFAULT_XFER_TIMEOUT_MS 30000
#define CR__SC_DEFAULT_HEARTBEAT_MS 1000
#define CR__SC_SEG_SIZE_MAX (1ull << 40)           /* contributed segment: 1 TiB */
#define CR__SC_LBUF_SIZE_MIN (64ull << 10)         /* staging buffer: 64 KiB.. */
#define CR__SC_LBUF_SIZE_MAX (1ull << 36)          /* ..64 GiB */
#define CR__SC_TIMEOUT_MAX_MS 3600000u             /* any timeout: at most 1 h */
/* Longest a staged put waits for staging space in one step (the put
 * deadline bounds it too). */
#define CR__SC_STAGING_WAIT_MAX_MS 60000

typedef struct cr__sc_reg {
    uintptr_t addr;
    size_t len;
} cr__sc_reg_t;

typedef struct cr__sc_seg {
    char name[CR_XFER_NAME_MAX];
    cr_xfer_segment_t handle;
} cr__sc_seg_t;

struct cr_store {
    /* configuration (immutable after create) */
    char hostname[CR__SC_STR];
    char metadata_uri[CR__SC_STR];
    char master_addr[CR__SC_STR];
    char protocol[CR__SC_STR];
    char devices[CR__SC_STR];
    uint64_t seg_size;
    uint64_t lbuf_size;
    unsigned rpc_timeout_ms;
    unsigned xfer_timeout_ms;
    unsigned stall_ms; /* the engine's stall time (disk-tier reads give up after it too) */
    unsigned hb_ms;
    uint16_t te_port;
    int fresh_name; /* a held segment name fails the create (cr_store_params_t) */
    cr__store_test_hooks_t test_hooks; /* tests only (test_hooks.h); zero otherwise */

    char key_file[CR__SC_STR]; /* "" = environment */
    cr__auth_t *auth;          /* NULL = security off */
    char tls_cert[CR__SC_STR], tls_key[CR__SC_STR], tls_ca[CR__SC_STR]; /* "" = environment */
    struct cr__tls *tls;       /* NULL = TLS off (common/tls) */

    cr_xfer_engine_t *te;
    char seg_name[CR_XFER_NAME_MAX];
    uint8_t *seg_base; /* contributed segment (mmap), NULL for a pure client */
    int seg_shared;    /* seg_base is from cr_xfer_mem_alloc_shared (else mmap) */
    uint8_t *lbuf;     /* staging buffer (mmap) */
    cr__staging_t staging;
    cr__rpc_client_id_t id;

    cr__rpc_client_t *rpc[CR__SC_RPC_CONNS];
    cr__rpc_client_t *hb_rpc; /* heartbeat thread's own connection */

    /* HA (master address "etcd://h1:2379[;h2:2379][/cluster_id]"): the
     * leader is looked up in etcd at create and whenever a call fails or is
     * refused; every master connection follows it. */
    int ha;
    cr__meta_t *etcd;
    char cluster_id[80];
    _Atomic uint32_t epoch;     /* highest leader epoch seen: older ones are refused */
    pthread_mutex_t ha_mu;      /* guards leader, last_resolve_ms; serialises lookups */
    char leader[CR__SC_STR];    /* host:port of the leader the connections use */
    uint64_t last_resolve_ms;

    pthread_t hb_thread;
    int hb_started;
    pthread_mutex_t hb_mu;
    pthread_cond_t hb_cv;
    int hb_stop;       /* guarded by hb_mu */
    atomic_int mounted; /* segment currently mounted (as far as we know) */
    /* the master whose capability key the engine holds (0: none); the
     * heartbeat thread remounts when another master answers (caps on) */
    atomic_ullong cap_master_id;
    atomic_ullong remounts;

    pthread_rwlock_t reg_lock;
    size_t n_regs; /* guarded by reg_lock */
    cr__sc_reg_t regs[CR__SC_REGS_MAX];

    pthread_mutex_t seg_mu;
    size_t n_segs; /* guarded by seg_mu */
    cr__sc_seg_t segs[CR__SC_SEG_CACHE];

    int crc_on;                   /* end-to-end checksums computed and checked */
    /* where keys were last found (loccache.h; ops.c "speculative get") and
     * how its reads went: kept, or dropped for the usual get */
    cr__lc_t lc;
    _Atomic uint64_t spec_kept, spec_dropped;
    /* one-round-trip puts through a space reservation (ops.c, "reserved
     * put"; store/master/reserve.c): resv_on unless CRESCENT_PUT_RESERVE == "0";
     * the current reservation and the one to hand back, guarded by resv_mu */
    int resv_on;
    int pipe_on; /* a reserved batch's commits pipelined (ops.c; CRESCENT_PUT_PIPE=0: off) */
    size_t get_chunk_keys; /* keys per chunk of a pipelined get (CRESCENT_GET_CHUNK_KEYS) */
    pthread_mutex_t resv_mu;
    struct {
        uint64_t id;             /* 0: none */
        char seg[CR_XFER_NAME_MAX];
        uint64_t cur, end;       /* absolute addresses: the next carve, the end */
        uint64_t granule;
        uint64_t write_until_ms; /* monotonic: no write starts at or after */
        uint64_t granted_ms;     /* monotonic: when it was asked for */
        uint8_t cap[CR__RPC_CAP_LEN];
        int has_cap;
    } resv;
    uint64_t resv_back_id, resv_back_cur; /* hand back (next RESERVE): its carve cursor */
    int resv_used;          /* a value was carved since the last idle check (resv_mu) */
    atomic_int resv_busy;   /* reserved puts between their carve and their commit */
    uint64_t resv_retry_ms; /* a RESERVE was refused: none before (resv_mu) */
    uint64_t resv_grant_len; /* the last reservation's length; 0: none yet (resv_mu) */
    uint64_t resv_want;      /* bytes the next RESERVE asks for; 0: the least (ops.c, resv_mu) */
    _Atomic uint64_t crc_errors;  /* replica reads that failed the check */

    /* segments that failed a transfer recently (suspect.c) */
    pthread_mutex_t sus_mu;
    _Atomic uint64_t sus_until_ms; /* latest expiry of any entry */
    struct {
        char name[CR_XFER_NAME_MAX];
        uint64_t until_ms;
    } suspects[CR__SC_SUSPECT_MAX]; /* guarded by sus_mu */
    /* the master reads PutStart's exclusion list (its PING reply says
     * CR__RPC_F_EXCLUDE): the suspect segments go with every PutStart */
    atomic_int master_excl;

    /* extra segments (mount.c): memory the caller mounted besides seg_base */
    pthread_mutex_t extra_mu; /* guards extra[], n_extra, extra_seq; held across their
                                 mount/unmount RPCs (heartbeat remounts too) */
    size_t n_extra;
    uint32_t extra_seq;
    struct {
        char name[CR_XFER_NAME_MAX];
        uintptr_t addr;
        uint64_t len;
    } extra[CR_STORE_EXTRA_SEGMENTS_MAX];

    /* idle connections to nodes' disk tier read servers (tier_read.c) */
    pthread_mutex_t tier_mu;
    int n_tier; /* guarded by tier_mu */
    struct {
        char name[CR_XFER_NAME_MAX];
        int fd;
        unsigned timeout_ms; /* its SO_RCVTIMEO/SO_SNDTIMEO */
    } tier_conns[CR__SC_TIER_CONNS];
    /* same-host disk tiers (tier_local.c); guarded by tier_mu */
    int tier_local_on; /* CRESCENT_TIER_LOCAL != "0" */
    uint64_t tier_read_window; /* value bytes in flight per batch of disk reads */
    unsigned rpc_spin_us; /* busy-poll budget of a master reply (CRESCENT_RPC_SPIN_US) */
    int n_tier_local;
    struct {
        char name[CR_XFER_NAME_MAX];
        int ufd, dfd;      /* the node's connection, its data file; -1: none */
        uint64_t cap;      /* data file bytes the node serves */
        uint64_t retry_ms; /* dfd < 0: do not try to connect before this */
    } tier_local[CR__SC_TIER_LOCAL];
    int n_tier_rings;
    struct io_uring *tier_rings[CR__SC_TIER_RINGS];

    /* shared-file-system tier (tier_fs.c); fs_state and the fds guarded by
     * fs_mu (set once, read without it after fs_state becomes 1) */
    pthread_mutex_t fs_mu;
    _Atomic int fs_state;   /* 0 not asked yet, 1 on, -1 off (master has none) */
    uint64_t fs_retry_ms;   /* fs_state 0 after a failed FS_INFO: not before */
    int fs_dfd, fs_tfd;     /* the tier's directory and its tmp/ */
    _Atomic uint64_t fs_errors; /* files that failed their checks, writes that failed */
    /* the persist queue (tier_fs.c), guarded by fs_mu: encoded objects the
     * persist thread writes and attaches; at most CR__SC_FS_QUEUE_BYTES */
    pthread_cond_t fs_cv;   /* queue changed (work, room, stop) */
    pthread_t fs_thread;
    int fs_thread_on, fs_stop;
    struct cr__sc_fs_job *fs_head, *fs_tail;
    uint64_t fs_q_bytes;
};

/* The calling thread's master connection for requests (client.c). */
cr__rpc_client_t *cr__sc_rpc(cr_store_t *s);
/* 1 if another live thread of the process is numbered onto the calling
 * thread's connection slot (cr__sc_rpc): a call of this thread may then
 * hold up that thread's calls (the speculative get reads only when not). */
int cr__sc_rpc_shared(void);

/* One call; maps transport failures to CR_E_RPC_FAIL. On 0, *reply owns
 * an arena. */
int cr__sc_call(cr_store_t *s, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply);
/* One attempt of req at the current master (no HA retry), running
 * during(arg) once in this thread while the master works on it
 * (cr__rpc_client_call_during). Same returns as cr__sc_call. */
int cr__sc_call_during(cr_store_t *s, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                       void (*during)(void *), void *arg);
/* cr__sc_call_during for a start(arg) that sets copies going (TE batches
 * left in flight): the reply is slept on, never busy-polled, so that the
 * copies get the CPU. */
int cr__sc_call_copying(cr_store_t *s, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                        void (*start)(void *), void *arg);
/* This thread's Transfer Engine batches in flight (ops.c, keyed_start to
 * keyed_done). A master call made while any is in flight sleeps on its
 * reply instead of busy-polling (CRESCENT_RPC_SPIN_US): the copies it
 * overlaps need the CPU the spin would take (on 2 vCPUs a spinning client
 * slowed a 16 KiB save by a fifth, docs/benchmarks.md). */
extern __thread unsigned cr__sc_te_busy;

/* Heartbeat: gives this client's reservations back over c when no value
 * was carved from them since the previous call and no reserved put is in
 * flight (ops.c, "reserved put"). */
void cr__sc_resv_idle(cr_store_t *s, cr__rpc_client_t *c);

/* TE handle of a segment by name (cached). Returns 0 or a negative errno. */
int cr__sc_segment(cr_store_t *s, const char *name, cr_xfer_segment_t *out);

/* suspect.c: remembers the segment behind TE handle h as failing when err
 * is a node failure (timeout, unreachable, reset); cr__sc_suspect says
 * whether a segment is suspect now. */
void cr__sc_suspect_mark(cr_store_t *s, cr_xfer_segment_t h, int err);
/* The same by segment name (a node's disk-tier read server, tier_read.c). */
void cr__sc_suspect_mark_name(cr_store_t *s, const char *segment, int err);
int cr__sc_suspect(cr_store_t *s, const char *segment);
/* 1 if any segment is suspect now (one atomic load). */
int cr__sc_any_suspect(cr_store_t *s);
/* The segments suspect now (at most CR__SC_SUSPECT_MAX = CR__RPC_EXCLUDE_MAX),
 * copied into m's arena: *names gets the array. Returns how many: 0 (with
 * nothing allocated: an atomic load and a clock read) when none is suspect,
 * or on -ENOMEM. */
uint32_t cr__sc_suspect_names(cr_store_t *s, cr__rpc_msg_t *m, const char ***names);

/* 1 if [p, p+len) lies in one user registration. */
int cr__sc_is_registered(cr_store_t *s, const void *p, size_t len);

/* 1 if [addr, addr+len) lies in this client's own contributed segment. */
int cr__sc_is_local(const cr_store_t *s, const char *segment, uint64_t addr, uint64_t len);

/* mount.c: the TE segment name a master segment name lives in (an extra
 * segment "<te name>#<n>" is memory of the TE segment "<te name>"), into
 * out (cap bytes). */
void cr__sc_te_name(const char *segment, char *out, size_t cap);
/* mount.c: remounts every extra segment through c (heartbeat thread, after
 * the master lost them); unmounts them all at teardown (remount = 0). */
void cr__sc_extra_sync(cr_store_t *s, cr__rpc_client_t *c, int remount);
/* mount.c: the name of one mounted extra segment into out, or "" if none. */
void cr__sc_extra_first(cr_store_t *s, char *out, size_t cap);

/* One read of a disk-tier replica (tier_read.c): value bytes [roff,
 * roff+rlen) of (key, version, size) at disk offset disk_off of the node
 * named by segment, into dst (any memory). */
typedef struct cr__sc_tier_rd {
    const char *segment, *key;
    uint32_t key_len;
    uint64_t version, size, disk_off, roff, rlen;
    void *dst;
    int result; /* out: 0, CR_E_OBJECT_NOT_FOUND (the node found the copy
                   bad: a miss), CR_E_TRANSFER_FAIL */
    int crc_known;  /* out: 1 when this process computed the crc32c of the
                       whole value it delivered (same-host path; the read
                       server path with end-to-end checks on) */
    uint32_t crc;   /* out: that crc (equal to the one stored with the object) */
} cr__sc_tier_rd_t;

/* Runs n reads, pipelined per node. Returns 0 or the first error. */
int cr__sc_tier_read_batch(cr_store_t *s, cr__sc_tier_rd_t *rd, size_t n);
/* Closes the idle disk-tier connections (destroy). */
void cr__sc_tier_close_all(cr_store_t *s);

/* tier_local.c: reads the reads of rd[idx[0..m)] (one segment) that this
 * process can read itself because the node runs on this host (tier.h),
 * straight into their dst. Sets result 0 or CR_E_OBJECT_NOT_FOUND (a
 * well-formed object of another key/version: the extent was reused) on
 * the reads it settled; leaves the others (no local path, an I/O error, a
 * torn or corrupted copy, which the node then re-reads, counts and
 * reports) untouched for the read server. */
void cr__sc_tier_local_read(cr_store_t *s, const char *segment, cr__sc_tier_rd_t *rd,
                            const size_t *idx, size_t m);
/* Closes the same-host descriptors and rings (destroy). */
void cr__sc_tier_local_close_all(cr_store_t *s);
/* tier_local.c: the io_uring reader behind both same-host paths: reads
 * rd[idx[j]] from fds[j] (a file of caps[j] bytes; < 0: skipped), all in
 * flight at once (bounded), checking each object as it completes (magic,
 * header crc, key, version, size, value crc32c). Settles the good ones
 * (result 0) and, with stale_miss, well-formed objects of another
 * key/version as CR_E_OBJECT_NOT_FOUND; leaves the rest (result 1).
 * Returns 0, -ENOMEM or -EIO (io_uring broke: reads may still be in
 * flight, their buffers are leaked, never reused). */
int cr__sc_tier_uring_read(cr_store_t *s, cr__sc_tier_rd_t *rd, const size_t *idx, size_t m,
                           const int *fds, const uint64_t *caps, int stale_miss);

/* tier_fs.c: the shared-file-system tier (--root_fs_dir on the master).
 * persist: after PutEnd, encodes every key with ok[i] (value srcs[i],
 * lens[i], version items[i].version) into its own buffer and queues it;
 * the persist thread writes the files and asks the master to attach them
 * (failures are logged and counted: the put itself stands). A full queue
 * makes the caller wait up to its transfer timeout, then that key is not
 * persisted (counted). close: persists what is queued, stops the thread.
 * read: the reads of rd[idx[0..m)] (segment CR__TIER_FS_SEGMENT), in
 * parallel; every read is settled (0 or CR_E_OBJECT_NOT_FOUND: a missing
 * or bad file is a miss, a bad one is counted and reported). */
void cr__sc_fs_persist(cr_store_t *s, const char *const *keys, const void *const *srcs,
                       const size_t *lens, const cr__rpc_item_t *items, const uint8_t *ok,
                       const int *results, size_t n);
void cr__sc_fs_read(cr_store_t *s, cr__sc_tier_rd_t *rd, const size_t *idx, size_t m);
void cr__sc_fs_close(cr_store_t *s);

/* HA: looks the leader up in etcd (at most every 50 ms) and points every
 * master connection at it. Returns 1 if the leader changed, 0 if not, or
 * a negative errno (no leader now, etcd unreachable). No-op without HA. */
int cr__sc_resolve(cr_store_t *s);

/* Moves value bytes [off, off+len) of replica rep to (write) or from local
 * memory (registered, or the staging buffer) and waits (ops.c). Returns 0,
 * CR_E_TRANSFER_FAIL or -ENOMEM. */
/* Installs the capability key a MountSegment reply carries (caps on), if
 * any, in the client's engine. */
void cr__sc_cap_install(cr_store_t *s, const cr__rpc_msg_t *rep);

int cr__sc_replica_io(cr_store_t *s, const cr__rpc_replica_t *rep, uint64_t off, uint64_t len,
                      void *local, int write);

/* Validates a key; returns 0 or CR_E_INVALID_KEY. */
int cr__sc_check_key(const char *key);

#endif
