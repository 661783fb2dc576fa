/* Leader election and fencing on etcd (elect.h). */
#include "store/master/ha/elect.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"

#define COMP "ha-elect"
#define CID_MAX 64

struct cr__ha_elect {
    cr__meta_t *etcd;
    char cid[CID_MAX + 1];
    char rpc[CR__HA_ADDR_MAX], admin[CR__HA_ADDR_MAX];
    char id[CR__HA_ID_MAX];
    unsigned ttl_s;
    uint32_t not_listed_logged; /* epoch of the in-sync set last logged as excluding us */
    int64_t garbage_logged;     /* mod revision of the garbage in-sync key last logged */
    uint32_t led_epoch;         /* guarded by mu: the last epoch this master led (its
                                   journal holds every change acknowledged in it) */
    pthread_t th;
    pthread_mutex_t mu; /* guards st, stop, lease ids, eligible, resign */
    pthread_cond_t cv;
    int stop, eligible, resign;
    int64_t lease, member_lease;
    cr__ha_elect_status_t st;
    /* read per request without the lock */
    _Atomic uint32_t epoch;
    _Atomic uint64_t valid_until_ms;
};

void cr__ha_key(char *buf, size_t cap, const char *cid, const char *leaf)
{
    snprintf(buf, cap, "/crescent/%s/master/%s", cid, leaf);
}

static int cid_ok(const char *c)
{
    size_t n = strlen(c);
    if (n == 0 || n > CID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((c[i] >= 'a' && c[i] <= 'z') || (c[i] >= 'A' && c[i] <= 'Z') ||
              (c[i] >= '0' && c[i] <= '9') || c[i] == '_' || c[i] == '.' || c[i] == '-'))
            return 0;
    return 1;
}

int cr__ha_parse_master_uri(const char *s, char *uri, size_t uri_cap, char *cid, size_t cid_cap)
{
    if (!s)
        return -EINVAL;
    if (!strncmp(s, "etcd://", 7))
        s += 7;
    const char *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);
    if (n == 0 || n + 8 > uri_cap)
        return -EINVAL;
    memcpy(uri, "etcd://", 7);
    for (size_t i = 0; i < n; i++)
        uri[7 + i] = s[i] == ';' ? ',' : s[i];
    uri[7 + n] = 0;
    const char *c = slash && slash[1] ? slash + 1 : "crescent";
    if (!cid_ok(c) || strlen(c) >= cid_cap)
        return -EINVAL;
    snprintf(cid, cid_cap, "%s", c);
    return 0;
}

/* ---- etcd calls ------------------------------------------------------------ */

/* POSTs and parses the JSON answer. Returns 0 and *out, or a negative errno
 * (-EIO for an HTTP error or malformed JSON). */
static int post_m(cr__meta_t *m, const char *api, json_t *body, json_t **out)
{
    char *req = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!req)
        return -ENOMEM;
    char *resp = NULL;
    size_t len = 0;
    int st = cr__meta_etcd_post(m, api, req, &resp, &len);
    free(req);
    if (st < 0)
        return st;
    json_t *j = st == 200 ? json_loadb(resp, len, 0, NULL) : NULL;
    if (!j)
        CR_LOG_WARN(COMP, "etcd %s: HTTP %d %.200s", api, st, resp ? resp : "");
    free(resp);
    if (!j)
        return -EIO;
    *out = j;
    return 0;
}

static int post(cr__ha_elect_t *e, const char *api, json_t *body, json_t **out)
{
    return post_m(e->etcd, api, body, out);
}

static json_t *b64(const char *s, size_t n)
{
    char *x = cr__b64_encode(s, n);
    json_t *j = x ? json_string(x) : NULL;
    free(x);
    return j;
}

/* int64 fields come as JSON strings from the gateway */
static int64_t jint(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (json_is_string(v))
        return strtoll(json_string_value(v), NULL, 10);
    if (json_is_integer(v))
        return (int64_t)json_integer_value(v);
    return 0;
}

