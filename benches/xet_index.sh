#!/usr/bin/env bash
# How long a file's Xet index takes to make (docs/hub.md, issue 30): the
# first HEAD of a 1 GiB safetensors file's resolve URL, which waits for
# its index (hub.xet_wait_ms raised so that it always does), against
# hf_xet's own `hash_files` (the Hugging Face reference implementation,
# the same chunks and hashes) over the same file, in the same run, page
# cache warm. Two HEAD rows: right after the daemon starts, while the
# file's digests (sha256, computed by the daemon for a safetensors file)
# are being computed, and once they are (its manifest asked for first,
# which waits for them, as a daemon that served the file has them).
# Each round starts a fresh daemon (no checks in the background), and
# every HEAD must name the hash hash_files gives the file (about 16,000
# chunks cut and hashed as the reference does). Prints medians and ratios. Not part
# of .ci/run.
# Usage: benches/xet_index.sh [ROUNDS]
#   ZT_DAEMON_BIN=PATH serves from another build (A/B runs).
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/support/stats.sh
rounds="${1:-5}"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q -r tests/interop/requirements.txt
cargo build -q --release --bin ztserve
bin="${ZT_DAEMON_BIN:-target/release/ztserve}"
data="$PWD/target/bench-data/hub"
mkdir -p "$data/root"
.venv/bin/python benches/support/hub_repo.py "$data/root"
# A root of that one file (a hard link: the same page cache), so that
# no other file's digests are computed beside it.
mkdir -p "$data/xet-root/bench/single"
file="$data/xet-root/bench/single/model.safetensors"
[ "$file" -ef "$data/root/bench/single/model.safetensors" ] ||
    ln -f "$data/root/bench/single/model.safetensors" "$file"
url=/bench/single/resolve/main/model.safetensors
port=17097
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
printf 'root = "/unused"\n[digests]\nrate_mib_s = 0\nverify_background = false\n[hub]\nxet_wait_ms = 600000\n' > "$work/c.toml"
cat "$file" >/dev/null

start() {
    rm -rf "$work/state"; mkdir -p "$work/state"
    "$bin" --config "$work/c.toml" --root "$data/xet-root" --listen 127.0.0.1:$port \
        --state-dir "$work/state" --log-level warn --no-quic &
    pid=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && return; sleep 0.1; done
    echo "the daemon did not start" >&2; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
# The reference's hash of the file: every HEAD must name the same.
want=$(.venv/bin/python -c "import hf_xet; print(hf_xet.hash_files(['$file'])[0].hash)")
head_s() {  # seconds for the HEAD, which must name the reference's hash
    local t0 h got
    t0=$(date +%s.%N)
    h=$(curl -sfIL "http://127.0.0.1:$port$url")
    python3 -c "print(round($(date +%s.%N) - $t0, 4))"
    got=$(grep -i '^x-xet-hash' <<<"$h" | tr -d '\r' | awk '{print $2}')
    [ "$got" = "$want" ] || { echo "the HEAD's Xet hash ${got:-(none)} is not hash_files' $want" >&2; exit 1; }
}

fresh=; checked=; peer=
for r in $(seq "$rounds"); do
    start; f=$(head_s); stop
    start; curl -sf "http://127.0.0.1:$port/v1/files/bench/single/model.safetensors/manifest" -o /dev/null
    c=$(head_s); stop
    p=$(.venv/bin/python -c "
import time, hf_xet
t = time.perf_counter(); hf_xet.hash_files(['$file']); print(round(time.perf_counter() - t, 4))")
    fresh+="$f "; checked+="$c "; peer+="$p "
    echo "round $r: first HEAD $f s (digests being computed), $c s (digests computed); hash_files $p s"
done
echo "# $rounds rounds, medians; $(stat -c %s "$file") bytes; $(nproc) cores"
printf '%-52s %8s s\n' "hf_xet.hash_files (the reference)" "$(m "$peer")"
printf '%-52s %8s s   %sx hash_files\n' "first HEAD, digests being computed" "$(m "$fresh")" "$(ratio "$(m "$fresh")" "$(m "$peer")")"
printf '%-52s %8s s   %sx hash_files\n' "first HEAD, digests computed already" "$(m "$checked")" "$(ratio "$(m "$checked")" "$(m "$peer")")"
