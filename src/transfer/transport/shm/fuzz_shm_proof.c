/* libFuzzer target for the shm proof reply parser: any input is refused
 * with -EBADMSG or yields non-empty, non-wrapping ranges sorted by addr,
 * each with a slot inside the fence table and an odd generation. */
#include <errno.h>
#include <stdlib.h>

#include "transfer/transport/shm/shm_proof.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cr__shm_range_t *r;
    uint32_t n;
    int rc = cr__shm_proof_parse(data, size, &r, &n);
    if (rc) {
        if (rc != -EBADMSG && rc != -ENOMEM)
            abort();
        return 0;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!r[i].len || r[i].addr + r[i].len < r[i].addr || (i && r[i].addr < r[i - 1].addr) ||
            r[i].slot >= CR__SHM_FENCE_SLOTS || !(r[i].gen & 1))
            abort();
    free(r);
    return 0;
}
