/* libFuzzer target for the etcd range-response parser and base64 decoder
 * (what an etcd endpoint, or anything answering on its port, sends back).
 * Accepted input must yield a NUL-terminated value of the reported length;
 * base64 must round-trip. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "transfer/metadata/meta_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *val = NULL;
    size_t len = 0;
    int rc = cr__meta_etcd_parse_range((const char *)data, size, &val, &len);
    if (rc == 0) {
        if (!val || val[len] != '\0' || len > CR__META_VALUE_MAX)
            abort();
        free(val);
    } else if (rc != -ENOENT && rc != -EIO && rc != -ENOMEM) {
        abort();
    }
    /* base64: decode arbitrary text; whatever decodes must re-encode to
     * something that decodes to the same bytes */
    char *dec = NULL;
    size_t dlen = 0;
    if (cr__b64_decode((const char *)data, size, &dec, &dlen) == 0) {
        char *enc = cr__b64_encode(dec, dlen);
        if (enc) {
            char *dec2 = NULL;
            size_t dlen2 = 0;
            if (cr__b64_decode(enc, strlen(enc), &dec2, &dlen2) != 0 || dlen2 != dlen ||
                memcmp(dec, dec2, dlen) != 0)
                abort();
            free(dec2);
            free(enc);
        }
        free(dec);
    }
    return 0;
}
