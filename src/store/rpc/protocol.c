/* Encoding and bounded decoding of the store control-plane frames
 * (protocol.h, docs/protocol.md). */
#include "store/rpc/protocol.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"

/* ---- arena -------------------------------------------------------------- */

typedef struct arena_blk {
    struct arena_blk *next;
    size_t used, cap;
    _Alignas(16) uint8_t data[];
} arena_blk_t;

#define ARENA_CHUNK 4096

void *cr__rpc_msg_alloc(cr__rpc_msg_t *m, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    arena_blk_t *b = m->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        arena_blk_t *nb = malloc(sizeof *nb + cap);
        if (!nb)
            return NULL;
        nb->used = 0;
        nb->cap = cap;
        if (b && n > ARENA_CHUNK / 2) {
            /* big one-off: keep the current block on top for small allocs */
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            m->arena = nb;
        }
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *cr__rpc_msg_strdup(cr__rpc_msg_t *m, const char *s, size_t len)
{
    char *d = cr__rpc_msg_alloc(m, len + 1);
    if (!d)
        return NULL;
    if (len)
        memcpy(d, s, len);
    d[len] = 0;
    return d;
}

void cr__rpc_msg_free(cr__rpc_msg_t *m)
{
    if (!m)
        return;
    arena_blk_t *b = m->arena;
    while (b) {
        arena_blk_t *n = b->next;
        free(b);
        b = n;
    }
    memset(m, 0, sizeof *m);
}

/* ---- types -------------------------------------------------------------- */

static const struct {
    uint16_t type;
    const char *name;
} type_names[] = {
    {CR__RPC_PING, "ping"},
    {CR__RPC_MOUNT_SEGMENT, "mount_segment"},
    {CR__RPC_UNMOUNT_SEGMENT, "unmount_segment"},
    {CR__RPC_REMOVE_ALL, "remove_all"},
    {CR__RPC_PUT_START, "put_start"},
    {CR__RPC_PUT_END, "put_end"},
    {CR__RPC_PUT_REVOKE, "put_revoke"},
    {CR__RPC_GET_REPLICA_LIST, "get_replica_list"},
    {CR__RPC_EXIST, "exist"},
    {CR__RPC_GET_SIZE, "get_size"},
    {CR__RPC_REMOVE, "remove"},
    {CR__RPC_VALIDATE, "validate"},
    {CR__RPC_BATCH_PUT_START, "batch_put_start"},
    {CR__RPC_BATCH_PUT_END, "batch_put_end"},
    {CR__RPC_BATCH_PUT_REVOKE, "batch_put_revoke"},
    {CR__RPC_BATCH_GET_REPLICA_LIST, "batch_get_replica_list"},
    {CR__RPC_BATCH_EXIST, "batch_exist"},
    {CR__RPC_BATCH_GET_SIZE, "batch_get_size"},
    {CR__RPC_BATCH_REMOVE, "batch_remove"},
    {CR__RPC_BATCH_VALIDATE, "batch_validate"},
    {CR__RPC_TIER_MOUNT, "tier_mount"},
    {CR__RPC_TIER_REPORT, "tier_report"},
    {CR__RPC_TIER_SYNC, "tier_sync"},
    {CR__RPC_FS_INFO, "fs_info"},
    {CR__RPC_FS_SYNC, "fs_sync"},
    {CR__RPC_REPL_APPEND, "repl_append"},
    {CR__RPC_REMOVE_BY_REGEX, "remove_by_regex"},
    {CR__RPC_RTASK_CREATE, "rtask_create"},
    {CR__RPC_RTASK_QUERY, "rtask_query"},
    {CR__RPC_RTASK_START, "rtask_start"},
    {CR__RPC_RTASK_END, "rtask_end"},
    {CR__RPC_REPLICA_CLEAR, "replica_clear"},
    {CR__RPC_RESERVE, "reserve"},
    {CR__RPC_PUT_COMMIT, "put_commit"},
};

const char *cr__rpc_type_name(uint16_t type)
{
    type &= (uint16_t)~CR__RPC_REPLY;
    for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++)
        if (type_names[i].type == type)
            return type_names[i].name;
    return "?";
}

int cr__rpc_type_valid(uint16_t type) { return cr__rpc_type_name(type)[0] != '?'; }

int cr__rpc_type_has_items(uint16_t type)
{
    type &= (uint16_t)~CR__RPC_REPLY;
    return cr__rpc_type_valid(type) && type >= CR__RPC_PUT_START && type <= CR__RPC_BATCH_VALIDATE;
}

