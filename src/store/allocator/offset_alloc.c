/* Two-level segregated-fit offset allocator (offset_alloc.h). */
#include "store/allocator/offset_alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MANT_BITS 3
#define MANT_VALUE (1u << MANT_BITS)
#define MANT_MASK (MANT_VALUE - 1)
#define NUM_TOP 32
#define BINS_PER_LEAF 8
#define NUM_BINS (NUM_TOP * BINS_PER_LEAF)
#define NIL UINT32_MAX

typedef struct node {
    uint32_t off, size;          /* granules */
    uint32_t bin_prev, bin_next; /* free list of the bin (free blocks); next = free-node list when unused */
    uint32_t nb_prev, nb_next;   /* physical neighbours */
    uint32_t state;              /* 0 unused node slot, 1 free block, 2 used block */
} node_t;

enum { N_UNUSED = 0, N_FREE = 1, N_USED = 2 };

struct cr__oalloc {
    unsigned shift;
    uint32_t total; /* granules */
    uint32_t used;  /* granules in used blocks */
    uint32_t top_mask;
    uint8_t leaf_mask[NUM_TOP];
    uint32_t bin_head[NUM_BINS];
    node_t *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t free_nodes; /* stack of unused slots through bin_next */
    uint32_t hint;       /* last reserved block (cr__oalloc_reserve), may be stale */
    uint64_t n_used_blocks, n_free_blocks;
};

static uint32_t float_round_up(uint32_t size)
{
    uint32_t exp = 0, mant;
    if (size < MANT_VALUE) {
        mant = size;
    } else {
        uint32_t hb = 31u - (uint32_t)__builtin_clz(size);
        uint32_t msb = hb - MANT_BITS;
        exp = msb + 1;
        mant = (size >> msb) & MANT_MASK;
        uint32_t low = (1u << msb) - 1;
        if (size & low)
            mant++;
    }
    return (exp << MANT_BITS) + mant; /* mantissa overflow carries into exp */
}

static uint32_t float_round_down(uint32_t size)
{
    uint32_t exp = 0, mant;
    if (size < MANT_VALUE) {
        mant = size;
    } else {
        uint32_t hb = 31u - (uint32_t)__builtin_clz(size);
        uint32_t msb = hb - MANT_BITS;
        exp = msb + 1;
        mant = (size >> msb) & MANT_MASK;
    }
    return (exp << MANT_BITS) | mant;
}

static uint32_t float_to_uint(uint32_t f)
{
    uint32_t exp = f >> MANT_BITS, mant = f & MANT_MASK;
    return exp == 0 ? mant : (mant | MANT_VALUE) << (exp - 1);
}

static uint32_t node_get(cr__oalloc_t *a)
{
    if (a->free_nodes != NIL) {
        uint32_t i = a->free_nodes;
        a->free_nodes = a->nodes[i].bin_next;
        return i;
    }
    if (a->n_nodes == a->cap_nodes) {
        if (a->cap_nodes >= NIL / 2)
            return NIL;
        uint32_t cap = a->cap_nodes ? a->cap_nodes * 2 : 64;
        node_t *n = realloc(a->nodes, (size_t)cap * sizeof *n);
        if (!n)
            return NIL;
        a->nodes = n;
        a->cap_nodes = cap;
    }
    return a->n_nodes++;
}

static void node_put(cr__oalloc_t *a, uint32_t i)
{
    a->nodes[i].state = N_UNUSED;
    a->nodes[i].bin_next = a->free_nodes;
    a->free_nodes = i;
}

static void bin_insert(cr__oalloc_t *a, uint32_t i)
{
    node_t *n = &a->nodes[i];
    uint32_t bin = float_round_down(n->size);
    uint32_t top = bin >> 3, leaf = bin & 7;
    if (a->bin_head[bin] == NIL) {
        a->leaf_mask[top] |= (uint8_t)(1u << leaf);
        a->top_mask |= 1u << top;
    }
    n->bin_prev = NIL;
    n->bin_next = a->bin_head[bin];
    if (n->bin_next != NIL)
        a->nodes[n->bin_next].bin_prev = i;
    a->bin_head[bin] = i;
    n->state = N_FREE;
    a->n_free_blocks++;
}

