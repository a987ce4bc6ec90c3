#!/usr/bin/env bash
# MATRIX-ATOM ingest and serving against their peers, measured in one run
# (docs/benchmarks.md); prints medians and ratios. Not part of .ci/run.
#   1. `zt ingest pack` throughput, MB/s of input text, against the
#      independent Python implementation of tests/interop/test_matrix_atom.py
#      on the same corpus (Debian's licence and copyright texts), with the
#      symbol map of llama.cpp's ggml-vocab-llama-spm.gguf;
#   2. reading 10,000 random atoms over HTTP (one keep-alive connection):
#      ztserve's `?rows=i:i+1` (verified rows, Content-Digest) against
#      nginx serving the same byte ranges of the same file.
# Usage: benches/ingest.sh [ROUNDS]   (needs the model cache the interop
# tests fill: target/model-cache/ggml-vocab-llama-spm.gguf)
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/support/nginx.sh
rounds="${1:-5}"
command -v nginx >/dev/null || { apt-get update -q && apt-get install -y -q nginx-light curl; }
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q -r tests/interop/requirements.txt
cargo build -q --release --bin zt --bin ztserve
vocab=target/model-cache/ggml-vocab-llama-spm.gguf
[ -f "$vocab" ] || { echo "run the interop tests first (they cache $vocab)"; exit 2; }
data="$PWD/target/bench-data/ingest"
rm -rf "$data/corpus" "$data/pack" "$data/root"
mkdir -p "$data/corpus" "$data/root"
# The corpus: every licence and copyright text Debian installed, as .txt.
i=0
for f in /usr/share/common-licenses/* /usr/share/doc/*/copyright; do
    [ -f "$f" ] || continue
    cp "$f" "$data/corpus/$(printf '%04d' $i).txt"; i=$((i + 1))
done
bytes=$(cat "$data/corpus"/*.txt | wc -c)
target/release/zt ingest tokenizer --from-gguf "$vocab" -o "$data/map.json" >/dev/null
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { python3 -c "print(f'{$1/$2:.3f}')"; }
now() { date +%s.%N; }

echo "# 1. zt ingest pack, $(ls "$data/corpus" | wc -l) documents, $bytes bytes of text, MB/s (median of $rounds)"
ours=$(for r in $(seq "$rounds"); do
    rm -rf "$data/pack"; t0=$(now)
    target/release/zt ingest pack "$data/corpus"/*.txt --tokenizer "$data/map.json" --atom-size 256 -o "$data/pack" >/dev/null
    python3 -c "print($bytes / 1e6 / ($(now) - $t0))"
done | median)
peer=$(for r in $(seq "$rounds"); do
    .venv/bin/python - "$data" <<'PY'
import pathlib, sys, time, json
sys.path.insert(0, "tests/interop")
from test_matrix_atom import clean, pack, tokenize
data = pathlib.Path(sys.argv[1])
inputs = sorted((data / "corpus").glob("*.txt"))
m = json.loads((data / "map.json").read_text())
t0 = time.perf_counter()
out = pack(m, [tokenize(m, clean(p)) for p in inputs], 256)
secs = time.perf_counter() - t0
assert out == (data / "pack" / "matrix_atoms.bin").read_bytes(), "the two implementations disagree"
print(sum(p.stat().st_size for p in inputs) / 1e6 / secs)
PY
done | median)
echo "zt ingest pack ${ours} MB/s, Python ${peer} MB/s: ratio $(ratio "$ours" "$peer")"

echo "# 2. 10,000 random atoms over HTTP, one connection, atoms/s (median of $rounds)"
cp "$data/pack/matrix_atoms.bin" "$data/root/atoms.bin"
chmod -R a+rX "$data"
zport=17097; nport=17098
state=$(mktemp -d)
target/release/ztserve --root "$data/root" --listen 127.0.0.1:$zport --no-quic --state-dir "$state" --log-level warn &
zpid=$!
nginx_start "$data" $nport "location / { root $data/root; }"
trap 'kill $zpid 2>/dev/null || true; nginx_stop "$data"; rm -rf "$state"' EXIT
until curl -sf -o /dev/null "http://127.0.0.1:$zport/readyz"; do sleep 0.05; done
curl -sf -o /dev/null "http://127.0.0.1:$zport/v1/files/atoms.bin/manifest"
reads() {
    .venv/bin/python - "$1" "$2" <<'PY'
import http.client, json, random, sys, time
which, port = sys.argv[1], int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port)
if which == "z":
    c.request("GET", "/v1/files/atoms.bin/manifest")
    m = json.loads(c.getresponse().read())
    count, size = m["objects"]["atoms"]["shape"]
else:
    c.request("GET", "/atoms.bin", headers={"Range": "bytes=0-63"})
    h = c.getresponse().read()
    size = int.from_bytes(h[0x14:0x18], "little"); count = int.from_bytes(h[0x18:0x20], "little")
rng = random.Random(7)
picks = [rng.randrange(count) for _ in range(10_000)]
t0 = time.perf_counter()
for i in picks:
    if which == "z":
        c.request("GET", f"/v1/files/atoms.bin/objects/atoms/data?rows={i}:{i + 1}")
    else:
        a = 64 + i * size * 2
        c.request("GET", "/atoms.bin", headers={"Range": f"bytes={a}-{a + size * 2 - 1}"})
    r = c.getresponse(); body = r.read()
    assert r.status == 206 and len(body) == size * 2
print(10_000 / (time.perf_counter() - t0))
PY
}
z=$(for r in $(seq "$rounds"); do reads z $zport; done | median)
n=$(for r in $(seq "$rounds"); do reads n $nport; done | median)
echo "ztserve ${z} atoms/s (rows, verified, Content-Digest), nginx ${n} atoms/s (byte ranges): ratio $(ratio "$z" "$n")"