/* single-key base type of an object op */
static uint16_t base_type(uint16_t type)
{
    type &= (uint16_t)~CR__RPC_REPLY;
    return type >= CR__RPC_BATCH_PUT_START && type <= CR__RPC_BATCH_VALIDATE
               ? (uint16_t)(type - CR__RPC_BATCH_OFFSET)
               : type;
}

static int is_batch(uint16_t type)
{
    type &= (uint16_t)~CR__RPC_REPLY;
    return type >= CR__RPC_BATCH_PUT_START && type <= CR__RPC_BATCH_VALIDATE;
}

/* ---- output buffer ------------------------------------------------------ */

void cr__rpc_buf_init(cr__rpc_buf_t *b) { memset(b, 0, sizeof *b); }

void cr__rpc_buf_free(cr__rpc_buf_t *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

static uint8_t *w_reserve_slow(cr__rpc_buf_t *b, size_t n);

/* n more bytes at the end of b (NULL, and b->err sticky, if that fails).
 * Inline for the common case, the room already there: the encoder calls it
 * for every field. */
static inline uint8_t *w_reserve(cr__rpc_buf_t *b, size_t n)
{
    size_t need = b->len + n;
    if (__builtin_expect(!b->err && need <= b->cap &&
                             need <= (size_t)CR__RPC_HDR_SIZE + CR__RPC_PAYLOAD_MAX,
                         1)) {
        uint8_t *p = b->data + b->len;
        b->len = need;
        return p;
    }
    return w_reserve_slow(b, n);
}

static uint8_t *w_reserve_slow(cr__rpc_buf_t *b, size_t n)
{
    if (b->err)
        return NULL;
    if (b->len + n > (size_t)CR__RPC_HDR_SIZE + CR__RPC_PAYLOAD_MAX) {
        b->err = -E2BIG;
        return NULL;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d) {
            b->err = -ENOMEM;
            return NULL;
        }
        b->data = d;
        b->cap = cap;
    }
    uint8_t *p = b->data + b->len;
    b->len += n;
    return p;
}

static inline void w_u16(cr__rpc_buf_t *b, uint16_t v)
{
    uint8_t *p = w_reserve(b, 2);
    if (p)
        cr__put_le(p, v, 2);
}
static inline void w_u32(cr__rpc_buf_t *b, uint32_t v)
{
    uint8_t *p = w_reserve(b, 4);
    if (p)
        cr__put_le(p, v, 4);
}
static inline void w_u64(cr__rpc_buf_t *b, uint64_t v)
{
    uint8_t *p = w_reserve(b, 8);
    if (p)
        cr__put_le(p, v, 8);
}
static inline void w_bytes(cr__rpc_buf_t *b, const void *s, size_t n)
{
    uint8_t *p = w_reserve(b, n);
    if (p && n)
        memcpy(p, s, n);
}

/* ---- encoder ------------------------------------------------------------ */

static int seg_ok(const char *s)
{
    return s && strnlen(s, CR__RPC_SEGMENT_NAME_MAX) < CR__RPC_SEGMENT_NAME_MAX;
}

static int w_seg(cr__rpc_buf_t *b, const char *s)
{
    if (!seg_ok(s))
        return -EINVAL;
    size_t l = strlen(s);
    w_u16(b, (uint16_t)l);
    w_bytes(b, s, l);
    return 0;
}

/* The capabilities of a replica list, after it: u32 n, then n x {u16
 * replica index, u16 shard index, cap[CR__RPC_CAP_LEN]}. */
static void w_caps(cr__rpc_buf_t *b, const cr__rpc_item_t *it)
{
    uint32_t n = 0;
    for (uint32_t r = 0; r < it->n_replicas; r++)
        for (uint32_t s = 0; s < it->replicas[r].n_shards; s++)
            n += it->replicas[r].shards[s].cap != NULL;
    w_u32(b, n);
    for (uint32_t r = 0; r < it->n_replicas; r++)
        for (uint32_t s = 0; s < it->replicas[r].n_shards; s++)
            if (it->replicas[r].shards[s].cap) {
                w_u16(b, (uint16_t)r);
                w_u16(b, (uint16_t)s);
                w_bytes(b, it->replicas[r].shards[s].cap, CR__RPC_CAP_LEN);
            }
}

static int w_replica_list(cr__rpc_buf_t *b, const cr__rpc_item_t *it);

