#!/usr/bin/env bash
# Sources against their peers, measured in one run (docs/sources.md);
# prints medians and ratios. Not part of .ci/run.
#   1. a 1 GiB safetensors file: one 32 MiB tensor and the whole file by
#      Range from ztserve against nginx serving the same file, and
#      `zt fetch` (HTTP, sha256 computed by the daemon, verified) against
#      `curl -o` from nginx;
#   2. the first manifest request for a 10,000-tensor safetensors file and
#      a GGUF file with the same tensors, against the same for `.zt` (a
#      fresh daemon each round; safetensors and GGUF include computing
#      their digests), and the next request;
#   3. digest throughput: the daemon hashing the 1 GiB file (sha256, no
#      rate limit, page cache warm) against `sha256sum`.
# Usage: benches/sources.sh [ROUNDS]   (needs nginx, curl, .venv with gguf)
set -euo pipefail
cd "$(dirname "$0")/.."
# Every fetch from the daemon, none from the component cache.
export ZTSERVE_CACHE=off
. benches/support/nginx.sh
rounds="${1:-5}"
command -v nginx >/dev/null || { apt-get update -q && apt-get install -y -q nginx-light curl; }
[ -x .venv/bin/python ] || { python3 -m venv .venv; }
.venv/bin/python -m pip install -q -r tests/interop/requirements.txt
cargo build -q --release --bin ztserve --bin zt
data="$PWD/target/bench-data/sources"
mkdir -p "$data/root" "$data/many" "$data/tmp"
big="$data/root/one-gib.safetensors"
.venv/bin/python benches/support/one_gib_safetensors.py "$big"
.venv/bin/python - "$data/many" <<'PY'
import os, sys
import numpy as np
many = sys.argv[1]
st = os.path.join(many, "many.safetensors")
if not os.path.exists(st):
    # 10,000 small f32 tensors (250 layers x 40), the same in GGUF.
    import gguf, safetensors.numpy
    rng = np.random.default_rng(0)
    t = {f"model.layers.{i // 40}.t{i % 40}": rng.standard_normal(64).astype(np.float32) for i in range(10_000)}
    safetensors.numpy.save_file(t, st)
    w = gguf.GGUFWriter(os.path.join(many, "many.gguf"), "llama")
    for k, v in t.items():
        w.add_tensor(k, v)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
[ -f "$data/many/many.zt" ] || target/release/zt pack "$data/many/many.safetensors" -o "$data/many/many.zt" --digest sha256
chmod -R a+rX "$data"

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { python3 -c "print(f'{$1/$2:.3f}')"; }
report() { printf '%-58s ztserve %12s   %-9s %12s   ratio %s\n' "$1" "$2" "$3" "$4" "$(ratio "$2" "$4")"; }
now() { date +%s.%N; }

zport=17091; nport=17092
state=$(mktemp -d)
printf 'root = "/unused"\n[digests]\nrate_mib_s = 0\n' > "$state/c.toml"
target/release/ztserve --config "$state/c.toml" --root "$data/root" --listen 127.0.0.1:$zport --no-quic \
    --state-dir "$state" --log-level warn &
zpid=$!
nginx_start "$data" $nport "location / { root $data/root; }"
cleanup() { kill $zpid 2>/dev/null || true; nginx_stop "$data"; rm -rf "$state"; }
trap cleanup EXIT
zurl="http://127.0.0.1:$zport/one-gib.safetensors"
nurl="http://127.0.0.1:$nport/one-gib.safetensors"
# The manifest waits for the digests: after it, both serve from a warm cache.
read off len < <(curl -s "http://127.0.0.1:$zport/v1/files/one-gib.safetensors/manifest" |
    python3 -c 'import json,sys; c=json.load(sys.stdin)["objects"]["model.layers.7.w"]["components"]["data"]; print(c["offset"], c["length"])')
cat "$big" > /dev/null

echo "# 1. 1 GiB safetensors, bytes/s (median of $rounds)"
rate() { curl -s -o /dev/null -w '%{speed_download}\n' "$@"; }
z=$(for i in $(seq "$rounds"); do rate -r "$off-$((off + len - 1))" "$zurl"; done | median)
n=$(for i in $(seq "$rounds"); do rate -r "$off-$((off + len - 1))" "$nurl"; done | median)
report "one 32 MiB tensor by Range (curl)" "$z" nginx "$n"
z=$(for i in $(seq "$rounds"); do rate -r "0-$(( $(stat -c %s "$big") - 1 ))" "$zurl"; done | median)
n=$(for i in $(seq "$rounds"); do rate -r "0-$(( $(stat -c %s "$big") - 1 ))" "$nurl"; done | median)
report "the whole file by Range (curl)" "$z" nginx "$n"
out="$data/tmp/out"
fetch_rate() { rm -f "$out.zt"; local s; s=$(now); target/release/zt fetch "$zurl" -o "$out.zt" --require-digest >/dev/null 2>&1; python3 -c "print($(stat -c %s "$big")/($(now)-$s))"; }
curl_o() { rm -f "$out.st"; rate -o "$out.st" "$nurl"; }
z=$(for i in $(seq "$rounds"); do fetch_rate; done | median)
n=$(for i in $(seq "$rounds"); do curl_o; done | median)
report "zt fetch (HTTP, sha256 verified) vs curl -o from nginx" "$z" "curl" "$n"
rm -f "$out.zt" "$out.st"
kill $zpid; wait $zpid 2>/dev/null || true

