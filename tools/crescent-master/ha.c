/* crescent-master HA mode (ha.h). */
#include "common/file.h"
#include "ha.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "store/master/ha/elect.h"
#include "store/master/ha/repl.h"

#define COMP "ha"

static struct {
    cr__ha_elect_t *elect;
    cr__ha_repl_t *repl;
    cr__master_t *m;
    cr__ha_journal_t *journal;
    char cid[80];
    pthread_t th;
    int started;
    atomic_int stop, deposed;
    _Atomic uint32_t ready; /* epoch this master serves as leader (0: not) */
    atomic_ullong promotions, last_promotion_ms, refused;
    atomic_ullong unwaited; /* changes acknowledged without a wait (window.c) */
    atomic_int fresh_check; /* still to learn whether the cluster ever had a leader */
    atomic_int up; /* set once started, cleared by quiesce: the RPC and admin
                      servers run before and after; their handlers use g.elect
                      and g.repl only while it is set */
    char endpoints[256];
    char id_dir[4096]; /* --journal_dir ("" without one) */
} g;

/* A master without a state may lead a cluster that never had a leader (no
 * epoch key). Asked by the role thread: etcd may be down at start (the
 * master then serves as a standby, says so once, and keeps asking). */
static void fresh_check(uint64_t now)
{
    static uint64_t next;
    static int said;
    if (now < next)
        return;
    char key[160], *v = NULL;
    cr__ha_key(key, sizeof key, g.cid, "epoch");
    int rc = cr__meta_get(cr__ha_elect_etcd(g.elect), key, &v, NULL);
    free(v);
    if (rc == -ENOENT) {
        cr__ha_shadow_t *empty;
        if (cr__ha_shadow_create(&empty) == 0) {
            cr__ha_repl_adopt_shadow(g.repl, empty);
            atomic_store(&g.fresh_check, 0);
        }
    } else if (rc == 0) {
        atomic_store(&g.fresh_check, 0); /* a leader's snapshot makes it eligible */
    } else {
        if (!said++)
            fprintf(stderr, "crescent-master: etcd %s unreachable (%s): a standby until it "
                            "answers; retrying\n", g.endpoints, cr_strerror(rc));
        next = now + 500;
        return;
    }
    if (said)
        fprintf(stderr, "crescent-master: etcd %s reachable\n", g.endpoints);
}

int master_ha_deposed(void) { return atomic_load(&g.deposed); }

/* This master's identity in the in-sync set: kept in dir/master_id so a
 * master restarted on its journal (a new port) is still the one listed;
 * without a journal a fresh one per process (it has no state to keep). */
static int load_id(const char *dir, char *id, size_t cap)
{
    char path[4200];
    if (dir && *dir) {
        snprintf(path, sizeof path, "%s/master_id", dir);
        FILE *f = fopen(path, "r");
        if (f) {
            int ok = fgets(id, (int)cap, f) != NULL;
            fclose(f);
            id[strcspn(id, "\r\n")] = 0;
            if (ok && strlen(id) == 16 && strspn(id, "0123456789abcdef") == 16)
                return 0;
            CR_LOG_WARN(COMP, "%s is not a master id: making a new one", path);
        }
    }
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x)
        x = cr__now_ns() ^ ((uint64_t)getpid() << 32);
    snprintf(id, cap, "%016" PRIx64, x);
    if (dir && *dir) {
        /* next to the journal: private like it (journal.h) */
        char line[32];
        int n = snprintf(line, sizeof line, "%s\n", id);
        int rc = cr__file_write_atomic(path, line, (size_t)n, 0, 0600);
        if (rc) {
            CR_LOG_ERROR(COMP, "cannot write %s: %s", path, strerror(-rc));
            return -EIO;
        }
    }
    return 0;
}
int master_ha_leading(void) { return atomic_load(&g.ready) != 0; }

/* The last epoch this master led, kept next to its journal (dir/led_epoch):
 * the leader of the newest epoch holds every acknowledged change, which
 * lets it (alone) lead when the in-sync set holds garbage (elect.h). */
static uint32_t load_led_epoch(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/led_epoch", dir);
    FILE *f = fopen(path, "r");
    unsigned long v = 0;
    if (f) {
        if (fscanf(f, "%lu", &v) != 1 || v > UINT32_MAX)
            v = 0;
        fclose(f);
    }
    return (uint32_t)v;
}

