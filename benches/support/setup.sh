# Sourced by the benchmark scripts that run Python clients: installs what
# they need (nginx, curl, the pinned packages in .venv, the release
# daemon) and sets `py` to the interpreter, .venv/bin/python. With
# ZT_BENCH_PREPARED=1 nothing is installed or built (a machine without
# the registries, where benches/lent_machine.sh carried it all) and
# `py` is $PYTHON (default python3).
#   bench_setup [MORE PIP REQUIREMENTS...]   (installed in a second call)
bench_setup() {
    if [ "${ZT_BENCH_PREPARED:-}" = 1 ]; then
        py="${PYTHON:-python3}"
        return 0
    fi
    py=.venv/bin/python
    command -v nginx >/dev/null || { apt-get update -q && apt-get install -y -q nginx-light curl; }
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/python -m pip install -q -r tests/interop/requirements.txt
    [ $# -eq 0 ] || .venv/bin/python -m pip install -q "$@"
    cargo build -q --release --bin ztserve
}
