#!/bin/sh
# Grid search of the scheduling parameters on the FIRST half of the trace only
# (requests 0..5999; the second half is never replayed here), with the
# estimation error of the evaluation (--err_sigma, default 0.3), at x1 and x1.5
# load. Objective: mean of the average TTFTs at the two loads. Each policy is
# tuned on its own grid, so the baseline gets a search too.
#   tools/crescent-sim/tune.sh SIM TRACE OUT_DIR [ERR_SIGMA] [global|late|both]
# Writes OUT_DIR/tune_global.csv and/or OUT_DIR/tune_late.csv, prints the best.
# SIM is copied first, so rebuilding it during the search cannot disturb it.
set -eu
SRC=$1 TRACE=$2 OUT=$3 ERR=${4:-0.3} WHICH=${5:-both}
mkdir -p "$OUT"
SIM=$(mktemp "$OUT/sim.XXXXXX")
trap 'rm -f "$SIM"' EXIT
cp "$SRC" "$SIM"
chmod 755 "$SIM"
run() { # policy, extra flags...; prints the mean avg TTFT over x1 and x1.5
  p=$1; shift
  s=0
  for r in 1 1.5; do
    v=$("$SIM" --trace="$TRACE" --count=6000 --rate_scale=$r --err_sigma="$ERR" --progress=false \
          --policies="$p" "$@" | awk -v p="$p" '$1 == p {print $2}')
    [ -n "$v" ] || { echo "tune.sh: $p $* failed at x$r" >&2; exit 1; }
    s=$(echo "$s $v" | awk '{print $1 + $2 / 2}')
  done
  echo "$s"
}
if [ "$WHICH" != late ]; then
  echo "pipe_min_s,pipe_max,pipe_idle_s,pipe_reserve,mean_avg_ttft" > "$OUT/tune_global.csv"
  for pm in 0 2 3 5; do for mx in 2 3 4; do for id in 0.5 2; do for rs in 0 2 3; do
    [ "$pm" = 0 ] && { [ "$mx" = 2 ] && [ "$id" = 0.5 ] && [ "$rs" = 0 ] || continue; }
    v=$(run global_cache --pipe_min_s=$pm --pipe_max=$mx --pipe_idle_s=$id --pipe_reserve=$rs)
    echo "$pm,$mx,$id,$rs,$v" >> "$OUT/tune_global.csv"
  done; done; done; done
  echo "best global: $(tail -n +2 "$OUT/tune_global.csv" | sort -t, -k5 -g | head -1)"
fi
if [ "$WHICH" != global ]; then
  echo "late_aging,late_window,pipe_min_s,pipe_max,pipe_reserve,mean_avg_ttft" > "$OUT/tune_late.csv"
  for ag in 0 0.1 0.25 0.5 1 2; do for pm in 0 3 5; do for mx in 2 4; do for rs in 1 3; do
    [ "$pm" = 0 ] && { [ "$mx" = 2 ] && [ "$rs" = 1 ] || continue; }
    v=$(run late --late_aging=$ag --late_window=64 --late_pipe_min_s=$pm --late_pipe_max=$mx \
          --late_pipe_reserve=$rs)
    echo "$ag,64,$pm,$mx,$rs,$v" >> "$OUT/tune_late.csv"
  done; done; done; done
  echo "best late:   $(tail -n +2 "$OUT/tune_late.csv" | sort -t, -k6 -g | head -1)"
fi
