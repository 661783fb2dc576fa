/* Eviction policy (policy.h). */
#include "store/eviction/policy.h"

cr__evict_verdict_t cr__evict_classify(const cr__evict_view_t *v, uint64_t now_ms)
{
    if (!v->complete || v->hard_pinned || v->lease_until_ms > now_ms)
        return CR__EVICT_SKIP;
    return v->soft_pinned ? CR__EVICT_LAST : CR__EVICT_NOW;
}

int cr__evict_over_watermark(const cr__evict_cfg_t *c, uint64_t used, uint64_t capacity)
{
    return capacity && (double)used > c->high_watermark * (double)capacity;
}

uint64_t cr__evict_target(const cr__evict_cfg_t *c, uint64_t used, uint64_t capacity,
                          uint64_t need)
{
    double r = c->ratio > 0 ? c->ratio : 0;
    uint64_t t = (uint64_t)(r * (double)capacity);
    if (t < need)
        t = need;
    if (t > used)
        t = used;
    return t;
}
