/* crescent-conductor service: applying KV-event batches (vLLM/SGLang
 * BlockStored/BlockRemoved/AllBlocksCleared, Mooncake Store events) to the
 * publisher's hash map and the prefix index; the ZMQ thread's entry point. */
#include "conductor/service/service_priv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* bh: H(block_i) of e's blocks, computed before the lock (NULL: compute). */
static void apply_stored_locked(cr__csvc_t *s, uint32_t si, const cr__kvev_t *e, int tier,
                                const uint64_t *bh)
{
    slot_t *sl = &s->slots[si];
    uint32_t bs = sl->reg.id.block_size;
    uint64_t *seq = s->scratch;
    size_t n = e->n_hashes;
    if (n > s->scratch_cap)
        n = s->scratch_cap; /* cannot happen: the decoder bounds n_hashes */
    if (e->n_tokens) {
        uint64_t prev = 0;
        int have_prev = 0;
        if (e->has_parent) {
            const cr__emap_ent_t *pe = cr__emap_get(&sl->map, e->parent);
            if (!pe) {
                inc(s, CR__CSVC_M_ORPHAN_BLOCKS, n);
                log_once(s, ONCE_ORPHAN,
                         "instance %s: BlockStored with unknown parent_block_hash %" PRIu64
                         "; its blocks are skipped",
                         sl->reg.id.instance_id, e->parent);
                return;
            }
            prev = pe->seq;
            have_prev = 1;
        }
        for (size_t i = 0; i < n; i++) {
            uint64_t b = bh ? bh[i] : cr_cond_hash_block(e->tokens + i * bs, bs);
            prev = have_prev ? cr_cond_hash_chain(prev, b) : b;
            have_prev = 1;
            seq[i] = prev;
        }
    } else {
        /* no tokens: the publisher uses the standard rolling hash already */
        memcpy(seq, e->hashes, n * sizeof *seq);
    }
    size_t mapped = 0;
    for (; mapped < n; mapped++) {
        int rc = cr__emap_put(&sl->map, e->hashes[mapped], seq[mapped], 1u << tier);
        if (rc) {
            inc(s, CR__CSVC_M_MAP_FULL, n - mapped);
            log_once(s, ONCE_MAPFULL,
                     "instance %s: engine hash map full (%zu entries, max_mapped_blocks); "
                     "further blocks are not indexed",
                     sl->reg.id.instance_id, sl->map.n);
            break;
        }
    }
    ns_apply(seq, mapped, sl->ns); /* the map keeps chainable hashes, the index ns'd ones */
    uint64_t evicted = 0;
    int rc = cr_cond_index_insert(s->idx, si, (cr_cond_tier_t)tier, seq, mapped, &evicted);
    if (rc == -ENOSPC) {
        inc(s, CR__CSVC_M_INDEX_FULL, 1);
        log_once(s, ONCE_INDEXFULL, "prefix index entry bound reached; inserts are refused");
    }
    inc(s, CR__CSVC_M_BLOCKS_STORED, mapped);
    inc(s, CR__CSVC_M_EVICTIONS, evicted);
}

/* Mooncake Store events: a mooncake_key names one block; its replicas say on
 * which tiers it is. The key is remembered (salted into the engine-hash map,
 * with the block hash as aux) so that BlockUpdateEvent can move it. */
#define MC_KEY_SALT 0x9e3779b97f4a7c15ull

static unsigned replica_tiers(unsigned replicas)
{
    unsigned m = 0;
    if (replicas & CR__KVEV_REPLICA_MEMORY)
        m |= 1u << CR_COND_TIER_DRAM;
    if (replicas & CR__KVEV_REPLICA_DISK)
        m |= 1u << CR_COND_TIER_DISK;
    return m;
}

