/* First-fit extent allocator over the registered staging buffer. */
#include "store/client/staging.h"

#include <errno.h>
#include <string.h>
#include <time.h>

static size_t round_up(size_t v) { return (v + CR__STAGING_ALIGN - 1) & ~(size_t)(CR__STAGING_ALIGN - 1); }

int cr__staging_init(cr__staging_t *s, void *base, size_t size)
{
    size &= ~(size_t)(CR__STAGING_ALIGN - 1);
    if (!base || size == 0)
        return -EINVAL;
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->base = base;
    s->size = size;
    s->n_free = 1;
    s->free_list[0].off = 0;
    s->free_list[0].len = size;
    return 0;
}

void cr__staging_fini(cr__staging_t *s)
{
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

static void *try_alloc_locked(cr__staging_t *s, size_t len)
{
    for (size_t i = 0; i < s->n_free; i++) {
        cr__staging_extent_t *e = &s->free_list[i];
        if (e->len < len)
            continue;
        size_t off = e->off;
        e->off += len;
        e->len -= len;
        if (e->len == 0) {
            memmove(&s->free_list[i], &s->free_list[i + 1], (s->n_free - i - 1) * sizeof *e);
            s->n_free--;
        }
        s->in_use += len;
        return s->base + off;
    }
    return NULL;
}

void *cr__staging_alloc(cr__staging_t *s, size_t len, int timeout_ms)
{
    if (len == 0 || len > s->size)
        return NULL;
    len = round_up(len);
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mu);
    void *p;
    while (!(p = try_alloc_locked(s, len))) {
        if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT) {
            p = try_alloc_locked(s, len);
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return p;
}

void cr__staging_free(cr__staging_t *s, void *p, size_t len)
{
    if (!p)
        return;
    len = round_up(len);
    size_t off = (size_t)((uint8_t *)p - s->base);
    pthread_mutex_lock(&s->mu);
    /* insertion point: first extent with offset > off */
    size_t i = 0;
    while (i < s->n_free && s->free_list[i].off < off)
        i++;
    int merge_prev = i > 0 && s->free_list[i - 1].off + s->free_list[i - 1].len == off;
    int merge_next = i < s->n_free && off + len == s->free_list[i].off;
    if (merge_prev && merge_next) {
        s->free_list[i - 1].len += len + s->free_list[i].len;
        memmove(&s->free_list[i], &s->free_list[i + 1], (s->n_free - i - 1) * sizeof s->free_list[0]);
        s->n_free--;
    } else if (merge_prev) {
        s->free_list[i - 1].len += len;
    } else if (merge_next) {
        s->free_list[i].off = off;
        s->free_list[i].len += len;
    } else {
        /* A new extent. There are at most (live allocations + 1) free extents
         * and every allocation is >= one alignment unit, so this bound only
         * matters for buffers of more than MAX_EXTENTS units; when full, the
         * bytes are leaked to the allocator until a neighbour frees (counted
         * as in use) rather than corrupting the list. */
        if (s->n_free < CR__STAGING_MAX_EXTENTS) {
            memmove(&s->free_list[i + 1], &s->free_list[i], (s->n_free - i) * sizeof s->free_list[0]);
            s->free_list[i].off = off;
            s->free_list[i].len = len;
            s->n_free++;
        } else {
            pthread_mutex_unlock(&s->mu);
            return;
        }
    }
    s->in_use -= len;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}
