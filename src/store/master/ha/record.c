/* Master op records (record.h). */
#include "store/master/ha/record.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "common/bytes.h"

void cr__ha_buf_free(cr__ha_buf_t *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static uint8_t *reserve(cr__ha_buf_t *b, size_t n)
{
    if (b->err)
        return NULL;
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->len + n)
            nc *= 2;
        uint8_t *np = realloc(b->p, nc);
        if (!np) {
            b->err = -ENOMEM;
            return NULL;
        }
        b->p = np;
        b->cap = nc;
    }
    uint8_t *p = b->p + b->len;
    b->len += n;
    return p;
}

int cr__ha_buf_append(cr__ha_buf_t *b, const void *p, size_t n)
{
    uint8_t *d = reserve(b, n);
    if (d && n)
        memcpy(d, p, n);
    return b->err;
}

static void w(cr__ha_buf_t *b, uint64_t v, int n)
{
    uint8_t *p = reserve(b, (size_t)n);
    if (p)
        cr__put_le(p, v, n);
}

static void wbytes(cr__ha_buf_t *b, const void *s, size_t n)
{
    uint8_t *p = reserve(b, n);
    if (p && n)
        memcpy(p, s, n);
}

static int wstr(cr__ha_buf_t *b, const char *s)
{
    size_t l = s ? strnlen(s, CR__RPC_SEGMENT_NAME_MAX) : CR__RPC_SEGMENT_NAME_MAX;
    if (l == 0 || l >= CR__RPC_SEGMENT_NAME_MAX)
        return -EINVAL;
    w(b, l, 2);
    wbytes(b, s, l);
    return 0;
}

static int wkey(cr__ha_buf_t *b, const char *k, size_t l)
{
    if (!k || l == 0 || l > CR__RPC_KEY_MAX)
        return -EINVAL;
    w(b, l, 2);
    wbytes(b, k, l);
    return 0;
}

/* A HELD record's bounds, written and read alike: every range inside the
 * memory, every time within the entry's. */
static int held_ok(const cr__ha_rec_t *r)
{
    if (r->hold_ms > CR__HA_HELD_MS_MAX || r->n_hrg > CR__HA_HELD_RG_MAX ||
        (r->flags & ~(CR__HA_HELD_WHOLE | CR__HA_HELD_MORE)) ||
        ((r->flags & CR__HA_HELD_WHOLE) && r->n_hrg) || r->base + r->seg_size < r->base)
        return 0;
    for (uint32_t i = 0; i < r->n_hrg; i++) {
        const cr__ha_held_rg_t *g = &r->hrg[i];
        if (!g->len || g->off > r->seg_size || g->len > r->seg_size - g->off ||
            g->ms > r->hold_ms)
            return 0;
    }
    return 1;
}

