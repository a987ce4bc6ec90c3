#!/usr/bin/env bash
# What CI cannot run, on a lent machine with a GPU and more cores
# (docs/benchmarks.md): the Python package's torch path onto the GPU, and
# the Python, Hub and fetch benches pinned to two cores, then on all of
# them, so that a figure of this 2-core machine can be read against
# another machine's. Not part of .ci/run. Exits with the number of steps
# that failed.
#
# That machine reaches no registry, so everything is built here first:
#   .dev/gpu/ztserve, .dev/gpu/zt     release binaries (stripped)
#   .dev/gpu/fetch-bench              the fetch bench (target/release/deps/fetch-*)
#   .dev/gpu/ztserve-*.whl            pip wheel --no-deps ./python -w .dev/gpu (one)
#   .dev/gpu/nginx                    this machine's /usr/sbin/nginx
#   .whl/                             huggingface_hub, httpx2, httpcore2,
#                                     truststore and hf-xet at the versions
#                                     tests/interop/requirements.txt pins
# (.dev/gpu may travel packed as .dev/gpu.tgz, to fit what a call carries)
# and the script runs there from the repository's root, with torch,
# safetensors, numpy, pytest and requests already installed:
#   OUT=DIR benches/lent_machine.sh      (each step's log lands in DIR)
# ZT_LENT_ONLY=torch-tests,hub-2-cores runs only the steps named;
# ZT_LENT_ROUNDS (default 3) sets the rounds of each bench.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/lent-machine}"
rounds="${ZT_LENT_ROUNDS:-3}"
mkdir -p "$out"
gpu="$PWD/.dev/gpu"
[ ! -f .dev/gpu.tgz ] || tar xzf .dev/gpu.tgz -C .dev || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$gpu"/ztserve-*.whl .whl/*.whl || exit 1
mkdir -p /tmp/bin /var/log/nginx /var/lib/nginx
cp "$gpu/nginx" /tmp/bin/ && chmod +x "$gpu"/* /tmp/bin/nginx || exit 1
export PATH="/tmp/bin:$PATH" PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 \
    ZT_DAEMON_BIN="$gpu/ztserve" ZT_BIN="$gpu/zt" ZT_BENCH_PREPARED=1 PYTHON="${PYTHON:-python3}"
nproc; nvidia-smi -L
# The carried wheels must import; torch, where it is missing, fails its own steps.
"$PYTHON" -c 'import huggingface_hub, ztserve; print("huggingface_hub", huggingface_hub.__version__)' || exit 1
"$PYTHON" -c 'import torch; print("torch", torch.__version__)'

# step NAME SECONDS COMMAND...: one check, its output also in $out/NAME.log
# (killed 10 s after its time if it ignores the signal: its daemons go too).
failed=0
step() {
    local name=$1 secs=$2 t0 rc
    shift 2
    case ",${ZT_LENT_ONLY:-$name}," in *",$name,"*) ;; *) return 0 ;; esac
    echo "=== $name: $*"
    t0=$(date +%s)
    timeout -k 10 "$secs" "$@" > "$out/$name.log" 2>&1
    rc=$?
    echo "--- exit $rc after $(($(date +%s) - t0)) s"
    [ "$rc" = 0 ] || failed=$((failed + 1))
    tail -n 40 "$out/$name.log"
}
all=$(nproc)
step torch-tests 90 "$PYTHON" -m pytest -q -p no:cacheprovider tests/interop/test_python.py -k torch_on_cuda
step torch-transports 100 "$PYTHON" benches/torch_transports.py --daemon "$ZT_DAEMON_BIN" --rounds "$rounds"
step connections 80 "$PYTHON" benches/connections.py --daemon "$ZT_DAEMON_BIN" --zt "$ZT_BIN" \
    --cores "2,$all" --connections 2,8 --rounds "$rounds"
step hub-2-cores 130 taskset -c 0,1 benches/hub.sh "$rounds"
step python-2-cores 110 taskset -c 0,1 benches/python.sh "$rounds"
step fetch-2-cores 75 env ZT_BENCH_ONLY=1c,3,4 taskset -c 0,1 "$gpu/fetch-bench" --bench "$rounds"
step hub-all 120 benches/hub.sh "$rounds"
step python-all 100 benches/python.sh "$rounds"
step fetch-all 100 env ZT_BENCH_ONLY=1c,3,4 "$gpu/fetch-bench" --bench "$rounds"
exit "$failed"