static int w_replicas(cr__rpc_buf_t *b, const cr__rpc_item_t *it)
{
    int rc = w_replica_list(b, it);
    if (!rc)
        w_caps(b, it);
    return rc;
}

static int w_replica_list(cr__rpc_buf_t *b, const cr__rpc_item_t *it)
{
    if (it->n_replicas > CR__RPC_REPLICA_MAX || (it->n_replicas && !it->replicas))
        return -EINVAL;
    w_u32(b, it->n_replicas);
    for (uint32_t r = 0; r < it->n_replicas; r++) {
        const cr__rpc_replica_t *rp = &it->replicas[r];
        if (rp->n_shards < 1 || rp->n_shards > CR__RPC_SHARD_MAX || !rp->shards)
            return -EINVAL;
        w_u64(b, rp->replica_id);
        w_u32(b, rp->n_shards);
        for (uint32_t s = 0; s < rp->n_shards; s++) {
            if (w_seg(b, rp->shards[s].segment))
                return -EINVAL;
            w_u64(b, rp->shards[s].addr);
            w_u64(b, rp->shards[s].len);
        }
    }
    return 0;
}

static int w_item(cr__rpc_buf_t *b, uint16_t bt, int reply, const cr__rpc_item_t *it)
{
    if (reply) {
        w_u32(b, (uint32_t)it->status);
        switch (bt) {
        case CR__RPC_PUT_START:
            w_u64(b, it->version);
            w_u32(b, it->lease_ms);
            return w_replicas(b, it);
        case CR__RPC_GET_REPLICA_LIST: {
            w_u64(b, it->version);
            w_u64(b, it->size);
            w_u32(b, it->lease_ms);
            int rc = w_replicas(b, it);
            w_u32(b, it->flags & CR__RPC_F_CRC);
            w_u32(b, it->crc);
            return rc;
        }
        case CR__RPC_GET_SIZE:
            w_u64(b, it->size);
            return 0;
        default:
            return 0;
        }
    }
    if (it->key_len > CR__RPC_KEY_MAX || (it->key_len && !it->key))
        return -EINVAL;
    w_u32(b, it->key_len);
    w_bytes(b, it->key, it->key_len);
    switch (bt) {
    case CR__RPC_PUT_START:
        if (it->cfg.n_preferred > CR__RPC_PREFERRED_MAX ||
            (it->cfg.n_preferred && !it->cfg.preferred))
            return -EINVAL;
        w_u64(b, it->size);
        w_u32(b, it->cfg.replica_num);
        w_u32(b, it->cfg.flags);
        w_u32(b, it->cfg.n_preferred);
        for (uint32_t i = 0; i < it->cfg.n_preferred; i++)
            if (w_seg(b, it->cfg.preferred[i]))
                return -EINVAL;
        return 0;
    case CR__RPC_PUT_END:
        w_u64(b, it->version);
        w_u32(b, it->flags & CR__RPC_F_CRC);
        w_u32(b, it->crc);
        return 0;
    case CR__RPC_PUT_REVOKE:
        w_u64(b, it->version);
        return 0;
    case CR__RPC_REMOVE:
        w_u32(b, it->flags);
        return 0;
    case CR__RPC_VALIDATE:
        w_u64(b, it->version);
        w_u64(b, it->replica_id);
        return 0;
    default:
        return 0;
    }
}

/* Tier messages (0x60..): one layout both ways, every field present. */
static int w_tier(cr__rpc_buf_t *b, const cr__rpc_msg_t *m)
{
    if (m->n_items > CR__RPC_BATCH_MAX || (m->n_items && !m->items))
        return -EINVAL;
    w_u64(b, m->client_id.hi);
    w_u64(b, m->client_id.lo);
    if (w_seg(b, m->segment ? m->segment : ""))
        return -EINVAL;
    w_u64(b, m->base);
    w_u64(b, m->size);
    w_u64(b, m->count);
    w_u32(b, m->flags);
    w_u32(b, m->n_items);
    for (uint32_t i = 0; i < m->n_items; i++) {
        const cr__rpc_item_t *it = &m->items[i];
        if (it->key_len > CR__RPC_KEY_MAX || (it->key_len && !it->key))
            return -EINVAL;
        w_u32(b, it->key_len);
        w_bytes(b, it->key, it->key_len);
        w_u32(b, (uint32_t)it->status);
        w_u64(b, it->version);
        w_u64(b, it->size);
        w_u64(b, it->replica_id);
        w_u32(b, it->flags);
        int rc = w_replicas(b, it);
        if (rc)
            return rc;
    }
    return 0;
}

