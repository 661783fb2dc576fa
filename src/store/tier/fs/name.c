/* File names of the shared-file-system tier (tier.h). */
#include <inttypes.h>
#include <stdio.h>

#include <xxhash.h>

#include "store/tier/tier.h"

void cr__tier_fs_name(char out[CR__TIER_FS_NAME_MAX], const char *key, size_t key_len,
                      uint64_t version)
{
    XXH128_hash_t h = XXH3_128bits(key, key_len);
    snprintf(out, CR__TIER_FS_NAME_MAX, "%016" PRIx64 "%016" PRIx64 "-%016" PRIx64, h.high64,
             h.low64, version);
}
