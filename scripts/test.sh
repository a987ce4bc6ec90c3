#!/usr/bin/env bash
# Runs every check and test. Installs what the tests need (a Python venv
# with pinned packages) on first use. Long benchmarks and fuzzing stay out.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# A clean run builds every target once: incremental caches would only
# double the target folder (about 2 GiB) on a disk CI does not size.
export CARGO_INCREMENTAL=0

step() {
    # Seconds since the run began, so that a slow step shows in the log.
    printf '\n==> [%ss] %s\n' "$SECONDS" "$*"
    # Free space, so that a run that fills the disk says so in its log.
    df -h . | tail -n 1
}

step "system tools the tests drive (curl, nginx as a plain Range server; chromium for the web page; ip and iptables for the lossy and dying network tests; debootstrap and docker-compose for the container tests)"
missing=()
# The allocator of ztserve and zt, jemalloc, is built from source with make.
command -v make >/dev/null || missing+=(make)
command -v curl >/dev/null || missing+=(curl)
command -v nginx >/dev/null || missing+=(nginx-light)
# The web page's tests drive a headless Chromium (tests/ui_browser.rs).
command -v chromium >/dev/null || missing+=(chromium)
if [ "$(id -u)" = 0 ]; then
    # Network namespaces need root; without it that test says SKIPPED.
    command -v ip >/dev/null || missing+=(iproute2)
    command -v iptables >/dev/null || missing+=(iptables)
    if command -v docker >/dev/null; then
        # The container tests: a base image made with debootstrap, and
        # the compose files checked with Compose v1.
        command -v debootstrap >/dev/null || missing+=(debootstrap)
        command -v docker-compose >/dev/null || missing+=(docker-compose)
    fi
fi
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -q && $sudo apt-get install -y -q "${missing[@]}"
fi

step "python venv (.venv) with pinned interop packages"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r tests/interop/requirements.txt

step "S3 servers for the object-storage tests (s3s-fs 0.14.1, built once into target/tools; moto, in the venv)"
if [ ! -x target/tools/bin/s3s-fs ]; then
    cargo install -q s3s-fs --version 0.14.1 --features binary --root target/tools
fi
# The second S3 server, moto's, came with the venv above.
export ZT_S3S_FS="$PWD/target/tools/bin/s3s-fs" ZT_MOTO_SERVER="$PWD/.venv/bin/moto_server" ZT_REQUIRE_S3=1
# Chromium was installed above: the browser tests must run.
export ZT_REQUIRE_BROWSER=1

step "cargo fmt --check (the workspace, and the Python extension crate outside it)"
cargo fmt --all -- --check
cargo fmt --manifest-path python/Cargo.toml -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy --manifest-path python/Cargo.toml --all-targets --locked -- -D warnings

step "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked -q

step "release build of ztserve and zt (tests/container_like.rs runs the binary the image ships; tests/container.rs builds the image with both)"
cargo build --release --locked --bin ztserve --bin zt

if command -v docker >/dev/null && [ "$(id -u)" = 0 ]; then
    # A Docker engine that does not answer then fails tests/container.rs
    # instead of skipping it.
    export ZT_REQUIRE_DOCKER=1
fi

step "cargo test (tests/fuzz_replay.rs replays every fuzz corpus and saved crash)"
if [ "$(id -u)" = 0 ]; then
    # As root the namespace and tmpfs tests can run, so they must: a skip
    # fails them instead of passing.
    export ZT_REQUIRE_PRIVILEGED=1
fi
ZT_TEST_RELEASE_BIN="$PWD/target/release/ztserve" cargo test --workspace --locked

step "the Python package (pip install ./python: maturin, sharing target/)"
.venv/bin/python -m pip install -q --disable-pip-version-check ./python

step "interop tests (ztensor 1.2.3, safetensors, numpy, a real model, the Python package)"
cargo build --locked --bin zt --bin ztserve
ZT_BIN="$PWD/target/debug/zt" ZT_DAEMON_BIN="$PWD/target/debug/ztserve" \
    ZT_MODEL_CACHE="$PWD/target/model-cache" \
    .venv/bin/python -m pytest -q tests/interop
step "done"
