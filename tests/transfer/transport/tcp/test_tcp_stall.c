/* tcp: the buffers of finished requests are never read again, when a peer
 * stalls mid-send and then cuts the connection (slices resent).
 *
 * One batch: A (one small WRITE from its own heap buffer) then B (a WRITE of
 * several slices). Both go out in one gathered send; the test's server reads
 * A, acknowledges it, and stops reading, so the sender blocks inside that
 * send with A's bytes already handed to the kernel. The caller sees A
 * finished and frees A's buffer (allowed: a finished request's buffer is the
 * caller's again). Only then does the server cut the connection: the send
 * returns, B's slices go back to the peer's retry list and are resent on a
 * new connection, which the server serves normally. Run under ASan, a read
 * of A's freed buffer after A finished (e.g. by the send's interceptor) is a
 * heap-use-after-free report. Ordering comes from the server's steps, never
 * from timing; socket buffers are made small (CRESCENT_TCP_SOCKBUF and the
 * server's SO_RCVBUF) so B cannot fit in them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../core/fake_peer.h"
#include "../../core/xfer_test_util.h"
#include "transfer/transport/tcp/tcp_wire.h"

#define A_LEN 4096u
#define B_LEN (4u << 20)
#define SMALL_BUF 16384

typedef struct srv {
    int lfd;
    uint16_t port;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int acked_a; /* conn 1 acknowledged A and stopped reading */
    int go;      /* the test freed A: cut conn 1 */
    int conns;   /* connections accepted */
    uint64_t b_bytes; /* B's bytes received on later connections */
    int rc;
} srv_t;

static int recv_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        ssize_t n = recv(fd, p, len, 0);
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* one WRITE request: header (+ capability) + payload; acked with status 0 */
static int serve_write(int fd, uint64_t *payload)
{
    cr__tcp_hdr_t h;
    if (recv_all(fd, &h, sizeof h) || cr__tcp_hdr_dec(&h) || h.opcode != CR__TCP_WRITE)
        return -1;
    static char sink[1 << 16];
    if ((h.flags & CR__TCP_F_CAP) && recv_all(fd, sink, CR__TCP_CAP_LEN))
        return -1;
    for (uint64_t left = h.len; left;) {
        size_t k = left < sizeof sink ? (size_t)left : sizeof sink;
        if (recv_all(fd, sink, k))
            return -1;
        left -= k;
    }
    *payload = h.len;
    cr__tcp_hdr_t r;
    cr__tcp_hdr_enc(&r, CR__TCP_WRITE | CR__TCP_RESP, 0, h.seq, h.addr, 0);
    return send(fd, &r, sizeof r, MSG_NOSIGNAL) == (ssize_t)sizeof r ? 0 : -1;
}