typedef struct kv {
    int found;
    char *value; /* decoded, malloc'd */
    size_t len;
    int64_t mod_rev, lease;
} kv_t;

static int range(cr__ha_elect_t *e, cr__meta_t *m, const char *key, kv_t *kv)
{
    memset(kv, 0, sizeof *kv);
    json_t *out, *body = json_object();
    json_object_set_new(body, "key", b64(key, strlen(key)));
    int rc = e ? post(e, "/v3/kv/range", body, &out) : -EINVAL;
    if (!e) {
        /* client side: same call on a caller's handle */
        char *req = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        char *resp = NULL;
        size_t len = 0;
        int st = req ? cr__meta_etcd_post(m, "/v3/kv/range", req, &resp, &len) : -ENOMEM;
        free(req);
        if (st < 0)
            return st;
        out = st == 200 ? json_loadb(resp, len, 0, NULL) : NULL;
        free(resp);
        rc = out ? 0 : -EIO;
    }
    if (rc)
        return rc;
    json_t *kvs = json_object_get(out, "kvs");
    json_t *k0 = json_is_array(kvs) ? json_array_get(kvs, 0) : NULL;
    if (json_is_object(k0)) {
        kv->found = 1;
        json_t *v = json_object_get(k0, "value");
        const char *vs = json_is_string(v) ? json_string_value(v) : "";
        if (cr__b64_decode(vs, strlen(vs), &kv->value, &kv->len))
            kv->value = NULL;
        kv->mod_rev = jint(k0, "mod_revision");
        kv->lease = jint(k0, "lease");
    }
    json_decref(out);
    return 0;
}

static int lease_grant(cr__ha_elect_t *e, int64_t *id)
{
    json_t *out, *body = json_object();
    json_object_set_new(body, "TTL", json_integer(e->ttl_s));
    int rc = post(e, "/v3/lease/grant", body, &out);
    if (rc)
        return rc;
    *id = jint(out, "ID");
    json_decref(out);
    return *id ? 0 : -EIO;
}

/* Returns the TTL left (> 0), 0 if the lease is gone, or a negative errno. */
static int64_t lease_keepalive(cr__ha_elect_t *e, int64_t id)
{
    char ids[32];
    snprintf(ids, sizeof ids, "%" PRId64, id);
    json_t *out, *body = json_object();
    json_object_set_new(body, "ID", json_string(ids));
    int rc = post(e, "/v3/lease/keepalive", body, &out);
    if (rc)
        return rc;
    int64_t ttl = jint(json_object_get(out, "result"), "TTL");
    json_decref(out);
    return ttl > 0 ? ttl : 0;
}

static void lease_revoke(cr__ha_elect_t *e, int64_t id)
{
    char ids[32];
    snprintf(ids, sizeof ids, "%" PRId64, id);
    json_t *out, *body = json_object();
    json_object_set_new(body, "ID", json_string(ids));
    if (post(e, "/v3/lease/revoke", body, &out) == 0)
        json_decref(out);
}

static json_t *cmp(const char *key, const char *target, int64_t v)
{
    char vs[32];
    snprintf(vs, sizeof vs, "%" PRId64, v);
    json_t *c = json_object();
    json_object_set_new(c, "key", b64(key, strlen(key)));
    json_object_set_new(c, "result", json_string("EQUAL"));
    json_object_set_new(c, "target", json_string(target));
    json_object_set_new(c, !strcmp(target, "CREATE") ? "create_revision" : "mod_revision",
                        json_string(vs));
    return c;
}

static json_t *op_put(const char *key, const char *val, int64_t lease)
{
    json_t *p = json_object();
    json_object_set_new(p, "key", b64(key, strlen(key)));
    json_object_set_new(p, "value", b64(val, strlen(val)));
    if (lease) {
        char ls[32];
        snprintf(ls, sizeof ls, "%" PRId64, lease);
        json_object_set_new(p, "lease", json_string(ls));
    }
    json_t *op = json_object();
    json_object_set_new(op, "request_put", p);
    return op;
}

