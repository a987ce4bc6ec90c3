#!/usr/bin/env bash
# What one `GET /api/models/{repo}?blobs=true` of a large repository costs
# the daemon: its peak resident memory (VmHWM) before and after the
# request, the request's time, and the answer's size (docs/benchmarks.md,
# thirty-ninth session). Not part of .ci/run.
# Usage: benches/hub_info_memory.sh [FILES] [DAEMON...]
#   FILES: how many files the repository has (default 200000; made once
#   under target/bench-data/hub-info); DAEMON: the binaries to compare,
#   run by turns, twice each (default target/release/ztserve).
set -euo pipefail
cd "$(dirname "$0")/.."
files="${1:-200000}"
shift || true
daemons=("$@")
[ ${#daemons[@]} -gt 0 ] || daemons=(target/release/ztserve)
export ZTSERVE_CACHE=off
root="$PWD/target/bench-data/hub-info/$files"
if [ ! -f "$root/.made" ]; then
    python3 - "$root/org/many" "$files" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    p = f"{d}/d{i % 100:02d}"
    os.makedirs(p, exist_ok=True)
    with open(f"{p}/file-{i:07d}.json", "w") as f:
        f.write("{}")
PY
    touch "$root/.made"
fi
port=17196
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
kib() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }
for round in 1 2; do
    for bin in "${daemons[@]}"; do
        rm -rf "${state:?}"/*
        "$bin" --root "$root" --listen 127.0.0.1:$port --state-dir "$state" >/dev/null 2>&1 &
        pid=$!
        for _ in $(seq 1 200); do
            curl -sf -o /dev/null "http://127.0.0.1:$port/api/models/org/many/refs" && break
            sleep 0.5
        done
        before=$(kib $pid)
        start=$(date +%s.%N)
        bytes=$(curl -sf -o /dev/null -w '%{size_download}' "http://127.0.0.1:$port/api/models/org/many?blobs=true")
        secs=$(echo "$(date +%s.%N) - $start" | bc)
        after=$(kib $pid)
        printf '%-40s round %d: peak %4d MiB before, %4d MiB after (+%d MiB), %.3f s, %d bytes\n' \
            "$bin" "$round" $((before / 1024)) $((after / 1024)) $(((after - before) / 1024)) "$secs" "$bytes"
        kill $pid
        wait $pid 2>/dev/null || true
    done
done
