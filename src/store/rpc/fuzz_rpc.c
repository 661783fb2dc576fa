/* libFuzzer target for the store control-plane codec and the master's
 * request handling.
 *
 * Input layout: the first 32 bytes go through cr__rpc_decode_hdr(); then
 * bytes [0..2) choose a message type and the rest is decoded as that
 * type's payload (so the payload decoder is reached whatever the header);
 * a PutStart's payload also with the EXCLUDE header flag (its exclusion
 * list after the items).
 * A decoded message must re-encode and decode to the same encoding
 * (round-trip property); a decoded request is also served by a master
 * state (with two mounted segments) and its reply must encode. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/master/master.h"
#include "store/rpc/protocol.h"

static cr__master_t *g_master;
static unsigned g_runs;
static uint64_t g_now;

static void master_reset(void)
{
    cr__master_destroy(g_master);
    g_master = NULL;
    cr__master_cfg_t cfg;
    cr__master_cfg_default(&cfg);
    cfg.lease_ttl_ms = 50;
    cfg.put_timeout_ms = 100;
    cfg.client_ttl_ms = 1000;
    cfg.min_stripe = 4096;
    if (cr__master_create(&cfg, &g_master))
        abort();
    cr__master_mount(g_master, (cr__rpc_client_id_t){1, 1}, "segA", 0x10000, 1u << 20, 0);
    cr__master_mount(g_master, (cr__rpc_client_id_t){2, 2}, "segB", 0x200000, 1u << 20, 0);
}

static void roundtrip(const cr__rpc_msg_t *m)
{
    cr__rpc_buf_t a, b;
    cr__rpc_buf_init(&a);
    cr__rpc_buf_init(&b);
    if (cr__rpc_encode(m, &a) == 0) {
        cr__rpc_hdr_t h;
        if (cr__rpc_decode_hdr(a.data, &h))
            abort();
        cr__rpc_msg_t d;
        if (cr__rpc_decode(&h, a.data + CR__RPC_HDR_SIZE, a.len - CR__RPC_HDR_SIZE, &d))
            abort(); /* what we encode we must decode */
        if (cr__rpc_encode(&d, &b) || b.len != a.len || memcmp(a.data, b.data, a.len))
            abort(); /* and it must encode to the same bytes */
        cr__rpc_msg_free(&d);
    }
    cr__rpc_buf_free(&a);
    cr__rpc_buf_free(&b);
}

/* Decodes payload as type with header flags hflags; a message that
 * decodes must round-trip, and a request is served by the master. */
static void serve(uint16_t type, uint32_t hflags, const uint8_t *payload, size_t len)
{
    cr__rpc_hdr_t h = {.magic = CR__RPC_MAGIC, .version = CR__RPC_VERSION, .type = type,
                       .payload_len = (uint32_t)len, .flags = hflags};
    cr__rpc_msg_t m;
    if (cr__rpc_decode(&h, payload, len, &m) != 0)
        return;
    roundtrip(&m);
    if (!(type & CR__RPC_REPLY)) {
        if (!g_master || (g_runs++ % 4096) == 0)
            master_reset();
        cr__rpc_msg_t rep;
        memset(&rep, 0, sizeof rep);
        rep.type = (uint16_t)(type | CR__RPC_REPLY);
        g_now += 7;
        cr__master_handle(g_master, &m, &rep, g_now);
        if ((g_runs & 63) == 0)
            cr__master_tick(g_master, g_now);
        cr__rpc_buf_t b;
        cr__rpc_buf_init(&b);
        if (cr__rpc_encode(&rep, &b) != 0)
            abort(); /* every reply the master builds must encode */
        cr__rpc_buf_free(&b);
        cr__rpc_msg_free(&rep);
    }
    cr__rpc_msg_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= CR__RPC_HDR_SIZE) {
        cr__rpc_hdr_t h;
        if (cr__rpc_decode_hdr(data, &h) == 0 && h.payload_len == size - CR__RPC_HDR_SIZE) {
            cr__rpc_msg_t m;
            if (cr__rpc_decode(&h, data + CR__RPC_HDR_SIZE, h.payload_len, &m) == 0) {
                roundtrip(&m);
                cr__rpc_msg_free(&m);
            }
        }
    }
    if (size < 2)
        return 0;
    uint16_t type = (uint16_t)(data[0] | (data[1] << 8));
    serve(type, 0, data + 2, size - 2);
    uint16_t bt = type & (uint16_t)~CR__RPC_REPLY;
    if (bt == CR__RPC_PUT_START || bt == CR__RPC_BATCH_PUT_START)
        serve(type, CR__RPC_HF_EXCLUDE, data + 2, size - 2); /* an exclusion list after the items */
    return 0;
}
