set terminal pngcairo size 900,600 noenhanced
set datafile separator ','
set key bottom right
set grid
set output 'docs/scheduling/ttft_cdf.png'
set title 'TTFT CDF per policy'
set xlabel 'TTFT (s)'
set ylabel 'fraction of requests'
set logscale x
plot 'docs/scheduling/ttft_cdf.csv' using 2:1 with lines lw 2 title 'random', 'docs/scheduling/ttft_cdf.csv' using 3:1 with lines lw 2 title 'load_balance', 'docs/scheduling/ttft_cdf.csv' using 4:1 with lines lw 2 title 'local_cache', 'docs/scheduling/ttft_cdf.csv' using 5:1 with lines lw 2 title 'global_cache', 'docs/scheduling/ttft_cdf.csv' using 6:1 with lines lw 2 title 'cost_fetch'
unset logscale x
set output 'docs/scheduling/capacity.png'
set title 'Effective capacity vs TBT SLO'
set xlabel 'TBT SLO (s)'
set ylabel 'requests/s'
set key bottom right
plot 'docs/scheduling/capacity.csv' using 1:2 with linespoints lw 2 title 'random', 'docs/scheduling/capacity.csv' using 1:3 with linespoints lw 2 title 'load_balance', 'docs/scheduling/capacity.csv' using 1:4 with linespoints lw 2 title 'local_cache', 'docs/scheduling/capacity.csv' using 1:5 with linespoints lw 2 title 'global_cache', 'docs/scheduling/capacity.csv' using 1:6 with linespoints lw 2 title 'cost_fetch'
set output 'docs/scheduling/hitrate.png'
set title 'Cache hit rate vs cache capacity'
set xlabel 'cache blocks per prefill instance'
set ylabel 'hit rate'
set logscale x
set key top left
plot 'docs/scheduling/hitrate.csv' using 1:2 skip 1 with linespoints lw 2 title 'per-node caches, load-balanced routing', 'docs/scheduling/hitrate.csv' using 1:3 skip 1 with linespoints lw 2 title 'per-node caches, cache-aware routing', 'docs/scheduling/hitrate.csv' using 1:4 skip 1 with linespoints lw 2 title 'global pool (global cache-aware)'
