# Sourced by the benchmark scripts that run Python clients: installs what
# they need (nginx, curl, the pinned packages in .venv, the release
# daemon) and sets `py` to the interpreter. With ZT_BENCH_PREPARED=1
# nothing is installed or built (a machine without the registries, where
# benches/lent_machine.sh carried it all) and PYTHON names the
# interpreter (default .venv/bin/python).
#   bench_setup [MORE PIP REQUIREMENTS...]
bench_setup() {
    py="${PYTHON:-.venv/bin/python}"
    [ -z "${ZT_BENCH_PREPARED:-}" ] || return 0
    command -v nginx >/dev/null || { apt-get update -q && apt-get install -y -q nginx-light curl; }
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/python -m pip install -q -r tests/interop/requirements.txt "$@"
    cargo build -q --release --bin ztserve
}
