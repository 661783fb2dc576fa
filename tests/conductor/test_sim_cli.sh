#!/bin/sh
# crescent-sim end to end: a tiny synthetic trace through every mode (CSV and,
# if gnuplot exists, PNG output), and bad traces/flags rejected with a message
# naming the line and field and a non-zero exit, never a crash.
set -u
SIM=$1
dir=$(mktemp -d /tmp/cr-cond-cli-XXXXXX)
trap 'rm -rf "$dir"' EXIT INT TERM
fail() { echo "FAIL: $*"; exit 1; }

# 60 requests, 4 groups sharing 3 of 5 blocks, one every 200 ms
i=0
while [ $i -lt 60 ]; do
  g=$((i % 4)); u=$((1000 + i * 2))
  echo "{\"timestamp\": $((i * 200)), \"input_length\": 2500, \"output_length\": 20, \"hash_ids\": [$((g*10)), $((g*10+1)), $((g*10+2)), $u, $((u+1))]}"
  i=$((i + 1))
done > "$dir/ok.jsonl"

plot=false; command -v gnuplot >/dev/null 2>&1 && plot=true
"$SIM" --trace="$dir/ok.jsonl" --mode=all --n_prefill=2 --n_decode=1 --tbt_list=0.05,0.1 \
  --cap_list=2,8,64 --out_dir="$dir/out" --plot=$plot --progress=false >"$dir/stdout" 2>"$dir/stderr" \
  || { cat "$dir/stderr"; fail "run on a valid trace exited non-zero"; }
for f in summary.csv ttft_cdf.csv capacity.csv hitrate.csv; do
  [ -s "$dir/out/$f" ] || fail "missing $f"
done
[ "$(wc -l < "$dir/out/summary.csv")" -eq 6 ] || fail "summary.csv: expected header + 5 policies"
grep -q '^global_cache,2,1,1,60,60,0,' "$dir/out/summary.csv" || { cat "$dir/out/summary.csv"; fail "global_cache row"; }
if $plot; then
  for f in ttft_cdf.png capacity.png hitrate.png; do
    [ -s "$dir/out/$f" ] || fail "missing plot $f"
  done
fi

expect_err() { # name, file content, expected message fragment
  printf '%s\n' "$2" > "$dir/bad.jsonl"
  "$SIM" --trace="$dir/bad.jsonl" --progress=false >/dev/null 2>"$dir/err"; rc=$?
  [ $rc -ne 0 ] || fail "$1: exit 0"
  [ $rc -lt 128 ] || fail "$1: crashed (exit $rc)"
  grep -q -- "$3" "$dir/err" || { cat "$dir/err"; fail "$1: message lacks '$3'"; }
}
good='{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2]}'
expect_err malformed "$good
{\"timestamp\": 5, \"input_length\"" "line 2: malformed JSON"
expect_err unknown "$good
$good
{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [], \"prio\": 1}" 'line 3: unknown field "prio"'
expect_err negative '{"timestamp": 0, "input_length": -600, "output_length": 2, "hash_ids": []}' 'line 1: field "input_length" is negative'
expect_err toomany '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2, 3]}' 'line 1: field "hash_ids" has 3 entries'
expect_err backwards "$good
{\"timestamp\": -1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": []}" 'line 2: field "timestamp"'
"$SIM" --trace="$dir/none.jsonl" >/dev/null 2>"$dir/err" && fail "missing trace accepted"
grep -q "none.jsonl" "$dir/err" || fail "missing trace: message lacks the path"
"$SIM" --trace="$dir/ok.jsonl" --policies=nope >/dev/null 2>"$dir/err" && fail "bad policy accepted"
grep -q 'unknown policy "nope"' "$dir/err" || fail "bad policy message"
"$SIM" --trace="$dir/ok.jsonl" --n_prefill=65 >/dev/null 2>&1 && fail "n_prefill 65 accepted"
"$SIM" --trace="$dir/ok.jsonl" --first=60 >/dev/null 2>&1 && fail "--first beyond trace accepted"
# a TBT SLO no decode step can meet (a step alone takes > 10 ms): the
# capacity is "unreachable", printed as such and left empty in the CSV, never
# "0 req/s"; a reachable one is a number
"$SIM" --trace="$dir/ok.jsonl" --mode=capacity --n_prefill=2 --n_decode=1 --policies=global_cache,late \
  --tbt_list=0.001,0.1 --out_dir="$dir/cap" --progress=false >"$dir/cap.out" 2>"$dir/err" \
  || { cat "$dir/err"; fail "capacity run exited non-zero"; }
grep -q '^0.001 *unreachable *unreachable$' "$dir/cap.out" || { cat "$dir/cap.out"; fail "unreachable not printed"; }
grep -q '^0.001,,$' "$dir/cap/capacity.csv" || { cat "$dir/cap/capacity.csv"; fail "unreachable not empty in the CSV"; }
grep -Eq '^0.100,[0-9.]+,[0-9.]+$' "$dir/cap/capacity.csv" || { cat "$dir/cap/capacity.csv"; fail "reachable capacity"; }
# margin mode: one row per (error, load), the estimation error flags accepted
"$SIM" --trace="$dir/ok.jsonl" --mode=margin --n_prefill=2 --n_decode=1 --loads=1,2 --errs=0,0.3 \
  --err_bias=1.2 --out_dir="$dir/mg" --progress=false >/dev/null 2>"$dir/err" \
  || { cat "$dir/err"; fail "margin run exited non-zero"; }
[ "$(wc -l < "$dir/mg/margin.csv")" -eq 5 ] || { cat "$dir/mg/margin.csv"; fail "margin.csv: header + 4 rows"; }
"$SIM" --trace="$dir/ok.jsonl" --err_sigma=-1 >/dev/null 2>&1 && fail "negative err_sigma accepted"
"$SIM" --trace="$dir/ok.jsonl" --err_bias=0 >/dev/null 2>&1 && fail "zero err_bias accepted"
"$SIM" --trace="$dir/ok.jsonl" --cache_blocks=-1 >/dev/null 2>&1 && fail "negative cache_blocks accepted"
"$SIM" --trace="$dir/ok.jsonl" --policies=, >/dev/null 2>"$dir/err" && fail "--policies naming none accepted"
grep -q 'names no policy' "$dir/err" || { cat "$dir/err"; fail "--policies naming none: no message"; }
"$SIM" --trace="$dir/ok.jsonl" --baseline_queue=lifo >/dev/null 2>"$dir/err" && fail "--baseline_queue=lifo accepted"
grep -q 'fifo or spf' "$dir/err" || { cat "$dir/err"; fail "--baseline_queue=lifo: no message"; }
# the baseline-engine options are real flags: shedding under an SLO rejects, FIFO/SPF both run
"$SIM" --trace="$dir/ok.jsonl" --n_prefill=1 --n_decode=1 --policies=global_cache --rate_scale=20 \
  --reject=true --ttft_slo=2 --baseline_shed=true --baseline_queue=fifo --out_dir="$dir/sh" \
  --progress=false >/dev/null 2>"$dir/err" || { cat "$dir/err"; fail "--baseline_shed run failed"; }
[ -s "$dir/sh/summary.csv" ] || fail "--baseline_shed: no summary.csv"
"$SIM" --help | grep -q -- '--baseline_shed' || fail "--help lacks --baseline_shed"
"$SIM" --help | grep -q -- '--cache_blocks' || fail "--help lists no options"
echo "PASS"
