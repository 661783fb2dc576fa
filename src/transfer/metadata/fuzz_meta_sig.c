/* libFuzzer target for signed metadata envelopes (cr__meta_verify): any
 * input is either refused with -EACCES or, when it is a well-formed
 * envelope, its value lies inside the input; bytes the fuzzer makes up
 * never verify, and a value it signs with the key round-trips. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/auth/auth.h"
#include "transfer/metadata/metadata.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cr__auth_t *a;
    if (!a && cr__auth_from_secret("fuzz-secret-fuzz-secret-fuzz-secret!", 36, &a))
        abort();
    const char *v;
    size_t vl;
    if (cr__meta_verify(a, "mooncake/ram/x", (const char *)data, size, &v, &vl) == 0)
        abort(); /* forged */
    char *env;
    size_t el;
    if (cr__meta_sign(a, "k", data, size, &env, &el))
        return 0;
    if (cr__meta_verify(a, "k", env, el, &v, &vl) || vl != size || memcmp(v, data, size))
        abort();
    if (cr__meta_verify(a, "other", env, el, &v, &vl) == 0)
        abort(); /* bound to its key */
    free(env);
    return 0;
}
