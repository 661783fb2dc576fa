/* Eviction policy of the store master: when to evict, how much, and in
 * which order a candidate object is taken.
 *
 * The master keeps complete objects on an LRU list (a get touches them).
 * One eviction step walks it from the least recently used end, visiting at
 * most max_visit objects, in two passes: pass 1 evicts objects that are
 * CR__EVICT_NOW, pass 2 (only if pass 1 freed too little) those that are
 * CR__EVICT_LAST (soft-pinned). Leased, hard-pinned and incomplete objects
 * are never evicted.
 */
#ifndef CR_STORE_EVICTION_POLICY_H
#define CR_STORE_EVICTION_POLICY_H

#include <stdint.h>

typedef struct cr__evict_cfg {
    double high_watermark; /* fraction of capacity that triggers eviction (0.90) */
    double ratio;          /* fraction of capacity freed per step (0.05) */
    uint32_t max_visit;    /* objects visited per step, per pass */
} cr__evict_cfg_t;

typedef enum cr__evict_verdict {
    CR__EVICT_SKIP = 0, /* leased, hard-pinned or incomplete */
    CR__EVICT_LAST = 1, /* soft-pinned: only in the second pass */
    CR__EVICT_NOW = 2,
} cr__evict_verdict_t;

/* What the policy needs to know about one object. */
typedef struct cr__evict_view {
    int complete;
    int hard_pinned;
    int soft_pinned; /* soft pin still within its TTL */
    uint64_t lease_until_ms;
} cr__evict_view_t;

/* Verdict for one object at time now_ms. */
cr__evict_verdict_t cr__evict_classify(const cr__evict_view_t *v, uint64_t now_ms);

/* 1 if used bytes out of capacity are above the high watermark. */
int cr__evict_over_watermark(const cr__evict_cfg_t *c, uint64_t used, uint64_t capacity);

/* Bytes one step should free: ratio * capacity, at least need (an
 * allocation that failed), at most used. */
uint64_t cr__evict_target(const cr__evict_cfg_t *c, uint64_t used, uint64_t capacity,
                          uint64_t need);

#endif
