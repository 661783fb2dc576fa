/* Test helpers: build vLLM-layout KV event batches with msgpack-c's packer. */
#ifndef CR_TEST_EVPACK_H
#define CR_TEST_EVPACK_H

#include <msgpack.h>
#include <stdint.h>
#include <string.h>

typedef struct evpack {
    msgpack_sbuffer sb;
    msgpack_packer pk;
} evpack_t;

static inline void ep_init(evpack_t *e)
{
    msgpack_sbuffer_init(&e->sb);
    msgpack_packer_init(&e->pk, &e->sb, msgpack_sbuffer_write);
}
static inline void ep_free(evpack_t *e) { msgpack_sbuffer_destroy(&e->sb); }

static inline void ep_str(evpack_t *e, const char *s)
{
    msgpack_pack_str(&e->pk, strlen(s));
    msgpack_pack_str_body(&e->pk, s, strlen(s));
}

/* Starts [ts, [n_events events...] (, dp_rank)]: pack the n events next,
 * then, if with_dp, call ep_dp(). */
static inline void ep_batch(evpack_t *e, double ts, uint32_t n_events, int with_dp)
{
    msgpack_pack_array(&e->pk, with_dp ? 3 : 2);
    msgpack_pack_double(&e->pk, ts);
    msgpack_pack_array(&e->pk, n_events);
}
static inline void ep_dp(evpack_t *e, int dp) { msgpack_pack_int(&e->pk, dp); }

/* BlockStored with the full vLLM field list (medium NULL = nil). */
static inline void ep_stored(evpack_t *e, const uint64_t *hashes, uint32_t n, const uint64_t *parent,
                             const uint32_t *tokens, uint32_t n_tokens, uint32_t block_size,
                             const char *medium)
{
    msgpack_pack_array(&e->pk, 8);
    ep_str(e, "BlockStored");
    msgpack_pack_array(&e->pk, n);
    for (uint32_t i = 0; i < n; i++)
        msgpack_pack_uint64(&e->pk, hashes[i]);
    if (parent)
        msgpack_pack_uint64(&e->pk, *parent);
    else
        msgpack_pack_nil(&e->pk);
    msgpack_pack_array(&e->pk, n_tokens);
    for (uint32_t i = 0; i < n_tokens; i++)
        msgpack_pack_uint32(&e->pk, tokens[i]);
    msgpack_pack_uint32(&e->pk, block_size);
    msgpack_pack_nil(&e->pk); /* lora_id */
    if (medium)
        ep_str(e, medium);
    else
        msgpack_pack_nil(&e->pk);
    msgpack_pack_nil(&e->pk); /* lora_name */
}

static inline void ep_removed(evpack_t *e, const uint64_t *hashes, uint32_t n, const char *medium)
{
    msgpack_pack_array(&e->pk, 3);
    ep_str(e, "BlockRemoved");
    msgpack_pack_array(&e->pk, n);
    for (uint32_t i = 0; i < n; i++)
        msgpack_pack_uint64(&e->pk, hashes[i]);
    if (medium)
        ep_str(e, medium);
    else
        msgpack_pack_nil(&e->pk);
}

static inline void ep_cleared(evpack_t *e)
{
    msgpack_pack_array(&e->pk, 1);
    ep_str(e, "AllBlocksCleared");
}

#endif