/* Written (and synced) before the first request of the epoch is served. */
static int save_led_epoch(const char *dir, uint32_t epoch)
{
    char path[4200], line[16];
    snprintf(path, sizeof path, "%s/led_epoch", dir);
    int n = snprintf(line, sizeof line, "%u\n", epoch);
    int rc = cr__file_write_atomic(path, line, (size_t)n, 1, 0600);
    if (rc) {
        CR_LOG_ERROR(COMP, "cannot write %s: %s", path, strerror(-rc));
        return -EIO;
    }
    return 0;
}

static void become_leader(uint32_t epoch)
{
    uint64_t t0 = cr__now_ms(), n = 0;
    cr__ha_repl_fence(g.repl, epoch);
    int rc = cr__master_restore(g.m, cr__ha_repl_shadow(g.repl), cr__now_ms(), &n);
    if (!rc) {
        cr__master_set_journal(g.m, cr__ha_repl_record, g.repl);
        /* the local journal starts from this state: a whole one */
        if (g.journal)
            rc = cr__ha_journal_compact(g.journal, g.m, 1);
    }
    if (!rc && g.journal && g.id_dir[0])
        rc = save_led_epoch(g.id_dir, epoch);
    if (!rc)
        rc = cr__ha_repl_lead(g.repl, g.m, epoch, cr__ha_elect_etcd(g.elect), g.cid);
    if (!rc)
        cr__master_windows(g.m, 1); /* small PutStarts wait for nobody (window.c) */
    if (rc) {
        CR_LOG_ERROR(COMP, "cannot take over as leader of epoch %u: %s", epoch, cr_strerror(rc));
        cr__ha_elect_resign(g.elect);
        atomic_store(&g.deposed, 1);
        kill(getpid(), SIGUSR1);
        return;
    }
    cr__master_caps_epoch(g.m, epoch); /* capabilities carry it: nodes fence older ones */
    uint64_t ms = cr__now_ms() - t0;
    atomic_store(&g.last_promotion_ms, ms);
    atomic_fetch_add(&g.promotions, 1);
    atomic_store(&g.ready, epoch);
    CR_LOG_WARN(COMP, "leader of epoch %u: %" PRIu64 " objects taken over in %" PRIu64 " ms",
                epoch, n, ms);
}

