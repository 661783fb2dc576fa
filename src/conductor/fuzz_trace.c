/* libFuzzer target: one trace line through the JSONL parser. */
#include <stddef.h>
#include <stdint.h>

#include "conductor/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint64_t buf[CR__COND_TRACE_MAX_BLOCKS];
    cr__cond_trace_req_t r;
    char err[256];
    (void)cr__cond_trace_parse_line((const char *)data, size, 1, 512, &r, buf,
                                    CR__COND_TRACE_MAX_BLOCKS, err, sizeof err);
    return 0;
}
