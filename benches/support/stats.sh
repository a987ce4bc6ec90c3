# Sourced by the benchmark scripts: medians and ratios of timings kept as
# space-separated lists.
#   median < LIST     the median of the numbers on stdin
#   m "LIST"          the median of LIST
#   ratio A B         A / B to three places
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
m() { median <<<"$1"; }
ratio() { python3 -c "print(f'{$1/$2:.3f}')"; }