int cr__ha_rec_put(cr__ha_buf_t *b, const cr__ha_rec_t *r)
{
    size_t start = b->len;
    if (!reserve(b, CR__HA_FRAME_HDR))
        return b->err;
    w(b, r->type, 1);
    int rc = 0;
    switch (r->type) {
    case CR__HA_OBJ: {
        w(b, r->version, 8);
        w(b, r->size, 8);
        w(b, r->flags, 1);
        if (r->flags & CR__HA_OBJ_CRC)
            w(b, r->crc, 4);
        rc = wkey(b, r->key, r->key_len);
        if (rc || r->n_rep > CR__RPC_REPLICA_MAX) {
            rc = -EINVAL;
            break;
        }
        w(b, r->n_rep, 1);
        uint32_t k = 0;
        for (uint32_t i = 0; i < r->n_rep && !rc; i++) {
            w(b, r->n_sh[i], 1);
            if (r->n_sh[i] == CR__HA_REP_DEAD)
                continue;
            if (r->n_sh[i] == 0 || r->n_sh[i] > CR__RPC_SHARD_MAX) {
                rc = -EINVAL;
                break;
            }
            for (uint32_t s = 0; s < r->n_sh[i] && !rc; s++, k++) {
                rc = wstr(b, r->sh[k].seg);
                w(b, r->sh[k].off, 8);
                w(b, r->sh[k].len, 8);
            }
        }
        break;
    }
    case CR__HA_END:
    case CR__HA_DEL:
    case CR__HA_ENDC:
        w(b, r->version, 8);
        if (r->type == CR__HA_ENDC)
            w(b, r->crc, 4);
        rc = wkey(b, r->key, r->key_len);
        break;
    case CR__HA_SEG:
        w(b, r->base, 8);
        w(b, r->seg_size, 8);
        w(b, r->client.hi, 8);
        w(b, r->client.lo, 8);
        rc = wstr(b, r->name);
        break;
    case CR__HA_SEGDROP:
        rc = wstr(b, r->name);
        break;
    case CR__HA_VERSION:
        w(b, r->version, 8);
        break;
    case CR__HA_WIN:
    case CR__HA_WINEND:
        rc = wstr(b, r->name);
        w(b, r->base, 8);
        w(b, r->seg_size, 8);
        break;
    case CR__HA_HELD:
    case CR__HA_HELDEND:
        rc = wstr(b, r->name);
        w(b, r->client.hi, 8);
        w(b, r->client.lo, 8);
        w(b, r->base, 8);
        w(b, r->seg_size, 8);
        if (r->type == CR__HA_HELDEND)
            break;
        if (!held_ok(r)) {
            rc = -EINVAL;
            break;
        }
        w(b, r->hold_ms, 8);
        w(b, r->flags, 1);
        w(b, r->n_hrg, 2);
        for (uint32_t i = 0; i < r->n_hrg; i++) {
            w(b, r->hrg[i].off, 8);
            w(b, r->hrg[i].len, 8);
            w(b, r->hrg[i].ms, 8);
        }
        break;
    default:
        rc = -EINVAL;
    }
    if (rc || b->err) {
        b->len = start;
        return rc ? rc : b->err;
    }
    size_t body = b->len - start - CR__HA_FRAME_HDR;
    cr__put_le(b->p + start, body, 4);
    cr__put_le(b->p + start + 4, (uint32_t)XXH3_64bits(b->p + start + CR__HA_FRAME_HDR, body), 4);
    return 0;
}

typedef struct rd {
    const uint8_t *p;
    size_t left;
    int bad;
} rd_t;

static uint64_t r(rd_t *d, int n)
{
    if (d->bad || d->left < (size_t)n) {
        d->bad = 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)d->p[i] << (8 * i);
    d->p += n;
    d->left -= (size_t)n;
    return v;
}

static const uint8_t *rtake(rd_t *d, size_t n)
{
    if (d->bad || d->left < n) {
        d->bad = 1;
        return NULL;
    }
    const uint8_t *p = d->p;
    d->p += n;
    d->left -= n;
    return p;
}

static void rstr(rd_t *d, char *out)
{
    size_t l = (size_t)r(d, 2);
    if (l == 0 || l >= CR__RPC_SEGMENT_NAME_MAX) {
        d->bad = 1;
        return;
    }
    const uint8_t *p = rtake(d, l);
    if (!p || memchr(p, 0, l)) {
        d->bad = 1;
        return;
    }
    memcpy(out, p, l);
    out[l] = 0;
}

static void rkey(rd_t *d, cr__ha_rec_t *rec)
{
    size_t l = (size_t)r(d, 2);
    if (l == 0 || l > CR__RPC_KEY_MAX) {
        d->bad = 1;
        return;
    }
    rec->key = (const char *)rtake(d, l);
    rec->key_len = (uint16_t)l;
    if (rec->key && memchr(rec->key, 0, l))
        d->bad = 1;
}

/* The rest of a HELD body. */
static void rheld(rd_t *d, cr__ha_rec_t *rec)
{
    rec->hold_ms = r(d, 8);
    rec->flags = (uint8_t)r(d, 1);
    rec->n_hrg = (uint16_t)r(d, 2);
    if (rec->n_hrg > CR__HA_HELD_RG_MAX) {
        d->bad = 1;
        return;
    }
    for (uint32_t i = 0; i < rec->n_hrg; i++) {
        rec->hrg[i].off = r(d, 8);
        rec->hrg[i].len = r(d, 8);
        rec->hrg[i].ms = r(d, 8);
    }
}

