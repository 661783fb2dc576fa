/* Store client: extra segments (store.h "extra segments", Mooncake's
 * mount_segment / allocate_and_mount_segment). Memory the caller owns is
 * registered with this client's Transfer Engine and mounted at the master
 * under the name "<TE segment name>#<n>": replicas placed there name that
 * segment, and every reader maps the name back to the TE segment
 * "<TE segment name>" (cr__sc_te_name) to reach the bytes. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "store/client/client.h"

#define COMP "store"
#define EXTRA_SEP '#'
#define EXTRA_ALIGN 4096u

void cr__sc_te_name(const char *segment, char *out, size_t cap)
{
    size_t n = strcspn(segment, "#");
    if (n >= cap)
        n = cap - 1;
    memcpy(out, segment, n);
    out[n] = '\0';
}

static int mount_rpc(cr_store_t *s, cr__rpc_client_t *c, const char *name, uint64_t base,
                     uint64_t len, int mount)
{
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = mount ? CR__RPC_MOUNT_SEGMENT : CR__RPC_UNMOUNT_SEGMENT;
    req.client_id = s->id;
    req.segment = name;
    req.base = base;
    req.size = len;
    int rc = c ? cr__rpc_client_call(c, &req, &rep) : cr__sc_call(s, &req, &rep);
    if (rc)
        return rc == -ENOMEM ? rc : CR_E_RPC_FAIL;
    rc = rep.status;
    if (!rc && mount)
        cr__sc_cap_install(s, &rep); /* caps on: the key of this client's segments */
    cr__rpc_msg_free(&rep);
    return rc;
}

/* 1 if [a, a+len) overlaps memory this client already uses or registered. */
static int overlaps_locked(cr_store_t *s, uintptr_t a, uint64_t len)
{
    for (size_t i = 0; i < s->n_extra; i++)
        if (a < s->extra[i].addr + s->extra[i].len && s->extra[i].addr < a + len)
            return 1;
    int hit = 0;
    pthread_rwlock_rdlock(&s->reg_lock);
    for (size_t i = 0; !hit && i < s->n_regs; i++)
        hit = a < s->regs[i].addr + s->regs[i].len && s->regs[i].addr < a + len;
    pthread_rwlock_unlock(&s->reg_lock);
    return hit;
}

int cr_store_segment_mount(cr_store_t *s, void *addr, size_t len, char *name, size_t cap)
{
    uintptr_t a = (uintptr_t)addr;
    if (!s || !addr || !name || cap < CR_STORE_SEGMENT_NAME_MAX || len < EXTRA_ALIGN ||
        len > CR__SC_SEG_SIZE_MAX || a % EXTRA_ALIGN || len % EXTRA_ALIGN || a + len < a)
        return CR_E_INVALID_PARAMS;
    char nm[CR_XFER_NAME_MAX];
    pthread_mutex_lock(&s->extra_mu);
    int rc = 0;
    if (s->n_extra >= CR_STORE_EXTRA_SEGMENTS_MAX)
        rc = CR_E_UNAVAILABLE_IN_CURRENT_STATUS;
    else if (overlaps_locked(s, a, len))
        rc = CR_E_INVALID_PARAMS;
    else if ((size_t)snprintf(nm, sizeof nm, "%s%c%" PRIu32, s->seg_name, EXTRA_SEP,
                              s->extra_seq + 1) >= sizeof nm)
        rc = CR_E_INVALID_PARAMS;
    if (!rc) {
        rc = cr_xfer_mem_register(s->te, addr, len, "cpu:0");
        if (rc == -EEXIST || rc == -EINVAL)
            rc = CR_E_INVALID_PARAMS; /* overlaps the staging buffer or main segment */
    }
    if (!rc) {
        rc = mount_rpc(s, NULL, nm, a, len, 1);
        if (rc)
            cr_xfer_mem_unregister(s->te, addr);
    }
    if (!rc) {
        s->extra_seq++;
        snprintf(s->extra[s->n_extra].name, sizeof s->extra[0].name, "%s", nm);
        s->extra[s->n_extra].addr = a;
        s->extra[s->n_extra].len = len;
        s->n_extra++;
        snprintf(name, cap, "%s", nm);
    }
    pthread_mutex_unlock(&s->extra_mu);
    if (rc)
        CR_LOG_WARN(COMP, "mount of %zu bytes at %p: %s", len, addr, cr_strerror(rc));
    else
        CR_LOG_INFO(COMP, "mounted extra segment %s (%zu bytes)", nm, len);
    return rc;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

int cr_store_segment_unmount(cr_store_t *s, const char *name, unsigned grace_ms)
{
    if (!s || !name || grace_ms > CR_STORE_EXTRA_GRACE_MAX_MS)
        return CR_E_INVALID_PARAMS;
    pthread_mutex_lock(&s->extra_mu);
    size_t i = 0;
    while (i < s->n_extra && strcmp(s->extra[i].name, name))
        i++;
    if (i == s->n_extra) {
        pthread_mutex_unlock(&s->extra_mu);
        return CR_E_SEGMENT_NOT_FOUND;
    }
    int rc = mount_rpc(s, NULL, name, 0, 0, 0);
    if (rc == CR_E_SEGMENT_NOT_FOUND)
        rc = 0; /* the master already dropped it (our client expired meanwhile) */
    if (rc) {
        pthread_mutex_unlock(&s->extra_mu);
        CR_LOG_WARN(COMP, "unmount of %s: %s (still mounted)", name, cr_strerror(rc));
        return rc;
    }
    void *addr = (void *)s->extra[i].addr;
    s->extra[i] = s->extra[--s->n_extra];
    pthread_mutex_unlock(&s->extra_mu);
    /* the master hands out no replica on it any more; readers that located
     * one before may still be reading the (intact) bytes */
    if (grace_ms)
        sleep_ms(grace_ms);
    rc = cr_xfer_mem_unregister(s->te, addr);
    if (rc)
        CR_LOG_WARN(COMP, "unregistering %s: %s", name, cr_strerror(rc));
    CR_LOG_INFO(COMP, "unmounted extra segment %s", name);
    return 0;
}

void cr__sc_extra_sync(cr_store_t *s, cr__rpc_client_t *c, int remount)
{
    pthread_mutex_lock(&s->extra_mu);
    for (size_t i = 0; i < s->n_extra; i++) {
        int rc = mount_rpc(s, c, s->extra[i].name, s->extra[i].addr, s->extra[i].len, remount);
        if (rc && !(rc == CR_E_SEGMENT_NOT_FOUND && !remount))
            CR_LOG_WARN(COMP, "%s of %s failed: %s", remount ? "remount" : "unmount",
                        s->extra[i].name, cr_strerror(rc));
    }
    pthread_mutex_unlock(&s->extra_mu);
}

void cr__sc_extra_first(cr_store_t *s, char *out, size_t cap)
{
    pthread_mutex_lock(&s->extra_mu);
    snprintf(out, cap, "%s", s->n_extra ? s->extra[0].name : "");
    pthread_mutex_unlock(&s->extra_mu);
}
