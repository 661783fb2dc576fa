/* Store RPC codec: round trips of every message type, every decoder bound,
 * truncation at every byte, trailing bytes, header validation, error
 * replies. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/rpc/protocol.h"

static int encode(const cr__rpc_msg_t *m, cr__rpc_buf_t *b)
{
    cr__rpc_buf_init(b);
    return cr__rpc_encode(m, b);
}

/* decode a whole encoded frame */
static int decode(const cr__rpc_buf_t *b, cr__rpc_msg_t *out)
{
    cr__rpc_hdr_t h;
    int rc = cr__rpc_decode_hdr(b->data, &h);
    if (rc)
        return rc;
    return cr__rpc_decode(&h, b->data + CR__RPC_HDR_SIZE, b->len - CR__RPC_HDR_SIZE, out);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void test_header_layout(void **s)
{
    (void)s;
    cr__rpc_msg_t m = {.type = CR__RPC_PING, .req_id = 0x1122334455667788ull,
                       .client_id = {7, 9}};
    cr__rpc_buf_t b;
    assert_int_equal(encode(&m, &b), 0);
    assert_int_equal(b.len, 32 + 16);
    /* little-endian magic "CRSM", version 1, type 1, req id, payload len */
    assert_memory_equal(b.data, "CRSM", 4);
    assert_int_equal(b.data[4], 1);
    assert_int_equal(b.data[5], 0);
    assert_int_equal(b.data[6], CR__RPC_PING);
    assert_int_equal(b.data[8], 0x88);
    assert_int_equal(b.data[15], 0x11);
    assert_int_equal(b.data[16], 16);
    cr__rpc_hdr_t h;
    assert_int_equal(cr__rpc_decode_hdr(b.data, &h), 0);
    assert_int_equal(h.payload_len, 16);
    /* bad magic, version, oversize payload */
    uint8_t bad[32];
    memcpy(bad, b.data, 32);
    bad[0] ^= 1;
    assert_int_equal(cr__rpc_decode_hdr(bad, &h), -EPROTO);
    memcpy(bad, b.data, 32);
    bad[4] = 2;
    assert_int_equal(cr__rpc_decode_hdr(bad, &h), -EPROTO);
    memcpy(bad, b.data, 32);
    put_u32(bad + 16, CR__RPC_PAYLOAD_MAX + 1);
    assert_int_equal(cr__rpc_decode_hdr(bad, &h), -EPROTO);
    put_u32(bad + 16, CR__RPC_PAYLOAD_MAX);
    assert_int_equal(cr__rpc_decode_hdr(bad, &h), 0);
    cr__rpc_buf_free(&b);
}

static void test_roundtrip_control(void **s)
{
    (void)s;
    cr__rpc_buf_t b;
    cr__rpc_msg_t d;
    /* ping request / reply */
    cr__rpc_msg_t m = {.type = CR__RPC_PING, .client_id = {0xdeadbeef, 42}};
    assert_int_equal(encode(&m, &b), 0);
    assert_int_equal(decode(&b, &d), 0);
    assert_int_equal(d.client_id.hi, 0xdeadbeef);
    assert_int_equal(d.client_id.lo, 42);
    cr__rpc_msg_free(&d);
    m = (cr__rpc_msg_t){.type = CR__RPC_PING | CR__RPC_REPLY, .flags = CR__RPC_F_NEED_REMOUNT,
                        .master_id = 1234567, .count = 10000};
    assert_int_equal(cr__rpc_encode(&m, &b), 0);
    assert_int_equal(decode(&b, &d), 0);
    assert_int_equal(d.flags, CR__RPC_F_NEED_REMOUNT);
    assert_int_equal(d.master_id, 1234567);
    assert_int_equal(d.count, 10000);
    cr__rpc_msg_free(&d);
    /* mount */
    m = (cr__rpc_msg_t){.type = CR__RPC_MOUNT_SEGMENT, .client_id = {1, 2},
                        .segment = "127.0.0.1:12345", .base = 0x7f0000000000ull, .size = 1 << 30};
    assert_int_equal(cr__rpc_encode(&m, &b), 0);
    assert_int_equal(decode(&b, &d), 0);
    assert_string_equal(d.segment, "127.0.0.1:12345");
    assert_int_equal(d.base, 0x7f0000000000ull);
    assert_int_equal(d.size, 1 << 30);
    cr__rpc_msg_free(&d);
    /* mount replies: empty, a held name's ms with and without a key */
    uint8_t key[56];
    memset(key, 7, sizeof key);
    for (int v = 0; v < 4; v++) {
        m = (cr__rpc_msg_t){.type = CR__RPC_MOUNT_SEGMENT | CR__RPC_REPLY,
                            .count = (v & 1) ? 1500 : 0, .blob = (v & 2) ? key : NULL,
                            .blob_len = (v & 2) ? sizeof key : 0};
        assert_int_equal(cr__rpc_encode(&m, &b), 0);
        assert_int_equal(decode(&b, &d), 0);
        assert_int_equal(d.count, (v & 1) ? 1500 : 0);
        assert_int_equal(d.blob_len, (v & 2) ? sizeof key : 0);
        if (v & 2)
            assert_memory_equal(d.blob, key, sizeof key);
        cr__rpc_msg_free(&d);
    }
    /* unmount, remove_all */
    m = (cr__rpc_msg_t){.type = CR__RPC_UNMOUNT_SEGMENT, .client_id = {1, 2}, .segment = "s"};
    assert_int_equal(cr__rpc_encode(&m, &b), 0);
    assert_int_equal(decode(&b, &d), 0);
    assert_string_equal(d.segment, "s");
    cr__rpc_msg_free(&d);
    m = (cr__rpc_msg_t){.type = CR__RPC_REMOVE_ALL, .flags = CR__RPC_F_FORCE};
    assert_int_equal(cr__rpc_encode(&m, &b), 0);
    assert_int_equal(decode(&b, &d), 0);
    assert_int_equal(d.flags, CR__RPC_F_FORCE);
    cr__rpc_msg_free(&d);
    m = (cr__rpc_msg_t){.type = CR__RPC_REMOVE_ALL | CR__RPC_REPLY, .count = 99};
    assert_int_equal(cr__rpc_encode(&m, &b), 0);
    assert_int_equal(decode(&b, &d), 0);
    assert_int_equal(d.count, 99);
    cr__rpc_msg_free(&d);
    /* segment name bounds: 255 ok, 256 refused by the encoder */
    char name[300];
    memset(name, 'n', sizeof name);
    name[255] = 0;
    m = (cr__rpc_msg_t){.type = CR__RPC_MOUNT_SEGMENT, .segment = name, .size = 1};
    assert_int_equal(cr__rpc_encode(&m, &b), 0);
    assert_int_equal(decode(&b, &d), 0);
    assert_int_equal(strlen(d.segment), 255);
    cr__rpc_msg_free(&d);
    name[255] = 'n';
    name[256] = 0;
    assert_int_equal(cr__rpc_encode(&m, &b), -EINVAL);
    m.segment = NULL;
    assert_int_equal(cr__rpc_encode(&m, &b), -EINVAL);
    /* unknown type */
    m = (cr__rpc_msg_t){.type = 999};
    assert_int_equal(cr__rpc_encode(&m, &b), -EINVAL);
    cr__rpc_buf_free(&b);
}

static void test_roundtrip_put_start(void **s)
{
    (void)s;
    const char *pref[] = {"segA", "segB"};
    cr__rpc_item_t items[3] = {0};
    for (int i = 0; i < 3; i++) {
        items[i].key = i == 0 ? "k0" : i == 1 ? "key-one" : "";
        items[i].key_len = (uint32_t)strlen(items[i].key);
        items[i].size = 1000u * (uint64_t)(i + 1);
        items[i].cfg = (cr__rpc_repl_cfg_t){.replica_num = 2, .flags = CR__RPC_CFG_SOFT_PIN,
                                            .n_preferred = 2, .preferred = pref};
    }
    cr__rpc_msg_t m = {.type = CR__RPC_BATCH_PUT_START, .n_items = 3, .items = items};
    cr__rpc_buf_t b;
    cr__rpc_msg_t d;
    assert_int_equal(encode(&m, &b), 0);
    assert_int_equal(decode(&b, &d), 0);
    assert_int_equal(d.n_items, 3);
    assert_string_equal(d.items[1].key, "key-one");
    assert_int_equal(d.items[1].key_len, 7);
    assert_int_equal(d.items[2].key_len, 0); /* empty key travels; the master refuses it */
    assert_int_equal(d.items[2].size, 3000);
    assert_int_equal(d.items[0].cfg.replica_num, 2);
    assert_int_equal(d.items[0].cfg.flags, CR__RPC_CFG_SOFT_PIN);
    assert_int_equal(d.items[0].cfg.n_preferred, 2);
    assert_string_equal(d.items[0].cfg.preferred[1], "segB");
    cr__rpc_msg_free(&d);
    /* single-key type with 3 items is refused */
    m.type = CR__RPC_PUT_START;
    assert_int_equal(cr__rpc_encode(&m, &b), -EINVAL);
    /* reply with replicas and shards */
    uint8_t capb[CR__RPC_CAP_LEN]; /* capabilities travel per shard, where granted */
    memset(capb, 0xab, sizeof capb);
    cr__rpc_shard_t sh[2] = {{"segA", 0x1000, 600, NULL}, {"segB", 0x2000, 400, capb}};
    cr__rpc_shard_t sh2[1] = {{"segC", 0x3000, 1000, NULL}};
    cr__rpc_replica_t reps[2] = {{.replica_id = 77, .n_shards = 2, .shards = sh},
                                 {.replica_id = 78, .n_shards = 1, .shards = sh2}};
    cr__rpc_item_t ri[2] = {
        {.status = 0, .version = 5, .lease_ms = 30000, .n_replicas = 2, .replicas = reps},
        {.status = CR_E_OBJECT_ALREADY_EXISTS},
    };
    cr__rpc_msg_t r = {.type = CR__RPC_BATCH_PUT_START | CR__RPC_REPLY, .n_items = 2,
                       .items = ri, .req_id = 3};
    assert_int_equal(cr__rpc_encode(&r, &b), 0);
    assert_int_equal(decode(&b, &d), 0);
    assert_int_equal(d.req_id, 3);
    assert_int_equal(d.n_items, 2);
    assert_int_equal(d.items[0].version, 5);
    assert_int_equal(d.items[0].lease_ms, 30000);
    assert_int_equal(d.items[0].n_replicas, 2);
    assert_int_equal(d.items[0].replicas[0].replica_id, 77);
    assert_int_equal(d.items[0].replicas[0].n_shards, 2);
    assert_string_equal(d.items[0].replicas[0].shards[1].segment, "segB");
    assert_int_equal(d.items[0].replicas[0].shards[1].addr, 0x2000);
    assert_int_equal(d.items[0].replicas[0].shards[1].len, 400);
    assert_non_null(d.items[0].replicas[0].shards[1].cap);
    assert_memory_equal(d.items[0].replicas[0].shards[1].cap, capb, sizeof capb);
    assert_null(d.items[0].replicas[0].shards[0].cap);
    assert_null(d.items[0].replicas[1].shards[0].cap);
    assert_string_equal(d.items[0].replicas[1].shards[0].segment, "segC");
    assert_int_equal(d.items[1].status, CR_E_OBJECT_ALREADY_EXISTS);
    assert_int_equal(d.items[1].n_replicas, 0);
    cr__rpc_msg_free(&d);
    cr__rpc_buf_free(&b);
}

/* PutStart's exclusion list: after the items, announced by the header
 * flag EXCLUDE (set by the encoder, only when there is a list), bounded;
 * a PutStart without one is byte for byte what it was before the list. */
static void test_put_start_exclusion_list(void **s)
{
    (void)s;
    const char *ex[CR__RPC_EXCLUDE_MAX + 1];
    char names[CR__RPC_EXCLUDE_MAX + 1][16];
    for (int i = 0; i <= CR__RPC_EXCLUDE_MAX; i++) {
        snprintf(names[i], sizeof names[i], "node-%d", i);
        ex[i] = names[i];
    }
    cr__rpc_item_t items[2] = {{.key = "k0", .key_len = 2, .size = 10, .cfg = {.replica_num = 2}},
                               {.key = "k1", .key_len = 2, .size = 20}};
    cr__rpc_msg_t m = {.type = CR__RPC_BATCH_PUT_START, .n_items = 2, .items = items,
                       .hflags = CR__RPC_HF_EXCLUDE}; /* a stray bit: the encoder's own */
    cr__rpc_buf_t plain, b;
    cr__rpc_msg_t d;
    assert_int_equal(encode(&m, &plain), 0);
    cr__rpc_hdr_t h;
    assert_int_equal(cr__rpc_decode_hdr(plain.data, &h), 0);
    assert_int_equal(h.flags, 0);
    assert_int_equal(decode(&plain, &d), 0);
    assert_int_equal(d.n_exclude, 0);
    assert_null(d.exclude);
    cr__rpc_msg_free(&d);
    /* with a list: the same bytes, then u32 n + n seg */
    m.n_exclude = 2;
    m.exclude = ex;
    assert_int_equal(encode(&m, &b), 0);
    assert_int_equal(cr__rpc_decode_hdr(b.data, &h), 0);
    assert_int_equal(h.flags, CR__RPC_HF_EXCLUDE);
    assert_int_equal(b.len, plain.len + 4 + 2 * (2 + 6));
    assert_memory_equal(b.data + CR__RPC_HDR_SIZE, plain.data + CR__RPC_HDR_SIZE,
                        plain.len - CR__RPC_HDR_SIZE);
    assert_int_equal(decode(&b, &d), 0);
    assert_int_equal(d.n_items, 2);
    assert_int_equal(d.items[1].size, 20);
    assert_int_equal(d.n_exclude, 2);
    assert_string_equal(d.exclude[0], "node-0");
    assert_string_equal(d.exclude[1], "node-1");
    cr__rpc_msg_free(&d);
    /* a decoder that does not know the flag (an older master) sees
     * trailing bytes: why a client sends the list only to a master whose
     * PING reply says CR__RPC_F_EXCLUDE */
    h.flags = 0;
    assert_int_equal(cr__rpc_decode(&h, b.data + CR__RPC_HDR_SIZE, h.payload_len, &d), -EBADMSG);
    /* the flag without its list: truncated */
    h = (cr__rpc_hdr_t){.magic = CR__RPC_MAGIC, .version = 1, .type = CR__RPC_BATCH_PUT_START,
                        .payload_len = (uint32_t)(plain.len - CR__RPC_HDR_SIZE),
                        .flags = CR__RPC_HF_EXCLUDE};
    assert_int_equal(cr__rpc_decode(&h, plain.data + CR__RPC_HDR_SIZE, h.payload_len, &d),
                     -EBADMSG);
    cr__rpc_buf_free(&b);
    /* bounds: 1..CR__RPC_EXCLUDE_MAX names (decoder and encoder), no empty list */
    for (uint32_t n = 0; n <= CR__RPC_EXCLUDE_MAX + 1; n++) {
        size_t base = plain.len - CR__RPC_HDR_SIZE;
        uint8_t *p = malloc(base + 4 + n * (2 + 7));
        memcpy(p, plain.data + CR__RPC_HDR_SIZE, base);
        size_t len = base;
        put_u32(p + len, n);
        len += 4;
        for (uint32_t i = 0; i < n; i++) {
            size_t l = strlen(ex[i]);
            p[len++] = (uint8_t)l;
            p[len++] = 0;
            memcpy(p + len, ex[i], l);
            len += l;
        }
        h.payload_len = (uint32_t)len;
        int rc = cr__rpc_decode(&h, p, len, &d);
        if (rc != (n >= 1 && n <= CR__RPC_EXCLUDE_MAX ? 0 : -EBADMSG))
            fail_msg("exclusion list of %u names: decode %d", n, rc);
        if (!rc) {
            assert_int_equal(d.n_exclude, n);
            assert_string_equal(d.exclude[n - 1], ex[n - 1]);
            cr__rpc_msg_free(&d);
        }
        m.n_exclude = n;
        rc = encode(&m, &b);
        if (rc != (n <= CR__RPC_EXCLUDE_MAX ? 0 : -EINVAL))
            fail_msg("exclusion list of %u names: encode %d", n, rc);
        cr__rpc_buf_free(&b);
        free(p);
    }
    /* only a request carries it: a reply's encoding ignores the list */
    cr__rpc_item_t ri = {.status = CR_E_OBJECT_ALREADY_EXISTS};
    cr__rpc_msg_t r = {.type = CR__RPC_PUT_START | CR__RPC_REPLY, .n_items = 1, .items = &ri,
                       .n_exclude = 1, .exclude = ex};
    assert_int_equal(encode(&r, &b), 0);
    assert_int_equal(decode(&b, &d), 0);
    assert_int_equal(d.n_exclude, 0);
    cr__rpc_msg_free(&d);
    cr__rpc_buf_free(&b);
    cr__rpc_buf_free(&plain);
}

static void test_roundtrip_other_items(void **s)
{
    (void)s;
    static const uint16_t types[] = {CR__RPC_PUT_END, CR__RPC_PUT_REVOKE, CR__RPC_GET_REPLICA_LIST,
                                     CR__RPC_EXIST, CR__RPC_GET_SIZE, CR__RPC_REMOVE,
                                     CR__RPC_VALIDATE};
    cr__rpc_buf_t b;
    cr__rpc_buf_init(&b);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (int batch = 0; batch < 2; batch++) {
            uint16_t ty = (uint16_t)(types[t] + (batch ? CR__RPC_BATCH_OFFSET : 0));
            cr__rpc_item_t it = {.key = "abc", .key_len = 3, .version = 11, .replica_id = 12,
                                 .flags = CR__RPC_F_FORCE};
            cr__rpc_msg_t m = {.type = ty, .n_items = 1, .items = &it};
            cr__rpc_msg_t d;
            assert_int_equal(cr__rpc_encode(&m, &b), 0);
            assert_int_equal(decode(&b, &d), 0);
            assert_int_equal(d.type, ty);
            assert_string_equal(d.items[0].key, "abc");
            if (types[t] == CR__RPC_PUT_END || types[t] == CR__RPC_PUT_REVOKE ||
                types[t] == CR__RPC_VALIDATE)
                assert_int_equal(d.items[0].version, 11);
            else
                assert_int_equal(d.items[0].version, 0); /* not on the wire */
            if (types[t] == CR__RPC_VALIDATE)
                assert_int_equal(d.items[0].replica_id, 12);
            if (types[t] == CR__RPC_REMOVE)
                assert_int_equal(d.items[0].flags, CR__RPC_F_FORCE);
            cr__rpc_msg_free(&d);
            /* reply */
            cr__rpc_shard_t sh = {"seg", 1, 2, NULL};
            cr__rpc_replica_t rp = {.replica_id = 9, .n_shards = 1, .shards = &sh};
            cr__rpc_item_t ri = {.status = -704, .size = 4096, .version = 3, .lease_ms = 5000,
                                 .n_replicas = 1, .replicas = &rp};
            cr__rpc_msg_t r = {.type = (uint16_t)(ty | CR__RPC_REPLY), .n_items = 1, .items = &ri};
            assert_int_equal(cr__rpc_encode(&r, &b), 0);
            assert_int_equal(decode(&b, &d), 0);
            assert_int_equal(d.items[0].status, -704);
            if (types[t] == CR__RPC_GET_REPLICA_LIST) {
                assert_int_equal(d.items[0].size, 4096);
                assert_int_equal(d.items[0].lease_ms, 5000);
                assert_int_equal(d.items[0].n_replicas, 1);
                assert_string_equal(d.items[0].replicas[0].shards[0].segment, "seg");
            } else if (types[t] == CR__RPC_GET_SIZE) {
                assert_int_equal(d.items[0].size, 4096);
                assert_int_equal(d.items[0].n_replicas, 0);
            } else {
                assert_int_equal(d.items[0].size, 0);
            }
            cr__rpc_msg_free(&d);
        }
    }
    cr__rpc_buf_free(&b);
}