static void apply_mc_store_locked(cr__csvc_t *s, uint32_t si, const cr__kvev_t *e,
                                  const uint64_t *bh)
{
    slot_t *sl = &s->slots[si];
    unsigned tiers = replica_tiers(e->replicas);
    if (!e->n_hashes || !tiers || (e->model[0] && strcmp(e->model, sl->reg.id.model)) ||
        e->block_size != sl->reg.id.block_size) {
        inc(s, CR__CSVC_M_SKIPPED_EVENTS, 1);
        log_once(s, ONCE_MOONCAKE,
                 "instance %s: BlockStoreEvent skipped (no block hash, no memory/disk replica, "
                 "model '%s' or block_size %u not as registered)",
                 sl->reg.id.instance_id, e->model, e->block_size);
        return;
    }
    for (int t = 0; t < CR_COND_TIER_COUNT; t++)
        if (tiers & (1u << t))
            apply_stored_locked(s, si, e, t, bh);
    const cr__emap_ent_t *be = cr__emap_get(&sl->map, e->hashes[0]);
    if (!be)
        return; /* orphan or map full: counted by apply_stored_locked */
    if (cr__emap_set(&sl->map, e->key ^ MC_KEY_SALT, be->seq, tiers, e->hashes[0]))
        inc(s, CR__CSVC_M_MAP_FULL, 1);
}

static void apply_mc_update_locked(cr__csvc_t *s, uint32_t si, const cr__kvev_t *e)
{
    slot_t *sl = &s->slots[si];
    const cr__emap_ent_t *ke = cr__emap_get(&sl->map, e->key ^ MC_KEY_SALT);
    if (!ke) {
        inc(s, CR__CSVC_M_SKIPPED_EVENTS, 1);
        log_once(s, ONCE_MOONCAKE, "instance %s: BlockUpdateEvent for an unknown mooncake_key",
                 sl->reg.id.instance_id);
        return;
    }
    uint64_t seq = ke->seq, block = ke->aux, iseq = seq ^ sl->ns;
    unsigned old = ke->mask, now = replica_tiers(e->replicas);
    for (int t = 0; t < CR_COND_TIER_COUNT; t++) {
        unsigned bit = 1u << t;
        if ((old & bit) && !(now & bit)) {
            cr_cond_index_remove(s->idx, si, (cr_cond_tier_t)t, &iseq, 1);
            inc(s, CR__CSVC_M_BLOCKS_REMOVED, 1);
        } else if (!(old & bit) && (now & bit)) {
            uint64_t ev = 0;
            if (cr_cond_index_insert(s->idx, si, (cr_cond_tier_t)t, &iseq, 1, &ev) == 0)
                inc(s, CR__CSVC_M_BLOCKS_STORED, 1);
            inc(s, CR__CSVC_M_EVICTIONS, ev);
        }
    }
    cr__emap_set(&sl->map, e->key ^ MC_KEY_SALT, seq, now, block);
    if (!now) /* no replica left: forget the block hash too */
        cr__emap_set(&sl->map, block, 0, 0, 0);
    else
        cr__emap_set(&sl->map, block, seq, now, 0);
}

static void apply_removed_locked(cr__csvc_t *s, uint32_t si, const cr__kvev_t *e, int tier)
{
    slot_t *sl = &s->slots[si];
    size_t m = 0;
    for (size_t i = 0; i < e->n_hashes; i++) {
        uint64_t seq;
        if (cr__emap_drop(&sl->map, e->hashes[i], 1u << tier, &seq))
            s->scratch[m++] = seq ^ sl->ns;
    }
    cr_cond_index_remove(s->idx, si, (cr_cond_tier_t)tier, s->scratch, m);
    inc(s, CR__CSVC_M_BLOCKS_REMOVED, m);
}

/* H(block) of every block that carries tokens, in event order, so that the
 * hashing is done before the service lock. NULL if none or out of memory
 * (then hashed under the lock). */
static uint64_t *block_hashes(const cr__kvev_batch_t *b)
{
    size_t total = 0;
    for (uint32_t k = 0; k < b->n_events; k++)
        if ((b->events[k].type == CR__KVEV_STORED || b->events[k].type == CR__KVEV_MC_STORE) &&
            b->events[k].n_tokens)
            total += b->events[k].n_hashes;
    uint64_t *bh = total ? malloc(total * sizeof *bh) : NULL;
    if (!bh)
        return NULL;
    size_t o = 0;
    for (uint32_t k = 0; k < b->n_events; k++) {
        const cr__kvev_t *e = &b->events[k];
        if ((e->type != CR__KVEV_STORED && e->type != CR__KVEV_MC_STORE) || !e->n_tokens)
            continue;
        for (uint32_t i = 0; i < e->n_hashes; i++)
            bh[o++] = cr_cond_hash_block(e->tokens + (size_t)i * e->block_size, e->block_size);
    }
    return bh;
}