int cr__rpc_encode(const cr__rpc_msg_t *m, cr__rpc_buf_t *b)
{
    b->len = 0;
    b->err = 0;
    uint16_t type = m->type;
    int reply = (type & CR__RPC_REPLY) != 0;
    if (!cr__rpc_type_valid(type))
        return -EINVAL;
    uint8_t *h = w_reserve(b, CR__RPC_HDR_SIZE);
    if (!h)
        return b->err;
    int rc = 0;
    uint16_t bt = base_type(type);
    /* the exclusion bit says what the payload holds: the encoder's alone */
    uint32_t hflags = !reply && bt == CR__RPC_PUT_START ? m->hflags & ~CR__RPC_HF_EXCLUDE
                                                        : m->hflags;
    if (CR__RPC_IS_TIER(type) || CR__RPC_IS_RTASK(type) || CR__RPC_IS_RESV(type)) {
        if (!(reply && m->status != 0))
            rc = w_tier(b, m);
    } else if (reply && m->status != 0 && !(cr__rpc_type_has_items(type) && m->n_items)) {
        /* error reply without items: empty payload */
    } else if (cr__rpc_type_has_items(type)) {
        if (m->n_items > CR__RPC_BATCH_MAX || (m->n_items && !m->items))
            return -EINVAL;
        if (m->n_items == 0 || (!reply && !is_batch(type) && m->n_items != 1))
            return -EINVAL;
        w_u32(b, m->n_items);
        for (uint32_t i = 0; i < m->n_items && !rc; i++)
            rc = w_item(b, bt, reply, &m->items[i]);
        if (!rc && !reply && bt == CR__RPC_PUT_START && m->n_exclude) {
            /* the exclusion list (u32 n + n seg), announced by the header */
            if (m->n_exclude > CR__RPC_EXCLUDE_MAX || !m->exclude)
                return -EINVAL;
            hflags |= CR__RPC_HF_EXCLUDE;
            w_u32(b, m->n_exclude);
            for (uint32_t i = 0; i < m->n_exclude && !rc; i++)
                rc = w_seg(b, m->exclude[i]);
        }
    } else {
        switch (bt) {
        case CR__RPC_PING:
            if (reply) {
                w_u32(b, m->flags);
                w_u64(b, m->master_id);
                w_u64(b, m->count);
            } else {
                w_u64(b, m->client_id.hi);
                w_u64(b, m->client_id.lo);
                if (m->segment) /* optional: the segment the sender holds mounted */
                    rc = w_seg(b, m->segment);
            }
            break;
        case CR__RPC_MOUNT_SEGMENT:
        case CR__RPC_UNMOUNT_SEGMENT:
            if (!reply) {
                w_u64(b, m->client_id.hi);
                w_u64(b, m->client_id.lo);
                rc = w_seg(b, m->segment);
                if (bt == CR__RPC_MOUNT_SEGMENT) {
                    w_u64(b, m->base);
                    w_u64(b, m->size);
                }
            } else if (bt == CR__RPC_MOUNT_SEGMENT && (m->blob_len || m->count)) {
                /* the segment's capability key (caps on; may be empty),
                 * then the ms the name stays held, when it is */
                if (m->blob_len > 256 || (m->blob_len && !m->blob))
                    return -EINVAL;
                w_u32(b, m->blob_len);
                w_bytes(b, m->blob, m->blob_len);
                if (m->count)
                    w_u64(b, m->count);
            }
            break;
        case CR__RPC_REMOVE_ALL:
            if (reply)
                w_u64(b, m->count);
            else
                w_u32(b, m->flags);
            break;
        case CR__RPC_REPL_APPEND:
            if (reply) {
                w_u64(b, m->count);
            } else {
                if (m->blob_len > CR__RPC_PAYLOAD_MAX - 16 || (m->blob_len && !m->blob))
                    return -EINVAL;
                w_u32(b, m->flags);
                w_u64(b, m->count);
                w_u32(b, m->blob_len);
                w_bytes(b, m->blob, m->blob_len);
            }
            break;
        case CR__RPC_REMOVE_BY_REGEX:
            if (reply) {
                w_u64(b, m->count);
            } else {
                size_t l = m->pattern ? strlen(m->pattern) : 0;
                if (l == 0 || l > CR__RPC_KEY_MAX)
                    return -EINVAL;
                w_u32(b, m->flags);
                w_u16(b, (uint16_t)l);
                w_bytes(b, m->pattern, l);
            }
            break;
        }
    }
    if (rc)
        return rc;
    if (b->err)
        return b->err;
    size_t plen = b->len - CR__RPC_HDR_SIZE;
    h = b->data; /* may have moved */
    cr__put_le(h + 0, CR__RPC_MAGIC, 4);
    cr__put_le(h + 4, CR__RPC_VERSION, 2);
    cr__put_le(h + 6, type, 2);
    cr__put_le(h + 8, m->req_id, 8);
    cr__put_le(h + 16, plen, 4);
    cr__put_le(h + 20, (uint32_t)m->status, 4);
    cr__put_le(h + 24, hflags, 4);
    cr__put_le(h + 28, m->epoch, 4);
    return 0;
}

