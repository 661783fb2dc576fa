/* Segment descriptor JSON: round trip, strict validation, contains(). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "transfer/segment_desc.h"

static void fill(cr__seg_desc_t *d, uint32_t nbuf)
{
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "127.0.0.1:15000");
    snprintf(d->host_id, sizeof d->host_id, "machine/boot/4026531992/4026531836");
    d->pid = 4242;
    d->version = 7;
    d->rpc_port = 15000;
    d->n_nics = 2;
    snprintf(d->nics[0].addr, sizeof d->nics[0].addr, "127.0.0.1");
    d->nics[0].port = 15000;
    snprintf(d->nics[1].addr, sizeof d->nics[1].addr, "::1");
    d->nics[1].port = 65535;
    d->n_buffers = nbuf;
    d->buffers = nbuf ? calloc(nbuf, sizeof *d->buffers) : NULL;
    for (uint32_t i = 0; i < nbuf; i++) {
        d->buffers[i].addr = 0x10000 + (uint64_t)i * 0x2000; /* 4 KiB gaps */
        d->buffers[i].len = 0x1000;
        snprintf(d->buffers[i].location, sizeof d->buffers[i].location, "cpu:%u", i % 2);
    }
}

static int decode_str(const char *s, cr__seg_desc_t *d) { return cr__seg_desc_decode(s, strlen(s), d); }

static void test_roundtrip(void **state)
{
    (void)state;
    cr__seg_desc_t a, b;
    fill(&a, 3);
    char *js = NULL;
    size_t len = 0;
    assert_int_equal(cr__seg_desc_encode(&a, &js, &len), 0);
    assert_non_null(js);
    assert_int_equal(strlen(js), len);
    assert_int_equal(cr__seg_desc_decode(js, len, &b), 0);
    assert_string_equal(a.name, b.name);
    assert_string_equal(a.host_id, b.host_id);
    assert_int_equal(a.pid, b.pid);
    assert_int_equal(a.version, b.version);
    assert_int_equal(b.rpc_port, 15000);
    assert_int_equal(b.n_nics, 2);
    assert_string_equal(b.nics[1].addr, "::1");
    assert_int_equal(b.nics[1].port, 65535);
    assert_int_equal(b.n_buffers, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(a.buffers[i].addr, b.buffers[i].addr);
        assert_int_equal(a.buffers[i].len, b.buffers[i].len);
        assert_string_equal(a.buffers[i].location, b.buffers[i].location);
    }
    free(js);
    cr__seg_desc_clear(&a);
    cr__seg_desc_clear(&b);
    assert_null(b.buffers);
    assert_int_equal(b.n_buffers, 0);
}

static void test_roundtrip_empty_and_high_addr(void **state)
{
    (void)state;
    cr__seg_desc_t a, b;
    fill(&a, 0);
    char *js;
    size_t len;
    assert_int_equal(cr__seg_desc_encode(&a, &js, &len), 0);
    assert_int_equal(cr__seg_desc_decode(js, len, &b), 0);
    assert_int_equal(b.n_buffers, 0);
    assert_null(b.buffers);
    free(js);
    cr__seg_desc_clear(&b);

    /* addresses above INT64_MAX travel as hex strings */
    fill(&a, 1);
    a.buffers[0].addr = 0xffff800000000000ull;
    a.buffers[0].len = 0x1000;
    a.version = UINT64_MAX;
    assert_int_equal(cr__seg_desc_encode(&a, &js, &len), 0);
    assert_int_equal(cr__seg_desc_decode(js, len, &b), 0);
    assert_true(b.buffers[0].addr == 0xffff800000000000ull);
    assert_true(b.version == UINT64_MAX);
    free(js);
    cr__seg_desc_clear(&a);
    cr__seg_desc_clear(&b);
}