static json_t *op_del(const char *key)
{
    json_t *p = json_object();
    json_object_set_new(p, "key", b64(key, strlen(key)));
    json_t *op = json_object();
    json_object_set_new(op, "request_delete_range", p);
    return op;
}

/* Returns 1 if the txn succeeded, 0 if a compare failed, < 0 on error. */
static int txn_m(cr__meta_t *m, json_t *compare, json_t *success)
{
    json_t *out, *body = json_object();
    json_object_set_new(body, "compare", compare);
    json_object_set_new(body, "success", success);
    int rc = post_m(m, "/v3/kv/txn", body, &out);
    if (rc)
        return rc;
    int ok = json_is_true(json_object_get(out, "succeeded"));
    json_decref(out);
    return ok;
}

static int txn(cr__ha_elect_t *e, json_t *compare, json_t *success)
{
    return txn_m(e->etcd, compare, success);
}

/* ---- the in-sync set ---------------------------------------------------------- */

/* {"epoch":N,"members":["id",...]}: the masters that hold every change the
 * leader of epoch N acknowledged. */
static char *insync_value(uint32_t epoch, const char *const *ids, int n)
{
    json_t *j = json_object(), *a = json_array();
    json_object_set_new(j, "epoch", json_integer(epoch));
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_string(ids[i]));
    json_object_set_new(j, "members", a);
    char *v = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return v;
}

/* Is id listed in the in-sync value v? -1 if v is not an in-sync set. */
static int insync_lists(const char *v, size_t len, const char *id, uint32_t *epoch)
{
    json_t *j = v ? json_loadb(v, len, 0, NULL) : NULL;
    json_t *a = json_object_get(j, "members"), *ep = json_object_get(j, "epoch");
    int r = -1;
    if (json_is_array(a) && json_is_integer(ep)) {
        *epoch = (uint32_t)json_integer_value(ep);
        r = 0;
        for (size_t i = 0; i < json_array_size(a); i++) {
            json_t *x = json_array_get(a, i);
            if (json_is_string(x) && !strcmp(json_string_value(x), id))
                r = 1;
        }
    }
    json_decref(j);
    return r;
}

static json_t *cmp_value(const char *key, const char *val)
{
    json_t *c = json_object();
    json_object_set_new(c, "key", b64(key, strlen(key)));
    json_object_set_new(c, "result", json_string("EQUAL"));
    json_object_set_new(c, "target", json_string("VALUE"));
    json_object_set_new(c, "value", b64(val, strlen(val)));
    return c;
}

static json_t *op_put(const char *key, const char *val, int64_t lease);

int cr__ha_insync_publish(cr__meta_t *m, const char *cluster_id, uint32_t epoch,
                          const char *const *ids, int n)
{
    char ikey[160], ekey[160], es[32];
    cr__ha_key(ikey, sizeof ikey, cluster_id, "insync");
    cr__ha_key(ekey, sizeof ekey, cluster_id, "epoch");
    snprintf(es, sizeof es, "%u", epoch);
    char *v = insync_value(epoch, ids, n);
    if (!v)
        return -ENOMEM;
    json_t *c = json_array(), *s = json_array();
    json_array_append_new(c, cmp_value(ekey, es)); /* only while epoch is the newest */
    json_array_append_new(s, op_put(ikey, v, 0));
    free(v);
    int rc = txn_m(m, c, s);
    return rc == 1 ? 0 : rc == 0 ? -ESTALE : rc;
}

int cr__ha_insync_check(cr__meta_t *m, const char *cluster_id)
{
    char ikey[160];
    cr__ha_key(ikey, sizeof ikey, cluster_id, "insync");
    kv_t kv;
    int rc = range(NULL, m, ikey, &kv);
    if (rc)
        return rc;
    uint32_t ep = 0;
    rc = !kv.found ? -ENOENT : insync_lists(kv.value, kv.len, "", &ep) < 0 ? -EBADMSG : 0;
    free(kv.value);
    return rc;
}

/* ---- the leader key ---------------------------------------------------------- */