static void apply_batch_locked(cr__csvc_t *s, uint32_t si, const cr__kvev_batch_t *b,
                               const uint64_t *bh)
{
    slot_t *sl = &s->slots[si];
    size_t bo = 0; /* offset of the current event's blocks in bh */
    for (uint32_t k = 0; k < b->n_events; k++) {
        const cr__kvev_t *e = &b->events[k];
        const uint64_t *ebh = NULL;
            if ((e->type == CR__KVEV_STORED || e->type == CR__KVEV_MC_STORE) && e->n_tokens) {
            ebh = bh ? bh + bo : NULL;
            bo += e->n_hashes;
        }
        if (e->type == CR__KVEV_CLEARED) {
            cr_cond_index_remove_instance(s->idx, si);
            cr__emap_clear(&sl->map);
            inc(s, CR__CSVC_M_CLEARS, 1);
            continue;
        }
        if (e->type == CR__KVEV_MC_STORE) {
            apply_mc_store_locked(s, si, e, ebh);
            continue;
        }
        if (e->type == CR__KVEV_MC_UPDATE) {
            apply_mc_update_locked(s, si, e);
            continue;
        }
        /* events without a medium are on the registration's default one */
        int tier = cr__csvc_medium_tier(e->medium[0] ? e->medium : sl->reg.medium);
        if (tier < 0) {
            inc(s, CR__CSVC_M_SKIPPED_EVENTS, 1);
            log_once(s, ONCE_MEDIUM, "instance %s: event with unknown medium '%s' skipped",
                     sl->reg.id.instance_id, e->medium);
            continue;
        }
        if (e->type == CR__KVEV_REMOVED) {
            apply_removed_locked(s, si, e, tier);
            continue;
        }
        if (e->block_size != sl->reg.id.block_size) {
            inc(s, CR__CSVC_M_SKIPPED_EVENTS, 1);
            log_once(s, ONCE_BLOCKSIZE,
                     "instance %s: BlockStored with block_size %u but registered with %u; "
                     "skipped",
                     sl->reg.id.instance_id, e->block_size, sl->reg.id.block_size);
            continue;
        }
        /* the event's LoRA: its lora_name, else the deprecated lora_id as
         * "lora_id:N" (the name /register and /query give a lora_id) */
        char lora[CR__KVEV_LORA_MAX];
        if (e->lora_name[0])
            snprintf(lora, sizeof lora, "%s", e->lora_name);
        else if (e->has_lora_id && e->lora_id >= 0)
            snprintf(lora, sizeof lora, "lora_id:%lld", (long long)e->lora_id);
        else
            lora[0] = 0; /* base model, or a publisher that does not say */
        if (lora[0] && strcmp(lora, sl->reg.id.lora_name)) {
            inc(s, CR__CSVC_M_SKIPPED_EVENTS, 1);
            log_once(s, ONCE_LORA,
                     "instance %s: BlockStored for LoRA '%s' but registered for '%s'; skipped",
                     sl->reg.id.instance_id, lora, sl->reg.id.lora_name);
            continue;
        }
        apply_stored_locked(s, si, e, tier, ebh);
    }
    if (b->has_dp_rank && (uint64_t)b->dp_rank != sl->reg.id.dp_rank)
        log_once(s, ONCE_DPRANK,
                 "instance %s: batch says data_parallel_rank %lld but it was registered as dp_rank "
                 "%u (events applied to the registered rank)",
                 sl->reg.id.instance_id, (long long)b->dp_rank, sl->reg.id.dp_rank);
    sl->batches++;
    sl->events += b->n_events;
    inc(s, CR__CSVC_M_BATCHES, 1);
    inc(s, CR__CSVC_M_EVENTS, b->n_events);
    if (b->n_unknown) {
        inc(s, CR__CSVC_M_UNKNOWN_EVENTS, b->n_unknown);
        log_once(s, ONCE_UNKNOWN, "instance %s: %u event(s) with an unknown tag skipped",
                 sl->reg.id.instance_id, b->n_unknown);
    }
}

