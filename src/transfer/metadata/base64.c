/* RFC 4648 base64 with padding (etcd's JSON gateway encodes bytes this way). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "transfer/metadata/meta_internal.h"

static const char enc_tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *cr__b64_encode(const void *data, size_t len)
{
    const unsigned char *p = data;
    if (len > (SIZE_MAX - 1) / 4 * 3 - 3)
        return NULL;
    size_t olen = (len + 2) / 3 * 4;
    char *out = malloc(olen + 1);
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        out[o++] = enc_tab[v >> 18];
        out[o++] = enc_tab[(v >> 12) & 63];
        out[o++] = enc_tab[(v >> 6) & 63];
        out[o++] = enc_tab[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0);
        out[o++] = enc_tab[v >> 18];
        out[o++] = enc_tab[(v >> 12) & 63];
        out[o++] = i + 1 < len ? enc_tab[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    out[o] = '\0';
    return out;
}

static int dec_char(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

int cr__b64_decode(const char *s, size_t slen, char **out, size_t *out_len)
{
    /* strip padding; accept unpadded input too */
    while (slen > 0 && s[slen - 1] == '=')
        slen--;
    if (slen % 4 == 1)
        return -EINVAL;
    size_t olen = slen / 4 * 3 + (slen % 4 ? slen % 4 - 1 : 0);
    char *o = malloc(olen + 1);
    if (!o)
        return -ENOMEM;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < slen; i++) {
        int d = dec_char(s[i]);
        if (d < 0) {
            free(o);
            return -EINVAL;
        }
        acc = (acc << 6) | (uint32_t)d;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (char)((acc >> bits) & 0xff);
        }
    }
    o[k] = '\0';
    *out = o;
    if (out_len)
        *out_len = k;
    return 0;
}