/* Parses {"rpc":..,"admin":..,"epoch":N}. Returns 0 or -EBADMSG. */
static int parse_leader(const char *v, size_t len, char *rpc, size_t cap, char *admin,
                        size_t acap, uint32_t *epoch)
{
    json_t *j = v ? json_loadb(v, len, 0, NULL) : NULL;
    json_t *r = json_object_get(j, "rpc"), *a = json_object_get(j, "admin");
    json_t *ep = json_object_get(j, "epoch");
    int ok = json_is_string(r) && json_string_length(r) > 0 && json_string_length(r) < cap &&
             json_is_integer(ep) && json_integer_value(ep) > 0 &&
             json_integer_value(ep) <= UINT32_MAX;
    if (ok) {
        snprintf(rpc, cap, "%s", json_string_value(r));
        if (admin)
            snprintf(admin, acap, "%s", json_is_string(a) ? json_string_value(a) : "");
        *epoch = (uint32_t)json_integer_value(ep);
    }
    json_decref(j);
    return ok ? 0 : -EBADMSG;
}

int cr__ha_leader_lookup(cr__meta_t *m, const char *cluster_id, char *rpc, size_t cap,
                         uint32_t *epoch)
{
    char key[160];
    cr__ha_key(key, sizeof key, cluster_id, "leader");
    kv_t kv;
    int rc = range(NULL, m, key, &kv);
    if (rc)
        return rc;
    if (!kv.found)
        return -ENOENT;
    rc = parse_leader(kv.value, kv.len, rpc, cap, NULL, 0, epoch);
    free(kv.value);
    return rc;
}

int cr__ha_members(cr__meta_t *m, const char *cluster_id, char (*addrs)[CR__HA_ADDR_MAX],
                   char (*ids)[CR__HA_ID_MAX], int max)
{
    char prefix[160];
    cr__ha_key(prefix, sizeof prefix, cluster_id, "members/");
    size_t pl = strlen(prefix);
    char end[160];
    memcpy(end, prefix, pl + 1);
    end[pl - 1]++; /* '/' + 1: the end of the prefix range */
    json_t *body = json_object();
    json_object_set_new(body, "key", b64(prefix, pl));
    json_object_set_new(body, "range_end", b64(end, pl));
    char *req = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    char *resp = NULL;
    size_t len = 0;
    int st = req ? cr__meta_etcd_post(m, "/v3/kv/range", req, &resp, &len) : -ENOMEM;
    free(req);
    if (st < 0)
        return st;
    json_t *out = st == 200 ? json_loadb(resp, len, 0, NULL) : NULL;
    free(resp);
    if (!out)
        return -EIO;
    json_t *kvs = json_object_get(out, "kvs");
    int n = 0;
    for (size_t i = 0; json_is_array(kvs) && i < json_array_size(kvs) && n < max; i++) {
        json_t *v = json_object_get(json_array_get(kvs, i), "value");
        char *val = NULL;
        size_t vl = 0;
        if (!json_is_string(v) ||
            cr__b64_decode(json_string_value(v), json_string_length(v), &val, &vl))
            continue;
        json_t *j = json_loadb(val, vl, 0, NULL);
        json_t *r = json_object_get(j, "rpc"), *id = json_object_get(j, "id");
        if (json_is_string(r) && json_string_length(r) > 0 &&
            json_string_length(r) < CR__HA_ADDR_MAX && json_is_string(id) &&
            json_string_length(id) < CR__HA_ID_MAX) {
            if (ids)
                snprintf(ids[n], CR__HA_ID_MAX, "%s", json_string_value(id));
            snprintf(addrs[n++], CR__HA_ADDR_MAX, "%s", json_string_value(r));
        }
        json_decref(j);
        free(val);
    }
    json_decref(out);
    return n;
}

/* ---- the thread ------------------------------------------------------------------ */

static uint64_t margin_ms(const cr__ha_elect_t *e)
{
    uint64_t t = (uint64_t)e->ttl_s * 1000;
    return t / 5 > 200 ? t / 5 : 200;
}

