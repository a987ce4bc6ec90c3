#!/usr/bin/env bash
# The Hugging Face Hub's protocol against its peer, measured in one run
# (docs/benchmarks.md, issue 30); prints medians and ratios. Not part of
# .ci/run. ztserve (release) and nginx serve the same root on 127.0.0.1,
# page cache warm, every download to the same disk, a fresh Hub cache
# each round:
#   1. snapshot_download of a 1 GiB repository (4 safetensors shards, their
#      index, a config, a tokenizer file) against one curl fetching the
#      same files one after another from nginx (one connection);
#   2. hf_hub_download of one 1 GiB file against curl fetching it from
#      nginx; the same with the client's Xet turned off
#      (HF_HUB_DISABLE_XET=1: one plain HTTP stream) against
#      huggingface_hub's own HTTP stack (httpx2, 10 MiB reads written to a
#      file) fetching it from nginx, the fastest any server can make that
#      path.
# Files of 10 MiB or more come through the Xet protocol (hf_xet), their
# indexes made before the rounds (the first HEAD's time is printed).
# The Hub client's time is taken around its call (its Python start and
# import, about 0.3 s, are not); the process's whole time is printed too.
# Usage: benches/hub.sh [ROUNDS]   (needs nginx, curl, a Rust toolchain)
#   ZT_DAEMON_BIN=PATH serves from another build (A/B runs).
#   ZT_BENCH_PREPARED=1 on a machine without the registries: nothing is
#   installed or built (benches/support/setup.sh). Run under `taskset -c
#   0,1` for two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/support/nginx.sh
. benches/support/stats.sh
. benches/support/setup.sh
rounds="${1:-5}"
bench_setup
data="$PWD/target/bench-data/hub"
mkdir -p "$data/root" "$data/tmp"
"$py" benches/support/hub_repo.py "$data/root"
chmod -R a+rX "$data"

zport=17095; nport=17096
state=$(mktemp -d)
printf 'root = "/unused"\n[digests]\nrate_mib_s = 0\n' > "$state/c.toml"
"${ZT_DAEMON_BIN:-target/release/ztserve}" --config "$state/c.toml" --root "$data/root" --listen 127.0.0.1:$zport \
    --state-dir "$state" --log-level warn --no-quic &
zpid=$!
nginx_start "$data" $nport "location / { root $data/root; }"
out="$data/tmp/out"
cleanup() { kill $zpid 2>/dev/null || true; nginx_stop "$data"; rm -rf "$state" "$out"; }
trap cleanup EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$zport/readyz" >/dev/null && break; sleep 0.1; done
files=(config.json model-00001-of-00004.safetensors model-00002-of-00004.safetensors
       model-00003-of-00004.safetensors model-00004-of-00004.safetensors
       model.safetensors.index.json tokenizer.json)
