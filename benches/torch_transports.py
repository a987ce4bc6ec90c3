"""The Python package's torch path onto a GPU, against the safetensors
package, in one run (docs/benchmarks.md); prints medians and ratios.
Not part of .ci/run (CI has no GPU): run where torch sees a CUDA device.

On the 1 GiB bench model (benches/support/one_gib_safetensors.py) served
by a ztserve daemon on 127.0.0.1, page cache warm, one Python process
(the CUDA context made once, before the first round), each round by turns:
  local      safetensors.torch.load_file(FILE, device="cuda:0")
  download   the file fetched whole over HTTP from the same daemon
             (curl, or urllib where curl is missing), then the same load
  zt-http    ztserve.load(http://..., framework="pt", device="cuda:0")
  zt-quic    ztserve.load(quic://..., ...) likewise
  zt-cpu     ztserve.load(http://..., framework="pt") (no device copy)
Each load ends with torch.cuda.synchronize(); the first round checks that
every tensor equals the local load's, bit for bit. Beside
benches/python_torch_gpu.py (its own 768 MiB model, against the local
load only), this one has the peer users have today (download, then
load_file), the cost of the copy to the device (zt-cpu), and the 1 GiB
bench model of benches/python.sh.

    python3 benches/torch_transports.py --daemon target/release/ztserve [--rounds 5] [--json FILE]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "support"))
import daemon  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--data", default=os.path.join(HERE, "..", "target", "bench-data", "torch"))
    ap.add_argument("--port", type=int, default=17097)
    ap.add_argument("--json")
    args = ap.parse_args()
    os.environ["ZTSERVE_CACHE"] = "off"  # every load from the daemon

    import torch
    import safetensors.torch
    import ztserve

    root, model = daemon.bench_model(args.data)
    state = tempfile.mkdtemp()
    base = f"127.0.0.1:{args.port}/one-gib.safetensors"
    d, daemon_state = daemon.start(root, args.port, "one-gib.safetensors", args.daemon)
    try:
        with open(model, "rb") as f:
            while f.read(1 << 24):
                pass
        torch.zeros(1, device="cuda:0")
        out = os.path.join(state, "download.safetensors")

        def download():
            fetch(f"http://{base}", out)
            try:
                return safetensors.torch.load_file(out, device="cuda:0")
            finally:
                os.remove(out)

        ways = {
            "local": lambda: safetensors.torch.load_file(model, device="cuda:0"),
            "download": download,
            "zt-http": lambda: ztserve.load(f"http://{base}", framework="pt", device="cuda:0"),
            "zt-quic": lambda: ztserve.load(f"quic://{base}", framework="pt", device="cuda:0", insecure=True),
            "zt-cpu": lambda: ztserve.load(f"http://{base}", framework="pt"),
        }
        secs = {k: [] for k in ways}
        reference = safetensors.torch.load_file(model, device="cuda:0")
        size = os.path.getsize(model)
        for r in range(args.rounds):
            for name, way in ways.items():
                t0 = time.perf_counter()
                got = way()
                torch.cuda.synchronize()
                secs[name].append(time.perf_counter() - t0)
                if r == 0:
                    check(name, got, reference, torch)
                del got
                torch.cuda.empty_cache()
    finally:
        daemon.stop(d, daemon_state)
        shutil.rmtree(state, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in secs.items()}
    print(f"# 1 GiB safetensors onto {torch.cuda.get_device_name(0)}, median of {args.rounds} rounds")
    for name in ways:
        print(f"{name:9} {med[name]:7.3f} s  {size / med[name] / 1e9:6.2f} GB/s  "
              f"vs local {med[name] / med['local']:.3f}x  vs download {med[name] / med['download']:.3f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": secs, "median": med, "bytes": size,
                       "device": torch.cuda.get_device_name(0), "torch": torch.__version__}, f, indent=1)



def fetch(url, out):
    if shutil.which("curl"):
        subprocess.run(["curl", "-sf", "-o", out, url], check=True)
        return
    with urllib.request.urlopen(url) as r, open(out, "wb") as f:
        shutil.copyfileobj(r, f, 1 << 20)


def check(name, got, want, torch):
    """Every tensor on the expected device, equal bit for bit."""
    assert sorted(got) == sorted(want), f"{name}: other tensor names"
    for k, v in want.items():
        t = got[k]
        assert t.dtype == v.dtype and t.shape == v.shape, f"{name}: {k}"
        if name == "zt-cpu":
            t = t.to("cuda:0")
        assert t.device == v.device, f"{name}: {k} on {t.device}"
        assert torch.equal(t.view(torch.uint8), v.view(torch.uint8)), f"{name}: {k} differs"


main()
