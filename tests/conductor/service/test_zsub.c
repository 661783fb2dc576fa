/* ZMQ subscriber thread against real ZMQ sockets on 127.0.0.1: framings,
 * replay (answered, empty, unanswered), oversized messages, remove. Waits
 * are bounded polls for a condition, never timing assertions. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include <cmocka.h>

#include "conductor/service/zsub.h"

#define MAXREC 64

typedef struct rec {
    uint32_t slot;
    int has_seq, bad;
    uint64_t seq;
    size_t len;
    char data[32];
} rec_t;

typedef struct sink {
    pthread_mutex_t lock;
    rec_t r[MAXREC];
    int n;
} sink_t;

static void on_msg(void *user, uint32_t slot, uint32_t gen, int has_seq, uint64_t seq,
                   const void *p, size_t len, int bad)
{
    (void)gen;
    sink_t *s = user;
    pthread_mutex_lock(&s->lock);
    if (s->n < MAXREC) {
        rec_t *r = &s->r[s->n++];
        r->slot = slot;
        r->has_seq = has_seq;
        r->seq = seq;
        r->bad = bad;
        r->len = len;
        memset(r->data, 0, sizeof r->data);
        if (p)
            memcpy(r->data, p, len < sizeof r->data - 1 ? len : sizeof r->data - 1);
    }
    pthread_mutex_unlock(&s->lock);
}

static int count(sink_t *s)
{
    pthread_mutex_lock(&s->lock);
    int n = s->n;
    pthread_mutex_unlock(&s->lock);
    return n;
}

static void wait_count(sink_t *s, int n)
{
    for (int i = 0; i < 3000 && count(s) < n; i++)
        usleep(10000);
    if (count(s) < n)
        fail_msg("expected %d messages, got %d within 30 s", n, count(s));
}

typedef struct fx {
    void *ctx, *pub, *router;
    char ep[128], rep[128];
    sink_t sink;
    cr__zsub_t *z;
} fx_t;

static void bind_any(void *sk, char *ep, size_t n)
{
    assert_int_equal(zmq_bind(sk, "tcp://127.0.0.1:*"), 0);
    assert_int_equal(zmq_getsockopt(sk, ZMQ_LAST_ENDPOINT, ep, &n), 0);
}

/* Waits for a subscription message on the XPUB (skipping unsubscriptions). */
static void wait_sub(fx_t *f)
{
    for (;;) {
        zmq_pollitem_t it = {.socket = f->pub, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 30000) != 1)
            fail_msg("no subscription within 30 s");
        char b[16];
        assert_true(zmq_recv(f->pub, b, sizeof b, 0) >= 1);
        if (b[0] == 1)
            return;
    }
}

static int setup_replay(void **st, int with_replay)
{
    fx_t *f = calloc(1, sizeof *f);
    pthread_mutex_init(&f->sink.lock, NULL);
    f->ctx = zmq_ctx_new();
    f->pub = zmq_socket(f->ctx, ZMQ_XPUB);
    int one = 1, zero = 0;
    zmq_setsockopt(f->pub, ZMQ_XPUB_VERBOSE, &one, sizeof one);
    zmq_setsockopt(f->pub, ZMQ_LINGER, &zero, sizeof zero);
    bind_any(f->pub, f->ep, sizeof f->ep);
    if (with_replay) {
        f->router = zmq_socket(f->ctx, ZMQ_ROUTER);
        zmq_setsockopt(f->router, ZMQ_LINGER, &zero, sizeof zero);
        bind_any(f->router, f->rep, sizeof f->rep);
    }
    assert_int_equal(cr__zsub_start(on_msg, &f->sink, 1024, 1000, 1000, &f->z), 0);
    char err[200];
    assert_int_equal(cr__zsub_add(f->z, 5, 1, f->ep, with_replay ? f->rep : NULL, err, sizeof err),
                     0);
    wait_sub(f);
    *st = f;
    return 0;
}
static int setup(void **st) { return setup_replay(st, 0); }
static int setup_r(void **st) { return setup_replay(st, 1); }