static int ingest(cr__csvc_t *s, uint32_t si, uint32_t gen, int check_gen, int has_seq,
                  uint64_t seq, const void *payload, size_t len)
{
    cr__kvev_batch_t *b = NULL;
    cr__kvev_err_t kind = CR__KVEV_OK;
    char err[256];
    int rc = cr__kvev_decode(payload, len, &s->evlim, &b, &kind, err, sizeof err);
    uint64_t *bh = rc ? NULL : block_hashes(b);
    pthread_mutex_lock(&s->lock);
    slot_t *sl = &s->slots[si];
    if (!sl->used || (check_gen && sl->gen != gen)) {
        pthread_mutex_unlock(&s->lock);
        free(bh);
        cr__kvev_batch_free(b);
        return -ENOENT; /* unregistered meanwhile */
    }
    if (has_seq) {
        if (sl->have_seq && seq > sl->last_seq + 1) {
            sl->seq_gaps += seq - sl->last_seq - 1;
            inc(s, CR__CSVC_M_SEQ_GAPS, seq - sl->last_seq - 1);
            log_once(s, ONCE_GAP,
                     "instance %s: missed %" PRIu64 " event batch(es) (seq %" PRIu64
                     " after %" PRIu64 ")",
                     sl->reg.id.instance_id, seq - sl->last_seq - 1, seq, sl->last_seq);
        }
        sl->have_seq = 1;
        sl->last_seq = seq;
    }
    if (rc) {
        sl->bad_batches++;
        char inst[CR__CREQ_NAME_MAX];
        memcpy(inst, sl->reg.id.instance_id, sizeof inst);
        pthread_mutex_unlock(&s->lock);
        static const int metric[CR__KVEV_ERR__COUNT] = {
            [CR__KVEV_ERR_MSGPACK] = CR__CSVC_M_BAD_MSGPACK,
            [CR__KVEV_ERR_LIMIT] = CR__CSVC_M_BAD_LIMIT,
            [CR__KVEV_ERR_SHAPE] = CR__CSVC_M_BAD_SHAPE,
            [CR__KVEV_ERR_FIELD] = CR__CSVC_M_BAD_FIELD};
        static const int once[CR__KVEV_ERR__COUNT] = {
            [CR__KVEV_ERR_MSGPACK] = ONCE_MSGPACK, [CR__KVEV_ERR_LIMIT] = ONCE_LIMIT,
            [CR__KVEV_ERR_SHAPE] = ONCE_SHAPE, [CR__KVEV_ERR_FIELD] = ONCE_FIELD};
        if (kind <= CR__KVEV_OK || kind >= CR__KVEV_ERR__COUNT)
            kind = CR__KVEV_ERR_LIMIT; /* -ENOMEM */
        inc(s, metric[kind], 1);
        log_once(s, once[kind], "instance %s: bad KV event batch (%s): %s", inst,
                 cr__kvev_err_name(kind), err[0] ? err : cr_strerror(rc));
        return rc;
    }
    apply_batch_locked(s, si, b, bh);
    pthread_mutex_unlock(&s->lock);
    free(bh);
    cr__kvev_batch_free(b);
    return 0;
}

void cr__csvc_on_zmq_message(void *user, uint32_t slot, uint32_t gen, int has_seq, uint64_t seq,
                             const void *payload, size_t len, int bad_frame)
{
    cr__csvc_t *s = user;
    if (bad_frame) {
        inc(s, CR__CSVC_M_BAD_FRAMES, 1);
        log_once(s, ONCE_FRAME,
                 "KV event message with unrecognised framing (expected [topic, seq, payload])");
        return;
    }
    ingest(s, slot, gen, 1, has_seq, seq, payload, len);
}

int cr__csvc_ingest(cr__csvc_t *s, uint32_t slot, const void *payload, size_t len)
{
    if (!s || slot >= NSLOT)
        return -EINVAL;
    return ingest(s, slot, 0, 0, 0, 0, payload, len);
}
