#!/usr/bin/env bash
# Two server efficiency figures (not part of .ci/run):
# 1. the daemon's anonymous and file-backed RSS while 16 clients fetch a
#    2 GiB file at once (bodies stream in bounded chunks, so anonymous RSS
#    must stay flat);
# 2. the time to the first catalog of a root holding 1,000 files.
# Usage: benches/serve_memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release --bin ztserve --bin zt --example make_bench_model
data="$PWD/target/bench-data/mem"
mkdir -p "$data/root"
[ -f "$data/root/two-gib.zt" ] || target/release/examples/make_bench_model "$data/root/two-gib.zt" one-tensor 2

port=17081
target/release/ztserve --root "$data/root" --listen 127.0.0.1:$port --log-level warn &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
sleep 1
rss() { awk '/^RssAnon|^RssFile/ {printf "%s %s kB  ", $1, $2}' "/proc/$pid/status"; echo; }
echo "idle:            $(rss)"
for i in $(seq 16); do curl -s -o /dev/null "http://127.0.0.1:$port/v1/files/two-gib.zt" & done
peak_anon=0; peak_file=0
while [ "$(jobs -r | wc -l)" -gt 1 ]; do
    a=$(awk '/^RssAnon/ {print $2}' "/proc/$pid/status"); f=$(awk '/^RssFile/ {print $2}' "/proc/$pid/status")
    [ "$a" -gt "$peak_anon" ] && peak_anon=$a; [ "$f" -gt "$peak_file" ] && peak_file=$f
    sleep 0.1
done
wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
echo "16 clients x 2 GiB: peak RssAnon $peak_anon kB, peak RssFile $peak_file kB"
echo "after:           $(rss)"
kill $pid; wait $pid 2>/dev/null || true

# 1,000 small files.
many="$data/many"
if [ ! -d "$many" ]; then
    mkdir -p "$many"
    for i in $(seq 0 999); do cp models/sample.zt "$many/m$i.zt" 2>/dev/null || true; done
fi
for run in 1 2 3; do
    start=$(date +%s.%N)
    target/release/ztserve --root "$many" --listen 127.0.0.1:0 --log-format json 2>&1 | while read -r line; do
        case "$line" in *'"initial scan done"'*) python3 -c "import time; print(f'catalog of 1,000 files: {time.time()-$start:.3f} s (process start to initial scan done)')"; pkill -f "ztserve --root $many"; break;; esac
    done
done
