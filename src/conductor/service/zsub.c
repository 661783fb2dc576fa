/* ZMQ subscriber thread: see zsub.h. */
#include "conductor/service/zsub.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include "common/log.h"
#include "crescent/conductor.h"

#define NSLOT CR_COND_MAX_INSTANCES
#define BURST 256 /* messages taken from one socket before polling again */

enum { CMD_NONE = 0, CMD_ADD, CMD_REMOVE, CMD_STOP };

struct cr__zsub {
    cr__zsub_msg_fn fn;
    void *user;
    size_t max_msg;
    int hwm;
    void *ctx;
    int efd;
    pthread_t thr;
    int started;

    /* owned by the thread */
    void *sock[NSLOT];
    uint32_t gen[NSLOT];

    /* one command at a time: callers serialise on cmd_lock, then hand the
     * command over under lock/cond */
    pthread_mutex_t cmd_lock;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int cmd, cmd_done, cmd_rc;
    uint32_t cmd_slot, cmd_gen;
    const char *cmd_endpoint;
    char cmd_err[200];
};

static void close_slot(cr__zsub_t *z, uint32_t s)
{
    if (z->sock[s]) {
        zmq_close(z->sock[s]);
        z->sock[s] = NULL;
    }
}

static int do_add(cr__zsub_t *z, uint32_t s, uint32_t gen, const char *ep, char *err, size_t n)
{
    if (z->sock[s])
        return -EEXIST;
    void *sk = zmq_socket(z->ctx, ZMQ_SUB);
    if (!sk) {
        snprintf(err, n, "endpoint: zmq_socket failed: %s", zmq_strerror(zmq_errno()));
        return -ENOMEM;
    }
    int linger = 0;
    int64_t maxmsg = (int64_t)z->max_msg;
    zmq_setsockopt(sk, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sk, ZMQ_RCVHWM, &z->hwm, sizeof z->hwm);
    zmq_setsockopt(sk, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(sk, ZMQ_SUBSCRIBE, "", 0);
    if (zmq_connect(sk, ep)) {
        int e = zmq_errno();
        snprintf(err, n, "endpoint: cannot connect to '%s': %s", ep, zmq_strerror(e));
        zmq_close(sk);
        return -EINVAL;
    }
    z->sock[s] = sk;
    z->gen[s] = gen;
    return 0;
}

/* Receives one multipart message from sk and dispatches it. Returns 0, or -1
 * when nothing was pending. */
static int recv_one(cr__zsub_t *z, uint32_t s)
{
    zmq_msg_t part[3];
    int nparts = 0, more = 1, extra = 0;
    for (int i = 0; i < 3; i++)
        zmq_msg_init(&part[i]);
    while (more) {
        zmq_msg_t *m = &part[nparts < 3 ? nparts : 2];
        if (nparts >= 3) {
            /* too many frames: keep draining into a scratch message */
            zmq_msg_t tmp;
            zmq_msg_init(&tmp);
            if (zmq_msg_recv(&tmp, z->sock[s], 0) < 0) {
                zmq_msg_close(&tmp);
                break;
            }
            more = zmq_msg_more(&tmp);
            zmq_msg_close(&tmp);
            extra = 1;
            continue;
        }
        if (zmq_msg_recv(m, z->sock[s], nparts == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            if (nparts == 0) {
                for (int i = 0; i < 3; i++)
                    zmq_msg_close(&part[i]);
                return -1;
            }
            break;
        }
        nparts++;
        more = zmq_msg_more(m);
    }
    int has_seq = 0;
    uint64_t seq = 0;
    const zmq_msg_t *payload = NULL;
    if (!extra) {
        const zmq_msg_t *seqm = NULL;
        if (nparts == 3) {
            if (zmq_msg_size(&part[1]) == 8)
                seqm = &part[1];
            payload = &part[2];
        } else if (nparts == 2) {
            if (zmq_msg_size(&part[0]) == 8)
                seqm = &part[0];
            payload = &part[1];
        } else if (nparts == 1) {
            payload = &part[0];
        }
        if (nparts == 3 && !seqm)
            payload = NULL; /* 3 frames but the middle one is no sequence number */
        if (seqm) {
            const uint8_t *b = zmq_msg_data((zmq_msg_t *)seqm);
            for (int i = 0; i < 8; i++)
                seq = seq << 8 | b[i];
            has_seq = 1;
        }
    }
    if (payload)
        z->fn(z->user, s, z->gen[s], has_seq, seq, zmq_msg_data((zmq_msg_t *)payload),
              zmq_msg_size(payload), 0);
    else
        z->fn(z->user, s, z->gen[s], 0, 0, NULL, 0, 1);
    for (int i = 0; i < 3; i++)
        zmq_msg_close(&part[i]);
    return 0;
}

static int handle_cmd(cr__zsub_t *z)
{
    uint64_t v;
    if (read(z->efd, &v, sizeof v) < 0 && errno != EAGAIN)
        return 0;
    int stop = 0;
    pthread_mutex_lock(&z->lock);
    if (z->cmd != CMD_NONE && !z->cmd_done) {
        switch (z->cmd) {
        case CMD_ADD:
            z->cmd_rc = do_add(z, z->cmd_slot, z->cmd_gen, z->cmd_endpoint, z->cmd_err,
                               sizeof z->cmd_err);
            break;
        case CMD_REMOVE:
            z->cmd_rc = z->sock[z->cmd_slot] ? 0 : -ENOENT;
            close_slot(z, z->cmd_slot);
            break;
        case CMD_STOP:
            stop = 1;
            z->cmd_rc = 0;
            break;
        }
        z->cmd_done = 1;
        pthread_cond_broadcast(&z->cond);
    }
    pthread_mutex_unlock(&z->lock);
    return stop;
}

static void *thread_main(void *arg)
{
    cr__zsub_t *z = arg;
    zmq_pollitem_t items[NSLOT + 1];
    uint32_t slot_of[NSLOT + 1];
    for (;;) {
        int n = 0;
        items[n++] = (zmq_pollitem_t){.socket = NULL, .fd = z->efd, .events = ZMQ_POLLIN};
        for (uint32_t s = 0; s < NSLOT; s++)
            if (z->sock[s]) {
                slot_of[n] = s;
                items[n++] = (zmq_pollitem_t){.socket = z->sock[s], .events = ZMQ_POLLIN};
            }
        int r = zmq_poll(items, n, -1);
        if (r < 0) {
            if (zmq_errno() == EINTR)
                continue;
            CR_LOG_ERROR("conductor", "zmq_poll failed: %s", zmq_strerror(zmq_errno()));
            break;
        }
        for (int i = 1; i < n; i++) {
            if (!(items[i].revents & ZMQ_POLLIN))
                continue;
            uint32_t s = slot_of[i];
            for (int k = 0; k < BURST && z->sock[s]; k++)
                if (recv_one(z, s))
                    break;
        }
        if ((items[0].revents & ZMQ_POLLIN) && handle_cmd(z))
            break;
    }
    for (uint32_t s = 0; s < NSLOT; s++)
        close_slot(z, s);
    return NULL;
}

static int run_cmd(cr__zsub_t *z, int cmd, uint32_t slot, uint32_t gen, const char *ep,
                   char *err, size_t errlen)
{
    pthread_mutex_lock(&z->cmd_lock);
    pthread_mutex_lock(&z->lock);
    z->cmd = cmd;
    z->cmd_done = 0;
    z->cmd_slot = slot;
    z->cmd_gen = gen;
    z->cmd_endpoint = ep;
    z->cmd_err[0] = 0;
    uint64_t one = 1;
    if (write(z->efd, &one, sizeof one) < 0) {
        int e = errno;
        z->cmd = CMD_NONE;
        pthread_mutex_unlock(&z->lock);
        pthread_mutex_unlock(&z->cmd_lock);
        return -e;
    }
    while (!z->cmd_done)
        pthread_cond_wait(&z->cond, &z->lock);
    int rc = z->cmd_rc;
    if (err && errlen)
        snprintf(err, errlen, "%s", z->cmd_err);
    z->cmd = CMD_NONE;
    pthread_mutex_unlock(&z->lock);
    pthread_mutex_unlock(&z->cmd_lock);
    return rc;
}

int cr__zsub_start(cr__zsub_msg_fn fn, void *user, size_t max_msg, int hwm, cr__zsub_t **out)
{
    cr__zsub_t *z = calloc(1, sizeof *z);
    if (!z)
        return -ENOMEM;
    z->fn = fn;
    z->user = user;
    z->max_msg = max_msg ? max_msg : (4u << 20);
    z->hwm = hwm > 0 ? hwm : 10000;
    z->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (z->efd < 0) {
        int e = errno;
        free(z);
        return -e;
    }
    z->ctx = zmq_ctx_new();
    if (!z->ctx) {
        close(z->efd);
        free(z);
        return -ENOMEM;
    }
    pthread_mutex_init(&z->cmd_lock, NULL);
    pthread_mutex_init(&z->lock, NULL);
    pthread_cond_init(&z->cond, NULL);
    int rc = pthread_create(&z->thr, NULL, thread_main, z);
    if (rc) {
        zmq_ctx_term(z->ctx);
        close(z->efd);
        pthread_mutex_destroy(&z->cmd_lock);
        pthread_mutex_destroy(&z->lock);
        pthread_cond_destroy(&z->cond);
        free(z);
        return -rc;
    }
    z->started = 1;
    *out = z;
    return 0;
}

int cr__zsub_add(cr__zsub_t *z, uint32_t slot, uint32_t gen, const char *endpoint, char *err,
                 size_t errlen)
{
    if (!z || slot >= NSLOT || !endpoint)
        return -EINVAL;
    return run_cmd(z, CMD_ADD, slot, gen, endpoint, err, errlen);
}

int cr__zsub_remove(cr__zsub_t *z, uint32_t slot)
{
    if (!z || slot >= NSLOT)
        return -EINVAL;
    return run_cmd(z, CMD_REMOVE, slot, 0, NULL, NULL, 0);
}

void cr__zsub_stop(cr__zsub_t *z)
{
    if (!z)
        return;
    if (z->started) {
        run_cmd(z, CMD_STOP, 0, 0, NULL, NULL, 0);
        pthread_join(z->thr, NULL);
    }
    zmq_ctx_term(z->ctx);
    close(z->efd);
    pthread_mutex_destroy(&z->cmd_lock);
    pthread_mutex_destroy(&z->lock);
    pthread_cond_destroy(&z->cond);
    free(z);
}
