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

#include "common/clock.h"
#include "common/log.h"
#include "crescent/conductor.h"

#define NSLOT CR_COND_MAX_INSTANCES
#define BURST 256 /* messages taken from one socket before polling again */
#define PENDING_MAX 1024             /* live messages held while replaying */
#define PENDING_BYTES_MAX (64u << 20)
#define DEFAULT_REPLAY_TIMEOUT_MS 2000 /* replay_timeout_ms 0 */
#define DEFAULT_HWM 10000              /* hwm <= 0 */

enum { CMD_NONE = 0, CMD_ADD, CMD_REMOVE, CMD_STOP };

typedef struct pending {
    uint64_t seq;
    void *data;
    size_t len;
} pending_t;

typedef struct zslot {
    void *sub;
    void *mon;    /* PAIR receiving the SUB socket's DISCONNECTED events */
    void *dealer; /* replay requests, when a replay endpoint was given */
    char ep[256]; /* the publisher endpoint, to reconnect */
    uint32_t gen;
    int have_seq;
    uint64_t last; /* last sequence number handed to the callback */
    int replaying;
    uint64_t deadline_ms;
    pending_t *pend; /* PENDING_MAX, allocated on the first replay */
    size_t n_pend, pend_bytes;
} zslot_t;

struct cr__zsub {
    cr__zsub_msg_fn fn;
    void *user;
    size_t max_msg;
    int hwm;
    uint64_t replay_timeout_ms;
    void *ctx;
    int efd;
    pthread_t thr;
    int started;

    zslot_t slot[NSLOT]; /* owned by the thread */

    /* one command at a time: callers serialise on cmd_lock, then hand the
     * command over under lock/cond */
    pthread_mutex_t cmd_lock;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int cmd, cmd_done, cmd_rc;
    int dead; /* the thread has left its loop: commands fail with -EIO */
    uint32_t cmd_slot, cmd_gen;
    const char *cmd_endpoint, *cmd_replay;
    char cmd_err[200];
};

static void drop_pending(zslot_t *zs)
{
    for (size_t i = 0; i < zs->n_pend; i++)
        free(zs->pend[i].data);
    zs->n_pend = zs->pend_bytes = 0;
}

static void close_slot(cr__zsub_t *z, uint32_t s)
{
    zslot_t *zs = &z->slot[s];
    if (zs->sub && zs->mon)
        zmq_socket_monitor(zs->sub, NULL, 0);
    if (zs->mon)
        zmq_close(zs->mon);
    if (zs->sub)
        zmq_close(zs->sub);
    if (zs->dealer)
        zmq_close(zs->dealer);
    drop_pending(zs);
    free(zs->pend);
    memset(zs, 0, sizeof *zs);
}

static int recv_parts(void *sk, zmq_msg_t part[3]);