static int teardown(void **st)
{
    fx_t *f = *st;
    cr__zsub_stop(f->z);
    zmq_close(f->pub);
    if (f->router)
        zmq_close(f->router);
    zmq_ctx_term(f->ctx);
    pthread_mutex_destroy(&f->sink.lock);
    free(f);
    return 0;
}

static void send3(void *sk, const char *topic, uint64_t seq, int seqlen, const char *payload)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(seq >> (56 - 8 * i));
    zmq_send(sk, topic, strlen(topic), ZMQ_SNDMORE);
    zmq_send(sk, b, (size_t)seqlen, ZMQ_SNDMORE);
    zmq_send(sk, payload, strlen(payload), 0);
}

static void test_framings(void **st)
{
    fx_t *f = *st;
    send3(f->pub, "t", 7, 8, "three");
    zmq_send(f->pub, "\0\0\0\0\0\0\0\x08", 8, ZMQ_SNDMORE);
    zmq_send(f->pub, "seqpay", 6, 0);
    zmq_send(f->pub, "topic", 5, ZMQ_SNDMORE);
    zmq_send(f->pub, "toppay", 6, 0);
    zmq_send(f->pub, "one", 3, 0);
    for (int i = 0; i < 4; i++)
        zmq_send(f->pub, "x", 1, i < 3 ? ZMQ_SNDMORE : 0);
    send3(f->pub, "t", 1, 5, "badseq");
    wait_count(&f->sink, 6);
    rec_t *r = f->sink.r;
    assert_true(r[0].has_seq && r[0].seq == 7 && !strcmp(r[0].data, "three") && r[0].slot == 5);
    assert_true(r[1].has_seq && r[1].seq == 8 && !strcmp(r[1].data, "seqpay"));
    assert_true(!r[2].has_seq && !strcmp(r[2].data, "toppay"));
    assert_true(!r[3].has_seq && !strcmp(r[3].data, "one"));
    assert_true(r[4].bad && r[5].bad);
}

static void test_oversized_dropped(void **st)
{
    fx_t *f = *st;
    char *big = malloc(4096);
    memset(big, 'b', 4095);
    big[4095] = 0;
    send3(f->pub, "t", 0, 8, big); /* > max_msg (1024): the SUB drops the connection */
    free(big);
    wait_sub(f);                   /* ...and subscribes again after reconnecting */
    send3(f->pub, "t", 1, 8, "small");
    wait_count(&f->sink, 1);
    assert_string_equal(f->sink.r[0].data, "small");
    assert_int_equal(f->sink.r[0].seq, 1);
}

static void test_remove_stops_delivery(void **st)
{
    fx_t *f = *st;
    send3(f->pub, "t", 0, 8, "a");
    wait_count(&f->sink, 1);
    assert_int_equal(cr__zsub_remove(f->z, 5, 2), -ENOENT); /* other generation */
    assert_int_equal(cr__zsub_remove(f->z, 5, 1), 0);
    assert_int_equal(cr__zsub_remove(f->z, 5, 1), -ENOENT);
    send3(f->pub, "t", 1, 8, "b");
    /* re-add on the same slot: only messages after it arrive */
    char err[200];
    assert_int_equal(cr__zsub_add(f->z, 5, 2, f->ep, NULL, err, sizeof err), 0);
    assert_int_equal(cr__zsub_add(f->z, 5, 2, f->ep, NULL, err, sizeof err), -EEXIST);
    assert_int_equal(cr__zsub_add(f->z, 6, 1, "tcp://", NULL, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "endpoint: cannot connect"));
    wait_sub(f);
    send3(f->pub, "t", 2, 8, "c");
    wait_count(&f->sink, 2);
    assert_string_equal(f->sink.r[1].data, "c");
    /* a newer generation replaces a socket left over from an older one, and
     * a late remove of the older one leaves it alone */
    assert_int_equal(cr__zsub_add(f->z, 5, 3, f->ep, NULL, err, sizeof err), 0);
    assert_int_equal(cr__zsub_remove(f->z, 5, 2), -ENOENT);
    wait_sub(f);
    send3(f->pub, "t", 3, 8, "d");
    wait_count(&f->sink, 3);
    assert_string_equal(f->sink.r[2].data, "d");
}

