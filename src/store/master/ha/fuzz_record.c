/* libFuzzer: the op-record stream a standby receives and a restarted master
 * reads from its journal. Arbitrary bytes are decoded and applied to a
 * shadow index, which is then restored into a master (a corrupt or hostile
 * stream must not crash either, nor make them allocate without bound), and
 * every record that decoded must encode back to the same bytes. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "store/master/ha/shadow.h"
#include "store/master/master.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cr__ha_rec_t rec;
    size_t off = 0;
    while (off < size) {
        long n = cr__ha_rec_get(data + off, size - off, &rec);
        if (n <= 0)
            break;
        cr__ha_buf_t b = {0};
        if (cr__ha_rec_put(&b, &rec) == 0 && ((size_t)n != b.len || memcmp(b.p, data + off, b.len)))
            __builtin_trap(); /* decode/encode must round-trip */
        cr__ha_buf_free(&b);
        off += (size_t)n;
    }
    cr__ha_shadow_t *sh;
    if (cr__ha_shadow_create(&sh))
        return 0;
    if (cr__ha_shadow_load(sh, data, size) >= 0) {
        cr__master_cfg_t c;
        cr__master_cfg_default(&c);
        cr__master_t *m;
        if (cr__master_create(&c, &m) == 0) {
            uint64_t n = 0;
            cr__master_restore(m, sh, 1000, &n);
            cr__master_tick(m, 1100);
            cr__master_destroy(m);
        }
    }
    cr__ha_shadow_destroy(sh);
    return 0;
}