/* ---- decoder ------------------------------------------------------------ */

int cr__rpc_decode_hdr(const void *buf, cr__rpc_hdr_t *h)
{
    const uint8_t *p = buf;
    cr__rpc_hdr_t t;
    t.magic = (uint32_t)cr__get_le(p, 4);
    t.version = (uint16_t)cr__get_le(p + 4, 2);
    t.type = (uint16_t)cr__get_le(p + 6, 2);
    t.req_id = cr__get_le(p + 8, 8);
    t.payload_len = (uint32_t)cr__get_le(p + 16, 4);
    t.status = (int32_t)(uint32_t)cr__get_le(p + 20, 4);
    t.flags = (uint32_t)cr__get_le(p + 24, 4);
    t.epoch = (uint32_t)cr__get_le(p + 28, 4);
    if (t.magic != CR__RPC_MAGIC || t.version != CR__RPC_VERSION ||
        t.payload_len > CR__RPC_PAYLOAD_MAX)
        return -EPROTO;
    *h = t;
    return 0;
}

typedef struct rd {
    const uint8_t *p;
    size_t left;
    int bad;
    /* the last segment name decoded (in the message's arena): a batch's
     * replica lists mostly name the same few segments, so an equal name
     * shares that string instead of taking a copy per shard */
    const char *last_seg;
    uint16_t last_seg_len;
} rd_t;

static const uint8_t *r_take(rd_t *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}
static uint64_t r_uint(rd_t *r, int n)
{
    const uint8_t *p = r_take(r, (size_t)n);
    return p ? cr__get_le(p, n) : 0;
}
#define r_u16(r) ((uint16_t)r_uint(r, 2))
#define r_u32(r) ((uint32_t)r_uint(r, 4))
#define r_u64(r) (r_uint(r, 8))

/* segment name: u16 len (< CR__RPC_SEGMENT_NAME_MAX), bytes without NUL */
static const char *r_seg(rd_t *r, cr__rpc_msg_t *m, int *nomem)
{
    uint16_t l = r_u16(r);
    if (r->bad || l >= CR__RPC_SEGMENT_NAME_MAX) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *p = r_take(r, l);
    if (!p)
        return NULL;
    if (r->last_seg && l == r->last_seg_len && !memcmp(p, r->last_seg, l))
        return r->last_seg; /* same bytes, so no NUL among them either */
    if (memchr(p, 0, l)) {
        r->bad = 1;
        return NULL;
    }
    char *s = cr__rpc_msg_strdup(m, (const char *)p, l);
    if (!s) {
        *nomem = 1;
        return NULL;
    }
    r->last_seg = s;
    r->last_seg_len = l;
    return s;
}

/* smallest encoded size of one item, per base type and direction; used to
 * bound counts against the bytes left before allocating arrays */
static size_t min_item(uint16_t bt, int reply)
{
    if (reply) {
        switch (bt) {
        case CR__RPC_PUT_START: return 4 + 8 + 4 + 4;
        case CR__RPC_GET_REPLICA_LIST: return 4 + 8 + 8 + 4 + 4 + 8;
        case CR__RPC_GET_SIZE: return 4 + 8;
        default: return 4;
        }
    }
    switch (bt) {
    case CR__RPC_PUT_START: return 4 + 8 + 12;
    case CR__RPC_PUT_END: return 4 + 8 + 8;
    case CR__RPC_PUT_REVOKE: return 4 + 8;
    case CR__RPC_REMOVE: return 4 + 4;
    case CR__RPC_VALIDATE: return 4 + 16;
    default: return 4;
    }
}