echo "# 2. first manifest request, 10,000 tensors, seconds (median of $rounds; a fresh daemon and state each)"
first() {
    local st; st=$(mktemp -d)
    printf 'root = "/unused"\n[digests]\nrate_mib_s = 0\n' > "$st/c.toml"
    target/release/ztserve --config "$st/c.toml" --root "$data/many" --listen 127.0.0.1:$zport --no-quic --state-dir "$st" --log-level warn &
    local pid=$!
    until curl -sf -o /dev/null "http://127.0.0.1:$zport/readyz"; do sleep 0.05; done
    local t; t=$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$zport/v1/files/$1/manifest")
    local t2; t2=$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$zport/v1/files/$1/manifest")
    kill $pid; wait $pid 2>/dev/null || true; rm -rf "$st"
    echo "$t $t2"
}
declare -A f s
for file in many.zt many.safetensors many.gguf; do
    runs=$(for i in $(seq "$rounds"); do first "$file"; done)
    f[$file]=$(echo "$runs" | awk '{print $1}' | median)
    s[$file]=$(echo "$runs" | awk '{print $2}' | median)
    printf '%-20s first %s s, next %s s\n' "$file" "${f[$file]}" "${s[$file]}"
done
echo "ratios to .zt: safetensors first $(ratio "${f[many.safetensors]}" "${f[many.zt]}"), next $(ratio "${s[many.safetensors]}" "${s[many.zt]}"); gguf first $(ratio "${f[many.gguf]}" "${f[many.zt]}"), next $(ratio "${s[many.gguf]}" "${s[many.zt]}")"

echo "# 3. digest throughput, 1 GiB, seconds (median of $rounds)"
ours=(); peer=()
for i in $(seq "$rounds"); do
    t0=$(now); sha256sum "$big" > /dev/null; t1=$(now)
    peer+=("$(python3 -c "print($t1 - $t0)")")
    st=$(mktemp -d); printf 'root = "/unused"\n[digests]\nrate_mib_s = 0\n' > "$st/c.toml"
    target/release/ztserve --config "$st/c.toml" --root "$data/root" --listen 127.0.0.1:0 --no-quic --state-dir "$st" --log-format json 2> "$st/log" &
    pid=$!
    for _ in $(seq 600); do grep -q '"digests computed"' "$st/log" && break; sleep 0.1; done
    kill $pid; wait $pid 2>/dev/null || true
    ours+=("$(grep '"digests computed"' "$st/log" | sed -E 's/.*"secs":([0-9.e-]+).*/\1/')")
    rm -rf "$st"
done
mo=$(printf '%s\n' "${ours[@]}" | median); mp=$(printf '%s\n' "${peer[@]}" | median)
echo "ztserve ${mo} s, sha256sum ${mp} s: throughput ratio ztserve/sha256sum $(ratio "$mp" "$mo")"

echo "# 4. one tensor of a cold 1 GiB file: its manifest by ?select= against the whole manifest, seconds (median of $rounds; a fresh daemon and state each, background hashing at 1 MiB/s)"
cold() {
    local st; st=$(mktemp -d)
    printf 'root = "/unused"\n[digests]\nrate_mib_s = 1\n' > "$st/c.toml"
    target/release/ztserve --config "$st/c.toml" --root "$data/root" --listen 127.0.0.1:$zport --no-quic --state-dir "$st" --log-level warn &
    local pid=$!
    until curl -sf -o /dev/null "http://127.0.0.1:$zport/readyz"; do sleep 0.05; done
    curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$zport/v1/files/one-gib.safetensors/manifest$1"
    kill $pid; wait $pid 2>/dev/null || true; rm -rf "$st"
}
sel=$(for i in $(seq "$rounds"); do cold '?select=model.layers.7.w'; done | median)
whole=$(for i in $(seq "$rounds"); do cold ''; done | median)
echo "select ${sel} s, whole manifest ${whole} s: the selected tensor's wait is $(ratio "$sel" "$whole") of the whole file's"
