/* libFuzzer target: crescent-conductor's HTTP request body parsers
 * (requests.h). The first input byte picks the endpoint; the rest is the
 * body. Outputs are checked against the limits and freed. */
#include <stddef.h>
#include <stdint.h>

#include "conductor/service/requests.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const cr__creq_limits_t lim = {.max_tokens = 512, .max_hashes = 128,
                                          .max_block_size = 1024};
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    char err[512];
    switch (data[0] % 6) {
    case 0: {
        cr__creq_register_t r;
        if (!cr__creq_parse_register(body, len, &lim, &r, err, sizeof err) &&
            (!r.endpoint[0] || !r.id.instance_id[0] || !r.id.block_size))
            __builtin_trap();
        break;
    }
    case 1: {
        cr__creq_ident_t id;
        cr__creq_parse_unregister(body, len, &lim, &id, err, sizeof err);
        break;
    }
    case 2:
    case 3: {
        cr__creq_query_t q;
        if (!cr__creq_parse_query(body, len, &lim, data[0] % 6 == 3, &q, err, sizeof err)) {
            if (q.n_tokens > lim.max_tokens || q.n_hashes > lim.max_hashes)
                __builtin_trap();
            cr__creq_query_free(&q);
        }
        break;
    }
    case 4: {
        cr__creq_schedule_t s;
        if (!cr__creq_parse_schedule(body, len, &lim, &s, err, sizeof err))
            cr__creq_query_free(&s.q);
        break;
    }
    default: {
        cr__creq_load_t l;
        cr__creq_parse_load(body, len, &lim, &l, err, sizeof err);
        break;
    }
    }
    return 0;
}
