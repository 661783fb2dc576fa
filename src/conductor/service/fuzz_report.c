/* libFuzzer target: crescent-conductor's POST /report body (report.h). Any
 * input either applies some entries to a predictor whose estimates stay
 * finite and positive, or is refused. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "conductor/service/report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cr_cond_pred_t *p;
    if (cr_cond_pred_create(NULL, &p))
        return 0;
    size_t ok = 0;
    json_t *refused = NULL;
    char err[256];
    if (cr__csvc_report_apply(p, (const char *)data, size, &ok, &refused, err, sizeof err) == 0) {
        if (ok + json_array_size(refused) > CR__CREPORT_MAX_ITEMS)
            __builtin_trap();
        json_decref(refused);
    }
    double e = cr_cond_pred_prefill(p, 10000, 0, 1);
    if (!(e > 0) || !isfinite(e))
        __builtin_trap();
    cr_cond_pred_destroy(p);
    return 0;
}