static void test_error_reply(void **s)
{
    (void)s;
    cr__rpc_msg_t m = {.type = CR__RPC_BATCH_EXIST | CR__RPC_REPLY, .status = CR_E_INVALID_PARAMS};
    cr__rpc_buf_t b;
    cr__rpc_msg_t d;
    assert_int_equal(encode(&m, &b), 0);
    assert_int_equal(b.len, 32);
    assert_int_equal(decode(&b, &d), 0);
    assert_int_equal(d.status, CR_E_INVALID_PARAMS);
    assert_int_equal(d.n_items, 0);
    cr__rpc_msg_free(&d);
    /* an empty payload with status 0 is not a valid object-op reply */
    m.status = 0;
    cr__rpc_hdr_t h = {.magic = CR__RPC_MAGIC, .version = 1,
                       .type = CR__RPC_BATCH_EXIST | CR__RPC_REPLY};
    assert_int_equal(cr__rpc_decode(&h, NULL, 0, &d), -EBADMSG);
    cr__rpc_buf_free(&b);
}

/* Every prefix of a valid payload and one trailing byte are refused. */
static void test_truncation_everywhere(void **s)
{
    (void)s;
    const char *pref[] = {"p1"};
    cr__rpc_shard_t sh[2] = {{"segA", 1, 2, NULL}, {"segB", 3, 4, NULL}};
    cr__rpc_replica_t rp = {.replica_id = 1, .n_shards = 2, .shards = sh};
    cr__rpc_item_t req_items[2] = {
        {.key = "key1", .key_len = 4, .size = 10,
         .cfg = {.replica_num = 1, .n_preferred = 1, .preferred = pref}},
        {.key = "key22", .key_len = 5, .size = 20}};
    cr__rpc_item_t rep_items[2] = {{.n_replicas = 1, .replicas = &rp, .version = 1},
                                   {.status = -705}};
    const char *ex[] = {"node-a", "node-b"};
    cr__rpc_msg_t msgs[] = {
        {.type = CR__RPC_BATCH_PUT_START, .n_items = 2, .items = req_items},
        {.type = CR__RPC_BATCH_PUT_START, .n_items = 2, .items = req_items, .n_exclude = 2,
         .exclude = ex},
        {.type = CR__RPC_BATCH_PUT_START | CR__RPC_REPLY, .n_items = 2, .items = rep_items},
        {.type = CR__RPC_BATCH_GET_REPLICA_LIST | CR__RPC_REPLY, .n_items = 2, .items = rep_items},
        {.type = CR__RPC_MOUNT_SEGMENT, .segment = "seg", .size = 5},
        {.type = CR__RPC_PING},
        {.type = CR__RPC_PING | CR__RPC_REPLY},
    };
    for (size_t k = 0; k < sizeof msgs / sizeof msgs[0]; k++) {
        cr__rpc_buf_t b;
        assert_int_equal(encode(&msgs[k], &b), 0);
        cr__rpc_hdr_t h;
        assert_int_equal(cr__rpc_decode_hdr(b.data, &h), 0);
        size_t plen = b.len - 32;
        uint8_t *copy = malloc(plen + 1);
        memcpy(copy, b.data + 32, plen);
        for (size_t cut = 0; cut < plen; cut++) {
            cr__rpc_msg_t d;
            h.payload_len = (uint32_t)cut;
            int rc = cr__rpc_decode(&h, cut ? copy : NULL, cut, &d);
            if (rc != -EBADMSG)
                fail_msg("msg %zu truncated to %zu/%zu bytes: expected -EBADMSG got %d", k, cut,
                         plen, rc);
        }
        copy[plen] = 0;
        h.payload_len = (uint32_t)plen + 1;
        cr__rpc_msg_t d;
        assert_int_equal(cr__rpc_decode(&h, copy, plen + 1, &d), -EBADMSG);
        /* payload_len must match the bytes given */
        h.payload_len = (uint32_t)plen;
        assert_int_equal(cr__rpc_decode(&h, copy, plen - 1, &d), -EBADMSG);
        assert_int_equal(cr__rpc_decode(&h, copy, plen, &d), 0);
        cr__rpc_msg_free(&d);
        free(copy);
        cr__rpc_buf_free(&b);
    }
}