static int r_replica_list(rd_t *r, cr__rpc_msg_t *m, cr__rpc_item_t *it, int *nomem);

/* Reads the capability block after a replica list (w_caps). */
static int r_caps(rd_t *r, cr__rpc_msg_t *m, cr__rpc_item_t *it, int *nomem)
{
    uint32_t n = r_u32(r);
    if (r->bad || n > CR__RPC_REPLICA_MAX * CR__RPC_SHARD_MAX ||
        (size_t)n * (4 + CR__RPC_CAP_LEN) > r->left)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t ri = r_u16(r), si = r_u16(r);
        const uint8_t *p = r_take(r, CR__RPC_CAP_LEN);
        if (r->bad || !p || ri >= it->n_replicas || si >= it->replicas[ri].n_shards)
            return -1;
        uint8_t *c = cr__rpc_msg_alloc(m, CR__RPC_CAP_LEN);
        if (!c) {
            *nomem = 1;
            return -1;
        }
        memcpy(c, p, CR__RPC_CAP_LEN);
        it->replicas[ri].shards[si].cap = c;
    }
    return 0;
}

static int r_replicas(rd_t *r, cr__rpc_msg_t *m, cr__rpc_item_t *it, int *nomem)
{
    if (r_replica_list(r, m, it, nomem))
        return -1;
    return r_caps(r, m, it, nomem);
}

static int r_replica_list(rd_t *r, cr__rpc_msg_t *m, cr__rpc_item_t *it, int *nomem)
{
    uint32_t n = r_u32(r);
    /* one replica is at least 8 + 4 + one shard (2 + 16) bytes */
    if (r->bad || n > CR__RPC_REPLICA_MAX || (size_t)n * 30 > r->left)
        return -1;
    it->n_replicas = n;
    if (!n)
        return 0;
    it->replicas = cr__rpc_msg_alloc(m, n * sizeof *it->replicas);
    if (!it->replicas) {
        *nomem = 1;
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        cr__rpc_replica_t *rp = &it->replicas[i];
        rp->replica_id = r_u64(r);
        rp->n_shards = r_u32(r);
        if (r->bad || rp->n_shards < 1 || rp->n_shards > CR__RPC_SHARD_MAX ||
            (size_t)rp->n_shards * 18 > r->left)
            return -1;
        rp->shards = cr__rpc_msg_alloc(m, rp->n_shards * sizeof *rp->shards);
        if (!rp->shards) {
            *nomem = 1;
            return -1;
        }
        for (uint32_t s = 0; s < rp->n_shards; s++) {
            rp->shards[s].segment = r_seg(r, m, nomem);
            if (!rp->shards[s].segment)
                return -1;
            rp->shards[s].addr = r_u64(r);
            rp->shards[s].len = r_u64(r);
        }
    }
    return r->bad ? -1 : 0;
}

static int r_item(rd_t *r, cr__rpc_msg_t *m, uint16_t bt, int reply, cr__rpc_item_t *it,
                  int *nomem)
{
    if (reply) {
        it->status = (int32_t)r_u32(r);
        switch (bt) {
        case CR__RPC_PUT_START:
            it->version = r_u64(r);
            it->lease_ms = r_u32(r);
            return r_replicas(r, m, it, nomem);
        case CR__RPC_GET_REPLICA_LIST:
            it->version = r_u64(r);
            it->size = r_u64(r);
            it->lease_ms = r_u32(r);
            if (r_replicas(r, m, it, nomem))
                return -1;
            it->flags = r_u32(r) & CR__RPC_F_CRC;
            it->crc = r_u32(r);
            break;
        case CR__RPC_GET_SIZE:
            it->size = r_u64(r);
            break;
        default:
            break;
        }
        return r->bad ? -1 : 0;
    }
    uint32_t kl = r_u32(r);
    if (r->bad || kl > CR__RPC_KEY_MAX)
        return -1;
    const uint8_t *kp = r_take(r, kl);
    if (!kp)
        return -1;
    it->key_len = kl;
    it->key = cr__rpc_msg_strdup(m, (const char *)kp, kl);
    if (!it->key) {
        *nomem = 1;
        return -1;
    }
    switch (bt) {
    case CR__RPC_PUT_START: {
        it->size = r_u64(r);
        it->cfg.replica_num = r_u32(r);
        it->cfg.flags = r_u32(r);
        uint32_t np = r_u32(r);
        if (r->bad || np > CR__RPC_PREFERRED_MAX || (size_t)np * 2 > r->left)
            return -1;
        it->cfg.n_preferred = np;
        if (np) {
            it->cfg.preferred = cr__rpc_msg_alloc(m, np * sizeof(char *));
            if (!it->cfg.preferred) {
                *nomem = 1;
                return -1;
            }
            for (uint32_t i = 0; i < np; i++)
                if (!(it->cfg.preferred[i] = r_seg(r, m, nomem)))
                    return -1;
        }
        break;
    }
    case CR__RPC_PUT_END:
        it->version = r_u64(r);
        it->flags = r_u32(r) & CR__RPC_F_CRC;
        it->crc = r_u32(r);
        break;
    case CR__RPC_PUT_REVOKE:
        it->version = r_u64(r);
        break;
    case CR__RPC_REMOVE:
        it->flags = r_u32(r);
        break;
    case CR__RPC_VALIDATE:
        it->version = r_u64(r);
        it->replica_id = r_u64(r);
        break;
    default:
        break;
    }
    return r->bad ? -1 : 0;
}

