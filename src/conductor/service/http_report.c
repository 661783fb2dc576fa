/* crescent-conductor service: POST /report, where instances report the
 * actual prefill and decode-step times they measured; the scheduler's
 * predictor learns from them so every later /schedule estimate is corrected
 * (report.h has the body). */
#include "conductor/service/service_priv.h"

#include <errno.h>
#include <string.h>

#include "conductor/service/report.h"

void cr__csvc_h_report(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    char err[512];
    json_error_t je;
    /* the reporter must be registered (like /load) */
    json_t *o = json_loadb(req->body, req->body_len, 0, &je);
    json_t *id = o ? json_object_get(o, "instance_id") : NULL;
    char inst[CR__CREQ_NAME_MAX] = "";
    if (id && json_is_string(id) && json_string_length(id) < sizeof inst)
        memcpy(inst, json_string_value(id), json_string_length(id) + 1);
    json_decref(o);
    size_t ok = 0;
    json_t *refused = NULL;
    pthread_mutex_lock(&s->lock);
    int known = 0;
    for (int i = 0; i < NSLOT && inst[0]; i++)
        known |= s->slots[i].used && !strcmp(s->slots[i].reg.id.instance_id, inst);
    int rc = 0;
    if (known || !inst[0])
        rc = cr__csvc_report_apply(cr_cond_sched_predictor(s->sched), req->body, req->body_len,
                                   &ok, &refused, err, sizeof err);
    json_t *pj = rc == 0 && known ? cr__csvc_pred_json(cr_cond_sched_predictor(s->sched)) : NULL;
    pthread_mutex_unlock(&s->lock);
    if (rc)
        return cr__csvc_reply_error(s, resp, cr__csvc_parse_status(rc), err);
    if (!known) {
        json_decref(refused);
        return cr__csvc_reply_error(s, resp, 404, "instance_id: not registered");
    }
    inc(s, CR__CSVC_M_REPORTS, ok);
    cr__csvc_reply_json(resp, 200,
                        json_pack("{s:s,s:I,s:o,s:o*}", "status", "ok", "accepted",
                                  (json_int_t)ok, "refused", refused, "predictor", pj));
}
