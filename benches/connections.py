"""QUIC connections per fetch against the cores the machine has, in one run
(docs/benchmarks.md, "Connections per fetch"); prints medians and each
one's speed against `zt fetch http://` of the same core set.

For each core set (the daemon and the client pinned to the first N cores
with taskset, a fresh daemon each), rounds by turns of `zt fetch` of the
1 GiB bench model (benches/support/one_gib_safetensors.py) to a file:
HTTP with its default, ztp/1 with its default (one connection per two
cores, 2 to 8) and with each `--connections` listed. Not part of .ci/run.

    python3 benches/connections.py --daemon target/release/ztserve --zt target/release/zt \\
        [--cores 2,4,8,16] [--connections 2,4,8] [--rounds 3]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "support"))
import daemon  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--zt", required=True)
    cpus = sorted(os.sched_getaffinity(0))
    ap.add_argument("--cores", default=str(len(cpus)))
    ap.add_argument("--connections", default="2,4,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data", default=os.path.join(HERE, "..", "target", "bench-data", "connections"))
    ap.add_argument("--port", type=int, default=17098)
    args = ap.parse_args()
    os.environ["ZTSERVE_CACHE"] = "off"  # every fetch from the daemon
    root, model = daemon.bench_model(args.data)
    out = os.path.join(args.data, "fetched.zt")
    ways = [("http", None), ("quic", None)] + [("quic", int(c)) for c in args.connections.split(",")]
    for cores in (int(c) for c in args.cores.split(",")):
        if cores > len(cpus):
            print(f"# {cores} cores: this process may use {len(cpus)}; skipped")
            continue
        pin = ["taskset", "-c", ",".join(map(str, cpus[:cores]))]
        secs = {w: [] for w in ways}
        d, state = daemon.start(root, args.port, "one-gib.safetensors", args.daemon, pin)
        try:
            for _ in range(args.rounds):
                for how, n in ways:
                    more = ["--connections", str(n)] if n else []
                    url = f"{how}://127.0.0.1:{args.port}/one-gib.safetensors"
                    t0 = time.perf_counter()
                    subprocess.run([*pin, args.zt, "fetch", "--insecure", *more, url, "-o", out],
                                   check=True, stdout=subprocess.DEVNULL)
                    secs[(how, n)].append(time.perf_counter() - t0)
                    os.remove(out)
        finally:
            daemon.stop(d, state)
        http = statistics.median(secs[("http", None)])
        print(f"# {cores} cores: zt fetch of the 1 GiB model, median of {args.rounds} rounds")
        for (how, n), v in secs.items():
            label = f"{how} {'default' if n is None else f'--connections {n}'}"
            med = statistics.median(v)
            print(f"{label:26} {med:7.3f} s   speed vs http {http / med:.3f}x   ({' '.join(f'{x:.3f}' for x in v)})")



main()