/* Hand-built payloads that exceed each bound. */
static uint8_t pay[1 << 16];
static size_t plen;
static void p32(uint32_t v)
{
    put_u32(pay + plen, v);
    plen += 4;
}
static void p64(uint64_t v)
{
    p32((uint32_t)v);
    p32((uint32_t)(v >> 32));
}
static void p16(uint16_t v)
{
    pay[plen++] = (uint8_t)v;
    pay[plen++] = (uint8_t)(v >> 8);
}
static void pbytes(const char *s, size_t n)
{
    memcpy(pay + plen, s, n);
    plen += n;
}
static int dec(uint16_t type)
{
    cr__rpc_hdr_t h = {.magic = CR__RPC_MAGIC, .version = 1, .type = type,
                       .payload_len = (uint32_t)plen};
    cr__rpc_msg_t d;
    int rc = cr__rpc_decode(&h, pay, plen, &d);
    if (!rc)
        cr__rpc_msg_free(&d);
    return rc;
}

static void test_bounds(void **s)
{
    (void)s;
    static char big[CR__RPC_KEY_MAX + 1];
    memset(big, 'k', sizeof big);
    /* key of exactly KEY_MAX: accepted; KEY_MAX + 1: refused */
    plen = 0;
    p32(1);
    p32(CR__RPC_KEY_MAX);
    pbytes(big, CR__RPC_KEY_MAX);
    assert_int_equal(dec(CR__RPC_EXIST), 0);
    plen = 0;
    p32(1);
    p32(CR__RPC_KEY_MAX + 1);
    pbytes(big, CR__RPC_KEY_MAX + 1);
    assert_int_equal(dec(CR__RPC_EXIST), -EBADMSG);
    /* key length larger than the payload (would over-read) */
    plen = 0;
    p32(1);
    p32(100);
    pbytes("abc", 3);
    assert_int_equal(dec(CR__RPC_EXIST), -EBADMSG);
    /* counts: 0 and BATCH_MAX+1 refused; a huge count with few bytes refused
     * before allocating */
    plen = 0;
    p32(0);
    assert_int_equal(dec(CR__RPC_BATCH_EXIST), -EBADMSG);
    plen = 0;
    p32(CR__RPC_BATCH_MAX + 1);
    assert_int_equal(dec(CR__RPC_BATCH_EXIST), -EBADMSG);
    plen = 0;
    p32(0xffffffffu);
    assert_int_equal(dec(CR__RPC_BATCH_EXIST), -EBADMSG);
    plen = 0;
    p32(CR__RPC_BATCH_MAX); /* claims 4096 items, carries 1 */
    p32(1);
    pbytes("a", 1);
    assert_int_equal(dec(CR__RPC_BATCH_EXIST), -EBADMSG);
    /* single-key type with 2 items */
    plen = 0;
    p32(2);
    p32(1);
    pbytes("a", 1);
    p32(1);
    pbytes("b", 1);
    assert_int_equal(dec(CR__RPC_EXIST), -EBADMSG);
    assert_int_equal(dec(CR__RPC_BATCH_EXIST), 0);
    /* preferred segments: MAX ok, MAX+1 refused */
    for (int over = 0; over < 2; over++) {
        plen = 0;
        p32(1);
        p32(1);
        pbytes("k", 1);
        p64(100);
        p32(1);
        p32(0);
        uint32_t n = CR__RPC_PREFERRED_MAX + (uint32_t)over;
        p32(n);
        for (uint32_t i = 0; i < n; i++) {
            p16(2);
            pbytes("sg", 2);
        }
        assert_int_equal(dec(CR__RPC_PUT_START), over ? -EBADMSG : 0);
    }
    /* segment name: 255 ok, 256 refused, embedded NUL refused */
    for (int v = 0; v < 3; v++) {
        plen = 0;
        p64(1);
        p64(2);
        uint16_t l = v == 1 ? 256 : 255;
        p16(l);
        for (int i = 0; i < l; i++)
            pay[plen++] = (v == 2 && i == 10) ? 0 : 'x';
        p64(0);
        p64(4096);
        assert_int_equal(dec(CR__RPC_MOUNT_SEGMENT), v == 0 ? 0 : -EBADMSG);
    }
    /* replicas: REPLICA_MAX+1 refused; shards 0 and SHARD_MAX+1 refused;
     * a capability naming a replica or shard that does not exist refused */
    for (int v = 0; v < 6; v++) {
        plen = 0;
        p32(1);  /* count */
        p32(0);  /* status */
        p64(1);  /* version */
        p32(10); /* lease */
        uint32_t nrep = v == 0 ? CR__RPC_REPLICA_MAX + 1 : 1;
        uint32_t nsh = v == 1 ? 0 : v == 2 ? CR__RPC_SHARD_MAX + 1 : CR__RPC_SHARD_MAX;
        p32(nrep);
        for (uint32_t r = 0; r < nrep; r++) {
            p64(r);
            p32(nsh);
            for (uint32_t k = 0; k < nsh; k++) {
                p16(1);
                pbytes("s", 1);
                p64(0);
                p64(1);
            }
        }
        p32(v >= 4 ? 1 : 0); /* capability block */
        if (v >= 4) {
            p16(v == 4 ? 1 : 0);                   /* replica index (1: none) */
            p16(v == 4 ? 0 : CR__RPC_SHARD_MAX);   /* shard index */
            for (int i = 0; i < CR__RPC_CAP_LEN; i++)
                pay[plen++] = 0;
        }
        int rc = dec(CR__RPC_PUT_START | CR__RPC_REPLY);
        if (rc != (v == 3 ? 0 : -EBADMSG))
            fail_msg("replica bound case %d: got %d", v, rc);
    }
    /* a request type with the reply bit and an unknown type */
    plen = 0;
    p32(1);
    p32(1);
    pbytes("a", 1);
    assert_int_equal(dec(77), -EBADMSG);
    assert_int_equal(dec(0), -EBADMSG);
}

