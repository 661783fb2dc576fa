/* libFuzzer target: the KV event msgpack decoder (kv_events.h) with small
 * limits, so limit paths are reached too. Every decoded batch is walked to
 * catch out-of-bounds pointers. */
#include <stddef.h>
#include <stdint.h>

#include "conductor/service/kv_events.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const cr__kvev_limits_t lim = {.max_bytes = 1 << 16,
                                          .max_objects = 4096,
                                          .max_events = 64,
                                          .max_hashes = 256,
                                          .max_tokens = 1024,
                                          .max_block_size = 256};
    cr__kvev_batch_t *b = NULL;
    cr__kvev_err_t kind;
    char err[256];
    if (cr__kvev_decode(data, size, (size & 1) ? &lim : NULL, &b, &kind, err, sizeof err))
        return 0;
    uint64_t sink = 0;
    for (uint32_t i = 0; i < b->n_events; i++) {
        const cr__kvev_t *e = &b->events[i];
        for (uint32_t k = 0; k < e->n_hashes; k++)
            sink += e->hashes[k];
        for (uint32_t k = 0; k < e->n_tokens; k++)
            sink += e->tokens[k];
        sink += (uint64_t)e->medium[0] + (uint64_t)e->lora_name[0];
        if (e->n_tokens && e->n_tokens != e->n_hashes * e->block_size)
            __builtin_trap(); /* the decoder promises tokens fill the blocks */
    }
    g_sink = sink;
    cr__kvev_batch_free(b);
    return 0;
}
