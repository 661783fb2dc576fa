/* crescent-conductor service: POST /register and /unregister. */
#include "conductor/service/service_priv.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int same_key(const cr__creq_ident_t *a, const cr__creq_ident_t *b)
{
    return !strcmp(a->instance_id, b->instance_id) && !strcmp(a->tenant_id, b->tenant_id) &&
           a->dp_rank == b->dp_rank;
}

/* Allocates a slot for reg. Returns the slot, -EEXIST (*existing set), or -ENOSPC. */
static int alloc_slot_locked(cr__csvc_t *s, const cr__creq_register_t *reg, int *existing)
{
    int free_slot = -1;
    for (int i = 0; i < NSLOT; i++) {
        if (s->slots[i].used && same_key(&s->slots[i].reg.id, &reg->id)) {
            *existing = i;
            return -EEXIST;
        }
        if (!s->slots[i].used && free_slot < 0)
            free_slot = i;
    }
    if (free_slot < 0)
        return -ENOSPC;
    slot_t *sl = &s->slots[free_slot];
    sl->used = 1;
    sl->reg = *reg;
    sl->ns = cr__csvc_ns_of(&reg->id);
    return free_slot;
}

int cr__csvc_register_local(cr__csvc_t *s, const cr__creq_register_t *reg)
{
    int existing = -1;
    pthread_mutex_lock(&s->lock);
    int rc = alloc_slot_locked(s, reg, &existing);
    pthread_mutex_unlock(&s->lock);
    if (rc >= 0)
        inc(s, CR__CSVC_M_REGISTERS, 1);
    return rc;
}

/* Is ep allowed by --endpoint_prefixes? */
static int endpoint_allowed(const cr__csvc_t *s, const char *ep)
{
    const char *p = s->cfg.endpoint_prefixes;
    if (!*p)
        return 1;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l && !strncmp(ep, p, l))
            return 1;
        p += l + (e ? 1 : 0);
    }
    return 0;
}

