/* Notifications: small messages between segments.
 *
 * Engine payload (opaque to transports): [u16 LE from_len][from][msg].
 * Received notifications go to a bounded ring (oldest dropped when full,
 * counted). Batch notifications are sent by one notifier thread once the
 * batch's writes to the target landed, so completion callbacks in transport
 * threads never block on a send. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "transfer/xfer_internal.h"

static void *notifier_main(void *arg)
{
    cr_xfer_engine_t *e = arg;
    pthread_mutex_lock(&e->out_lock);
    for (;;) {
        while (!e->out_head && !e->out_stop)
            pthread_cond_wait(&e->out_cv, &e->out_lock);
        if (!e->out_head)
            break;
        cr__xfer_outmsg_t *m = e->out_head;
        e->out_head = m->next;
        if (!e->out_head)
            e->out_tail = NULL;
        e->out_count--;
        int stop = e->out_stop;
        pthread_mutex_unlock(&e->out_lock);
        if (!stop) {
            int rc = cr__xfer_notify_send_peer(e, m->peer, m->msg, m->len);
            if (rc)
                CR_LOG_WARN("xfer", "batch notification to %s failed: %s", m->peer->name,
                            cr_strerror(rc));
        }
        free(m);
        pthread_mutex_lock(&e->out_lock);
    }
    pthread_mutex_unlock(&e->out_lock);
    return NULL;
}

int cr__xfer_notify_init(cr_xfer_engine_t *e)
{
    pthread_mutex_init(&e->nq_lock, NULL);
    pthread_mutex_init(&e->out_lock, NULL);
    pthread_cond_init(&e->out_cv, NULL);
    e->nq = calloc(CR__XFER_NOTIFY_QUEUE, sizeof *e->nq);
    if (!e->nq)
        return -ENOMEM;
    if (pthread_create(&e->notifier, NULL, notifier_main, e))
        return -ENOMEM;
    e->notifier_started = 1;
    return 0;
}

void cr__xfer_notify_fini(cr_xfer_engine_t *e)
{
    if (e->notifier_started) {
        pthread_mutex_lock(&e->out_lock);
        e->out_stop = 1;
        pthread_cond_signal(&e->out_cv);
        pthread_mutex_unlock(&e->out_lock);
        pthread_join(e->notifier, NULL);
        e->notifier_started = 0;
    }
    while (e->out_head) {
        cr__xfer_outmsg_t *m = e->out_head;
        e->out_head = m->next;
        free(m);
    }
    pthread_mutex_lock(&e->nq_lock);
    free(e->nq);
    e->nq = NULL;
    pthread_mutex_unlock(&e->nq_lock);
}

void cr__xfer_notify_enqueue(cr_xfer_engine_t *e, cr__xfer_outmsg_t *m)
{
    m->next = NULL;
    pthread_mutex_lock(&e->out_lock);
    if (e->out_stop || e->out_count >= CR__XFER_OUT_NOTIFY_MAX) {
        pthread_mutex_unlock(&e->out_lock);
        CR_LOG_WARN("xfer", "batch notification to %s dropped: queue full", m->peer->name);
        free(m);
        return;
    }
    if (e->out_tail)
        e->out_tail->next = m;
    else
        e->out_head = m;
    e->out_tail = m;
    e->out_count++;
    pthread_cond_signal(&e->out_cv);
    pthread_mutex_unlock(&e->out_lock);
}

int cr__xfer_notify_send_peer(cr_xfer_engine_t *e, cr__xfer_peer_t *p, const void *msg,
                              size_t len)
{
    void *st;
    const struct cr_xfer_transport_ops *t = cr__xfer_transport_of(e, &st, p);
    if (t && t->notify && st)
        return t->notify(st, p, msg, len);
    return cr__xfer_ctl_notify(e, p, msg, len);
}

int cr_xfer_notify_send(cr_xfer_engine_t *e, cr_xfer_segment_t target, const void *msg,
                        size_t len)
{
    if (!e || (len && !msg) || len > CR_XFER_NOTIFY_MAX)
        return -EINVAL;
    cr__xfer_peer_t *p = cr__xfer_peer_get(e, target);
    if (!p)
        return -ENOENT;
    size_t nl = strlen(e->local.name);
    char buf[2 + CR_XFER_NAME_MAX + CR_XFER_NOTIFY_MAX];
    buf[0] = (char)(nl & 0xff);
    buf[1] = (char)(nl >> 8);
    memcpy(buf + 2, e->local.name, nl);
    if (len)
        memcpy(buf + 2 + nl, msg, len);
    return cr__xfer_notify_send_peer(e, p, buf, 2 + nl + len);
}

int cr__xfer_notify_payload_deliver(cr_xfer_engine_t *e, const void *payload, size_t len)
{
    const unsigned char *b = payload;
    if (len < 2)
        return -EINVAL;
    size_t nl = (size_t)b[0] | ((size_t)b[1] << 8);
    if (nl >= CR_XFER_NAME_MAX || 2 + nl > len || len - 2 - nl > CR_XFER_NOTIFY_MAX)
        return -EINVAL;
    char from[CR_XFER_NAME_MAX];
    memcpy(from, b + 2, nl);
    from[nl] = 0;
    if (strlen(from) != nl)
        return -EINVAL;
    cr__xfer_notify_deliver(e, from, b + 2 + nl, len - 2 - nl);
    return 0;
}

void cr__xfer_notify_deliver(cr_xfer_engine_t *e, const char *from, const void *msg, size_t len)
{
    if (len > CR_XFER_NOTIFY_MAX)
        len = CR_XFER_NOTIFY_MAX;
    pthread_mutex_lock(&e->nq_lock);
    if (!e->nq) {
        pthread_mutex_unlock(&e->nq_lock);
        return;
    }
    if (e->nq_count == CR__XFER_NOTIFY_QUEUE) { /* full: drop the oldest */
        e->nq_head = (e->nq_head + 1) % CR__XFER_NOTIFY_QUEUE;
        e->nq_count--;
        if (e->nq_dropped++ == 0)
            CR_LOG_WARN("xfer", "notification queue full: dropping the oldest");
    }
    cr_xfer_notify_t *n = &e->nq[(e->nq_head + e->nq_count) % CR__XFER_NOTIFY_QUEUE];
    snprintf(n->from, sizeof n->from, "%s", from);
    n->len = len;
    memcpy(n->msg, msg, len);
    e->nq_count++;
    pthread_mutex_unlock(&e->nq_lock);
}

int cr_xfer_notify_poll(cr_xfer_engine_t *e, cr_xfer_notify_t *out, size_t cap, size_t *n)
{
    if (!e || !n || (cap && !out))
        return -EINVAL;
    size_t k = 0;
    pthread_mutex_lock(&e->nq_lock);
    while (k < cap && e->nq_count > 0) {
        out[k++] = e->nq[e->nq_head];
        e->nq_head = (e->nq_head + 1) % CR__XFER_NOTIFY_QUEUE;
        e->nq_count--;
    }
    pthread_mutex_unlock(&e->nq_lock);
    *n = k;
    return 0;
}