static void bin_remove(cr__oalloc_t *a, uint32_t i)
{
    node_t *n = &a->nodes[i];
    if (n->bin_prev != NIL) {
        a->nodes[n->bin_prev].bin_next = n->bin_next;
    } else {
        uint32_t bin = float_round_down(n->size);
        a->bin_head[bin] = n->bin_next;
        if (n->bin_next == NIL) {
            uint32_t top = bin >> 3, leaf = bin & 7;
            a->leaf_mask[top] &= (uint8_t)~(1u << leaf);
            if (!a->leaf_mask[top])
                a->top_mask &= ~(1u << top);
        }
    }
    if (n->bin_next != NIL)
        a->nodes[n->bin_next].bin_prev = n->bin_prev;
    a->n_free_blocks--;
}

int cr__oalloc_create(uint64_t size, unsigned min_shift, cr__oalloc_t **out)
{
    if (min_shift < 6 || min_shift > 30)
        return -EINVAL;
    unsigned shift = min_shift;
    while ((size >> shift) > 0xfffffff0ull)
        shift++;
    uint64_t g = size >> shift;
    if (g == 0)
        return -EINVAL;
    cr__oalloc_t *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    a->shift = shift;
    a->total = (uint32_t)g;
    a->free_nodes = NIL;
    for (int i = 0; i < NUM_BINS; i++)
        a->bin_head[i] = NIL;
    uint32_t r = node_get(a);
    if (r == NIL) {
        free(a);
        return -ENOMEM;
    }
    a->nodes[r] = (node_t){.off = 0, .size = a->total, .nb_prev = NIL, .nb_next = NIL};
    bin_insert(a, r);
    *out = a;
    return 0;
}

void cr__oalloc_destroy(cr__oalloc_t *a)
{
    if (!a)
        return;
    free(a->nodes);
    free(a);
}

uint32_t cr__oalloc_alloc(cr__oalloc_t *a, uint64_t len, uint64_t *offset)
{
    if (len == 0)
        return CR__OALLOC_NONE;
    uint64_t g64 = (len + (1ull << a->shift) - 1) >> a->shift;
    if (g64 > a->total)
        return CR__OALLOC_NONE;
    uint32_t g = (uint32_t)g64;
    /* reserve a node slot for the split first, so failure has no effect */
    uint32_t spare = node_get(a);
    if (spare == NIL)
        return CR__OALLOC_NONE;
    uint32_t min_bin = float_round_up(g);
    uint32_t top = min_bin >> 3, leaf = min_bin & 7, bin = NIL;
    if (top < NUM_TOP) {
        uint32_t lm = a->leaf_mask[top] & (0xffu << leaf) & 0xffu;
        if (lm) {
            bin = (top << 3) | (uint32_t)__builtin_ctz(lm);
        } else if (top + 1 < NUM_TOP) {
            uint32_t tm = a->top_mask & (~0u << (top + 1));
            if (tm) {
                uint32_t t = (uint32_t)__builtin_ctz(tm);
                bin = (t << 3) | (uint32_t)__builtin_ctz(a->leaf_mask[t]);
            }
        }
    }
    if (bin == NIL) {
        node_put(a, spare);
        return CR__OALLOC_NONE;
    }
    uint32_t i = a->bin_head[bin];
    bin_remove(a, i);
    node_t *n = &a->nodes[i];
    uint32_t rest = n->size - g;
    n->size = g;
    n->state = N_USED;
    if (rest) {
        node_t *s = &a->nodes[spare];
        *s = (node_t){.off = n->off + g, .size = rest, .nb_prev = i, .nb_next = n->nb_next};
        if (n->nb_next != NIL)
            a->nodes[n->nb_next].nb_prev = spare;
        n->nb_next = spare;
        bin_insert(a, spare);
    } else {
        node_put(a, spare);
    }
    a->used += g;
    a->n_used_blocks++;
    if (offset)
        *offset = (uint64_t)n->off << a->shift;
    return i;
}

