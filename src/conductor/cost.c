/* Cost models of the conductor (all times in seconds). */
#include "crescent/conductor.h"

void cr_cond_model_default(cr_cond_model_t *m)
{
    if (!m)
        return;
    m->flops_per_token = 2.0 * 70e9;           /* LLaMA3-70B: 2 x params */
    m->attn_flops_per_pair = 4.0 * 80 * 8192;  /* QK^T + AV, 80 layers, hidden 8192 */
    m->gpu_flops = 8 * 312e12;                 /* 8 x A800 bf16 dense peak */
    m->prefill_mfu = 0.5;
    m->prefill_overhead_s = 0.02;
    m->kv_bytes_per_token = 327680;            /* 80 x 8 x 128 x 2 (K,V) x 2 B */
    m->net_bandwidth = 8 * 100e9 / 8;          /* 8 x 100 Gbps RDMA NICs, bytes/s */
    m->transfer_overhead_s = 0.001;
    m->weight_bytes = 140e9;                   /* bf16 weights */
    m->hbm_bandwidth = 8 * 2.039e12;           /* 8 x A800 80GB HBM2e */
    m->decode_mbu = 0.6;
    m->decode_overhead_s = 0.005;
}

double cr_cond_cost_prefill(const cr_cond_model_t *m, uint64_t input_len, uint64_t reused_len)
{
    if (reused_len > input_len)
        reused_len = input_len;
    double n = (double)input_len, p = (double)reused_len;
    double lin = m->flops_per_token * (n - p);
    /* causal attention: token i attends to i+1 keys; sum over i in [p, n) */
    double attn = m->attn_flops_per_pair * ((n * (n + 1) - p * (p + 1)) / 2.0);
    double eff = m->gpu_flops * m->prefill_mfu;
    if (eff <= 0)
        return 0;
    return m->prefill_overhead_s + (lin + attn) / eff;
}

double cr_cond_cost_transfer(const cr_cond_model_t *m, uint64_t tokens)
{
    if (tokens == 0 || m->net_bandwidth <= 0)
        return 0;
    return m->transfer_overhead_s + (double)tokens * m->kv_bytes_per_token / m->net_bandwidth;
}

double cr_cond_cost_decode_step(const cr_cond_model_t *m, uint32_t batch, uint64_t context_tokens)
{
    double bw = m->hbm_bandwidth * m->decode_mbu;
    if (bw <= 0)
        return m->decode_overhead_s;
    /* memory bound: weights once per step + every request's KV cache;
     * compute (2 x params per token) added as a second, usually small, term */
    double bytes = m->weight_bytes + (double)context_tokens * m->kv_bytes_per_token;
    double compute = (double)batch * m->flops_per_token / (m->gpu_flops * 0.5);
    return m->decode_overhead_s + bytes / bw + compute;
}

double cr_cond_cost_queue(double now, double busy_until)
{
    return busy_until > now ? busy_until - now : 0.0;
}

double cr_cond_cost_prefill_chunked(const cr_cond_model_t *m, uint64_t input_len,
                                    uint64_t reused_len, uint32_t chunk_tokens, uint32_t stages)
{
    if (reused_len > input_len)
        reused_len = input_len;
    uint64_t ch = chunk_tokens ? chunk_tokens : input_len - reused_len;
    if (ch == 0 || stages == 0 || reused_len >= input_len)
        return cr_cond_cost_prefill(m, input_len, reused_len);
    /* O(1), no loop over chunks (a decision estimates many prefills): the
     * per-chunk linear and attention terms telescope, so the sum of the
     * chunks is the unchunked compute plus one overhead per chunk */
    uint64_t nch = (input_len - reused_len + ch - 1) / ch;
    double sum = cr_cond_cost_prefill(m, input_len, reused_len) +
                 (double)(nch - 1) * m->prefill_overhead_s;
    if (stages == 1)
        return sum;
    /* stages run 1/stages of the layers each: a proportionate flow shop,
     * whose makespan is sum / k + (k - 1) / k x the LARGEST chunk (the
     * pipeline drains at the pace of its slowest chunk). A chunk costs more
     * the later it starts, so the largest is the last full-size chunk or
     * the final remainder; the remainder is often short, so it must not
     * stand in for the largest. */
    uint64_t last_a = reused_len + (nch - 1) * ch;
    double big = cr_cond_cost_prefill(m, input_len, last_a);
    if (nch >= 2 && input_len - last_a < ch) {
        double full = cr_cond_cost_prefill(m, last_a, last_a - ch);
        if (full > big)
            big = full;
    }
    double k = stages;
    return sum / k + (k - 1) / k * big + (k - 1) * m->transfer_overhead_s;
}
