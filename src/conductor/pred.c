/* Predictor: the cost model as a prior, corrected online from observed
 * times (see conductor.h). Per bucket: count, mean and variance of
 * log(actual / model), updated as a running mean until 1 / learn_rate
 * samples, then as an exponentially weighted one (recent behaviour wins
 * when the engine changes). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/conductor.h"

typedef struct lstat {
    uint64_t n;
    double mean, var; /* of log(actual / model) */
} lstat_t;

struct cr_cond_pred {
    cr_cond_model_t model;
    uint32_t chunk;
    double rate;
    uint32_t min_samples;
    lstat_t pf[CR_COND_PRED_BUCKETS]; /* prefill, by log2(computed tokens) */
    lstat_t pf_all, dec;
};

int cr_cond_pred_create(const cr_cond_pred_params_t *params, cr_cond_pred_t **out)
{
    if (!out)
        return -EINVAL;
    cr_cond_pred_t p;
    memset(&p, 0, sizeof p);
    cr_cond_model_default(&p.model);
    p.rate = 0.05;
    p.min_samples = 8;
    if (params) {
        uint64_t f = params->field_mask;
        if (f & CR_COND_PRED_PARAM_MODEL)
            p.model = params->model;
        if (f & CR_COND_PRED_PARAM_CHUNK_TOKENS)
            p.chunk = params->chunk_tokens;
        if (f & CR_COND_PRED_PARAM_LEARN_RATE)
            p.rate = params->learn_rate;
        if (f & CR_COND_PRED_PARAM_MIN_SAMPLES)
            p.min_samples = params->min_samples;
    }
    if (!(p.rate > 0 && p.rate <= 1))
        return -EINVAL;
    cr_cond_pred_t *r = malloc(sizeof *r);
    if (!r)
        return -ENOMEM;
    *r = p;
    *out = r;
    return 0;
}

void cr_cond_pred_destroy(cr_cond_pred_t *p)
{
    free(p);
}

static unsigned bucket(uint64_t tokens)
{
    unsigned b = tokens ? 63u - (unsigned)__builtin_clzll(tokens) : 0;
    return b < CR_COND_PRED_BUCKETS ? b : CR_COND_PRED_BUCKETS - 1;
}

static void lstat_add(lstat_t *s, double x, double rate)
{
    s->n++;
    double w = 1.0 / (double)s->n;
    if (w < rate)
        w = rate;
    double d = x - s->mean;
    s->mean += w * d;
    /* West's weighted incremental variance */
    s->var = (1 - w) * (s->var + w * d * d);
}

/* One report moves the correction by at most a factor CLAMP: a wild or
 * hostile report (an engine stalled by something else, a bad clock) cannot
 * make every estimate absurd. */
#define CLAMP_LOG 2.995732273553991 /* ln 20 */

static double clamp_log(double x)
{
    return x > CLAMP_LOG ? CLAMP_LOG : x < -CLAMP_LOG ? -CLAMP_LOG : x;
}

static const lstat_t *pf_stat(const cr_cond_pred_t *p, uint64_t computed)
{
    const lstat_t *b = &p->pf[bucket(computed)];
    return b->n >= p->min_samples ? b : &p->pf_all;
}

static double base_prefill(const cr_cond_pred_t *p, uint64_t n, uint64_t reused, uint32_t stages)
{
    return cr_cond_cost_prefill_chunked(&p->model, n, reused, p->chunk, stages ? stages : 1);
}

double cr_cond_pred_prefill_bound(const cr_cond_pred_t *p, uint64_t input_len,
                                  uint64_t reused_len, uint32_t stages, double z)
{
    if (reused_len > input_len)
        reused_len = input_len;
    const lstat_t *s = pf_stat(p, input_len - reused_len);
    double sd = s->var > 0 ? sqrt(s->var) : 0;
    return base_prefill(p, input_len, reused_len, stages) * exp(s->mean + z * sd);
}

double cr_cond_pred_prefill(const cr_cond_pred_t *p, uint64_t input_len, uint64_t reused_len,
                            uint32_t stages)
{
    if (reused_len > input_len)
        reused_len = input_len;
    const lstat_t *s = pf_stat(p, input_len - reused_len);
    double b = base_prefill(p, input_len, reused_len, stages);
    return s->mean == 0 ? b : b * exp(s->mean);
}

double cr_cond_pred_decode_step(const cr_cond_pred_t *p, uint32_t batch, uint64_t ctx)
{
    double b = cr_cond_cost_decode_step(&p->model, batch, ctx);
    return p->dec.mean == 0 ? b : b * exp(p->dec.mean);
}

int cr_cond_pred_observe_prefill(cr_cond_pred_t *p, uint64_t input_len, uint64_t reused_len,
                                 uint32_t stages, double actual_s)
{
    if (!p || !(actual_s > 0) || !isfinite(actual_s) || stages == 0 ||
        reused_len >= input_len)
        return -EINVAL;
    double b = base_prefill(p, input_len, reused_len, stages);
    if (!(b > 0))
        return -EINVAL;
    double x = clamp_log(log(actual_s / b));
    lstat_add(&p->pf[bucket(input_len - reused_len)], x, p->rate);
    lstat_add(&p->pf_all, x, p->rate);
    return 0;
}

int cr_cond_pred_observe_decode_step(cr_cond_pred_t *p, uint32_t batch, uint64_t ctx,
                                     double actual_s)
{
    if (!p || !(actual_s > 0) || !isfinite(actual_s))
        return -EINVAL;
    double b = cr_cond_cost_decode_step(&p->model, batch, ctx);
    if (!(b > 0))
        return -EINVAL;
    lstat_add(&p->dec, clamp_log(log(actual_s / b)), p->rate);
    return 0;
}

int cr_cond_pred_stats(const cr_cond_pred_t *p, cr_cond_pred_stats_t *out)
{
    if (!p || !out)
        return -EINVAL;
    out->prefill_samples = p->pf_all.n;
    out->decode_samples = p->dec.n;
    out->prefill_factor = exp(p->pf_all.mean);
    out->prefill_sigma = sqrt(p->pf_all.var);
    out->decode_factor = exp(p->dec.mean);
    out->decode_sigma = sqrt(p->dec.var);
    return 0;
}