uint32_t cr__oalloc_reserve(cr__oalloc_t *a, uint64_t offset, uint64_t len)
{
    uint64_t gmask = (1ull << a->shift) - 1;
    if (len == 0 || (offset & gmask))
        return CR__OALLOC_NONE;
    uint64_t go = offset >> a->shift, gl = (len + gmask) >> a->shift;
    if (go >= a->total || gl > a->total - go)
        return CR__OALLOC_NONE;
    uint32_t f = NIL;
    if (a->hint < a->n_nodes && a->nodes[a->hint].state != N_UNUSED &&
        a->nodes[a->hint].off <= go) {
        for (uint32_t i = a->hint; i != NIL; i = a->nodes[i].nb_next) {
            if (a->nodes[i].off > go)
                break;
            if (go < (uint64_t)a->nodes[i].off + a->nodes[i].size) {
                f = i;
                break;
            }
        }
    } else {
        for (uint32_t i = 0; i < a->n_nodes; i++)
            if (a->nodes[i].state != N_UNUSED && a->nodes[i].off <= go &&
                go < (uint64_t)a->nodes[i].off + a->nodes[i].size) {
                f = i;
                break;
            }
    }
    if (f == NIL || a->nodes[f].state != N_FREE ||
        go + gl > (uint64_t)a->nodes[f].off + a->nodes[f].size)
        return CR__OALLOC_NONE;
    /* the spare node slots first, so failure has no effect */
    uint32_t pre = NIL, post = NIL;
    int need_pre = a->nodes[f].off < go;
    int need_post = go + gl < (uint64_t)a->nodes[f].off + a->nodes[f].size;
    if (need_pre && (pre = node_get(a)) == NIL)
        return CR__OALLOC_NONE;
    if (need_post && (post = node_get(a)) == NIL) {
        if (pre != NIL)
            node_put(a, pre);
        return CR__OALLOC_NONE;
    }
    bin_remove(a, f);
    node_t *n = &a->nodes[f];
    uint32_t end = n->off + n->size;
    if (need_pre) {
        a->nodes[pre] = (node_t){.off = n->off, .size = (uint32_t)(go - n->off),
                                 .nb_prev = n->nb_prev, .nb_next = f};
        if (n->nb_prev != NIL)
            a->nodes[n->nb_prev].nb_next = pre;
        n->nb_prev = pre;
        bin_insert(a, pre);
    }
    n = &a->nodes[f];
    n->off = (uint32_t)go;
    n->size = (uint32_t)gl;
    if (need_post) {
        a->nodes[post] = (node_t){.off = (uint32_t)(go + gl), .size = (uint32_t)(end - go - gl),
                                  .nb_prev = f, .nb_next = n->nb_next};
        if (n->nb_next != NIL)
            a->nodes[n->nb_next].nb_prev = post;
        n->nb_next = post;
        bin_insert(a, post);
    }
    n->state = N_USED;
    a->used += (uint32_t)gl;
    a->n_used_blocks++;
    a->hint = f;
    return f;
}

int cr__oalloc_free(cr__oalloc_t *a, uint32_t i)
{
    if (i >= a->n_nodes || a->nodes[i].state != N_USED)
        return -EINVAL;
    node_t *n = &a->nodes[i];
    a->used -= n->size;
    a->n_used_blocks--;
    uint32_t p = n->nb_prev;
    if (p != NIL && a->nodes[p].state == N_FREE) {
        node_t *pn = &a->nodes[p];
        bin_remove(a, p);
        n->off = pn->off;
        n->size += pn->size;
        n->nb_prev = pn->nb_prev;
        if (pn->nb_prev != NIL)
            a->nodes[pn->nb_prev].nb_next = i;
        node_put(a, p);
    }
    uint32_t x = n->nb_next;
    if (x != NIL && a->nodes[x].state == N_FREE) {
        node_t *xn = &a->nodes[x];
        bin_remove(a, x);
        n->size += xn->size;
        n->nb_next = xn->nb_next;
        if (xn->nb_next != NIL)
            a->nodes[xn->nb_next].nb_prev = i;
        node_put(a, x);
    }
    bin_insert(a, i);
    return 0;
}

