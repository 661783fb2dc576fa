/* The local segment: memory registration and the descriptor built from it
 * (published to the metadata service, served to p2p peers).
 *
 * Registrations are a sorted array under a
 * rwlock. Lookups (request validation, remote pins) take it for reading;
 * register/unregister for writing. A pin increments the registration's pin
 * count; unregistration removes the entry first (no new pins) and then waits
 * for the count to drop to zero before freeing it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "transfer/xfer_internal.h"

int cr__xfer_mem_init(cr_xfer_engine_t *e)
{
    if (pthread_rwlock_init(&e->mem_lock, NULL))
        return -ENOMEM;
    e->cap_regs = CR__XFER_INITIAL_REGS;
    e->regs = calloc(e->cap_regs, sizeof *e->regs);
    if (!e->regs) {
        pthread_rwlock_destroy(&e->mem_lock);
        return -ENOMEM;
    }
    return 0;
}

void cr__xfer_mem_fini(cr_xfer_engine_t *e)
{
    if (!e->regs)
        return;
    for (size_t i = 0; i < e->n_regs; i++)
        free(e->regs[i]);
    free(e->regs);
    e->regs = NULL;
    e->n_regs = 0;
    pthread_rwlock_destroy(&e->mem_lock);
}

/* index of the last registration with addr <= a, or -1 */
static long find_floor_locked(cr_xfer_engine_t *e, uint64_t a)
{
    size_t lo = 0, hi = e->n_regs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (e->regs[mid]->addr <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (long)lo - 1;
}

cr__memreg_t *cr__xfer_mem_find_locked(cr_xfer_engine_t *e, uint64_t addr, uint64_t len)
{
    if (len == 0 || addr > UINT64_MAX - len)
        return NULL;
    long i = find_floor_locked(e, addr);
    if (i < 0)
        return NULL;
    cr__memreg_t *r = e->regs[i];
    if (addr - r->addr > r->len || len > r->len - (addr - r->addr))
        return NULL;
    return r;
}

int cr_xfer_mem_register(cr_xfer_engine_t *e, void *addr, size_t len, const char *location)
{
    if (!e || !addr || len == 0 || (uint64_t)(uintptr_t)addr > UINT64_MAX - len)
        return -EINVAL;
    if (!location)
        location = "cpu:0";
    if (!location[0] || strlen(location) >= CR_XFER_LOCATION_MAX)
        return -EINVAL;
    cr__memreg_t *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->addr = (uint64_t)(uintptr_t)addr;
    r->len = len;
    strcpy(r->location, location);
    cr__xfer_topology_masks(&e->topo, &e->cfg, location, &r->nic_pref_mask, &r->nic_sec_mask);

    pthread_rwlock_wrlock(&e->mem_lock);
    int rc = 0;
    if (e->n_regs >= CR__SEG_MAX_BUFFERS) {
        rc = -ENOSPC;
        goto out;
    }
    long i = find_floor_locked(e, r->addr);
    /* overlap with the floor entry or the next one */
    if (i >= 0 && e->regs[i]->addr + e->regs[i]->len > r->addr)
        rc = -EEXIST;
    else if ((size_t)(i + 1) < e->n_regs && e->regs[i + 1]->addr < r->addr + r->len)
        rc = -EEXIST;
    if (rc)
        goto out;
    if (e->n_regs == e->cap_regs) {
        cr__memreg_t **n = realloc(e->regs, 2 * e->cap_regs * sizeof *n);
        if (!n) {
            rc = -ENOMEM;
            goto out;
        }
        e->regs = n;
        e->cap_regs *= 2;
    }
    size_t pos = (size_t)(i + 1);
    memmove(&e->regs[pos + 1], &e->regs[pos], (e->n_regs - pos) * sizeof *e->regs);
    e->regs[pos] = r;
    e->n_regs++;
out:
    pthread_rwlock_unlock(&e->mem_lock);
    if (rc) {
        free(r);
        return rc;
    }
    /* let the transports prepare the range (e.g. huge-page advice) */
    for (size_t i = 0; i < e->n_transports; i++)
        if (e->transports[i].ops->mem_registered && e->transports[i].state)
            e->transports[i].ops->mem_registered(e->transports[i].state, addr, len);
    int prc = cr__xfer_publish(e);
    if (prc)
        CR_LOG_WARN("xfer", "registered %p+%zu but could not republish: %s", addr, len,
                    cr_strerror(prc));
    return 0;
}

int cr_xfer_mem_unregister(cr_xfer_engine_t *e, void *addr)
{
    if (!e || !addr)
        return -EINVAL;
    uint64_t a = (uint64_t)(uintptr_t)addr;
    pthread_rwlock_wrlock(&e->mem_lock);
    long i = find_floor_locked(e, a);
    if (i < 0 || e->regs[i]->addr != a) {
        pthread_rwlock_unlock(&e->mem_lock);
        return -ENOENT;
    }
    cr__memreg_t *r = e->regs[i];
    memmove(&e->regs[i], &e->regs[i + 1], (e->n_regs - (size_t)i - 1) * sizeof *e->regs);
    e->n_regs--;
    pthread_rwlock_unlock(&e->mem_lock);
    /* one-sided transports (their peers copy by themselves) revoke the
     * peers' access and wait for their copies in flight */
    for (size_t k = 0; k < e->n_transports; k++)
        if (e->transports[k].ops->mem_unregistered && e->transports[k].state)
            e->transports[k].ops->mem_unregistered(e->transports[k].state, addr, r->len);
    /* republish first so peers stop targeting it, then wait for pins */
    cr__xfer_publish(e);
    struct timespec ts = {0, 100000};
    while (atomic_load(&r->pins) > 0)
        nanosleep(&ts, NULL);
    free(r);
    return 0;
}

int cr__xfer_mem_pin(cr_xfer_engine_t *e, uint64_t addr, uint64_t len, void **token)
{
    pthread_rwlock_rdlock(&e->mem_lock);
    cr__memreg_t *r = cr__xfer_mem_find_locked(e, addr, len);
    if (r)
        atomic_fetch_add_explicit(&r->pins, 1, memory_order_acq_rel);
    pthread_rwlock_unlock(&e->mem_lock);
    if (!r)
        return -EFAULT;
    *token = r;
    return 0;
}

void cr__xfer_mem_unpin(cr_xfer_engine_t *e, void *token)
{
    (void)e;
    cr__memreg_t *r = token;
    atomic_fetch_sub_explicit(&r->pins, 1, memory_order_acq_rel);
}

/* Fills d->buffers from regs (caller holds publish_lock). Returns 0 or -ENOMEM. */
static int mem_snapshot(cr_xfer_engine_t *e, cr__seg_desc_t *d)
{
    pthread_rwlock_rdlock(&e->mem_lock);
    size_t n = e->n_regs;
    cr_xfer_buffer_info_t *b = n ? malloc(n * sizeof *b) : NULL;
    if (n && !b) {
        pthread_rwlock_unlock(&e->mem_lock);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        memset(&b[i], 0, sizeof b[i]);
        b[i].addr = e->regs[i]->addr;
        b[i].len = e->regs[i]->len;
        strcpy(b[i].location, e->regs[i]->location);
    }
    pthread_rwlock_unlock(&e->mem_lock);
    free(d->buffers);
    d->buffers = b;
    d->n_buffers = (uint32_t)n;
    return 0;
}

int cr__xfer_publish(cr_xfer_engine_t *e)
{
    pthread_mutex_lock(&e->publish_lock);
    e->local.version = atomic_fetch_add(&e->version, 1) + 1;
    int rc = 0;
    if (e->meta) {
        char *json = NULL;
        size_t len = 0;
        rc = mem_snapshot(e, &e->local);
        if (!rc)
            rc = cr__seg_desc_encode(&e->local, &json, &len);
        if (!rc) {
            char key[CR__META_KEY_MAX];
            snprintf(key, sizeof key, "%s%s", CR__SEG_KEY_PREFIX, e->local.name);
            rc = cr__meta_put(e->meta, key, json, len);
            if (rc) {
                char why[CR__META_WHY_TEXT];
                cr__meta_last_error(e->meta, why, sizeof why);
                CR_LOG_WARN("xfer", "publishing segment %s to the metadata service failed: %s",
                            e->local.name, why[0] ? why : cr_strerror(rc));
            }
        }
        free(json);
    }
    pthread_mutex_unlock(&e->publish_lock);
    return rc;
}

int cr__xfer_local_desc_json(cr_xfer_engine_t *e, char **json, size_t *len)
{
    pthread_mutex_lock(&e->publish_lock);
    int rc = mem_snapshot(e, &e->local);
    if (!rc)
        rc = cr__seg_desc_encode(&e->local, json, len);
    pthread_mutex_unlock(&e->publish_lock);
    return rc;
}
