/* libFuzzer target for the topology matrix parser: any input is either
 * rejected or yields entries with NUL-terminated non-empty locations and
 * NIC masks inside the configured NICs; mask lookups stay inside them too. */
#include <stdlib.h>
#include <string.h>

#include "transfer/xfer_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cr__xfer_config_t cfg;
    if (cfg.n_nics == 0) {
        cfg.n_nics = 3;
        strcpy(cfg.nics[0], "10.0.0.1");
        strcpy(cfg.nics[1], "10.0.0.2");
        strcpy(cfg.nics[2], "fe80::1");
    }
    cr__topology_t t;
    if (cr__xfer_topology_parse((const char *)data, size, &cfg, &t))
        return 0;
    const uint32_t all = (1u << cfg.n_nics) - 1;
    for (size_t i = 0; i < t.n; i++) {
        const cr__topo_entry_t *e = &t.entries[i];
        size_t l = strnlen(e->location, sizeof e->location);
        if (l == 0 || l >= sizeof e->location || (e->pref_mask & ~all) || (e->sec_mask & ~all))
            abort();
        uint32_t pref, sec;
        cr__xfer_topology_masks(&t, &cfg, e->location, &pref, &sec);
        if (!pref || (pref & ~all) || (sec & ~all) || (pref & sec))
            abort();
    }
    /* a location the file does not name may use every NIC */
    int named = 0;
    for (size_t i = 0; i < t.n; i++)
        named |= !strcmp(t.entries[i].location, "no-such-location");
    uint32_t pref, sec;
    cr__xfer_topology_masks(&t, &cfg, "no-such-location", &pref, &sec);
    if (!named && (pref != all || sec != 0))
        abort();
    cr__xfer_topology_free(&t);
    return 0;
}
