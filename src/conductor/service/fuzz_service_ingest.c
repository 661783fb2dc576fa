/* libFuzzer target: KV event batches applied to a live service (decoder +
 * engine-hash maps + index updates, vLLM and Mooncake paths), followed by
 * /query and /schedule through the HTTP handler. The first input byte picks
 * one of three publishers (two models); the rest is the msgpack payload.
 * Small bounds keep memory flat across millions of inputs. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conductor/service/service.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static cr__csvc_t *g_svc;
static int g_slot[3];

static void setup(void)
{
    static cr__csvc_config_t cfg;
    char err[256];
    char *argv[] = {"fuzz", "--block_size=2", "--max_mapped_blocks=4096",
                    "--gpu_capacity_blocks=2048", "--dram_capacity_blocks=2048",
                    "--disk_capacity_blocks=2048", "--max_hashes=512", "--max_tokens=4096",
                    "--max_events=64"};
    if (cr__cfg_parse(cr__csvc_cfg_table, cr__csvc_cfg_table_len, &cfg,
                      (int)(sizeof argv / sizeof argv[0]), argv, 1, NULL, NULL, 0, NULL, err,
                      sizeof err) ||
        cr__csvc_create(&cfg, &g_svc, err, sizeof err))
        abort();
    const char *ids[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        cr__creq_register_t r;
        memset(&r, 0, sizeof r);
        strcpy(r.id.model, i < 2 ? "m" : "n");
        strcpy(r.id.tenant_id, "default");
        strcpy(r.id.instance_id, ids[i]);
        r.id.block_size = 2;
        r.id.dp_rank = 0;
        strcpy(r.endpoint, "inproc://none");
        r.role = CR__ROLE_BOTH;
        g_slot[i] = cr__csvc_register_local(g_svc, &r);
        if (g_slot[i] < 0)
            abort();
    }
}

static void call(const char *method, const char *path, const char *body)
{
    cr__http_req_t req = {.method = method, .path = path, .body = body,
                          .body_len = strlen(body)};
    cr__http_resp_t resp = {.status = 200};
    cr__csvc_handle(g_svc, &req, &resp);
    if (resp.status >= 500)
        abort(); /* no internal error on any state the events can create */
    free(resp.body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned n;
    if (!g_svc)
        setup();
    if (size < 1)
        return 0;
    cr__csvc_ingest(g_svc, (uint32_t)g_slot[data[0] % 3], data + 1, size - 1);
    call("POST", "/query", "{\"model\":\"m\",\"token_ids\":[1,2,3,4,5,6,7,8]}");
    if (++n % 16 == 0) {
        call("POST", "/query_by_hash", "{\"model\":\"n\",\"seq_hashes\":[1,2,\"0x10\"]}");
        call("POST", "/schedule", "{\"model\":\"m\",\"token_ids\":[1,2,3,4],\"dry_run\":true}");
        call("GET", "/metrics", "");
    }
    return 0;
}
