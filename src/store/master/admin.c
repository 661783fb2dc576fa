/* HTTP admin endpoints of the master (admin.h). */
#include "store/master/admin.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

static void take(cr__http_resp_t *resp, int status, const char *ctype, char *body, size_t len)
{
    resp->status = status;
    resp->content_type = ctype;
    resp->body = body;
    resp->body_len = len;
}

void cr__master_admin_handler(void *user, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    cr__master_t *m = user;
    char *body = NULL;
    size_t len = 0;
    if (strcmp(req->method, "GET") != 0) {
        cr__http_resp_printf(resp, 405, "method not allowed\n");
        return;
    }
    if (!strcmp(req->path, "/health")) {
        cr__http_resp_printf(resp, 200, "ok\n");
    } else if (!strcmp(req->path, "/metrics")) {
        if (cr__master_metrics_text(m, &body, &len))
            cr__http_resp_printf(resp, 500, "out of memory\n");
        else
            take(resp, 200, "text/plain; version=0.0.4", body, len);
    } else if (!strcmp(req->path, "/query_key")) {
        const char *key = cr__http_req_arg(req, "key");
        int rc = key ? cr__master_query_key_json(m, key, strlen(key), cr__now_ms(), &body, &len)
                     : CR_E_INVALID_KEY;
        if (rc == 0)
            take(resp, 200, "application/json", body, len);
        else if (rc == CR_E_OBJECT_NOT_FOUND)
            cr__http_resp_printf(resp, 404, "{\"error\":\"OBJECT_NOT_FOUND\"}\n");
        else if (rc == CR_E_INVALID_KEY)
            cr__http_resp_printf(resp, 400, "{\"error\":\"INVALID_KEY\"}\n");
        else
            cr__http_resp_printf(resp, 500, "{\"error\":\"%s\"}\n", cr_strerror(rc));
    } else if (!strcmp(req->path, "/get_all_segments")) {
        if (cr__master_segments_json(m, &body, &len))
            cr__http_resp_printf(resp, 500, "out of memory\n");
        else
            take(resp, 200, "application/json", body, len);
    } else {
        cr__http_resp_printf(resp, 404, "not found\n");
    }
}
