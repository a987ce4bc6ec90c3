#!/usr/bin/env bash
# What the component cache costs and saves `zt fetch`, in one run: the
# 1 GiB, 32-layer model of benches/shard_cache.py (safetensors, f16
# [4096, 4096] per layer) fetched to a .zt file from ztserve on 127.0.0.1
# over HTTP, against `curl -o` of the raw file from nginx: with the cache
# off, into an empty cache (each component stored as it arrives), and
# again with everything cached. Medians; ratio = zt / curl (below 1 is
# faster). Not part of .ci/run.
# Usage: benches/fetch_cache.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/support/nginx.sh
. benches/support/stats.sh
rounds="${1:-5}"
command -v nginx >/dev/null || { apt-get update -q && apt-get install -y -q nginx-light curl; }
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q -r tests/interop/requirements.txt
cargo build -q --release --bin ztserve --bin zt
data="$PWD/target/bench-data/shard-cache"
mkdir -p "$data/root" "$data/tmp"
.venv/bin/python benches/shard_cache.py --write "$data/root/v1.safetensors"
chmod -R a+rX "$data"
zport=17097; nport=17098
state=$(mktemp -d)
printf 'root = "/unused"\n[digests]\nrate_mib_s = 0\n' > "$state/c.toml"
target/release/ztserve --config "$state/c.toml" --root "$data/root" --listen 127.0.0.1:$zport \
    --state-dir "$state" --log-level warn &
zpid=$!
nginx_start "$data" $nport "location / { root $data/root; }"
out="$data/tmp/out.zt"; raw="$data/tmp/raw.safetensors"; cache="$data/tmp/cache"
cleanup() { kill $zpid 2>/dev/null || true; nginx_stop "$data"; rm -rf "$state" "$out" "$raw" "$cache"; }
trap cleanup EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$zport/readyz" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$zport/v1/files/v1.safetensors/manifest" >/dev/null
t() { local s; s=$(date +%s.%N); "$@" >/dev/null; python3 -c "print($(date +%s.%N) - $s)"; }
zurl="http://127.0.0.1:$zport/v1.safetensors"
declare -A secs
for _ in $(seq "$rounds"); do
    secs[curl]+="$(t curl -sf -o "$raw" "http://127.0.0.1:$nport/v1.safetensors") "; rm -f "$raw"
    secs[off]+="$(t target/release/zt fetch "$zurl" -o "$out" --no-cache) "; rm -f "$out"
    rm -rf "$cache"
    secs[store]+="$(t target/release/zt fetch "$zurl" -o "$out" --cache-dir "$cache") "; rm -f "$out"
    secs[warm]+="$(t target/release/zt fetch "$zurl" -o "$out" --cache-dir "$cache") "; rm -f "$out"
done
echo "# 1 GiB to a file, median of $rounds rounds (ratio = zt / curl from nginx)"
c=$(m "${secs[curl]}")
printf '%-44s %7.3f s\n' "curl -o from nginx (peer)" "$c"
for k in off store warm; do
    case $k in off) l="zt fetch, --no-cache";; store) l="zt fetch, empty cache (stores every component)";; warm) l="zt fetch, everything cached";; esac
    printf '%-44s %7.3f s   ratio %s\n' "$l" "$(m "${secs[$k]}")" "$(ratio "$(m "${secs[$k]}")" "$c")"
done