/* PutStart's exclusion list (after the items): u32 n (1..CR__RPC_EXCLUDE_MAX: the
 * encoder sends none rather than an empty one), n seg. */
static int r_exclude(rd_t *r, cr__rpc_msg_t *m, int *nomem)
{
    uint32_t n = r_u32(r);
    if (r->bad || n < 1 || n > CR__RPC_EXCLUDE_MAX || (size_t)n * 2 > r->left)
        return -1;
    m->n_exclude = n;
    m->exclude = cr__rpc_msg_alloc(m, n * sizeof *m->exclude);
    if (!m->exclude) {
        *nomem = 1;
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!(m->exclude[i] = r_seg(r, m, nomem)))
            return -1;
    return 0;
}

static int r_tier(rd_t *r, cr__rpc_msg_t *m, int *nomem)
{
    m->client_id.hi = r_u64(r);
    m->client_id.lo = r_u64(r);
    m->segment = r_seg(r, m, nomem);
    if (!m->segment)
        return -1;
    m->base = r_u64(r);
    m->size = r_u64(r);
    m->count = r_u64(r);
    m->flags = r_u32(r);
    uint32_t n = r_u32(r);
    /* an item is at least 4 + 4 + 8 + 8 + 8 + 4 + 4 bytes */
    if (r->bad || n > CR__RPC_BATCH_MAX || (size_t)n * 40 > r->left)
        return -1;
    m->n_items = n;
    if (!n)
        return 0;
    m->items = cr__rpc_msg_alloc(m, (size_t)n * sizeof *m->items);
    if (!m->items) {
        *nomem = 1;
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        cr__rpc_item_t *it = &m->items[i];
        uint32_t kl = r_u32(r);
        if (r->bad || kl > CR__RPC_KEY_MAX)
            return -1;
        const uint8_t *kp = r_take(r, kl);
        if (!kp)
            return -1;
        it->key_len = kl;
        it->key = cr__rpc_msg_strdup(m, (const char *)kp, kl);
        if (!it->key) {
            *nomem = 1;
            return -1;
        }
        it->status = (int32_t)r_u32(r);
        it->version = r_u64(r);
        it->size = r_u64(r);
        it->replica_id = r_u64(r);
        it->flags = r_u32(r);
        if (r->bad || r_replicas(r, m, it, nomem))
            return -1;
    }
    return r->bad ? -1 : 0;
}