int cr__oalloc_create_used(uint64_t size, unsigned min_shift, const uint64_t *offs,
                           const uint64_t *lens, size_t n, uint32_t *blk, cr__oalloc_t **out)
{
    cr__oalloc_t *a;
    int rc = cr__oalloc_create(size, min_shift, &a);
    if (rc)
        return rc;
    /* the free tail [cur.off, total): node 0 at first, then what follows
     * the last range placed */
    uint32_t cur = 0;
    for (size_t k = 0; k < n; k++) {
        blk[k] = CR__OALLOC_NONE;
        uint64_t gran = 1ull << a->shift;
        if (cur == NIL || (offs[k] & (gran - 1)) || lens[k] == 0)
            continue;
        uint64_t go = offs[k] >> a->shift, g = (lens[k] + gran - 1) >> a->shift;
        node_t *c = &a->nodes[cur];
        if (go < c->off || go + g > (uint64_t)c->off + c->size)
            continue; /* overlaps the previous range or passes the end */
        /* two spare node slots first, so a failure changes nothing */
        uint32_t s1 = node_get(a), s2 = s1 == NIL ? NIL : node_get(a);
        if (s2 == NIL) {
            if (s1 != NIL)
                node_put(a, s1);
            cr__oalloc_destroy(a);
            return -ENOMEM;
        }
        uint32_t sp[2] = {s1, s2}, nsp = 2;
        c = &a->nodes[cur]; /* node_get may have moved the array */
        bin_remove(a, cur);
        uint32_t used = cur;
        if (go > c->off) { /* the gap before the range stays free in cur */
            uint32_t x = sp[--nsp];
            node_t *u = &a->nodes[x];
            *u = (node_t){.off = (uint32_t)go, .size = c->off + c->size - (uint32_t)go,
                          .nb_prev = cur, .nb_next = c->nb_next};
            if (c->nb_next != NIL)
                a->nodes[c->nb_next].nb_prev = x;
            c->nb_next = x;
            c->size = (uint32_t)go - c->off;
            bin_insert(a, cur);
            used = x;
        }
        node_t *u = &a->nodes[used];
        uint32_t rest = u->size - (uint32_t)g;
        u->size = (uint32_t)g;
        u->state = N_USED;
        a->used += (uint32_t)g;
        a->n_used_blocks++;
        blk[k] = used;
        cur = NIL;
        if (rest) {
            uint32_t x = sp[--nsp];
            node_t *t = &a->nodes[x];
            *t = (node_t){.off = u->off + (uint32_t)g, .size = rest, .nb_prev = used,
                          .nb_next = u->nb_next};
            if (u->nb_next != NIL)
                a->nodes[u->nb_next].nb_prev = x;
            u->nb_next = x;
            bin_insert(a, x);
            cur = x;
        }
        while (nsp)
            node_put(a, sp[--nsp]);
    }
    *out = a;
    return 0;
}

uint64_t cr__oalloc_block_offset(const cr__oalloc_t *a, uint32_t i)
{
    return i < a->n_nodes ? (uint64_t)a->nodes[i].off << a->shift : 0;
}

uint64_t cr__oalloc_block_size(const cr__oalloc_t *a, uint32_t i)
{
    return i < a->n_nodes ? (uint64_t)a->nodes[i].size << a->shift : 0;
}

uint64_t cr__oalloc_max_alloc(const cr__oalloc_t *a)
{
    if (!a->top_mask)
        return 0;
    uint32_t t = 31u - (uint32_t)__builtin_clz(a->top_mask);
    uint32_t l = 31u - (uint32_t)__builtin_clz(a->leaf_mask[t]);
    return (uint64_t)float_to_uint((t << 3) | l) << a->shift;
}

uint64_t cr__oalloc_used(const cr__oalloc_t *a) { return (uint64_t)a->used << a->shift; }
uint64_t cr__oalloc_capacity(const cr__oalloc_t *a) { return (uint64_t)a->total << a->shift; }

void cr__oalloc_stats(const cr__oalloc_t *a, cr__oalloc_stats_t *st)
{
    memset(st, 0, sizeof *st);
    st->granule = 1ull << a->shift;
    st->capacity = (uint64_t)a->total << a->shift;
    st->used = (uint64_t)a->used << a->shift;
    st->free = st->capacity - st->used;
    st->n_used_blocks = a->n_used_blocks;
    st->n_free_blocks = a->n_free_blocks;
    st->meta_bytes = sizeof *a + (uint64_t)a->cap_nodes * sizeof(node_t);
    if (a->top_mask) {
        uint32_t t = 31u - (uint32_t)__builtin_clz(a->top_mask);
        uint32_t l = 31u - (uint32_t)__builtin_clz(a->leaf_mask[t]);
        uint32_t best = 0;
        for (uint32_t i = a->bin_head[(t << 3) | l]; i != NIL; i = a->nodes[i].bin_next)
            if (a->nodes[i].size > best)
                best = a->nodes[i].size;
        st->largest_free = (uint64_t)best << a->shift;
    }
}

uint64_t cr__oalloc_granule(const cr__oalloc_t *a) { return 1ull << a->shift; }
