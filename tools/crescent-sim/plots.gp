# Plots of docs/scheduling.md from the CSVs eval.sh writes:
#   gnuplot -e "dir='docs/scheduling'" tools/crescent-sim/plots.gp
set terminal pngcairo size 960,620 noenhanced font ",11"
set datafile separator ','
set grid
set datafile missing ''

# TTFT CDF per policy, held-out half at x1, exact estimates (solid) and 30 %
# lognormal error (dashed)
set output dir.'/ttft_cdf.png'
set title 'TTFT CDF, held-out half (requests 6000-12030), x1 load: exact estimates (solid) vs 30 % error (dashed)'
set xlabel 'TTFT (s), log scale'
set ylabel 'fraction of requests'
set logscale x
set key bottom right
set xrange [0.05:100]
# columns: fraction, random, load_balance, local_cache, global_cache, cost_fetch, late
plot for [c in "2 3 4 5 7"] dir.'/heldout_err0/ttft_cdf.csv' using int(c):1 every ::1 with lines lw 2 lc rgb word("x #808080 #1f77b4 #ff7f0e #2ca02c #9467bd #d62728", int(c)) title word("x random load_balance local_cache global_cache cost_fetch late", int(c)).' (exact)', \
     for [c in "2 3 4 5 7"] dir.'/heldout_err0.3/ttft_cdf.csv' using int(c):1 every ::1 with lines lw 2 dt 2 lc rgb word("x #808080 #1f77b4 #ff7f0e #2ca02c #9467bd #d62728", int(c)) title word("x random load_balance local_cache global_cache cost_fetch late", int(c)).' (30 % error)'
unset logscale x
unset xrange

# margin of late against global cache-aware (with pipelining) vs load
set output dir.'/margin.png'
set title 'late vs global cache-aware + pipelining: avg TTFT change, held-out half (negative = late better)'
set xlabel 'load (x trace arrival rate)'
set ylabel 'avg TTFT change (%)'
set key top right
set yrange [*:*]
plot for [e in "0 0.1 0.3 0.5"] dir.'/margin/margin.csv' using 2:(($1 == e+0) ? $5 : 1/0) every ::1 with linespoints lw 2 title 'estimation error sigma '.e, \
     0 with lines lc rgb 'black' notitle

# effective capacity vs TBT threshold
set output dir.'/capacity.png'
set yrange [0:*]
set title 'Effective capacity (>= 90 % meet TTFT <= 10 s and TBT <= threshold), held-out half'
set xlabel 'TBT threshold (s)'
set ylabel 'requests/s'
set key bottom right
plot dir.'/capacity_err0/capacity.csv' using 1:2 every ::1 with linespoints lw 2 lc 1 title 'global cache-aware (exact)', \
     dir.'/capacity_err0/capacity.csv' using 1:3 every ::1 with linespoints lw 2 lc 2 title 'late (exact)', \
     dir.'/capacity_err0.3/capacity.csv' using 1:2 every ::1 with linespoints lw 2 dt 2 lc 1 title 'global cache-aware (30 % error)', \
     dir.'/capacity_err0.3/capacity.csv' using 1:3 every ::1 with linespoints lw 2 dt 2 lc 2 title 'late (30 % error)'

# cache hit rate vs cache capacity (whole trace, exact estimates)
set output dir.'/hitrate.png'
set yrange [*:*]
set title 'Cache hit rate vs cache capacity (whole trace)'
set xlabel 'cache blocks per prefill instance'
set ylabel 'hit rate'
set logscale x
set key top left
plot dir.'/fig5/hitrate.csv' using 1:2 every ::1 with linespoints lw 2 title 'per-node caches, load-balanced routing', \
     dir.'/fig5/hitrate.csv' using 1:3 every ::1 with linespoints lw 2 title 'per-node caches, cache-aware routing', \
     dir.'/fig5/hitrate.csv' using 1:4 every ::1 with linespoints lw 2 title 'global pool (global cache-aware)'