static void *new_socket(cr__zsub_t *z, int type)
{
    void *sk = zmq_socket(z->ctx, type);
    if (!sk)
        return NULL;
    int linger = 0;
    int64_t maxmsg = (int64_t)z->max_msg;
    zmq_setsockopt(sk, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sk, ZMQ_RCVHWM, &z->hwm, sizeof z->hwm);
    zmq_setsockopt(sk, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    return sk;
}

static int do_add(cr__zsub_t *z, uint32_t s, uint32_t gen, const char *ep, const char *replay,
                  char *err, size_t n)
{
    zslot_t *zs = &z->slot[s];
    if (zs->sub) {
        if (zs->gen == gen)
            return -EEXIST;
        close_slot(z, s); /* left over from an older registration of the slot */
    }
    void *sk = new_socket(z, ZMQ_SUB);
    if (!sk) {
        snprintf(err, n, "endpoint: zmq_socket failed: %s", zmq_strerror(zmq_errno()));
        return -ENOMEM;
    }
    zmq_setsockopt(sk, ZMQ_SUBSCRIBE, "", 0);
    if (zmq_connect(sk, ep)) {
        snprintf(err, n, "endpoint: cannot connect to '%s': %s", ep, zmq_strerror(zmq_errno()));
        zmq_close(sk);
        return -EINVAL;
    }
    void *dl = NULL;
    if (replay && *replay) {
        /* connected now so that a request made at the first gap is queued
         * even before the TCP connection completes */
        dl = new_socket(z, ZMQ_DEALER);
        if (!dl || zmq_connect(dl, replay)) {
            snprintf(err, n, "replay_endpoint: cannot connect to '%s': %s", replay,
                     zmq_strerror(zmq_errno()));
            if (dl)
                zmq_close(dl);
            zmq_close(sk);
            return -EINVAL;
        }
    }
    /* libzmq does not reconnect after a protocol error (e.g. a message over
     * ZMQ_MAXMSGSIZE): watch for disconnects and reconnect ourselves */
    char mon_ep[64];
    snprintf(mon_ep, sizeof mon_ep, "inproc://cr-conductor-mon-%u-%u", s, gen);
    void *mon = NULL;
    if (zmq_socket_monitor(sk, mon_ep, ZMQ_EVENT_DISCONNECTED) == 0 &&
        (mon = zmq_socket(z->ctx, ZMQ_PAIR)) != NULL && zmq_connect(mon, mon_ep) != 0) {
        zmq_close(mon);
        mon = NULL;
    }
    if (!mon)
        CR_LOG_WARN("conductor", "slot %u: no socket monitor (%s); a dropped connection "
                    "will not be re-established", s, zmq_strerror(zmq_errno()));
    memset(zs, 0, sizeof *zs);
    zs->sub = sk;
    zs->mon = mon;
    zs->dealer = dl;
    zs->gen = gen;
    snprintf(zs->ep, sizeof zs->ep, "%s", ep);
    return 0;
}

/* A DISCONNECTED event of slot s: connect again (libzmq retries by itself
 * after a plain disconnect, not after a protocol error; a fresh connect
 * covers both). */
static int on_monitor(cr__zsub_t *z, uint32_t s)
{
    zslot_t *zs = &z->slot[s];
    zmq_msg_t part[3];
    for (int i = 0; i < 3; i++)
        zmq_msg_init(&part[i]);
    int n = recv_parts(zs->mon, part);
    for (int i = 0; i < 3; i++)
        zmq_msg_close(&part[i]);
    if (!n)
        return -1;
    zmq_disconnect(zs->sub, zs->ep);
    if (zmq_connect(zs->sub, zs->ep))
        CR_LOG_WARN("conductor", "slot %u: reconnect to %s failed: %s", s, zs->ep,
                    zmq_strerror(zmq_errno()));
    else
        CR_LOG_INFO("conductor", "slot %u: publisher %s disconnected, reconnecting", s, zs->ep);
    return 0;
}

static void deliver(cr__zsub_t *z, uint32_t s, int has_seq, uint64_t seq, const void *p,
                    size_t len)
{
    zslot_t *zs = &z->slot[s];
    if (has_seq) {
        zs->have_seq = 1;
        zs->last = seq;
    }
    z->fn(z->user, s, zs->gen, has_seq, seq, p, len, 0);
}

/* Ends a replay: hands over the live messages held meanwhile, in order,
 * skipping those the replay already delivered. */
static void finish_replay(cr__zsub_t *z, uint32_t s)
{
    zslot_t *zs = &z->slot[s];
    for (size_t i = 0; i < zs->n_pend; i++)
        if (!zs->have_seq || zs->pend[i].seq > zs->last)
            deliver(z, s, 1, zs->pend[i].seq, zs->pend[i].data, zs->pend[i].len);
    drop_pending(zs);
    zs->replaying = 0;
}

static int hold(zslot_t *zs, uint64_t seq, const void *p, size_t len)
{
    if (!zs->pend && !(zs->pend = calloc(PENDING_MAX, sizeof *zs->pend)))
        return -1;
    if (zs->n_pend >= PENDING_MAX || zs->pend_bytes + len > PENDING_BYTES_MAX)
        return -1;
    void *d = malloc(len ? len : 1);
    if (!d)
        return -1;
    memcpy(d, p, len);
    zs->pend[zs->n_pend++] = (pending_t){.seq = seq, .data = d, .len = len};
    zs->pend_bytes += len;
    return 0;
}

/* A live message with a sequence number. */
static void on_live(cr__zsub_t *z, uint32_t s, uint64_t seq, const void *p, size_t len)
{
    zslot_t *zs = &z->slot[s];
    if (zs->replaying) {
        if (hold(zs, seq, p, len)) {
            CR_LOG_WARN("conductor", "slot %u: too much traffic during a replay; giving it up",
                        s);
            finish_replay(z, s);
            deliver(z, s, 1, seq, p, len);
        }
        return;
    }
    if (zs->dealer && zs->have_seq && seq > zs->last + 1) {
        /* vLLM's replay protocol: [empty, start seq (8 bytes BE)] to its
         * ROUTER; answers [empty, seq, payload]... then [empty, -1, ""] */
        uint8_t start[8];
        uint64_t from = zs->last + 1;
        for (int i = 0; i < 8; i++)
            start[i] = (uint8_t)(from >> (56 - 8 * i));
        if (zmq_send(zs->dealer, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) == 0 &&
            zmq_send(zs->dealer, start, 8, ZMQ_DONTWAIT) == 8 && !hold(zs, seq, p, len)) {
            zs->replaying = 1;
            zs->deadline_ms = cr__now_ms() + z->replay_timeout_ms;
            CR_LOG_INFO("conductor", "slot %u: seq %llu after %llu, replaying from %llu", s,
                        (unsigned long long)seq, (unsigned long long)zs->last,
                        (unsigned long long)from);
            return;
        }
    }
    deliver(z, s, 1, seq, p, len);
}

/* Receives one multipart message: its first 3 frames into part[] (further
 * frames are drained). Returns the frame count, capped at 4 ("more than
 * 3"), or 0 if nothing was pending. */
static int recv_parts(void *sk, zmq_msg_t part[3])
{
    int n = 0;
    for (;;) {
        zmq_msg_t tmp, *m = n < 3 ? &part[n] : &tmp;
        if (n >= 3)
            zmq_msg_init(&tmp);
        if (zmq_msg_recv(m, sk, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            if (n >= 3)
                zmq_msg_close(&tmp);
            return n;
        }
        int more = zmq_msg_more(m);
        if (n >= 3) {
            zmq_msg_close(&tmp);
            n = 4;
        } else {
            n++;
        }
        if (!more)
            return n;
    }
}

static uint64_t be64(const zmq_msg_t *m)
{
    const uint8_t *b = zmq_msg_data((zmq_msg_t *)m);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v;
}

/* One message from the SUB socket of slot s. Returns 0, or -1 if none. */
static int recv_sub(cr__zsub_t *z, uint32_t s)
{
    zmq_msg_t part[3];
    for (int i = 0; i < 3; i++)
        zmq_msg_init(&part[i]);
    int n = recv_parts(z->slot[s].sub, part);
    int rc = n ? 0 : -1;
    const zmq_msg_t *seqm = NULL, *payload = NULL;
    if (n == 3 && zmq_msg_size(&part[1]) == 8) {
        seqm = &part[1];
        payload = &part[2];
    } else if (n == 2) {
        seqm = zmq_msg_size(&part[0]) == 8 ? &part[0] : NULL;
        payload = &part[1];
    } else if (n == 1) {
        payload = &part[0];
    }
    if (n && !payload)
        z->fn(z->user, s, z->slot[s].gen, 0, 0, NULL, 0, 1);
    else if (payload && seqm)
        on_live(z, s, be64(seqm), zmq_msg_data((zmq_msg_t *)payload), zmq_msg_size(payload));
    else if (payload)
        deliver(z, s, 0, 0, zmq_msg_data((zmq_msg_t *)payload), zmq_msg_size(payload));
    for (int i = 0; i < 3; i++)
        zmq_msg_close(&part[i]);
    return rc;
}

/* One reply from the replay DEALER of slot s. Returns 0, or -1 if none. */
static int recv_replay(cr__zsub_t *z, uint32_t s)
{
    zslot_t *zs = &z->slot[s];
    zmq_msg_t part[3];
    for (int i = 0; i < 3; i++)
        zmq_msg_init(&part[i]);
    int n = recv_parts(zs->dealer, part);
    int rc = n ? 0 : -1;
    if (n == 3 && zmq_msg_size(&part[0]) == 0 && zmq_msg_size(&part[1]) == 8) {
        uint64_t seq = be64(&part[1]);
        if (!zs->replaying) {
            /* late answer to a replay we gave up: ignore */
        } else if (seq == UINT64_MAX) {
            finish_replay(z, s); /* end marker (-1) */
        } else if (!zs->have_seq || seq > zs->last) {
            deliver(z, s, 1, seq, zmq_msg_data(&part[2]), zmq_msg_size(&part[2]));
        }
    } else if (n) {
        z->fn(z->user, s, zs->gen, 0, 0, NULL, 0, 1);
    }
    for (int i = 0; i < 3; i++)
        zmq_msg_close(&part[i]);
    return rc;
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
            z->cmd_rc = do_add(z, z->cmd_slot, z->cmd_gen, z->cmd_endpoint, z->cmd_replay,
                               z->cmd_err, sizeof z->cmd_err);
            break;
        case CMD_REMOVE:
            if (z->slot[z->cmd_slot].sub && z->slot[z->cmd_slot].gen == z->cmd_gen) {
                close_slot(z, z->cmd_slot);
                z->cmd_rc = 0;
            } else {
                z->cmd_rc = -ENOENT;
            }
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
    zmq_pollitem_t items[3 * NSLOT + 1];
    uint32_t slot_of[3 * NSLOT + 1];
    int is_replay[3 * NSLOT + 1]; /* 0 SUB, 1 replay DEALER, 2 monitor */
    for (;;) {
        int n = 0;
        long timeout = -1;
        uint64_t now = cr__now_ms();
        items[n++] = (zmq_pollitem_t){.socket = NULL, .fd = z->efd, .events = ZMQ_POLLIN};
        for (uint32_t s = 0; s < NSLOT; s++) {
            zslot_t *zs = &z->slot[s];
            if (!zs->sub)
                continue;
            if (zs->replaying) {
                if (now >= zs->deadline_ms) {
                    CR_LOG_WARN("conductor", "slot %u: replay timed out", s);
                    finish_replay(z, s);
                } else if (timeout < 0 || (long)(zs->deadline_ms - now) < timeout) {
                    timeout = (long)(zs->deadline_ms - now);
                }
            }
            slot_of[n] = s;
            is_replay[n] = 0;
            items[n++] = (zmq_pollitem_t){.socket = zs->sub, .events = ZMQ_POLLIN};
            if (zs->dealer) {
                slot_of[n] = s;
                is_replay[n] = 1;
                items[n++] = (zmq_pollitem_t){.socket = zs->dealer, .events = ZMQ_POLLIN};
            }
            if (zs->mon) {
                slot_of[n] = s;
                is_replay[n] = 2;
                items[n++] = (zmq_pollitem_t){.socket = zs->mon, .events = ZMQ_POLLIN};
            }
        }
        int r = zmq_poll(items, n, timeout);
        if (r < 0) {
            if (zmq_errno() == EINTR)
                continue;
            CR_LOG_ERROR("conductor", "zmq_poll failed: %s", zmq_strerror(zmq_errno()));
            break;
        }
        /* replay answers first, so that held live messages follow them;
         * monitor events last */
        static const int order[3] = {1, 0, 2};
        for (int o = 0; o < 3; o++)
            for (int i = 1; i < n; i++) {
                int kind = order[o];
                if (is_replay[i] != kind || !(items[i].revents & ZMQ_POLLIN))
                    continue;
                uint32_t s = slot_of[i];
                for (int k = 0; k < BURST && z->slot[s].sub; k++)
                    if (kind == 1 ? recv_replay(z, s) : kind == 0 ? recv_sub(z, s)
                                                                  : on_monitor(z, s))
                        break;
            }
        if ((items[0].revents & ZMQ_POLLIN) && handle_cmd(z))
            break;
    }
    for (uint32_t s = 0; s < NSLOT; s++)
        close_slot(z, s);
    /* never leave a caller waiting for a thread that is gone */
    pthread_mutex_lock(&z->lock);
    z->dead = 1;
    pthread_cond_broadcast(&z->cond);
    pthread_mutex_unlock(&z->lock);
    return NULL;
}

static int run_cmd(cr__zsub_t *z, int cmd, uint32_t slot, uint32_t gen, const char *ep,
                   const char *replay, char *err, size_t errlen)
{
    pthread_mutex_lock(&z->cmd_lock);
    pthread_mutex_lock(&z->lock);
    if (z->dead) {
        pthread_mutex_unlock(&z->lock);
        pthread_mutex_unlock(&z->cmd_lock);
        if (err && errlen)
            snprintf(err, errlen, "endpoint: the ZMQ thread has stopped");
        return -EIO;
    }
    z->cmd = cmd;
    z->cmd_done = 0;
    z->cmd_slot = slot;
    z->cmd_gen = gen;
    z->cmd_endpoint = ep;
    z->cmd_replay = replay;
    z->cmd_err[0] = 0;
    uint64_t one = 1;
    if (write(z->efd, &one, sizeof one) < 0) {
        int e = errno;
        z->cmd = CMD_NONE;
        pthread_mutex_unlock(&z->lock);
        pthread_mutex_unlock(&z->cmd_lock);
        return -e;
    }
    while (!z->cmd_done && !z->dead)
        pthread_cond_wait(&z->cond, &z->lock);
    int rc = z->cmd_done ? z->cmd_rc : (cmd == CMD_STOP ? 0 : -EIO);
    if (err && errlen)
        snprintf(err, errlen, "%s", z->cmd_err);
    z->cmd = CMD_NONE;
    pthread_mutex_unlock(&z->lock);
    pthread_mutex_unlock(&z->cmd_lock);
    return rc;
}

int cr__zsub_start(cr__zsub_msg_fn fn, void *user, size_t max_msg, int hwm,
                   unsigned replay_timeout_ms, cr__zsub_t **out)
{
    cr__zsub_t *z = calloc(1, sizeof *z);
    if (!z)
        return -ENOMEM;
    z->replay_timeout_ms = replay_timeout_ms ? replay_timeout_ms : DEFAULT_REPLAY_TIMEOUT_MS;
    z->fn = fn;
    z->user = user;
    z->max_msg = max_msg ? max_msg : (4u << 20);
    z->hwm = hwm > 0 ? hwm : DEFAULT_HWM;
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

int cr__zsub_add(cr__zsub_t *z, uint32_t slot, uint32_t gen, const char *endpoint,
                 const char *replay_endpoint, char *err, size_t errlen)
{
    if (!z || slot >= NSLOT || !endpoint)
        return -EINVAL;
    return run_cmd(z, CMD_ADD, slot, gen, endpoint, replay_endpoint, err, errlen);
}

int cr__zsub_remove(cr__zsub_t *z, uint32_t slot, uint32_t gen)
{
    if (!z || slot >= NSLOT)
        return -EINVAL;
    return run_cmd(z, CMD_REMOVE, slot, gen, NULL, NULL, NULL, 0);
}

void cr__zsub_stop(cr__zsub_t *z)
{
    if (!z)
        return;
    if (z->started) {
        run_cmd(z, CMD_STOP, 0, 0, NULL, NULL, NULL, 0);
        pthread_join(z->thr, NULL);
    }
    zmq_ctx_term(z->ctx);
    close(z->efd);
    pthread_mutex_destroy(&z->cmd_lock);
    pthread_mutex_destroy(&z->lock);
    pthread_cond_destroy(&z->cond);
    free(z);
}