/* Reads one replay request from the ROUTER; returns its start seq. */
static uint64_t replay_request(fx_t *f, zmq_msg_t *id)
{
    zmq_pollitem_t it = {.socket = f->router, .events = ZMQ_POLLIN};
    assert_int_equal(zmq_poll(&it, 1, 30000), 1);
    zmq_msg_init(id);
    assert_true(zmq_msg_recv(id, f->router, 0) > 0);
    char empty[4], start[16];
    assert_int_equal(zmq_recv(f->router, empty, sizeof empty, 0), 0);
    assert_int_equal(zmq_recv(f->router, start, sizeof start, 0), 8);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | (uint8_t)start[i];
    return v;
}

static void replay_send(fx_t *f, zmq_msg_t *id, uint64_t seq, const char *payload)
{
    zmq_msg_t c;
    zmq_msg_init(&c);
    zmq_msg_copy(&c, id);
    zmq_msg_send(&c, f->router, ZMQ_SNDMORE);
    zmq_send(f->router, "", 0, ZMQ_SNDMORE);
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(seq >> (56 - 8 * i));
    zmq_send(f->router, b, 8, ZMQ_SNDMORE);
    zmq_send(f->router, payload, strlen(payload), 0);
}

static void test_replay_fills_gap_in_order(void **st)
{
    fx_t *f = *st;
    send3(f->pub, "t", 0, 8, "s0");
    wait_count(&f->sink, 1);
    send3(f->pub, "t", 3, 8, "s3"); /* 1 and 2 were lost */
    zmq_msg_t id;
    assert_int_equal(replay_request(f, &id), 1);
    send3(f->pub, "t", 4, 8, "s4"); /* live traffic during the replay is held */
    replay_send(f, &id, 1, "s1");
    replay_send(f, &id, 2, "s2");
    replay_send(f, &id, 3, "s3");
    replay_send(f, &id, UINT64_MAX, "");
    zmq_msg_close(&id);
    wait_count(&f->sink, 5);
    for (int i = 0; i < 5; i++) {
        char want[16];
        snprintf(want, sizeof want, "s%d", i);
        if (f->sink.r[i].seq != (uint64_t)i || strcmp(f->sink.r[i].data, want))
            fail_msg("message %d: expected seq %d '%s', got seq %llu '%s'", i, i, want,
                     (unsigned long long)f->sink.r[i].seq, f->sink.r[i].data);
    }
}

static void test_replay_unanswered_then_empty(void **st)
{
    fx_t *f = *st;
    send3(f->pub, "t", 0, 8, "s0");
    wait_count(&f->sink, 1);
    send3(f->pub, "t", 2, 8, "s2");
    zmq_msg_t id;
    assert_int_equal(replay_request(f, &id), 1);
    /* no answer: after the replay timeout the held message is delivered
     * (the gap stays visible to the service as seq 0 -> 2) */
    wait_count(&f->sink, 2);
    assert_int_equal(f->sink.r[1].seq, 2);
    /* a late answer is ignored */
    replay_send(f, &id, 1, "late");
    replay_send(f, &id, UINT64_MAX, "");
    zmq_msg_close(&id);
    /* the publisher has nothing to replay: the end marker releases at once */
    send3(f->pub, "t", 5, 8, "s5");
    assert_int_equal(replay_request(f, &id), 3);
    replay_send(f, &id, UINT64_MAX, "");
    zmq_msg_close(&id);
    wait_count(&f->sink, 3);
    assert_int_equal(f->sink.r[2].seq, 5);
    assert_string_equal(f->sink.r[2].data, "s5");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_framings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversized_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_stops_delivery, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_fills_gap_in_order, setup_r, teardown),
        cmocka_unit_test_setup_teardown(test_replay_unanswered_then_empty, setup_r, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