void cr__csvc_h_register(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    char err[512];
    cr__creq_register_t r;
    int rc = cr__creq_parse_register(req->body, req->body_len, &s->rqlim, &r, err, sizeof err);
    if (rc)
        return cr__csvc_reply_error(s, resp, cr__csvc_parse_status(rc), err);
    if (cr__csvc_medium_tier(r.medium) < 0) {
        snprintf(err, sizeof err, "medium: unknown '%s' (GPU, NPU, CPU, DRAM, DISK, SSD, ...)",
                 r.medium);
        return cr__csvc_reply_error(s, resp, 400, err);
    }
    if (!endpoint_allowed(s, r.endpoint) ||
        (r.replay_endpoint[0] && !endpoint_allowed(s, r.replay_endpoint)))
        return cr__csvc_reply_error(s, resp, 403,
                           !endpoint_allowed(s, r.endpoint)
                                    ? "endpoint: not allowed by --endpoint_prefixes"
                                    : "replay_endpoint: not allowed by --endpoint_prefixes");
    int existing = -1;
    pthread_mutex_lock(&s->lock);
    int slot = alloc_slot_locked(s, &r, &existing);
    uint32_t gen = slot >= 0 ? s->slots[slot].gen : 0;
    const cr__creq_register_t *o = existing >= 0 ? &s->slots[existing].reg : NULL;
    int same = o && !strcmp(o->endpoint, r.endpoint) &&
               !strcmp(o->replay_endpoint, r.replay_endpoint) && !strcmp(o->id.model, r.id.model) &&
               !strcmp(o->id.lora_name, r.id.lora_name) && !strcmp(o->id.salt, r.id.salt) &&
               o->id.block_size == r.id.block_size && o->role == r.role &&
               !strcmp(o->medium, r.medium);
    pthread_mutex_unlock(&s->lock);
    if (slot == -EEXIST) {
        if (!same)
            return cr__csvc_reply_error(s, resp, 409,
                               "instance_id: already registered with other settings (endpoint, "
                               "model, LoRA, salt, block_size, role or medium); unregister it "
                               "first");
        json_t *j = json_pack("{s:s,s:s}", "status", "already registered", "instance_id",
                              r.id.instance_id);
        return cr__csvc_reply_json(resp, 200, j);
    }
    if (slot < 0)
        return cr__csvc_reply_error(s, resp, 503,
                           "instance_id: no free publisher slot (at most 64 registrations)");
    rc = cr__zsub_add(s->zsub, (uint32_t)slot, gen, r.endpoint, r.replay_endpoint, err,
                      sizeof err);
    if (rc) {
        pthread_mutex_lock(&s->lock);
        cr__csvc_slot_reset_locked(s, (uint32_t)slot);
        pthread_mutex_unlock(&s->lock);
        return cr__csvc_reply_error(s, resp, rc == -EINVAL ? 400 : 500,
                           err[0] ? err : "endpoint: cannot subscribe");
    }
    /* an /unregister may have freed the slot while we subscribed */
    pthread_mutex_lock(&s->lock);
    int current = s->slots[slot].used && s->slots[slot].gen == gen;
    pthread_mutex_unlock(&s->lock);
    if (!current) {
        cr__zsub_remove(s->zsub, (uint32_t)slot, gen);
        return cr__csvc_reply_error(s, resp, 409, "instance_id: unregistered while registering");
    }
    inc(s, CR__CSVC_M_REGISTERS, 1);
    CR_LOG_INFO(COMP, "registered %s|%s|%u (%s, block_size %u) at %s as slot %d",
                r.id.instance_id, r.id.tenant_id, r.id.dp_rank, r.id.model, r.id.block_size,
                r.endpoint, slot);
    json_t *j = json_pack("{s:s,s:s}", "status", "registered successfully", "instance_id",
                          r.id.instance_id);
    cr__csvc_reply_json(resp, 200, j);
}

void cr__csvc_h_unregister(cr__csvc_t *s, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    char err[512];
    cr__creq_ident_t id;
    int rc = cr__creq_parse_unregister(req->body, req->body_len, &s->rqlim, &id, err, sizeof err);
    if (rc)
        return cr__csvc_reply_error(s, resp, cr__csvc_parse_status(rc), err);
    int removed[NSLOT], nr = 0;
    uint32_t removed_gen[NSLOT];
    json_t *names = json_array();
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < NSLOT; i++) {
        const slot_t *sl = &s->slots[i];
        if (!sl->used || strcmp(sl->reg.id.instance_id, id.instance_id) ||
            strcmp(sl->reg.id.tenant_id, id.tenant_id) ||
            (id.has_dp_rank && sl->reg.id.dp_rank != id.dp_rank))
            continue;
        char name[3 * CR__CREQ_NAME_MAX + 16];
        snprintf(name, sizeof name, "%s|%s|%u", sl->reg.id.instance_id, sl->reg.id.tenant_id,
                 sl->reg.id.dp_rank);
        json_array_append_new(names, json_string(name));
        removed_gen[nr] = sl->gen;
        removed[nr++] = i;
        cr__csvc_slot_reset_locked(s, (uint32_t)i);
    }
    pthread_mutex_unlock(&s->lock);
    for (int k = 0; k < nr; k++)
        cr__zsub_remove(s->zsub, (uint32_t)removed[k], removed_gen[k]); /* -ENOENT: local */
    if (!nr) {
        json_decref(names);
        return cr__csvc_reply_error(s, resp, 404, "instance_id: not registered");
    }
    inc(s, CR__CSVC_M_UNREGISTERS, (uint64_t)nr);
    json_t *j = json_object();
    json_object_set_new(j, "status", json_string("unregistered successfully"));
    json_object_set_new(j, "removed_instances", names);
    cr__csvc_reply_json(resp, 200, j);
}
