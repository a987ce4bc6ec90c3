#!/usr/bin/env bash
# Digest computation throughput (docs/sources.md): the daemon hashing a
# 1 GiB safetensors file (sha256, no rate limit, the file in the page
# cache) against `sha256sum` of the same file, in the same run. Prints
# each run's seconds and the median ratio (>1: the daemon is faster).
# Not part of .ci/run. Usage: benches/digests.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
cargo build -q --release --bin ztserve
data="$PWD/target/bench-data/digests"
mkdir -p "$data/root"
file="$data/root/one-gib.safetensors"
if [ ! -f "$file" ]; then
    # 16 tensors of 64 MiB each, random bytes (nothing to compress away).
    python3 - "$file" <<'PY'
import json, os, struct, sys
n, size = 16, 64 << 20
header = {f"model.layers.{i}.w": {"dtype": "F32", "shape": [size // 4], "data_offsets": [i * size, (i + 1) * size]} for i in range(n)}
h = json.dumps(header).encode()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for _ in range(n):
        f.write(os.urandom(size))
PY
fi
cat "$file" > /dev/null   # into the page cache for both sides

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ours=(); peer=()
for run in $(seq "$runs"); do
    t0=$(date +%s.%N); sha256sum "$file" > /dev/null; t1=$(date +%s.%N)
    peer+=("$(echo "$t1 - $t0" | bc -l)")
    state=$(mktemp -d)
    cfg="$state/c.toml"
    printf 'root = "/unused"\n[digests]\nrate_mib_s = 0\n' > "$cfg"
    log="$state/log"
    target/release/ztserve --config "$cfg" --root "$data/root" --listen 127.0.0.1:0 --no-quic \
        --state-dir "$state" --log-format json > /dev/null 2> "$log" &
    pid=$!
    # The hasher logs the seconds it took once the file is done.
    for _ in $(seq 600); do grep -q '"digests computed"' "$log" && break; sleep 0.1; done
    kill "$pid"; wait "$pid" 2>/dev/null || true
    secs=$(grep '"digests computed"' "$log" | sed -E 's/.*"secs":([0-9.e-]+).*/\1/')
    ours+=("$secs")
    rm -rf "$state"
    echo "run $run: sha256sum ${peer[-1]} s, ztserve ${ours[-1]} s"
done
mo=$(printf '%s\n' "${ours[@]}" | median)
mp=$(printf '%s\n' "${peer[@]}" | median)
echo "median: sha256sum $mp s, ztserve $mo s; ztserve/sha256sum throughput ratio $(echo "$mp / $mo" | bc -l | cut -c1-5)x"