static void step_down(cr__ha_elect_t *e, const char *why)
{
    atomic_store(&e->valid_until_ms, 0);
    pthread_mutex_lock(&e->mu);
    int was = e->st.leader;
    e->st.leader = 0;
    e->st.leader_rpc[0] = 0;
    if (was)
        e->st.leadership_lost++;
    int64_t lease = e->lease;
    e->lease = 0;
    pthread_mutex_unlock(&e->mu);
    if (was)
        CR_LOG_WARN(COMP, "no longer the leader of epoch %u: %s", atomic_load(&e->epoch), why);
    if (lease)
        lease_revoke(e, lease);
}

static void etcd_failed(cr__ha_elect_t *e, int rc)
{
    pthread_mutex_lock(&e->mu);
    if (e->st.etcd_reachable)
        CR_LOG_WARN(COMP, "etcd unreachable (%s); retrying", strerror(-rc));
    e->st.etcd_reachable = 0;
    e->st.etcd_errors++;
    pthread_mutex_unlock(&e->mu);
}

static void etcd_ok(cr__ha_elect_t *e)
{
    pthread_mutex_lock(&e->mu);
    if (!e->st.etcd_reachable)
        CR_LOG_INFO(COMP, "etcd reachable");
    e->st.etcd_reachable = 1;
    pthread_mutex_unlock(&e->mu);
}

/* Keeps this master's member key alive (standbys are found through it). */
static void member_tick(cr__ha_elect_t *e)
{
    char key[600], val[600];
    char leaf[CR__HA_ADDR_MAX + 16];
    snprintf(leaf, sizeof leaf, "members/%s", e->rpc);
    cr__ha_key(key, sizeof key, e->cid, leaf);
    if (e->member_lease) {
        int64_t t = lease_keepalive(e, e->member_lease);
        if (t > 0)
            return;
        e->member_lease = 0;
    }
    if (lease_grant(e, &e->member_lease))
        return;
    snprintf(val, sizeof val, "{\"rpc\":\"%s\",\"admin\":\"%s\",\"id\":\"%s\"}", e->rpc,
             e->admin, e->id);
    json_t *c = json_array(), *s = json_array();
    json_array_append_new(s, op_put(key, val, e->member_lease));
    txn(e, c, s);
}