#define BASE_PREFIX "{\"name\":\"n\",\"host_id\":\"h\",\"pid\":1,\"version\":1,"
static const char *bad_docs[] = {
    "",
    "null",
    "[]",
    "{",
    "{\"name\":\"n\"}",
    /* missing fields */
    BASE_PREFIX "\"nics\":[]}",
    BASE_PREFIX "\"buffers\":[]}",
    /* wrong types */
    "{\"name\":1,\"host_id\":\"h\",\"pid\":1,\"version\":1,\"nics\":[],\"buffers\":[]}",
    "{\"name\":\"\",\"host_id\":\"h\",\"pid\":1,\"version\":1,\"nics\":[],\"buffers\":[]}",
    "{\"name\":\"n\",\"host_id\":\"h\",\"pid\":1.5,\"version\":1,\"nics\":[],\"buffers\":[]}",
    "{\"name\":\"n\",\"host_id\":\"h\",\"pid\":-1,\"version\":1,\"nics\":[],\"buffers\":[]}",
    "{\"name\":\"n\",\"host_id\":\"h\",\"pid\":true,\"version\":1,\"nics\":[],\"buffers\":[]}",
    "{\"name\":\"n\",\"host_id\":\"h\",\"pid\":1,\"version\":-3,\"nics\":[],\"buffers\":[]}",
    "{\"name\":\"n\",\"host_id\":\"h\",\"pid\":4294967296,\"version\":1,\"nics\":[],\"buffers\":[]}",
    "{\"name\":\"n\\u0000x\",\"host_id\":\"h\",\"pid\":1,\"version\":1,\"nics\":[],\"buffers\":[]}",
    /* duplicate key */
    "{\"name\":\"n\",\"name\":\"m\",\"host_id\":\"h\",\"pid\":1,\"version\":1,\"nics\":[],\"buffers\":[]}",
    /* nics */
    BASE_PREFIX "\"nics\":{},\"buffers\":[]}",
    BASE_PREFIX "\"rpc_port\":65536,\"nics\":[],\"buffers\":[]}",
    BASE_PREFIX "\"rpc_port\":\"80\",\"nics\":[],\"buffers\":[]}",
    BASE_PREFIX "\"nics\":[{\"addr\":\"localhost\",\"port\":1}],\"buffers\":[]}",
    BASE_PREFIX "\"nics\":[{\"addr\":\"127.0.0.1\",\"port\":-1}],\"buffers\":[]}",
    BASE_PREFIX "\"nics\":[{\"addr\":\"127.0.0.1\",\"port\":65536}],\"buffers\":[]}",
    BASE_PREFIX "\"nics\":[{\"addr\":\"127.0.0.1\",\"port\":\"80\"}],\"buffers\":[]}",
    BASE_PREFIX "\"nics\":[{\"addr\":\"127.0.0.1\"}],\"buffers\":[]}",
    BASE_PREFIX "\"nics\":[1,2,3,4,5,6,7,8,9],\"buffers\":[]}",
    /* buffers */
    BASE_PREFIX "\"nics\":[],\"buffers\":[{\"addr\":0,\"len\":0,\"location\":\"cpu:0\"}]}",
    BASE_PREFIX "\"nics\":[],\"buffers\":[{\"addr\":4096,\"len\":10,\"location\":\"\"}]}",
    BASE_PREFIX "\"nics\":[],\"buffers\":[{\"addr\":4096,\"len\":-1,\"location\":\"c\"}]}",
    BASE_PREFIX "\"nics\":[],\"buffers\":[{\"addr\":\"0xffffffffffffffff\",\"len\":2,\"location\":\"c\"}]}",
    BASE_PREFIX "\"nics\":[],\"buffers\":[{\"addr\":\"0x1ffffffffffffffff\",\"len\":2,\"location\":\"c\"}]}",
    BASE_PREFIX "\"nics\":[],\"buffers\":[{\"addr\":\"12z\",\"len\":2,\"location\":\"c\"}]}",
    /* overlapping, then unsorted */
    BASE_PREFIX "\"nics\":[],\"buffers\":[{\"addr\":4096,\"len\":4096,\"location\":\"c\"},"
                "{\"addr\":8191,\"len\":10,\"location\":\"c\"}]}",
    BASE_PREFIX "\"nics\":[],\"buffers\":[{\"addr\":9000,\"len\":10,\"location\":\"c\"},"
                "{\"addr\":4096,\"len\":10,\"location\":\"c\"}]}",
    /* trailing garbage */
    BASE_PREFIX "\"nics\":[],\"buffers\":[]} x",
};

static void test_rejects_malformed(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_docs / sizeof bad_docs[0]; i++) {
        cr__seg_desc_t d;
        memset(&d, 0xAB, sizeof d);
        int rc = cr__seg_desc_decode(bad_docs[i], strlen(bad_docs[i]), &d);
        if (rc != -EINVAL)
            fail_msg("doc %zu: expected -EINVAL, got %d: %s", i, rc, bad_docs[i]);
        /* untouched on failure */
        assert_int_equal(((unsigned char *)&d)[0], 0xAB);
        assert_int_equal(((unsigned char *)&d)[sizeof d - 1], 0xAB);
    }
}

static void test_accepts_valid_edge_cases(void **state)
{
    (void)state;
    cr__seg_desc_t d;
    /* adjacent buffers (end == next start), unknown members ignored, hex string addr */
    const char *ok = BASE_PREFIX "\"future\":{\"x\":[1]},\"nics\":[{\"addr\":\"10.0.0.1\",\"port\":1}],"
                                 "\"buffers\":[{\"addr\":4096,\"len\":4096,\"location\":\"c\"},"
                                 "{\"addr\":\"0x2000\",\"len\":1,\"location\":\"d\"}]}";
    assert_int_equal(decode_str(ok, &d), 0);
    assert_int_equal(d.n_buffers, 2);
    assert_int_equal(d.buffers[1].addr, 0x2000);
    assert_int_equal(d.nics[0].port, 1);
    cr__seg_desc_clear(&d);

    /* decode does not need a NUL terminator: length bounds it */
    char *copy = malloc(strlen(ok));
    memcpy(copy, ok, strlen(ok));
    assert_int_equal(cr__seg_desc_decode(copy, strlen(ok), &d), 0);
    cr__seg_desc_clear(&d);
    /* one byte short is malformed */
    assert_int_equal(cr__seg_desc_decode(copy, strlen(ok) - 1, &d), -EINVAL);
    free(copy);
}

