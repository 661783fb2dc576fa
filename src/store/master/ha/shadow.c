/* Shadow index (shadow.h): a chained hash of key -> the object's latest OBJ
 * frame (copied), plus the mounted segments. */
#include "store/master/ha/shadow.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

typedef struct ent {
    struct ent *next;
    uint64_t hash, version;
    int complete;
    int has_crc;  /* crc: the value's end-to-end crc32c (OBJ's or ENDC's) */
    uint32_t crc;
    uint16_t key_len;
    uint32_t frame_len;
    uint8_t *frame; /* the OBJ record frame; the key points inside it */
    const char *key;
} ent_t;

struct cr__ha_shadow {
    ent_t **b;
    uint64_t nb, count;
    cr__ha_seg_t *segs;
    uint32_t n_segs, cap_segs;
    uint64_t next_version;
    cr__ha_win_t *wins; /* open allocation windows */
    uint32_t n_wins, cap_wins;
    cr__ha_held_t held[CR__HA_HELDS_MAX]; /* held names: the first n_held */
    uint32_t n_held;
};

int cr__ha_shadow_create(cr__ha_shadow_t **out)
{
    cr__ha_shadow_t *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->nb = 1024;
    s->b = calloc(s->nb, sizeof *s->b);
    if (!s->b) {
        free(s);
        return -ENOMEM;
    }
    *out = s;
    return 0;
}

static void ent_free(ent_t *e)
{
    if (e) {
        free(e->frame);
        free(e);
    }
}

void cr__ha_shadow_reset(cr__ha_shadow_t *s)
{
    for (uint64_t i = 0; i < s->nb; i++) {
        ent_t *e = s->b[i];
        while (e) {
            ent_t *n = e->next;
            ent_free(e);
            e = n;
        }
        s->b[i] = NULL;
    }
    s->count = 0;
    s->n_segs = 0;
    s->n_wins = 0;
    s->next_version = 0;
    for (uint32_t i = 0; i < s->n_held; i++)
        free(s->held[i].rg);
    s->n_held = 0;
}

void cr__ha_shadow_destroy(cr__ha_shadow_t *s)
{
    if (!s)
        return;
    cr__ha_shadow_reset(s);
    free(s->b);
    free(s->segs);
    free(s->wins);
    free(s);
}

static ent_t **find(cr__ha_shadow_t *s, const char *k, size_t l, uint64_t h)
{
    ent_t **pp = &s->b[h & (s->nb - 1)];
    while (*pp && !((*pp)->hash == h && (*pp)->key_len == l && !memcmp((*pp)->key, k, l)))
        pp = &(*pp)->next;
    return pp;
}

static void grow(cr__ha_shadow_t *s)
{
    uint64_t nb = s->nb * 2;
    ent_t **b = calloc(nb, sizeof *b);
    if (!b)
        return; /* longer chains, still correct */
    for (uint64_t i = 0; i < s->nb; i++) {
        ent_t *e = s->b[i];
        while (e) {
            ent_t *n = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = n;
        }
    }
    free(s->b);
    s->b = b;
    s->nb = nb;
}

static void bump_version(cr__ha_shadow_t *s, uint64_t v)
{
    if (v + 1 > s->next_version)
        s->next_version = v + 1;
}

static int seg_index(const cr__ha_shadow_t *s, const char *name)
{
    for (uint32_t i = 0; i < s->n_segs; i++)
        if (!strcmp(s->segs[i].name, name))
            return (int)i;
    return -1;
}

/* The held entry of r's name, owner and memory, or -1. */
static int held_index(const cr__ha_shadow_t *s, const cr__ha_rec_t *r)
{
    for (uint32_t i = 0; i < s->n_held; i++) {
        const cr__ha_held_t *h = &s->held[i];
        if (!strcmp(h->name, r->name) && h->client.hi == r->client.hi &&
            h->client.lo == r->client.lo && h->base == r->base && h->size == r->seg_size)
            return (int)i;
    }
    return -1;
}

