/* libFuzzer target for the capability parser (cap.h): any bytes are
 * accepted or refused without reading out of bounds; a parsed capability
 * re-minted with the same fields encodes to the same signed bytes; bytes
 * the fuzzer makes up never verify (it cannot guess the MAC), and a grant
 * never covers a range outside itself. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/auth/cap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t key[CR__CAP_KEY_LEN] = "fuzz-capability-key-32-bytes!!!";
    cr__cap_t c;
    int rc = cr__cap_parse(data, size, &c);
    if (rc != 0 && rc != -EBADMSG)
        abort();
    if (rc == 0) {
        if (size != CR__CAP_LEN || !c.len || c.addr + c.len <= c.addr)
            abort();
        uint8_t again[CR__CAP_LEN];
        if (cr__cap_mint(key, c.ops, c.seg_id, c.epoch, c.addr, c.len, c.expiry_ms, again) ||
            memcmp(again, data, 48))
            abort();
        /* the fuzzer's own MAC bytes must not verify (unless it copied ours) */
        cr__cap_t v;
        int vr = cr__cap_verify(key, c.seg_id, data, size, c.expiry_ms - 1, &v);
        if (vr == 0 && memcmp(again + 48, data + 48, 32))
            abort();
        /* coverage: never beyond the granted range */
        if (cr__cap_covers(&c, c.ops, c.addr + c.len - 1, 2, 0))
            abort();
        if (c.addr && cr__cap_covers(&c, c.ops, c.addr - 1, 1, 0))
            abort();
        cr__cap_table_t t;
        memset(&t, 0, sizeof t);
        for (int i = 0; i < CR__CAP_TABLE_SLOTS + 3; i++)
            cr__cap_table_add(&t, &c);
        if (t.n != CR__CAP_TABLE_SLOTS)
            abort();
    }
    return 0;
}