static void *srv_main(void *arg)
{
    srv_t *s = arg;
    int fd = accept(s->lfd, NULL, NULL);
    uint64_t len = 0;
    if (fd < 0 || serve_write(fd, &len) || len != A_LEN) {
        s->rc = -1;
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    s->conns = 1;
    s->acked_a = 1;
    pthread_cond_broadcast(&s->cv);
    while (!s->go)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    close(fd); /* unread data: the client sees a reset mid-send */
    /* B's slices come again on a new connection: serve them all */
    while (s->b_bytes < B_LEN) {
        fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            break;
        pthread_mutex_lock(&s->mu);
        s->conns++;
        pthread_mutex_unlock(&s->mu);
        while (s->b_bytes < B_LEN && !serve_write(fd, &len))
            s->b_bytes += len;
        close(fd);
    }
    return NULL;
}

static void test_freed_after_finish_never_read(void **state)
{
    (void)state;
    setenv("CRESCENT_TCP_SOCKBUF", "16384", 1);
    srv_t s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    s.lfd = cr__net_listen("127.0.0.1", 0, 8, &s.port);
    assert_true(s.lfd >= 0);
    int sb = SMALL_BUF; /* inherited by accepted sockets */
    setsockopt(s.lfd, SOL_SOCKET, SO_RCVBUF, &sb, sizeof sb);
    assert_int_equal(pthread_create(&s.th, NULL, srv_main, &s), 0);

    fake_peer_t fp; /* answers GET_DESC, naming our server as the data port */
    assert_int_equal(fake_peer_start(&fp), 0);
    fp.desc_dport = s.port;

    cr_xfer_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_XFER_PARAM_TRANSPORTS | CR_XFER_PARAM_NICS | CR_XFER_PARAM_TIMEOUT_MS |
                   CR_XFER_PARAM_SLICE_SIZE | CR_XFER_PARAM_CONNS_PER_PATH |
                   CR_XFER_PARAM_STALL_TIMEOUT_MS;
    p.transports = "tcp";
    p.nics = "127.0.0.1";
    /* the stall watchdog must not be what ends the stall here (the server
     * does, after the free): far beyond any scheduling delay */
    p.timeout_ms = 120000;
    p.stall_timeout_ms = 60000;
    p.slice_size = 256u << 10;
    p.conns_per_path = 1; /* A and B share one connection and one send */
    cr_xfer_engine_t *e;
    assert_int_equal(cr_xfer_engine_create(&p, &e), 0);
    char *a = malloc(A_LEN); /* heap: ASan poisons it once freed */
    char *b = xt_alloc(B_LEN);
    assert_non_null(a);
    assert_non_null(b);
    memset(a, 0x5a, A_LEN);
    assert_int_equal(cr_xfer_mem_register(e, a, A_LEN, NULL), 0);
    assert_int_equal(cr_xfer_mem_register(e, b, B_LEN, NULL), 0);
    cr_xfer_segment_t seg;
    assert_int_equal(cr_xfer_segment_open(e, fp.name, &seg), 0);
    cr_xfer_request_t r[2];
    memset(r, 0, sizeof r);
    r[0].opcode = CR_XFER_WRITE;
    r[0].local_addr = a;
    r[0].target = seg;
    r[0].target_addr = FAKE_BUF_ADDR;
    r[0].length = A_LEN;
    r[1] = r[0];
    r[1].local_addr = b;
    r[1].target_addr = FAKE_BUF_ADDR + A_LEN;
    r[1].length = B_LEN;
    cr_xfer_batch_t *bt;
    assert_int_equal(cr_xfer_batch_alloc(e, 2, &bt), 0);
    assert_int_equal(cr_xfer_batch_submit(bt, r, 2), 0);

    /* the server acked A; wait until the engine reports A finished */
    pthread_mutex_lock(&s.mu);
    while (!s.acked_a && !s.rc)
        pthread_cond_wait(&s.cv, &s.mu);
    pthread_mutex_unlock(&s.mu);
    assert_int_equal(s.rc, 0);
    cr_xfer_status_t st;
    for (;;) {
        assert_int_equal(cr_xfer_batch_status(bt, 0, &st), 0);
        if (st.state != CR_XFER_STATE_WAITING)
            break;
        usleep(1000);
    }
    assert_int_equal(st.state, CR_XFER_STATE_COMPLETED);
    assert_int_equal(cr_xfer_batch_status(bt, 1, &st), 0);
    assert_int_equal(st.state, CR_XFER_STATE_WAITING); /* B is stuck in the send */
    /* A is finished: its buffer is the caller's again */
    assert_int_equal(cr_xfer_mem_unregister(e, a), 0);
    free(a);

    /* now the peer cuts the connection: B is resent on a new one */
    pthread_mutex_lock(&s.mu);
    s.go = 1;
    pthread_cond_broadcast(&s.cv);
    pthread_mutex_unlock(&s.mu);
    int rc;
    do /* a wait is bounded: loop until the batch itself ended */
        rc = cr_xfer_batch_wait(bt, 1000);
    while (rc == -ETIMEDOUT && cr_xfer_batch_status(bt, 1, &st) == 0 &&
           st.state == CR_XFER_STATE_WAITING);
    assert_int_equal(cr_xfer_batch_status(bt, 1, &st), 0);
    assert_int_equal(st.state, CR_XFER_STATE_COMPLETED);
    assert_int_equal(cr_xfer_batch_free(bt), 0);
    pthread_join(s.th, NULL);
    assert_true(s.conns >= 2); /* B went again on a new connection */
    assert_true(s.b_bytes >= B_LEN);
    cr_xfer_engine_destroy(e);
    fake_peer_stop(&fp);
    close(s.lfd);
    xt_free(b, B_LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_freed_after_finish_never_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