long cr__ha_rec_get(const uint8_t *p, size_t avail, cr__ha_rec_t *rec)
{
    if (avail < CR__HA_FRAME_HDR)
        return 0;
    uint32_t body = (uint32_t)(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24);
    uint32_t check = (uint32_t)(p[4] | p[5] << 8 | p[6] << 16 | (uint32_t)p[7] << 24);
    if (body == 0 || body > CR__HA_REC_MAX)
        return -EBADMSG;
    if (avail - CR__HA_FRAME_HDR < body)
        return 0;
    if ((uint32_t)XXH3_64bits(p + CR__HA_FRAME_HDR, body) != check)
        return -EBADMSG;
    rd_t d = {.p = p + CR__HA_FRAME_HDR, .left = body};
    memset(rec, 0, offsetof(cr__ha_rec_t, segs));
    rec->name[0] = 0;
    rec->type = (uint8_t)r(&d, 1);
    switch (rec->type) {
    case CR__HA_OBJ: {
        rec->version = r(&d, 8);
        rec->size = r(&d, 8);
        rec->flags = (uint8_t)r(&d, 1);
        if (rec->flags & CR__HA_OBJ_CRC)
            rec->crc = (uint32_t)r(&d, 4);
        rkey(&d, rec);
        rec->n_rep = (uint8_t)r(&d, 1);
        if (rec->n_rep > CR__RPC_REPLICA_MAX) {
            d.bad = 1;
            break;
        }
        uint32_t k = 0;
        for (uint32_t i = 0; i < rec->n_rep && !d.bad; i++) {
            rec->n_sh[i] = (uint8_t)r(&d, 1);
            if (rec->n_sh[i] == CR__HA_REP_DEAD)
                continue;
            if (rec->n_sh[i] == 0 || rec->n_sh[i] > CR__RPC_SHARD_MAX) {
                d.bad = 1;
                break;
            }
            for (uint32_t s = 0; s < rec->n_sh[i] && !d.bad; s++, k++) {
                rstr(&d, rec->segs[k]);
                rec->sh[k].seg = rec->segs[k];
                rec->sh[k].off = r(&d, 8);
                rec->sh[k].len = r(&d, 8);
            }
        }
        break;
    }
    case CR__HA_END:
    case CR__HA_DEL:
    case CR__HA_ENDC:
        rec->version = r(&d, 8);
        if (rec->type == CR__HA_ENDC)
            rec->crc = (uint32_t)r(&d, 4);
        rkey(&d, rec);
        break;
    case CR__HA_SEG:
        rec->base = r(&d, 8);
        rec->seg_size = r(&d, 8);
        rec->client.hi = r(&d, 8);
        rec->client.lo = r(&d, 8);
        rstr(&d, rec->name);
        break;
    case CR__HA_SEGDROP:
        rstr(&d, rec->name);
        break;
    case CR__HA_VERSION:
        rec->version = r(&d, 8);
        break;
    case CR__HA_WIN:
    case CR__HA_WINEND:
        rstr(&d, rec->name);
        rec->base = r(&d, 8);
        rec->seg_size = r(&d, 8);
        break;
    case CR__HA_HELD:
    case CR__HA_HELDEND:
        rstr(&d, rec->name);
        rec->client.hi = r(&d, 8);
        rec->client.lo = r(&d, 8);
        rec->base = r(&d, 8);
        rec->seg_size = r(&d, 8);
        if (rec->type == CR__HA_HELD) {
            rheld(&d, rec);
            d.bad |= !held_ok(rec);
        }
        break;
    default:
        d.bad = 1;
    }
    if (d.bad || d.left)
        return -EBADMSG;
    return (long)(CR__HA_FRAME_HDR + body);
}
