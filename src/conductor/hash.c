/* Prefix block hashing: XXH3-64 rolling hash over little-endian u32 tokens. */
#include <errno.h>
#include <string.h>

#include <xxhash.h>

#include "crescent/conductor.h"

/* Tokens are hashed as little-endian u32. On little-endian hosts that is the
 * in-memory layout; elsewhere they are byte-swapped through a small buffer. */
uint64_t cr_cond_hash_block(const uint32_t *tokens, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return XXH3_64bits(n ? (const void *)tokens : (const void *)"", n * sizeof(uint32_t));
#else
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    uint8_t buf[1024];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t t = tokens[i];
        buf[k++] = (uint8_t)t;
        buf[k++] = (uint8_t)(t >> 8);
        buf[k++] = (uint8_t)(t >> 16);
        buf[k++] = (uint8_t)(t >> 24);
        if (k == sizeof buf) {
            XXH3_64bits_update(&st, buf, k);
            k = 0;
        }
    }
    XXH3_64bits_update(&st, buf, k);
    return XXH3_64bits_digest(&st);
#endif
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t cr_cond_hash_chain(uint64_t prev, uint64_t block_hash)
{
    uint8_t buf[16];
    put_le64(buf, prev);
    put_le64(buf + 8, block_hash);
    return XXH3_64bits(buf, sizeof buf);
}

int cr_cond_hash_tokens(const uint32_t *tokens, size_t n_tokens, uint32_t block_tokens,
                        uint64_t *out, size_t out_cap, size_t *n_out)
{
    if (block_tokens == 0 || block_tokens > CR_COND_MAX_BLOCK_TOKENS || !n_out ||
        (n_tokens && !tokens))
        return -EINVAL;
    size_t nb = n_tokens / block_tokens;
    if (nb > out_cap)
        return -ENOSPC;
    if (nb && !out)
        return -EINVAL;
    uint64_t prev = 0;
    for (size_t i = 0; i < nb; i++) {
        uint64_t h = cr_cond_hash_block(tokens + i * (size_t)block_tokens, block_tokens);
        prev = i == 0 ? h : cr_cond_hash_chain(prev, h);
        out[i] = prev;
    }
    *n_out = nb;
    return 0;
}
