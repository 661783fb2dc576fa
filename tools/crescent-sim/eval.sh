#!/bin/sh
# The evaluation of docs/scheduling.md, end to end. Parameters are the ones
# tools/crescent-sim/tune.sh chose on the FIRST half of the trace; every
# comparison of late against global cache-aware is reported on the SECOND
# half (requests 6000..12030), which the search never replayed.
#   tools/crescent-sim/eval.sh SIM TRACE OUT_DIR [STEP...]
# STEPs (default all, in this order): fig5 heldout margin bias ablation seeds capacity fair plots;
# separate invocations may run different steps at the same time.
# Writes CSVs under OUT_DIR (and PNGs if gnuplot exists).
set -eu
SRC=$1 TRACE=$2 OUT=$3
shift 3
STEPS=${*:-fig5 heldout margin bias ablation seeds capacity fair plots}
want() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
mkdir -p "$OUT"
SIM=$(mktemp "$OUT/sim.XXXXXX")
trap 'rm -f "$SIM"' EXIT
cp "$SRC" "$SIM"
chmod 755 "$SIM"
# chosen on the first half (tune.sh, err_sigma 0.3, x1 and x1.5): the
# baseline's best setting WITH pipelining (its best overall, pipelining off,
# is PIPE_MIN_S=0) and late's best
PIPE="--pipe_min_s=${PIPE_MIN_S:-5} --pipe_max=${PIPE_MAX:-2} --pipe_idle_s=${PIPE_IDLE_S:-0.5} --pipe_reserve=${PIPE_RESERVE:-3}"
LATE="--late_aging=${LATE_AGING:-0.1} --late_window=64 --late_pipe_min_s=${LATE_PIPE_MIN_S:-5} --late_pipe_max=${LATE_PIPE_MAX:-2} --late_pipe_reserve=${LATE_PIPE_RESERVE:-1}"
HALF2="--first=6000"
run() { echo "+ crescent-sim $*" >&2; "$SIM" --trace="$TRACE" --progress=false $PIPE $LATE "$@"; }

# 1. Fig. 5 reproduction: whole trace, exact estimates, every policy; hit
# rate. FIFO engines, as the paper's (the held-out tables use the default SPF)
if want fig5; then
run --mode=run --policies=random,load_balance,local_cache,global_cache,late --baseline_queue=fifo --out_dir="$OUT/fig5"
run --mode=hitrate --cap_list=250,500,1000,2000,4000,8000,16000 --baseline_queue=fifo --out_dir="$OUT/fig5"
fi
# 2. held-out half, x1: TTFT per policy without and with 30 % estimation error
want heldout && for e in 0 0.3; do
  run --mode=run $HALF2 --err_sigma=$e \
      --policies=random,load_balance,local_cache,global_cache,cost_fetch,late \
      --out_dir="$OUT/heldout_err$e"
done
# 3. margin of late against global, loads x error levels (learning predictor)
if want margin; then
run --mode=margin $HALF2 --loads=1,1.25,1.5,1.75,2 --errs=0,0.1,0.3,0.5 --out_dir="$OUT/margin"
# 3b. the withdrawn cost_fetch claim, corrected: cost_fetch against global, both pipelining
run --mode=margin $HALF2 --ours=cost_fetch --loads=1,1.25,1.5,1.75 --errs=0,0.3 \
    --out_dir="$OUT/margin_cost_fetch"
fi
# 4. systematic bias, with and without learning (30 % per-request error)
want bias && for b in 0.7 1.5; do
  for l in true false; do
    run --mode=margin $HALF2 --loads=1,1.5 --errs=0.3 --err_bias=$b --err_decode_bias=$b \
        --learn=$l --out_dir="$OUT/bias${b}_learn_$l"
  done
done
# 4b. ablation: where late's gain comes from. FIFO late binding (aging
# >= 1000: exact FIFO by arrival sequence, ties included) isolates binding on
# observed idleness from shortest-predicted-first; no pipelining isolates that
# mechanism. The aging knob is shared with the baseline's SPF engines, so
# the FIFO row compares FIFO late binding with FIFO engines.
if want ablation; then
  run --mode=margin $HALF2 --loads=1,1.5 --errs=0,0.3 --late_aging=1000 --out_dir="$OUT/ablation_fifo"
  run --mode=margin $HALF2 --loads=1,1.5 --errs=0,0.3 --late_pipe_min_s=0 --out_dir="$OUT/ablation_nopipe"
fi
# 4c. other draws of the per-request error (the headline uses err_seed 7)
if want seeds; then
  for sd in 1 2 3; do
    run --mode=margin $HALF2 --loads=1,1.5 --errs=0.3 --err_seed=$sd --out_dir="$OUT/seed$sd"
  done
fi
# 5. effective capacity under SLOs (TTFT <= 10 s, TBT <= threshold, 90 %)
for e in 0 0.3; do
  want capacity || want "capacity$e" || continue
  run --mode=capacity $HALF2 --err_sigma=$e --policies=global_cache,late --ttft_slo=10 \
      --tbt_list=0.03,0.04,0.05,0.1 --out_dir="$OUT/capacity_err$e"
done
# 6. baseline engines with and without each mechanism (defaults: spf queues,
# no shedding; docs/scheduling.md says why), and late without its shedding
if want fair; then
  mkdir -p "$OUT/fair"
  run --mode=margin $HALF2 --loads=1,1.5 --errs=0,0.3 --baseline_queue=fifo --out_dir="$OUT/fair/margin_fifo"
  for q in fifo spf; do
    for sh in false true; do
      run --mode=capacity $HALF2 --err_sigma=0.3 --policies=global_cache --ttft_slo=10 \
          --tbt_list=0.03,0.04,0.05,0.1 --baseline_queue=$q --baseline_shed=$sh \
          --out_dir="$OUT/fair/capacity_${q}_shed_$sh"
    done
  done
  run --mode=capacity $HALF2 --err_sigma=0.3 --policies=late --ttft_slo=10 \
      --tbt_list=0.03,0.04,0.05,0.1 --late_shed=false --out_dir="$OUT/fair/capacity_late_noshed"
  run --mode=capacity $HALF2 --err_sigma=0 --policies=global_cache --ttft_slo=10 \
      --tbt_list=0.03,0.04,0.05,0.1 --baseline_shed=true --out_dir="$OUT/fair/capacity_err0_spf_shed_true"
fi
if want plots && command -v gnuplot >/dev/null 2>&1; then
  gnuplot -e "dir='$OUT'" "$(dirname "$0")/plots.gp"
fi
echo "eval.sh: $STEPS done; CSVs in $OUT"
