/* HTTP admin endpoints of the master (served on --metrics_port through
 * src/common/httpd.h):
 *   GET /metrics               Prometheus text (cr__master_metrics_text)
 *   GET /health                "ok"
 *   GET /query_key?key=K       JSON of one key, 404 if absent
 *   GET /get_all_segments      JSON array of mounted segments
 * Anything else is 404; methods other than GET are 405. */
#ifndef CR_STORE_MASTER_ADMIN_H
#define CR_STORE_MASTER_ADMIN_H

#include "common/httpd.h"
#include "store/master/master.h"

/* cr__http_handler_fn; user is the cr__master_t. Thread-safe. */
void cr__master_admin_handler(void *user, const cr__http_req_t *req, cr__http_resp_t *resp);

#endif