static void *role_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&g.stop)) {
        uint64_t now = cr__now_ms();
        uint32_t e = cr__ha_elect_epoch(g.elect, now);
        uint32_t ready = atomic_load(&g.ready);
        cr__ha_repl_stats_t st;
        cr__ha_repl_stats(g.repl, &st);
        if (!ready && atomic_load(&g.fresh_check)) {
            fresh_check(now);
        } else if (!ready) {
            cr__ha_elect_set_eligible(g.elect, st.usable);
            if (e)
                become_leader(e);
        } else if (e != ready || st.deposed) {
            CR_LOG_WARN(COMP, "leadership of epoch %u lost (%s): stopping to restart as a standby",
                        ready, st.deposed ? "a standby knows a newer epoch" : "lease");
            atomic_store(&g.ready, 0);
            /* from here on nothing this master does is a change anyone was
             * told about: the journal it restarts on ends here (its clients,
             * refused while it stops, must not be expired into it) */
            cr__master_set_journal(g.m, NULL, NULL);
            cr__ha_elect_resign(g.elect);
            atomic_store(&g.deposed, 1);
            kill(getpid(), SIGUSR1);
            break;
        }
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int master_ha_start(const master_ha_cfg_t *cfg, cr__master_t *m)
{
    g.m = m;
    g.journal = cfg->journal;
    snprintf(g.cid, sizeof g.cid, "%s", cfg->cluster_id);
    char id[CR__HA_ID_MAX];
    int rc = load_id(cfg->id_dir, id, sizeof id);
    if (rc)
        return rc;
    rc = cr__ha_repl_create(cfg->rpc_addr, id, cfg->journal, cfg->sync_timeout_ms, &g.repl);
    if (rc)
        return rc;
    cr__ha_repl_set_auth(g.repl, cfg->auth);
    cr__ha_repl_set_tls(g.repl, cfg->tls);
    /* A deposed leader keeps its journal like a master restarted after a
     * crash: it holds every change it acknowledged (synced before each
     * acknowledgement), maybe some it did not (their callers were told the
     * change failed: in doubt either way). Whether it may lead again is the
     * in-sync set's decision, as for any restarted master: only a listed one
     * campaigns, so a deposed leader that was the set's only member leads
     * again once etcd is back, and one that was replaced (the winner's
     * campaign made the set the winner alone) waits for the new leader's
     * snapshot. (Before, it started empty and a cluster whose only in-sync
     * master lost its lease stayed leaderless.) */
    int deposed = getenv("CRESCENT_MASTER_HA_DEPOSED") != NULL;
    unsetenv("CRESCENT_MASTER_HA_DEPOSED");
    int usable = 0;
    cr__ha_journal_stats_t js = {0};
    if (cfg->journal)
        cr__ha_journal_stats(cfg->journal, &js);
    /* a journal holds a whole state once it holds anything: a leader
     * writes a snapshot when it takes over, a standby its first one */
    if (cfg->loaded && js.file_bytes > 0) {
        cr__ha_repl_adopt_shadow(g.repl, cfg->loaded); /* a whole state */
        usable = 1;
        if (deposed)
            CR_LOG_WARN(COMP, "restarted after losing leadership: keeping the journal (%" PRIu64
                              " bytes); campaigning only while the in-sync set lists this master",
                        js.file_bytes);
    } else {
        cr__ha_shadow_destroy(cfg->loaded);
    }
    snprintf(g.id_dir, sizeof g.id_dir, "%s", cfg->id_dir ? cfg->id_dir : "");
    cr__ha_elect_params_t ep = {
        .endpoints = cfg->endpoints,
        .cluster_id = cfg->cluster_id,
        .rpc_address = cfg->rpc_addr,
        .admin_address = cfg->admin_addr,
        .id = id,
        .lease_ttl_s = cfg->lease_ttl_s,
        .eligible = 0,
        /* only with the journal it made: a master that starts empty holds nothing */
        .led_epoch = usable && g.id_dir[0] ? load_led_epoch(g.id_dir) : 0,
        .tls = cfg->tls,
    };
    if ((rc = cr__ha_elect_start(&ep, &g.elect)))
        return rc;
    if (!usable) {
        cr__ha_repl_reset(g.repl); /* not eligible until a leader's snapshot... */
        /* ...or, found by the role thread once etcd answers, a cluster that
         * never had a leader (an empty master may lead only that one) */
        atomic_store(&g.fresh_check, !deposed);
        snprintf(g.endpoints, sizeof g.endpoints, "%s", cfg->endpoints);
    }
    if (pthread_create(&g.th, NULL, role_main, NULL))
        return -ENOMEM;
    g.started = 1;
    atomic_store(&g.up, 1);
    return 0;
}

void master_ha_quiesce(void)
{
    atomic_store(&g.up, 0);
    atomic_store(&g.stop, 1);
    atomic_store(&g.ready, 0);
    if (g.m) /* stopping: nothing more goes into the journal it restarts on */
        cr__master_set_journal(g.m, NULL, NULL);
    if (g.elect)
        cr__ha_elect_resign(g.elect); /* no request served from here on */
}

void master_ha_stop(void)
{
    atomic_store(&g.stop, 1);
    if (g.started)
        pthread_join(g.th, NULL);
    g.started = 0;
    if (g.repl)
        cr__ha_repl_unlead(g.repl);
    if (g.m)
        cr__master_set_journal(g.m, NULL, NULL);
    cr__ha_elect_stop(g.elect);
    cr__ha_repl_destroy(g.repl);
    g.elect = NULL;
    g.repl = NULL;
}

static void fail_reply(cr__rpc_msg_t *reply, int status)
{
    uint16_t type = reply->type;
    uint64_t id = reply->req_id;
    cr__rpc_msg_free(reply); /* zeroes it */
    reply->type = type;
    reply->req_id = id;
    reply->status = status;
}

void master_ha_handle(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply)
{
    uint16_t type = req->type & (uint16_t)~CR__RPC_REPLY;
    if (type == CR__RPC_REPL_APPEND) {
        uint64_t applied = 0;
        if (!atomic_load(&g.up)) {
            reply->status = CR_E_UNAVAILABLE_IN_CURRENT_STATUS; /* busy: the leader retries */
            return;
        }
        int rc = cr__ha_repl_apply(g.repl, req->epoch, req->flags, req->count, req->blob,
                                   req->blob_len, &applied);
        /* UNAVAILABLE_IN_CURRENT_MODE + a newer epoch tells the sender it is deposed */
        reply->status = rc == 0           ? 0
                        : rc == -ESTALE   ? CR_E_UNAVAILABLE_IN_CURRENT_MODE
                        : rc == -EBUSY    ? CR_E_UNAVAILABLE_IN_CURRENT_STATUS
                                          : CR_E_INVALID_PARAMS;
        reply->epoch = rc == -ESTALE ? cr__ha_repl_floor(g.repl) : 0;
        reply->count = applied;
        return;
    }
    uint64_t now = cr__now_ms();
    uint32_t e = atomic_load(&g.up) ? cr__ha_elect_epoch(g.elect, now) : 0;
    if (!e || e != atomic_load(&g.ready) || req->epoch > e) {
        /* not the leader (or no longer): the client looks the leader up */
        atomic_fetch_add(&g.refused, 1);
        reply->status = CR_E_UNAVAILABLE_IN_CURRENT_MODE;
        return;
    }
    uint64_t mark = cr__ha_repl_mark(g.repl);
    cr__master_wait_reset();
    cr__master_handle(m, req, reply, now);
    /* acknowledged only once every in-sync standby has it, and only while
     * still the leader (a change made under a lease that ran out during
     * the wait is reported as failed: it may or may not survive). A
     * PutStart carved from allocation windows the standbys know waits for
     * nobody (window.c); its PutEnd waits, and the stream is ordered. */
    int failed = 0;
    if (!cr__master_wait_needed()) {
        if (cr__master_changed())
            atomic_fetch_add(&g.unwaited, 1); /* a change, carved from known windows */
    } else {
        uint64_t gen = cr__master_win_gen(m); /* windows opened before the wait's target */
        /* a retried PutEnd / PUT_COMMIT answered "done" changed nothing
         * itself: wait for every record so far, the one that made the
         * change among them (mark 0) */
        failed = cr__ha_repl_wait(g.repl, cr__master_wait_prior() ? 0 : mark) != 0;
        if (failed)
            fail_reply(reply, CR_E_INTERNAL_ERROR);
        else
            cr__master_win_confirm(m, gen);
    }
    if (!failed && cr__ha_elect_epoch(g.elect, cr__now_ms()) != e)
        fail_reply(reply, CR_E_UNAVAILABLE_IN_CURRENT_MODE);
    reply->epoch = e;
}

/* ---- admin ------------------------------------------------------------------------ */

int master_ha_admin(const cr__http_req_t *req, cr__http_resp_t *resp)
{
    if (!atomic_load(&g.up))
        return 0;
    cr__ha_elect_status_t es;
    cr__ha_elect_status(g.elect, cr__now_ms(), &es);
    int leader = atomic_load(&g.ready) != 0 && es.leader;
    if (!strcmp(req->path, "/role")) {
        cr__http_resp_printf(resp, 200, "%s\n", leader ? "leader" : "standby");
        return 1;
    }
    if (!strcmp(req->path, "/leader")) {
        if (es.leader_rpc[0])
            cr__http_resp_printf(resp, 200, "{\"rpc\":\"%s\",\"admin\":\"%s\",\"epoch\":%u}\n",
                                 es.leader_rpc, es.leader_admin, es.epoch);
        else
            cr__http_resp_printf(resp, 503, "{\"error\":\"no leader\"}\n");
        return 1;
    }
    if (!strcmp(req->path, "/ha_status")) {
        cr__ha_repl_stats_t rs;
        cr__ha_repl_stats(g.repl, &rs);
        cr__http_resp_printf(
            resp, 200,
            "{\"role\":\"%s\",\"epoch\":%u,\"leader\":\"%s\",\"lease_left_ms\":%" PRIu64
            ",\"etcd_reachable\":%s,\"elections_won\":%" PRIu64 ",\"campaigns\":%" PRIu64
            ",\"leadership_lost\":%" PRIu64 ",\"garbage_keys\":%" PRIu64
            ",\"campaigns_skipped_not_in_sync_set\":%" PRIu64 ",\"insync_key_garbage\":%" PRIu64
            ",\"promotions\":%llu,\"last_promotion_ms\":%llu,\"seq\":%" PRIu64
            ",\"standbys\":%u,\"standbys_in_sync\":%u,\"max_lag_records\":%" PRIu64
            ",\"sync_timeouts\":%" PRIu64 ",\"snapshots_sent\":%" PRIu64
            ",\"state_usable\":%s,\"refused_requests\":%llu,\"unwaited_changes\":%llu"
            ",\"waits\":%" PRIu64 ",\"wait_us_total\":%" PRIu64 ",\"records_sent\":%" PRIu64
            ",\"appends_sent\":%" PRIu64 "}\n",
            leader ? "leader" : "standby", es.epoch, es.leader_rpc, es.lease_left_ms,
            es.etcd_reachable ? "true" : "false", es.elections_won, es.campaigns,
            es.leadership_lost, es.garbage_keys, es.not_in_sync_set, es.insync_garbage,
            (unsigned long long)atomic_load(&g.promotions),
            (unsigned long long)atomic_load(&g.last_promotion_ms), rs.seq, rs.followers,
            rs.in_sync, rs.max_lag_records, rs.sync_timeouts, rs.snapshots_sent,
            rs.usable ? "true" : "false", (unsigned long long)atomic_load(&g.refused),
            (unsigned long long)atomic_load(&g.unwaited), rs.waits, rs.wait_us_total,
            rs.records_sent, rs.appends_sent);
        return 1;
    }
    return 0;
}

char *master_ha_metrics(void)
{
    if (!atomic_load(&g.up))
        return NULL;
    cr__ha_elect_status_t es;
    cr__ha_elect_status(g.elect, cr__now_ms(), &es);
    cr__ha_repl_stats_t rs;
    cr__ha_repl_stats(g.repl, &rs);
    char *out = NULL;
#define HA_M(name, type, help) "# HELP crescent_master_" name " " help "\n# TYPE crescent_master_" name " " type "\ncrescent_master_" name
    int n = asprintf(
        &out,
        HA_M("ha_is_leader", "gauge", "1 while this master serves as the leader") " %d\n"
        HA_M("ha_epoch", "gauge", "Leader epoch (this master's when leader, else the last seen)") " %u\n"
        HA_M("ha_elections_won_total", "counter", "Elections this master won") " %" PRIu64 "\n"
        HA_M("ha_campaigns_total", "counter", "Campaign transactions tried") " %" PRIu64 "\n"
        HA_M("ha_leadership_lost_total", "counter", "Times this master stopped leading (lease, key, etcd)") " %" PRIu64 "\n"
        HA_M("ha_failovers_total", "counter", "Takeovers: a standby's state became the live index") " %llu\n"
        HA_M("ha_takeover_ms", "gauge", "Duration of the last takeover (restore of the index)") " %llu\n"
        HA_M("ha_etcd_errors_total", "counter", "etcd requests that failed") " %" PRIu64 "\n"
        HA_M("ha_standbys", "gauge", "Standbys the leader streams to") " %u\n"
        HA_M("ha_standbys_in_sync", "gauge", "Standbys every acknowledged change waits for") " %u\n"
        HA_M("ha_replication_lag_records", "gauge", "Records the most behind in-sync standby lacks") " %" PRIu64 "\n"
        HA_M("ha_sync_timeouts_total", "counter", "Standbys dropped out of sync by a wait timeout") " %" PRIu64 "\n"
        HA_M("ha_snapshots_sent_total", "counter", "Snapshots sent to standbys") " %" PRIu64 "\n"
        HA_M("ha_replicated_records_total", "counter", "Op records streamed to standbys") " %" PRIu64 "\n"
        HA_M("ha_refused_requests_total", "counter", "Requests refused because this master was not the leader") " %llu\n"
        HA_M("ha_unwaited_changes_total", "counter", "Changes acknowledged without waiting for the standbys (PutStarts carved from known allocation windows)") " %llu\n"
        HA_M("ha_waits_total", "counter", "Acknowledgements that waited for the standbys") " %" PRIu64 "\n"
        HA_M("ha_wait_seconds_total", "counter", "Time acknowledgements spent waiting for the standbys") " %.6f\n"
        HA_M("ha_appends_total", "counter", "Log appends the standbys acknowledged (records per append: the batching)") " %" PRIu64 "\n",
        atomic_load(&g.ready) != 0 && es.leader, es.epoch, es.elections_won, es.campaigns,
        es.leadership_lost, (unsigned long long)atomic_load(&g.promotions),
        (unsigned long long)atomic_load(&g.last_promotion_ms), es.etcd_errors, rs.followers,
        rs.in_sync, rs.max_lag_records, rs.sync_timeouts, rs.snapshots_sent, rs.records_sent,
        (unsigned long long)atomic_load(&g.refused), (unsigned long long)atomic_load(&g.unwaited),
        rs.waits, (double)rs.wait_us_total / 1e6, rs.appends_sent);
#undef HA_M
    return n < 0 ? NULL : out;
}