int cr__rpc_decode(const cr__rpc_hdr_t *h, const void *payload, size_t len, cr__rpc_msg_t *out)
{
    cr__rpc_msg_t m;
    memset(&m, 0, sizeof m);
    if (len != h->payload_len || len > CR__RPC_PAYLOAD_MAX || (len && !payload))
        return -EBADMSG;
    uint16_t type = h->type;
    int reply = (type & CR__RPC_REPLY) != 0;
    if (!cr__rpc_type_valid(type))
        return -EBADMSG;
    m.type = type;
    m.req_id = h->req_id;
    m.status = h->status;
    m.epoch = h->epoch;
    m.hflags = h->flags;
    rd_t r = {.p = payload, .left = len, .bad = 0};
    int nomem = 0, rc = 0;
    uint16_t bt = base_type(type);
    if (reply && h->status != 0 && len == 0) {
        /* error reply without payload */
    } else if (CR__RPC_IS_TIER(type) || CR__RPC_IS_RTASK(type) || CR__RPC_IS_RESV(type)) {
        rc = r_tier(&r, &m, &nomem);
    } else if (cr__rpc_type_has_items(type)) {
        uint32_t n = r_u32(&r);
        /* count 0 is never valid: an item-less reply is the empty payload */
        if (r.bad || n > CR__RPC_BATCH_MAX || n == 0 ||
            (!reply && !is_batch(type) && n != 1) || (size_t)n * min_item(bt, reply) > r.left) {
            rc = -1;
        } else if (n) {
            m.n_items = n;
            m.items = cr__rpc_msg_alloc(&m, (size_t)n * sizeof *m.items);
            if (!m.items)
                nomem = 1, rc = -1;
            for (uint32_t i = 0; i < n && !rc; i++)
                rc = r_item(&r, &m, bt, reply, &m.items[i], &nomem);
            if (!rc && !reply && bt == CR__RPC_PUT_START && (h->flags & CR__RPC_HF_EXCLUDE))
                rc = r_exclude(&r, &m, &nomem);
        }
    } else if (reply && h->status != 0) {
        rc = -1; /* an error reply of a non-item type carries no payload */
    } else {
        switch (bt) {
        case CR__RPC_PING:
            if (reply) {
                m.flags = r_u32(&r);
                m.master_id = r_u64(&r);
                m.count = r_u64(&r);
            } else {
                m.client_id.hi = r_u64(&r);
                m.client_id.lo = r_u64(&r);
                if (!r.bad && r.left) {
                    m.segment = r_seg(&r, &m, &nomem);
                    if (!m.segment)
                        rc = -1;
                }
            }
            break;
        case CR__RPC_MOUNT_SEGMENT:
        case CR__RPC_UNMOUNT_SEGMENT:
            if (!reply) {
                m.client_id.hi = r_u64(&r);
                m.client_id.lo = r_u64(&r);
                m.segment = r_seg(&r, &m, &nomem);
                if (!m.segment)
                    rc = -1;
                if (bt == CR__RPC_MOUNT_SEGMENT) {
                    m.base = r_u64(&r);
                    m.size = r_u64(&r);
                }
            } else if (bt == CR__RPC_MOUNT_SEGMENT && r.left) {
                m.blob_len = r_u32(&r);
                const uint8_t *p = r.bad || m.blob_len > 256 ? NULL : r_take(&r, m.blob_len);
                uint8_t *copy = p ? cr__rpc_msg_alloc(&m, m.blob_len ? m.blob_len : 1) : NULL;
                if (!p)
                    rc = -1;
                else if (!copy)
                    nomem = 1, rc = -1;
                else {
                    memcpy(copy, p, m.blob_len);
                    m.blob = copy;
                }
                if (!rc && r.left)
                    m.count = r_u64(&r);
            }
            break;
        case CR__RPC_REMOVE_ALL:
            if (reply)
                m.count = r_u64(&r);
            else
                m.flags = r_u32(&r);
            break;
        case CR__RPC_REPL_APPEND:
            if (reply) {
                m.count = r_u64(&r);
            } else {
                m.flags = r_u32(&r);
                m.count = r_u64(&r);
                m.blob_len = r_u32(&r);
                if (!r.bad && m.blob_len > r.left) {
                    rc = -1;
                } else if (!r.bad && m.blob_len) {
                    const uint8_t *p = r_take(&r, m.blob_len);
                    uint8_t *copy = p ? cr__rpc_msg_alloc(&m, m.blob_len) : NULL;
                    if (p && !copy)
                        nomem = 1, rc = -1;
                    else if (copy)
                        memcpy(copy, p, m.blob_len);
                    m.blob = copy;
                }
            }
            break;
        case CR__RPC_REMOVE_BY_REGEX:
            if (reply) {
                m.count = r_u64(&r);
            } else {
                m.flags = r_u32(&r);
                uint16_t l = r_u16(&r);
                const uint8_t *p = r.bad || l == 0 || l > CR__RPC_KEY_MAX ? NULL : r_take(&r, l);
                if (!p || memchr(p, 0, l)) {
                    rc = -1;
                } else {
                    m.pattern = cr__rpc_msg_strdup(&m, (const char *)p, l);
                    if (!m.pattern)
                        nomem = 1, rc = -1;
                }
            }
            break;
        }
    }
    if (rc || r.bad || r.left != 0) {
        cr__rpc_msg_free(&m);
        return nomem ? -ENOMEM : -EBADMSG;
    }
    *out = m;
    return 0;
}
