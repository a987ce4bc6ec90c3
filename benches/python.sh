#!/usr/bin/env bash
# The Python package against what users do today, measured in one run
# (docs/benchmarks.md); prints medians and ratios. Not part of .ci/run.
# On the 1 GiB bench model (benches/support/one_gib_safetensors.py),
# ztserve and nginx on 127.0.0.1, page cache warm, each load in a fresh
# Python process:
#   1. everything into memory: ztserve.load (HTTP and QUIC) against
#      `curl -o` from nginx followed by safetensors.numpy.load_file, and
#      against a `requests` download (streamed to a file) plus the same load;
#      the `-b3` rows load from a second daemon that vouches for the
#      tensors with BLAKE3 (digests.algorithm = "blake3") instead of sha256;
#   2. time to the first tensor with tensors(), as a fraction of the whole;
#   3. peak RSS of the Python process against the model's size.
# Usage: benches/python.sh [ROUNDS]   (needs nginx, curl, a Rust toolchain)
#   ZT_DAEMON_BIN=PATH serves from another build (A/B runs).
#   ZT_BENCH_PREPARED=1 on a machine without the registries: nothing is
#   installed or built (benches/support/setup.sh). Run under `taskset -c
#   0,1` for two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every load from the daemon: the component cache (~/.cache/ztserve by
# default) would answer every round after the first from disk.
# benches/shard_cache.sh and benches/fetch_cache.sh time the cache.
export ZTSERVE_CACHE=off
. benches/support/nginx.sh
. benches/support/stats.sh
. benches/support/setup.sh
rounds="${1:-5}"
bench_setup requests==2.32.5 ./python
daemon="${ZT_DAEMON_BIN:-target/release/ztserve}"
# A field of a python_load.py result ("null" where it has none).
field() { python3 -c 'import json, sys; v = json.loads(sys.argv[1]).get(sys.argv[2]); print("null" if v is None else v)' "$1" "$2"; }
data="$PWD/target/bench-data/python"
mkdir -p "$data/root" "$data/tmp"
model="$data/root/one-gib.safetensors"
"$py" benches/support/one_gib_safetensors.py "$model"
chmod -R a+rX "$data"
size=$(stat -c %s "$model")

zport=17093; nport=17094; bport=17092
state=$(mktemp -d); bstate=$(mktemp -d)
printf 'root = "/unused"\n[digests]\nrate_mib_s = 0\n' > "$state/c.toml"
printf 'root = "/unused"\n[digests]\nrate_mib_s = 0\nalgorithm = "blake3"\n' > "$bstate/c.toml"
"$daemon" --config "$state/c.toml" --root "$data/root" --listen 127.0.0.1:$zport \
    --state-dir "$state" --log-level warn &
zpid=$!
"$daemon" --config "$bstate/c.toml" --root "$data/root" --listen 127.0.0.1:$bport \
    --state-dir "$bstate" --log-level warn &
bpid=$!
nginx_start "$data" $nport "location / { root $data/root; }"
out="$data/tmp/download.safetensors"
cleanup() { kill $zpid $bpid 2>/dev/null || true; nginx_stop "$data"; rm -rf "$state" "$bstate" "$out"; }
trap cleanup EXIT
for port in $zport $bport; do
    for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
    # The manifest waits for the digests: later rounds start from a warm cache.
    curl -sf "http://127.0.0.1:$port/v1/files/one-gib.safetensors/manifest" >/dev/null
done
cat "$model" >/dev/null

zhttp="http://127.0.0.1:$zport/one-gib.safetensors"
zquic="quic://127.0.0.1:$zport/one-gib.safetensors"
bhttp="http://127.0.0.1:$bport/one-gib.safetensors"
bquic="quic://127.0.0.1:$bport/one-gib.safetensors"
nurl="http://127.0.0.1:$nport/one-gib.safetensors"
insecure='{"insecure": true}'
run() { "$py" benches/python_load.py "$@"; }
declare -A secs rss first
for i in $(seq "$rounds"); do
    for how in ztserve-http ztserve-quic ztserve-http-b3 ztserve-quic-b3 curl requests first-http first-quic; do
        case $how in
            ztserve-http) j=$(run ztserve "$zhttp") ;;
            ztserve-quic) j=$(run ztserve "$zquic" "$insecure") ;;
            ztserve-http-b3) j=$(run ztserve "$bhttp") ;;
            ztserve-quic-b3) j=$(run ztserve "$bquic" "$insecure") ;;
            curl) j=$(run curl "$nurl" "$out"); rm -f "$out" ;;
            requests) j=$(run requests "$nurl" "$out"); rm -f "$out" ;;
            first-http) j=$(run first "$zhttp") ;;
            first-quic) j=$(run first "$zquic" "$insecure") ;;
        esac
        secs[$how]+="$(field "$j" secs) "
        rss[$how]+="$(field "$j" rss) "
        f=$(field "$j" first)
        [ "$f" = null ] || first[$how]+="$(python3 -c "print($f / $(field "$j" secs))") "
    done
done
echo "# 1 GiB safetensors into memory, median of $rounds rounds (seconds; ratio = ztserve / peer, below 1 is faster)"
for peer in curl requests; do
    for z in ztserve-http ztserve-quic ztserve-http-b3 ztserve-quic-b3; do
        a=$(m "${secs[$z]}"); b=$(m "${secs[$peer]}")
        printf '%-15s %8.3f s   %-9s %8.3f s   ratio %s\n' "$z" "$a" "$peer" "$b" "$(ratio "$a" "$b")"
    done
done
echo "# time to the first tensor with tensors(), as a fraction of the whole load (median)"
for z in first-http first-quic; do
    printf '%-14s first tensor at %.3f of the load\n' "$z" "$(m "${first[$z]}")"
done
echo "# peak RSS of the Python process against the model's size ($size bytes), median"
for how in ztserve-http ztserve-quic first-quic curl requests; do
    r=$(m "${rss[$how]}")
    printf '%-14s %6.0f MiB   %s x the model\n' "$how" "$(python3 -c "print($r / 1048576)")" "$(ratio "$r" "$size")"
done