/* One round as a candidate. */
static void candidate_tick(cr__ha_elect_t *e, const char *lkey, const char *ekey)
{
    kv_t kv;
    int rc = range(e, NULL, lkey, &kv);
    if (rc) {
        etcd_failed(e, rc);
        return;
    }
    etcd_ok(e);
    if (kv.found) {
        char rpc[CR__HA_ADDR_MAX], admin[CR__HA_ADDR_MAX];
        uint32_t ep;
        int bad = parse_leader(kv.value, kv.len, rpc, sizeof rpc, admin, sizeof admin, &ep);
        if (bad || kv.lease == 0) {
            pthread_mutex_lock(&e->mu);
            e->st.garbage_keys++;
            pthread_mutex_unlock(&e->mu);
            if (kv.lease == 0) {
                CR_LOG_WARN(COMP, "%s holds %s without a lease (nobody's campaign): deleting it",
                            lkey, bad ? "garbage" : "a leader");
                json_t *c = json_array(), *s = json_array();
                json_array_append_new(c, cmp(lkey, "MOD", kv.mod_rev));
                json_array_append_new(s, op_del(lkey));
                txn(e, c, s);
            } else {
                CR_LOG_WARN(COMP, "%s holds garbage under lease %" PRId64
                            ": no election until it expires", lkey, kv.lease);
            }
        } else {
            pthread_mutex_lock(&e->mu);
            snprintf(e->st.leader_rpc, sizeof e->st.leader_rpc, "%s", rpc);
            snprintf(e->st.leader_admin, sizeof e->st.leader_admin, "%s", admin);
            if (ep > e->st.epoch)
                e->st.epoch = ep;
            pthread_mutex_unlock(&e->mu);
        }
        free(kv.value);
        return;
    }
    pthread_mutex_lock(&e->mu);
    e->st.leader_rpc[0] = 0;
    int eligible = e->eligible && !e->resign;
    pthread_mutex_unlock(&e->mu);
    if (!eligible)
        return;
    /* Only a master of the in-sync set may campaign: it holds every change
     * the last leader acknowledged (a standby that fell behind is removed
     * from the set before anything it lacks is acknowledged). No set yet:
     * a cluster that never had a leader. */
    char ikey[160];
    cr__ha_key(ikey, sizeof ikey, e->cid, "insync");
    kv_t ik;
    if ((rc = range(e, NULL, ikey, &ik))) {
        etcd_failed(e, rc);
        return;
    }
    int garbage = 0;
    if (ik.found) {
        uint32_t iep = 0;
        int listed = insync_lists(ik.value, ik.len, e->id, &iep);
        /* a set that does not parse: decided below against the epoch key
         * (only the leader of the newest epoch may campaign) */
        garbage = listed < 0;
        if (listed == 0) {
            pthread_mutex_lock(&e->mu);
            int log = e->not_listed_logged != iep + 1;
            e->not_listed_logged = iep + 1;
            e->st.not_in_sync_set++;
            pthread_mutex_unlock(&e->mu);
            if (log)
                CR_LOG_WARN(COMP, "not campaigning: not in the in-sync set (this master may "
                            "lack acknowledged changes; it campaigns once a leader has it in "
                            "sync)");
            free(ik.value);
            return;
        }
    }
    kv_t ek;
    if ((rc = range(e, NULL, ekey, &ek))) {
        free(ik.value);
        etcd_failed(e, rc);
        return;
    }
    uint64_t last = ek.found && ek.value ? strtoull(ek.value, NULL, 10) : 0;
    free(ek.value);
    if (garbage) {
        /* Garbage in the in-sync set: nobody can tell which standbys hold
         * every acknowledged change. The leader of the newest epoch can: it
         * made them (each synced to its journal before being acknowledged)
         * and took over with all earlier ones. So it alone may campaign; the
         * txn below requires the epoch key and the garbage unchanged and
         * replaces the garbage with a valid set. */
        pthread_mutex_lock(&e->mu);
        uint32_t led = e->led_epoch;
        int log = e->garbage_logged != ik.mod_rev;
        e->garbage_logged = ik.mod_rev;
        e->st.insync_garbage++;
        if (led == 0 || led != last)
            e->st.not_in_sync_set++;
        pthread_mutex_unlock(&e->mu);
        if (led == 0 || led != last) {
            if (log)
                CR_LOG_ERROR(COMP, "%s holds garbage (not an in-sync set): not campaigning, "
                             "only the leader of the newest epoch %" PRIu64 " may (this master "
                             "last led epoch %u); if that master is lost for good, deleting the "
                             "key lets any master with a state lead, losing what it lacks",
                             ikey, last, led);
            free(ik.value);
            return;
        }
        if (log)
            CR_LOG_ERROR(COMP, "%s holds garbage (not an in-sync set): campaigning as the leader "
                         "of the newest epoch %" PRIu64 ", which holds every acknowledged change; "
                         "the campaign replaces it", ikey, last);
    }
    free(ik.value);
    /* campaign: a fresh lease, then the txn (on the revisions read above) */
    uint64_t t0 = cr__now_ms();
    int64_t lease;
    if ((rc = lease_grant(e, &lease))) {
        etcd_failed(e, rc);
        return;
    }
    uint32_t epoch = (uint32_t)(last + 1);
    char val[1024], es[32];
    snprintf(val, sizeof val, "{\"rpc\":\"%s\",\"admin\":\"%s\",\"epoch\":%u}", e->rpc, e->admin,
             epoch);
    snprintf(es, sizeof es, "%u", epoch);
    /* the new epoch's in-sync set is the new leader alone (standbys join
     * once they hold its state); the set must not have changed since read */
    const char *self = e->id;
    char *iv = insync_value(epoch, &self, 1);
    if (!iv) {
        lease_revoke(e, lease);
        return;
    }
    json_t *c = json_array(), *s = json_array();
    json_array_append_new(c, cmp(lkey, "CREATE", 0));
    json_array_append_new(c, ek.found ? cmp(ekey, "MOD", ek.mod_rev) : cmp(ekey, "CREATE", 0));
    json_array_append_new(c, ik.found ? cmp(ikey, "MOD", ik.mod_rev) : cmp(ikey, "CREATE", 0));
    json_array_append_new(s, op_put(lkey, val, lease));
    json_array_append_new(s, op_put(ekey, es, 0));
    json_array_append_new(s, op_put(ikey, iv, 0));
    free(iv);
    pthread_mutex_lock(&e->mu);
    e->st.campaigns++;
    pthread_mutex_unlock(&e->mu);
    rc = txn(e, c, s);
    if (rc != 1) {
        lease_revoke(e, lease);
        if (rc < 0)
            etcd_failed(e, rc);
        return;
    }
    pthread_mutex_lock(&e->mu);
    e->lease = lease;
    e->st.leader = 1;
    e->st.epoch = epoch;
    e->st.elections_won++;
    e->led_epoch = epoch;
    snprintf(e->st.leader_rpc, sizeof e->st.leader_rpc, "%s", e->rpc);
    snprintf(e->st.leader_admin, sizeof e->st.leader_admin, "%s", e->admin);
    pthread_mutex_unlock(&e->mu);
    atomic_store(&e->epoch, epoch);
    atomic_store(&e->valid_until_ms, t0 + (uint64_t)e->ttl_s * 1000 - margin_ms(e));
    CR_LOG_INFO(COMP, "elected leader of %s, epoch %u", e->cid, epoch);
}