static void test_encoder_bounds(void **s)
{
    (void)s;
    cr__rpc_buf_t b;
    cr__rpc_buf_init(&b);
    static char big[CR__RPC_KEY_MAX + 1];
    cr__rpc_item_t it = {.key = big, .key_len = CR__RPC_KEY_MAX + 1};
    cr__rpc_msg_t m = {.type = CR__RPC_EXIST, .n_items = 1, .items = &it};
    assert_int_equal(cr__rpc_encode(&m, &b), -EINVAL);
    it.key_len = CR__RPC_KEY_MAX;
    assert_int_equal(cr__rpc_encode(&m, &b), 0);
    m.n_items = 0;
    assert_int_equal(cr__rpc_encode(&m, &b), -EINVAL);
    m.type = CR__RPC_BATCH_EXIST;
    m.n_items = CR__RPC_BATCH_MAX + 1;
    assert_int_equal(cr__rpc_encode(&m, &b), -EINVAL);
    /* a batch of BATCH_MAX max-size keys is 16 MiB + a bit: fits */
    cr__rpc_item_t *many = calloc(CR__RPC_BATCH_MAX, sizeof *many);
    for (int i = 0; i < CR__RPC_BATCH_MAX; i++) {
        many[i].key = big;
        many[i].key_len = CR__RPC_KEY_MAX;
    }
    m.n_items = CR__RPC_BATCH_MAX;
    m.items = many;
    assert_int_equal(cr__rpc_encode(&m, &b), 0);
    cr__rpc_msg_t d;
    assert_int_equal(decode(&b, &d), 0);
    assert_int_equal(d.n_items, CR__RPC_BATCH_MAX);
    assert_int_equal(d.items[CR__RPC_BATCH_MAX - 1].key_len, CR__RPC_KEY_MAX);
    cr__rpc_msg_free(&d);
    free(many);
    cr__rpc_item_t r = {.n_replicas = CR__RPC_REPLICA_MAX + 1};
    cr__rpc_msg_t rm = {.type = CR__RPC_GET_REPLICA_LIST | CR__RPC_REPLY, .n_items = 1, .items = &r};
    assert_int_equal(cr__rpc_encode(&rm, &b), -EINVAL);
    cr__rpc_buf_free(&b);
    cr__rpc_msg_free(NULL);
    cr__rpc_msg_t z = {0};
    cr__rpc_msg_free(&z);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_layout),        cmocka_unit_test(test_roundtrip_control),
        cmocka_unit_test(test_roundtrip_put_start),
        cmocka_unit_test(test_put_start_exclusion_list),
        cmocka_unit_test(test_roundtrip_other_items),
        cmocka_unit_test(test_error_reply),          cmocka_unit_test(test_truncation_everywhere),
        cmocka_unit_test(test_bounds),               cmocka_unit_test(test_encoder_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
