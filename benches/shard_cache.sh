#!/usr/bin/env bash
# Issue 31's goals (tensor-parallel shards, the component cache), measured
# in one run by benches/shard_cache.py; prints medians and ratios.
# Not part of .ci/run. Usage: benches/shard_cache.sh [ROUNDS] [http|quic]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q -r tests/interop/requirements.txt
.venv/bin/python -m pip install -q ./python
cargo build -q --release --bin ztserve
.venv/bin/python benches/shard_cache.py "${1:-5}" "${2:-http}"