static void test_overlong_strings(void **state)
{
    (void)state;
    char name[CR_XFER_NAME_MAX + 1];
    memset(name, 'a', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    char doc[2048];
    /* name of CR_XFER_NAME_MAX chars: does not fit with its NUL */
    snprintf(doc, sizeof doc,
             "{\"name\":\"%s\",\"host_id\":\"h\",\"pid\":1,\"version\":1,\"nics\":[],\"buffers\":[]}",
             name);
    cr__seg_desc_t d;
    assert_int_equal(decode_str(doc, &d), -EINVAL);
    /* CR_XFER_NAME_MAX - 1 chars fits */
    name[CR_XFER_NAME_MAX - 1] = '\0';
    snprintf(doc, sizeof doc,
             "{\"name\":\"%s\",\"host_id\":\"h\",\"pid\":1,\"version\":1,\"nics\":[],\"buffers\":[]}",
             name);
    assert_int_equal(decode_str(doc, &d), 0);
    assert_int_equal(strlen(d.name), CR_XFER_NAME_MAX - 1);
    cr__seg_desc_clear(&d);
}

static void test_too_many_buffers(void **state)
{
    (void)state;
    cr__seg_desc_t a, b;
    fill(&a, CR__SEG_MAX_BUFFERS);
    char *js;
    size_t len;
    assert_int_equal(cr__seg_desc_encode(&a, &js, &len), 0);
    assert_int_equal(cr__seg_desc_decode(js, len, &b), 0);
    assert_int_equal(b.n_buffers, CR__SEG_MAX_BUFFERS);
    cr__seg_desc_clear(&b);
    free(js);
    /* one more is rejected */
    cr_xfer_buffer_info_t *nb = realloc(a.buffers, (CR__SEG_MAX_BUFFERS + 1) * sizeof *nb);
    assert_non_null(nb);
    a.buffers = nb;
    a.buffers[CR__SEG_MAX_BUFFERS] = a.buffers[CR__SEG_MAX_BUFFERS - 1];
    a.buffers[CR__SEG_MAX_BUFFERS].addr += 0x2000;
    a.n_buffers = CR__SEG_MAX_BUFFERS + 1;
    assert_int_equal(cr__seg_desc_encode(&a, &js, &len), 0);
    assert_int_equal(cr__seg_desc_decode(js, len, &b), -EINVAL);
    free(js);
    cr__seg_desc_clear(&a);
    /* input larger than CR__SEG_DESC_MAX_JSON is rejected before parsing */
    assert_int_equal(cr__seg_desc_decode("{}", (size_t)CR__SEG_DESC_MAX_JSON + 1, &b), -EINVAL);
}

static void test_contains(void **state)
{
    (void)state;
    cr__seg_desc_t d;
    fill(&d, 100); /* buffers [0x10000 + i*0x2000, +0x1000) */
    for (uint32_t i = 0; i < 100; i++) {
        uint64_t a = 0x10000 + (uint64_t)i * 0x2000;
        assert_int_equal(cr__seg_desc_contains(&d, a, 0x1000), 1);
        assert_int_equal(cr__seg_desc_contains(&d, a + 0xfff, 1), 1);
        assert_int_equal(cr__seg_desc_contains(&d, a + 0x800, 0x800), 1);
        assert_int_equal(cr__seg_desc_contains(&d, a + 0x800, 0x801), 0); /* past end */
        assert_int_equal(cr__seg_desc_contains(&d, a + 0x1000, 1), 0);    /* in the gap */
        assert_int_equal(cr__seg_desc_contains(&d, a - 1, 2), 0);         /* straddles start */
        assert_int_equal(cr__seg_desc_contains(&d, a, 0x2001), 0);        /* spans two */
    }
    assert_int_equal(cr__seg_desc_contains(&d, 0, 1), 0);
    assert_int_equal(cr__seg_desc_contains(&d, 0x10000, 0), 0);
    assert_int_equal(cr__seg_desc_contains(&d, UINT64_MAX, 2), 0); /* wraps */
    assert_int_equal(cr__seg_desc_contains(&d, 0x10000, UINT64_MAX), 0);
    cr__seg_desc_clear(&d);
    assert_int_equal(cr__seg_desc_contains(&d, 0x10000, 1), 0);
    assert_int_equal(cr__seg_desc_contains(NULL, 0x10000, 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_roundtrip_empty_and_high_addr),
        cmocka_unit_test(test_rejects_malformed),
        cmocka_unit_test(test_accepts_valid_edge_cases),
        cmocka_unit_test(test_overlong_strings),
        cmocka_unit_test(test_too_many_buffers),
        cmocka_unit_test(test_contains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
