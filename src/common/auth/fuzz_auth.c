/* libFuzzer target for the authentication parsers: the handshake message
 * parser and the HTTP signature header parser must reject or accept any
 * input without reading out of bounds, and a server fed arbitrary bytes as
 * HELLO/PROOF must never report success (no key is ever proven by bytes
 * the fuzzer can guess). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/auth/auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cr__auth_t *a;
    if (!a && cr__auth_from_secret("fuzz-secret-fuzz-secret-fuzz-secret!", 36, &a))
        abort();
    cr__auth_msg_t m;
    int rc = cr__auth_msg_parse(data, size, &m);
    if (rc == 0 && (size != cr__auth_msg_len(m.type) || m.flags != 0))
        abort();
    if (rc != 0 && rc != -EBADMSG)
        abort();

    /* server side of the handshake on fuzzer bytes */
    cr__auth_hs_t hs;
    uint8_t out[CR__AUTH_MSG_MAX];
    size_t half = size / 2;
    if (cr__auth_hs_server_challenge(a, &hs, "fuzz", data, half, out) == 0) {
        /* whatever the second half holds, it cannot know mac_c for a fresh nonce_s */
        if (cr__auth_hs_server_verify(a, &hs, data + half, size - half) == 0)
            abort();
    }

    /* HTTP header parser on a NUL-terminated copy */
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    uint64_t ts = 0;
    uint8_t nonce[16], mac[CR__AUTH_MAC_LEN];
    rc = cr__auth_http_parse(s, &ts, nonce, mac);
    if (rc != 0 && rc != -EBADMSG)
        abort();
    if (cr__auth_http_verify(a, s, "GET", "/x", "", 0, ts) == 0)
        abort(); /* a forged header never verifies */
    free(s);
    return 0;
}
