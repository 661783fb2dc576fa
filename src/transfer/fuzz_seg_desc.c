/* libFuzzer target for the segment descriptor JSON decoder: any input must
 * either be rejected with -EINVAL or decode into a descriptor that satisfies
 * every invariant the engine relies on (bounded counts, NUL-terminated
 * strings, sorted non-overlapping buffers) and survives an encode/decode
 * round trip unchanged. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "transfer/segment_desc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cr__seg_desc_t d;
    int rc = cr__seg_desc_decode((const char *)data, size, &d);
    if (rc != 0) {
        if (rc != -EINVAL && rc != -ENOMEM)
            abort();
        return 0;
    }
    if (d.n_nics > CR_XFER_MAX_NICS || d.n_buffers > CR__SEG_MAX_BUFFERS)
        abort();
    if (strnlen(d.name, sizeof d.name) >= sizeof d.name || d.name[0] == '\0')
        abort();
    if (strnlen(d.host_id, sizeof d.host_id) >= sizeof d.host_id)
        abort();
    /* a NIC's port may be 0: that segment runs no network data transport
     * (same-host only); it must survive the round trip below like any */
    for (uint32_t i = 0; i < d.n_buffers; i++) {
        const cr_xfer_buffer_info_t *b = &d.buffers[i];
        if (b->len == 0 || (i > 0 && b->addr < d.buffers[i - 1].addr + d.buffers[i - 1].len))
            abort();
        if (!cr__seg_desc_contains(&d, b->addr, b->len) ||
            !cr__seg_desc_contains(&d, b->addr + b->len - 1, 1))
            abort();
    }
    char *js;
    size_t len;
    if (cr__seg_desc_encode(&d, &js, &len) == 0) {
        cr__seg_desc_t e;
        if (cr__seg_desc_decode(js, len, &e) != 0)
            abort();
        if (e.n_buffers != d.n_buffers || e.n_nics != d.n_nics || strcmp(e.name, d.name) ||
            e.version != d.version || e.pid != d.pid)
            abort();
        for (uint32_t i = 0; i < d.n_nics; i++)
            if (e.nics[i].port != d.nics[i].port)
                abort();
        for (uint32_t i = 0; i < d.n_buffers; i++)
            if (e.buffers[i].addr != d.buffers[i].addr || e.buffers[i].len != d.buffers[i].len ||
                strcmp(e.buffers[i].location, d.buffers[i].location))
                abort();
        cr__seg_desc_clear(&e);
        free(js);
    }
    cr__seg_desc_clear(&d);
    return 0;
}