/* HELD: a new entry or the entry replaced (more ranges with _MORE). */
static int held_apply(cr__ha_shadow_t *s, const cr__ha_rec_t *r)
{
    int i = held_index(s, r);
    cr__ha_held_t *h;
    if (r->flags & CR__HA_HELD_MORE) {
        if (i < 0)
            return 0; /* its first record was not seen: as the master would */
        h = &s->held[i];
    } else {
        if (i < 0) {
            if (s->n_held == CR__HA_HELDS_MAX)
                return -ENOMEM;
            i = (int)s->n_held++;
            memset(&s->held[i], 0, sizeof s->held[i]);
        }
        h = &s->held[i];
        memcpy(h->name, r->name, sizeof h->name);
        h->client = r->client;
        h->base = r->base;
        h->size = r->seg_size;
        h->hold_ms = r->hold_ms;
        h->whole = (r->flags & CR__HA_HELD_WHOLE) != 0;
        h->n_rg = 0;
    }
    if (h->whole || !r->n_hrg)
        return 0;
    if (h->n_rg + r->n_hrg > CR__HA_HELD_RANGES_MAX) {
        h->whole = 1; /* as the master does past its bound */
        h->n_rg = 0;
        return 0;
    }
    if (h->n_rg + r->n_hrg > h->cap_rg) {
        uint32_t nc = h->cap_rg ? h->cap_rg : CR__HA_HELD_RG_MAX;
        while (nc < h->n_rg + r->n_hrg)
            nc *= 2;
        cr__ha_held_rg_t *n = realloc(h->rg, nc * sizeof *n);
        if (!n)
            return -ENOMEM;
        h->rg = n;
        h->cap_rg = nc;
    }
    memcpy(h->rg + h->n_rg, r->hrg, r->n_hrg * sizeof *r->hrg);
    h->n_rg += r->n_hrg;
    return 0;
}

int cr__ha_shadow_apply(cr__ha_shadow_t *s, const uint8_t *frame, size_t len,
                        const cr__ha_rec_t *r)
{
    switch (r->type) {
    case CR__HA_OBJ: {
        uint64_t h = XXH3_64bits(r->key, r->key_len);
        ent_t **pp = find(s, r->key, r->key_len, h);
        ent_t *e = *pp;
        uint8_t *copy = malloc(len);
        if (!copy)
            return -ENOMEM;
        memcpy(copy, frame, len);
        if (!e) {
            e = calloc(1, sizeof *e);
            if (!e) {
                free(copy);
                return -ENOMEM;
            }
            e->hash = h;
            e->next = s->b[h & (s->nb - 1)];
            s->b[h & (s->nb - 1)] = e;
            s->count++;
        } else {
            free(e->frame);
        }
        e->frame = copy;
        e->frame_len = (uint32_t)len;
        e->key = (const char *)copy + (r->key - (const char *)frame);
        e->key_len = r->key_len;
        e->version = r->version;
        e->complete = (r->flags & CR__HA_OBJ_COMPLETE) != 0;
        e->has_crc = (r->flags & CR__HA_OBJ_CRC) != 0;
        e->crc = r->crc;
        bump_version(s, r->version);
        if (s->count > s->nb)
            grow(s);
        return 0;
    }
    case CR__HA_END:
    case CR__HA_ENDC:
    case CR__HA_DEL: {
        ent_t **pp = find(s, r->key, r->key_len, XXH3_64bits(r->key, r->key_len));
        ent_t *e = *pp;
        if (!e || e->version != r->version)
            return 0;
        if (r->type != CR__HA_DEL) {
            e->complete = 1;
            if (r->type == CR__HA_ENDC && !e->has_crc) { /* the first PutEnd's crc stays */
                e->has_crc = 1;
                e->crc = r->crc;
            }
        } else {
            *pp = e->next;
            ent_free(e);
            s->count--;
        }
        return 0;
    }
    case CR__HA_SEG: {
        int i = seg_index(s, r->name);
        if (i < 0) {
            if (s->n_segs == s->cap_segs) {
                uint32_t nc = s->cap_segs ? s->cap_segs * 2 : 16;
                cr__ha_seg_t *n = realloc(s->segs, nc * sizeof *n);
                if (!n)
                    return -ENOMEM;
                s->segs = n;
                s->cap_segs = nc;
            }
            i = (int)s->n_segs++;
        }
        cr__ha_seg_t *g = &s->segs[i];
        memcpy(g->name, r->name, sizeof g->name);
        g->base = r->base;
        g->size = r->seg_size;
        g->client = r->client;
        return 0;
    }
    case CR__HA_SEGDROP: {
        int i = seg_index(s, r->name);
        if (i >= 0)
            s->segs[i] = s->segs[--s->n_segs];
        for (uint32_t k = 0; k < s->n_wins;) /* its windows went with it */
            if (!strcmp(s->wins[k].name, r->name))
                s->wins[k] = s->wins[--s->n_wins];
            else
                k++;
        return 0;
    }
    case CR__HA_WIN: {
        if (s->n_wins == s->cap_wins) {
            uint32_t nc = s->cap_wins ? s->cap_wins * 2 : 16;
            cr__ha_win_t *n = nc <= CR__HA_WINS_MAX ? realloc(s->wins, nc * sizeof *n) : NULL;
            if (!n)
                return -ENOMEM;
            s->wins = n;
            s->cap_wins = nc;
        }
        cr__ha_win_t *w = &s->wins[s->n_wins++];
        memcpy(w->name, r->name, sizeof w->name);
        w->off = r->base;
        w->len = r->seg_size;
        return 0;
    }
    case CR__HA_WINEND:
        for (uint32_t k = 0; k < s->n_wins; k++)
            if (s->wins[k].off == r->base && !strcmp(s->wins[k].name, r->name)) {
                s->wins[k] = s->wins[--s->n_wins];
                break;
            }
        return 0;
    case CR__HA_VERSION:
        if (r->version > s->next_version)
            s->next_version = r->version;
        return 0;
    case CR__HA_HELD:
        return held_apply(s, r);
    case CR__HA_HELDEND: {
        int i = held_index(s, r);
        if (i >= 0) {
            free(s->held[i].rg);
            s->held[i] = s->held[--s->n_held];
        }
        return 0;
    }
    }
    return 0;
}