static void leader_tick(cr__ha_elect_t *e, const char *lkey)
{
    uint64_t t0 = cr__now_ms();
    pthread_mutex_lock(&e->mu);
    int64_t lease = e->lease;
    int resign = e->resign;
    pthread_mutex_unlock(&e->mu);
    if (resign) {
        step_down(e, "resigned");
        return;
    }
    int64_t ttl = lease_keepalive(e, lease);
    if (ttl > 0) {
        etcd_ok(e);
        /* is the key still ours? (deleted or overwritten: another may win) */
        kv_t kv;
        int rc = range(e, NULL, lkey, &kv);
        if (rc == 0 && (!kv.found || kv.lease != lease)) {
            free(kv.value);
            step_down(e, "the leader key no longer names this master");
            return;
        }
        free(kv.value);
        if (rc == 0) {
            uint64_t v = t0 + (uint64_t)ttl * 1000;
            v = v > margin_ms(e) ? v - margin_ms(e) : 0;
            if (v > atomic_load(&e->valid_until_ms))
                atomic_store(&e->valid_until_ms, v);
        }
    } else if (ttl == 0) {
        step_down(e, "its lease expired in etcd");
        return;
    } else {
        etcd_failed(e, (int)ttl);
    }
    if (cr__now_ms() >= atomic_load(&e->valid_until_ms))
        step_down(e, "lease validity passed without a keepalive (etcd unreachable or stalled)");
}

static void *elect_main(void *arg)
{
    cr__ha_elect_t *e = arg;
    char lkey[160], ekey[160];
    cr__ha_key(lkey, sizeof lkey, e->cid, "leader");
    cr__ha_key(ekey, sizeof ekey, e->cid, "epoch");
    uint64_t next_member = 0;
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        int leader = e->st.leader;
        pthread_mutex_unlock(&e->mu);
        uint64_t now = cr__now_ms();
        if (now >= next_member) {
            member_tick(e);
            next_member = now + (uint64_t)e->ttl_s * 1000 / 3;
        }
        if (leader)
            leader_tick(e, lkey);
        else
            candidate_tick(e, lkey, ekey);
        /* leaders renew at a third of the TTL; candidates poll faster */
        uint64_t wait = leader ? (uint64_t)e->ttl_s * 1000 / 4 : 100;
        pthread_mutex_lock(&e->mu);
        if (!e->stop) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            uint64_t ns = (uint64_t)ts.tv_nsec + wait * 1000000ull;
            ts.tv_sec += (time_t)(ns / 1000000000ull);
            ts.tv_nsec = (long)(ns % 1000000000ull);
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        }
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

