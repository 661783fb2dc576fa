/* Topology matrix: which local NICs serve which memory location.
 *
 *   {"cpu:0": [["10.0.0.1", "10.0.0.2"], ["10.0.1.1"]], "cpu:1": [[...], [...]]}
 *
 * maps a location tag to [preferred NICs, secondary NICs] (Mooncake's
 * topology matrix). NIC addresses are matched against the engine's NIC list;
 * addresses that are not local NICs are ignored (with a warning). A location
 * missing from the file, or without any matching NIC, may use every NIC. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "transfer/xfer_internal.h"

#define TOPO_MAX_ENTRIES 1024
#define TOPO_MAX_FILE (1u << 20)
#define TOPO_MAX_NICS_PER_LIST 64 /* addresses in one preferred/secondary list */

static int nic_list_mask(json_t *arr, const cr__xfer_config_t *cfg, uint32_t *mask)
{
    *mask = 0;
    if (!json_is_array(arr) || json_array_size(arr) > TOPO_MAX_NICS_PER_LIST)
        return -EINVAL;
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (!json_is_string(v))
            return -EINVAL;
        const char *ip = json_string_value(v);
        uint32_t k;
        for (k = 0; k < cfg->n_nics; k++)
            if (!strcmp(cfg->nics[k], ip))
                break;
        if (k == cfg->n_nics) {
            CR_LOG_WARN("xfer", "topology: %s is not a local NIC, ignored", ip);
            continue;
        }
        *mask |= 1u << k;
    }
    return 0;
}

int cr__xfer_topology_parse(const char *json, size_t len, const cr__xfer_config_t *cfg,
                            cr__topology_t *t)
{
    memset(t, 0, sizeof *t);
    if (!json || len == 0 || len > TOPO_MAX_FILE)
        return -EINVAL;
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        CR_LOG_ERROR("xfer", "topology: %s (line %d)", jerr.text, jerr.line);
        return -EINVAL;
    }
    int rc = -EINVAL;
    if (!json_is_object(root) || json_object_size(root) > TOPO_MAX_ENTRIES)
        goto out;
    t->entries = calloc(json_object_size(root) + 1, sizeof *t->entries);
    if (!t->entries) {
        rc = -ENOMEM;
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        cr__topo_entry_t *en = &t->entries[t->n];
        if (strlen(key) == 0 || strlen(key) >= sizeof en->location)
            goto out;
        if (!json_is_array(val) || json_array_size(val) < 1 || json_array_size(val) > 2)
            goto out;
        if (nic_list_mask(json_array_get(val, 0), cfg, &en->pref_mask))
            goto out;
        if (json_array_size(val) == 2 && nic_list_mask(json_array_get(val, 1), cfg, &en->sec_mask))
            goto out;
        strcpy(en->location, key);
        t->n++;
    }
    rc = 0;
out:
    json_decref(root);
    if (rc) {
        CR_LOG_ERROR("xfer", "topology: malformed (want {\"loc\": [[ips], [ips]]})");
        cr__xfer_topology_free(t);
    }
    return rc;
}

int cr__xfer_topology_load(const char *path, const cr__xfer_config_t *cfg, cr__topology_t *t)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) {
        CR_LOG_ERROR("xfer", "topology %s: cannot open", path);
        return -EINVAL;
    }
    char *buf = malloc(TOPO_MAX_FILE + 1);
    size_t n = buf ? fread(buf, 1, TOPO_MAX_FILE + 1, f) : 0;
    fclose(f);
    int rc = !buf ? -ENOMEM : n > TOPO_MAX_FILE ? -EINVAL : cr__xfer_topology_parse(buf, n, cfg, t);
    if (rc)
        CR_LOG_ERROR("xfer", "topology %s rejected", path);
    free(buf);
    return rc;
}

void cr__xfer_topology_free(cr__topology_t *t)
{
    free(t->entries);
    t->entries = NULL;
    t->n = 0;
}

void cr__xfer_topology_masks(const cr__topology_t *t, const cr__xfer_config_t *cfg,
                             const char *location, uint32_t *pref, uint32_t *sec)
{
    uint32_t all = cfg->n_nics >= 32 ? ~0u : (1u << cfg->n_nics) - 1;
    *pref = all;
    *sec = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (strcmp(t->entries[i].location, location))
            continue;
        if (t->entries[i].pref_mask || t->entries[i].sec_mask) {
            *pref = t->entries[i].pref_mask ? t->entries[i].pref_mask : t->entries[i].sec_mask;
            *sec = t->entries[i].pref_mask ? t->entries[i].sec_mask & ~*pref : 0;
        }
        break;
    }
}