# Warm: the page cache, and the daemon's digests and component checks
# (every later round reads checked components, as a long-running daemon does).
cat "$data"/root/bench/*/* >/dev/null
for f in "${files[@]}"; do
    curl -sf "http://127.0.0.1:$zport/v1/files/bench/sharded/$f/manifest" -o /dev/null || true
    curl -sf "http://127.0.0.1:$zport/bench/sharded/resolve/main/$f" -o /dev/null
done
curl -sf "http://127.0.0.1:$zport/v1/files/bench/single/model.safetensors/manifest" -o /dev/null
curl -sf "http://127.0.0.1:$zport/bench/single/resolve/main/model.safetensors" -o /dev/null
# The Xet indexes, made once per file version on the first HEAD (the
# first download of a version waits for its index, hub.xet_wait_ms at most).
for f in "${files[@]}"; do curl -sfIL "http://127.0.0.1:$zport/bench/sharded/resolve/main/$f" -o /dev/null; done
t0=$(date +%s.%N)
curl -sfIL "http://127.0.0.1:$zport/bench/single/resolve/main/model.safetensors" -o /dev/null
echo "# the first HEAD of the 1 GiB file (its Xet index made): $(python3 -c "print(round($(date +%s.%N) - $t0, 3))") s"
# What memory touched for the first time costs here (the Hub client's
# downloader allocates much of it; curl little): one GiB, by a new process.
echo "# 1 GiB of fresh memory written by a new process: $(python3 -c '
import mmap, time
n = 1 << 30
m = mmap.mmap(-1, n)
z = b"\1" * (1 << 20)
t = time.perf_counter()
for i in range(0, n, 1 << 20):
    m[i:i + (1 << 20)] = z
print(round(time.perf_counter() - t, 3))') s"

hub() {  # hub.sh's Hub client run: prints "call-seconds process-seconds sys-seconds faults"
    local t0 j
    rm -rf "$out"; mkdir -p "$out"
    sync
    t0=$(date +%s.%N)
    j=$(HF_ENDPOINT="http://127.0.0.1:$zport" HF_HUB_CACHE="$out/cache" HF_HUB_DISABLE_TELEMETRY=1 \
        HF_HUB_DISABLE_UPDATE_CHECK=1 HF_HUB_DISABLE_PROGRESS_BARS=1 \
        "$py" benches/support/hub_download.py "$@")
    echo "$(python3 -c "import json,sys; j=json.loads(sys.argv[1]); print(j['secs'], end=' ')" "$j")$(python3 -c "print($(date +%s.%N) - $t0, end=' ')")$(python3 -c "import json,sys; j=json.loads(sys.argv[1]); print(round(j['sys'], 2), j['faults'])" "$j")"
}
curls() {  # curl fetching URLs one after another on one connection: seconds
    local t0 args=()
    rm -rf "$out"; mkdir -p "$out"
    for u in "$@"; do args+=(-o "$out/$(basename "$u")" "$u"); done
    sync
    t0=$(date +%s.%N)
    curl -sf "${args[@]}"
    python3 -c "print($(date +%s.%N) - $t0)"
}
declare -A secs mem
nurls=(); for f in "${files[@]}"; do nurls+=("http://127.0.0.1:$nport/bench/sharded/$f"); done
for i in $(seq "$rounds"); do
    read -r call whole sys faults < <(hub snapshot bench/sharded)
    secs[snapshot]+="$call "; secs[snapshot-process]+="$whole "
    mem[snapshot]+="$sys/$faults "
    secs[curl-files]+="$(curls "${nurls[@]}") "
    read -r call whole sys faults < <(hub file bench/single model.safetensors)
    secs[file]+="$call "; secs[file-process]+="$whole "
    mem[file]+="$sys/$faults "
    read -r call whole sys faults < <(HF_HUB_DISABLE_XET=1 hub file bench/single model.safetensors)
    secs[file-no-xet]+="$call "
    mem[file-no-xet]+="$sys/$faults "
    secs[curl-file]+="$(curls "http://127.0.0.1:$nport/bench/single/model.safetensors") "
    rm -rf "$out"; mkdir -p "$out"; sync
    j=$("$py" benches/support/hub_download.py httpx \
        "http://127.0.0.1:$nport/bench/single/model.safetensors" "$out/model.safetensors")
    secs[httpx-file]+="$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['secs'])" "$j") "
done
echo "# Hub downloads from ztserve against curl from nginx, median of $rounds rounds (seconds; ratio below 1 is faster)"
for pair in "snapshot curl-files" "snapshot-process curl-files" "file curl-file" "file-process curl-file" \
    "file-no-xet curl-file" "file-no-xet httpx-file" "httpx-file curl-file"; do
    set -- $pair
    a=$(m "${secs[$1]}"); b=$(m "${secs[$2]}")
    printf '%-17s %7.3f s   %-10s %7.3f s   ratio %s\n' "$1" "$a" "$2" "$b" "$(ratio "$a" "$b")"
done
echo "# every round (seconds)"
for k in "${!secs[@]}"; do printf '%-17s %s\n' "$k" "${secs[$k]}"; done | sort
echo "# the Hub client's system seconds / minor page faults, every round (a fault is a page touched"
echo "# for the first time, which costs far more on some virtual machines: docs/benchmarks.md)"
for k in "${!mem[@]}"; do printf '%-17s %s\n' "$k" "${mem[$k]}"; done | sort
