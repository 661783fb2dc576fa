/* Two tcp-only engines on loopback for the tcp transport's tests: a
 * initiates, b serves; each registers buf bytes (b also a separate 1 MiB
 * range, bextra, a test may unregister to get a refusal), and a opens b's
 * segment. Include after cmocka.h and xfer_test_util.h. */
#ifndef CR_TEST_TCP_PAIR_FX_H
#define CR_TEST_TCP_PAIR_FX_H

#include <stdlib.h>
#include <string.h>

#include "crescent/transfer.h"

#define TCP_FX_EXTRA (1u << 20)

typedef struct tcp_fx {
    cr_xfer_engine_t *a, *b; /* a initiates, b serves (a test may destroy b: NULL) */
    char *abuf, *bbuf, *bextra;
    size_t buf;
    cr_xfer_segment_t seg;
} tcp_fx_t;

/* slice_size 0: the engine's default */
static inline cr_xfer_engine_t *tcp_fx_engine(uint64_t slice_size, int timeout_ms)
{
    cr_xfer_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_XFER_PARAM_TRANSPORTS | CR_XFER_PARAM_NICS | CR_XFER_PARAM_TIMEOUT_MS;
    p.transports = "tcp";
    p.nics = "127.0.0.1";
    p.timeout_ms = timeout_ms;
    if (slice_size) {
        p.field_mask |= CR_XFER_PARAM_SLICE_SIZE;
        p.slice_size = slice_size;
    }
    cr_xfer_engine_t *e = NULL;
    int rc = cr_xfer_engine_create(&p, &e);
    if (rc)
        fprintf(stderr, "engine create: %s\n", cr_strerror(rc));
    return e;
}

static inline tcp_fx_t *tcp_fx_open(size_t buf, uint64_t slice_size, int timeout_ms)
{
    tcp_fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->buf = buf;
    f->a = tcp_fx_engine(slice_size, timeout_ms);
    f->b = tcp_fx_engine(slice_size, timeout_ms);
    assert_non_null(f->a);
    assert_non_null(f->b);
    f->abuf = xt_alloc(buf);
    f->bbuf = xt_alloc(buf);
    f->bextra = xt_alloc(TCP_FX_EXTRA);
    assert_non_null(f->abuf);
    assert_non_null(f->bbuf);
    assert_non_null(f->bextra);
    assert_int_equal(cr_xfer_mem_register(f->a, f->abuf, buf, NULL), 0);
    assert_int_equal(cr_xfer_mem_register(f->b, f->bbuf, buf, NULL), 0);
    assert_int_equal(cr_xfer_mem_register(f->b, f->bextra, TCP_FX_EXTRA, NULL), 0);
    assert_int_equal(cr_xfer_segment_open(f->a, cr_xfer_engine_name(f->b), &f->seg), 0);
    return f;
}

static inline void tcp_fx_close(tcp_fx_t *f)
{
    cr_xfer_engine_destroy(f->a);
    if (f->b)
        cr_xfer_engine_destroy(f->b);
    xt_free(f->abuf, f->buf);
    xt_free(f->bbuf, f->buf);
    xt_free(f->bextra, TCP_FX_EXTRA);
    free(f);
}

#endif