long cr__ha_shadow_load(cr__ha_shadow_t *s, const uint8_t *buf, size_t len)
{
    /* ~57 KiB: on the heap, neither on a (small) thread stack nor in TLS,
     * which glibc carves out of every thread's stack */
    cr__ha_rec_t *rec = malloc(sizeof *rec);
    if (!rec)
        return -ENOMEM;
    size_t off = 0;
    long rc = 0;
    while (off < len) {
        long n = cr__ha_rec_get(buf + off, len - off, rec);
        if (n == 0)
            break;
        if (n < 0) {
            rc = -EBADMSG;
            break;
        }
        if ((rc = cr__ha_shadow_apply(s, buf + off, (size_t)n, rec)) != 0)
            break;
        off += (size_t)n;
    }
    free(rec);
    return rc ? rc : (long)off;
}

uint64_t cr__ha_shadow_objects(const cr__ha_shadow_t *s) { return s->count; }
uint64_t cr__ha_shadow_next_version(const cr__ha_shadow_t *s) { return s->next_version; }

int cr__ha_shadow_foreach_seg(const cr__ha_shadow_t *s, int (*fn)(void *, const cr__ha_seg_t *),
                              void *user)
{
    for (uint32_t i = 0; i < s->n_segs; i++) {
        int rc = fn(user, &s->segs[i]);
        if (rc)
            return rc;
    }
    return 0;
}

int cr__ha_shadow_foreach_win(const cr__ha_shadow_t *s, int (*fn)(void *, const cr__ha_win_t *),
                              void *user)
{
    for (uint32_t i = 0; i < s->n_wins; i++) {
        int rc = fn(user, &s->wins[i]);
        if (rc)
            return rc;
    }
    return 0;
}

uint32_t cr__ha_shadow_n_held(const cr__ha_shadow_t *s) { return s->n_held; }
const cr__ha_held_t *cr__ha_shadow_held(const cr__ha_shadow_t *s, uint32_t i)
{
    return i < s->n_held ? &s->held[i] : NULL;
}

int cr__ha_shadow_foreach_obj(const cr__ha_shadow_t *s, int (*fn)(void *, const cr__ha_rec_t *),
                              void *user)
{
    cr__ha_rec_t *rec = malloc(sizeof *rec);
    if (!rec)
        return -ENOMEM;
    int rc = 0;
    for (uint64_t i = 0; i < s->nb && !rc; i++) {
        for (ent_t *e = s->b[i]; e && !rc; e = e->next) {
            if (cr__ha_rec_get(e->frame, e->frame_len, rec) <= 0)
                continue; /* cannot happen: the frame decoded when applied */
            if (e->complete)
                rec->flags |= CR__HA_OBJ_COMPLETE;
            else
                rec->flags &= (uint8_t)~CR__HA_OBJ_COMPLETE;
            if (e->has_crc) {
                rec->flags |= CR__HA_OBJ_CRC;
                rec->crc = e->crc;
            }
            rc = fn(user, rec);
        }
    }
    free(rec);
    return rc;
}
