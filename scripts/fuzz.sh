#!/usr/bin/env bash
# Long fuzz runs (not part of .ci/run). Usage: scripts/fuzz.sh [SECONDS] [TARGET]
# Needs `cargo install cargo-fuzz`; RUSTC_BOOTSTRAP=1 lets it use stable Rust.
# A crash is copied to fuzz/regressions/TARGET/, which `cargo test --test fuzz_replay` replays.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${1:-600}"
target="${2:-read_file}"
mkdir -p "corpus/$target" "regressions/$target"
status=0
RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "corpus/$target" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 || status=$?
if compgen -G "artifacts/$target/*" >/dev/null; then
    cp -n artifacts/"$target"/* "regressions/$target/"
    echo "crashes saved to fuzz/regressions/$target/"
fi
exit "$status"