int cr__ha_elect_start(const cr__ha_elect_params_t *p, cr__ha_elect_t **out)
{
    if (!p || !p->endpoints || !p->cluster_id || !cid_ok(p->cluster_id) || !p->rpc_address ||
        !*p->rpc_address || strlen(p->rpc_address) >= CR__HA_ADDR_MAX || p->lease_ttl_s < 1 ||
        p->lease_ttl_s > 60 || (p->admin_address && strlen(p->admin_address) >= CR__HA_ADDR_MAX) ||
        strpbrk(p->rpc_address, "\"\\/") || (p->admin_address && strpbrk(p->admin_address, "\"\\")) ||
        !p->id || !*p->id || strlen(p->id) >= CR__HA_ID_MAX || strpbrk(p->id, "\"\\"))
        return -EINVAL;
    char uri[2048], cid[CID_MAX + 1];
    if (cr__ha_parse_master_uri(p->endpoints, uri, sizeof uri, cid, sizeof cid))
        return -EINVAL;
    cr__ha_elect_t *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    int rc = cr__meta_open(uri, (int)(p->lease_ttl_s * 1000 / 4 > 100 ? p->lease_ttl_s * 1000 / 4
                                                                      : 100),
                           &e->etcd);
    if (rc) {
        free(e);
        return rc;
    }
    cr__meta_set_tls(e->etcd, p->tls);
    snprintf(e->cid, sizeof e->cid, "%s", p->cluster_id);
    snprintf(e->rpc, sizeof e->rpc, "%s", p->rpc_address);
    snprintf(e->admin, sizeof e->admin, "%s", p->admin_address ? p->admin_address : "");
    snprintf(e->id, sizeof e->id, "%s", p->id);
    e->ttl_s = p->lease_ttl_s;
    e->eligible = p->eligible;
    e->led_epoch = p->led_epoch;
    e->st.etcd_reachable = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&e->th, NULL, elect_main, e)) {
        cr__meta_close(e->etcd);
        free(e);
        return -ENOMEM;
    }
    *out = e;
    return 0;
}

void cr__ha_elect_stop(cr__ha_elect_t *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->th, NULL);
    if (e->st.leader)
        step_down(e, "stopping");
    if (e->member_lease)
        lease_revoke(e, e->member_lease);
    cr__meta_close(e->etcd);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

uint32_t cr__ha_elect_epoch(cr__ha_elect_t *e, uint64_t now_ms)
{
    if (now_ms >= atomic_load(&e->valid_until_ms))
        return 0;
    return atomic_load(&e->epoch);
}

void cr__ha_elect_resign(cr__ha_elect_t *e)
{
    atomic_store(&e->valid_until_ms, 0);
    pthread_mutex_lock(&e->mu);
    e->resign = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void cr__ha_elect_set_eligible(cr__ha_elect_t *e, int eligible)
{
    pthread_mutex_lock(&e->mu);
    /* the role thread calls this every 20 ms: wake the election thread
     * (an etcd read at once) only when something changed, else a standby
     * read the election key 50 times a second (~85 etcd requests/s for two
     * standbys, store-ha.md "An idle HA cluster costs CPU") */
    int changed = e->eligible != eligible || (eligible && e->resign);
    e->eligible = eligible;
    if (eligible)
        e->resign = 0;
    if (changed)
        pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void cr__ha_elect_status(cr__ha_elect_t *e, uint64_t now_ms, cr__ha_elect_status_t *st)
{
    pthread_mutex_lock(&e->mu);
    *st = e->st;
    pthread_mutex_unlock(&e->mu);
    uint64_t v = atomic_load(&e->valid_until_ms);
    st->leader = st->leader && now_ms < v;
    st->lease_left_ms = st->leader ? v - now_ms : 0;
}

cr__meta_t *cr__ha_elect_etcd(cr__ha_elect_t *e) { return e->etcd; }
