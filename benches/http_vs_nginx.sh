#!/usr/bin/env bash
# ztserve against nginx (sendfile on) serving the same root on 127.0.0.1,
# measured in the same run; prints medians and ztserve/nginx ratios.
# Not part of .ci/run. Usage: benches/http_vs_nginx.sh [ROUNDS]
#   ZT_DAEMON_BIN=PATH serves from another build (A/B runs).
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/support/nginx.sh
rounds="${1:-5}"
need() { command -v "$1" >/dev/null || { apt-get update -q && apt-get install -y -q nginx-light wrk curl; }; }
need nginx; need wrk; need curl

cargo build -q --release --bin ztserve --bin zt --example make_bench_model
data="$PWD/target/bench-data/http"
mkdir -p "$data/root"
[ -f "$data/root/one-gib.zt" ] || target/release/examples/make_bench_model "$data/root/one-gib.zt" one-tensor 1

zport=17071; nport=17072
"${ZT_DAEMON_BIN:-target/release/ztserve}" --root "$data/root" --listen 127.0.0.1:$zport --log-level warn &
zpid=$!
nginx_start "$data" $nport "location /v1/files/ { alias $data/root/; }"
cleanup() { kill $zpid 2>/dev/null || true; nginx_stop "$data"; }
trap cleanup EXIT
sleep 1

# The one component's byte range, from the manifest.
read off len < <(curl -s "http://127.0.0.1:$zport/v1/files/one-gib.zt/manifest" |
    python3 -c 'import json,sys; c=json.load(sys.stdin)["objects"]["weight"]["components"]["data"]; print(c["offset"], c["length"])')
range="bytes=$off-$((off + len - 1))"
zurl="http://127.0.0.1:$zport/v1/files/one-gib.zt"
nurl="http://127.0.0.1:$nport/v1/files/one-gib.zt"
curl -s -o /dev/null -r "$off-$((off + len - 1))" "$zurl"; curl -s -o /dev/null -r "$off-$((off + len - 1))" "$nurl"

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { python3 -c "print(f'{$1/$2:.3f}')"; }

# wrk throughput in bytes/s (Transfer/sec), or requests/s.
wrk_bytes() { wrk -t "$1" -c "$2" -d "$3" -H "Range: $4" "$5" | awk '/Transfer\/sec/ {v=$2; u=substr(v,length(v)-1); n=v+0; if(u=="GB") n*=1e9; else if(u=="MB") n*=1e6; else if(u=="KB") n*=1e3; print n}'; }
wrk_rps() { wrk -t 2 -c "$1" -d "$2" --latency -H "Range: $3" "$4" | awk '/Requests\/sec/ {print $2}'; }
wrk_p99() { wrk -t 2 -c "$1" -d "$2" --latency -H "Range: $3" "$4" | awk '/ 99%/ {print $2}'; }

report() { printf '%-52s ztserve %12s   nginx %12s   ratio %s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }

echo "# 1 GiB component by Range, wrk (client not the bottleneck), bytes/s, median of $rounds"
z=$(for i in $(seq "$rounds"); do wrk_bytes 1 1 5s "$range" "$zurl"; done | median)
n=$(for i in $(seq "$rounds"); do wrk_bytes 1 1 5s "$range" "$nurl"; done | median)
report "1 client, 1 GiB range (B/s)" "$z" "$n"
z=$(for i in $(seq "$rounds"); do wrk_bytes 2 8 5s "$range" "$zurl"; done | median)
n=$(for i in $(seq "$rounds"); do wrk_bytes 2 8 5s "$range" "$nurl"; done | median)
report "8 clients, 1 GiB range (B/s)" "$z" "$n"

echo "# the same with curl as the client, bytes/s"
curl_rate() { curl -s -o /dev/null -w '%{speed_download}\n' -r "$off-$((off + len - 1))" "$1"; }
z=$(for i in $(seq "$rounds"); do curl_rate "$zurl"; done | median)
n=$(for i in $(seq "$rounds"); do curl_rate "$nurl"; done | median)
report "1 curl, 1 GiB range (B/s)" "$z" "$n"
curl8() { local s; s=$(date +%s.%N); for j in 1 2 3 4 5 6 7 8; do curl_rate "$1" >/dev/null & done; wait; python3 -c "import time; print(8*$len/(time.time()-$s))"; }
z=$(for i in $(seq "$rounds"); do curl8 "$zurl"; done | median)
n=$(for i in $(seq "$rounds"); do curl8 "$nurl"; done | median)
report "8 curls, 1 GiB range each (B/s)" "$z" "$n"

echo "# small ranges (4 KiB, manifest-sized), 16 connections, wrk"
small="bytes=0-4095"
z=$(for i in $(seq "$rounds"); do wrk_rps 16 3s "$small" "$zurl"; done | median)
n=$(for i in $(seq "$rounds"); do wrk_rps 16 3s "$small" "$nurl"; done | median)
report "4 KiB ranges (requests/s)" "$z" "$n"
echo "p99 latency, one run each: ztserve $(wrk_p99 16 3s "$small" "$zurl")  nginx $(wrk_p99 16 3s "$small" "$nurl")"
