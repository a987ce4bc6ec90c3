"""Issue 31's goals, measured in one run (docs/benchmarks.md, "Shards and
the cache"): a 1 GiB, 32-layer safetensors model of 2-D tensors (one f16
[4096, 4096] per layer) and a second version with layers 5 and 20
changed, served by ztserve on 127.0.0.1 (digests computed ahead); every
load in a fresh Python process; bytes on the wire are the daemon's own
count (`ztserve_bytes_sent_total`). Prints medians and ratios.

1. A TP=8 column shard of every tensor (rank 3: `load(url, shard=(3, 8),
   dims={"*": 1})`) against loading the whole model and slicing it.
2. Loading version 2 with version 1 in the cache, against the first load
   of version 1 (an empty cache).
   Also with `mmap=True` (in a second cache holding only version 1).
3. Loading version 1 again from the cache (with and without `mmap=True`)
   against loading it from the daemon with the cache off; and version 2
   again with `mmap=True`.

The daemon keeps the digest of every slice it gathered: the shard of the
first round is reported apart (digests computed) from the later rounds'
(digests kept).

Usage: .venv/bin/python benches/shard_cache.py [ROUNDS] [http|quic]
(needs the package installed: `pip install ./python`, and
`cargo build --release --bin ztserve`; benches/shard_cache.sh does both).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

LAYERS, ROWS, COLS, WORLD, RANK = 32, 4096, 4096, 8, 3


def write_model(path, changed=()):
    """The model, or a version of it whose `changed` layers hold other bytes."""
    if os.path.exists(path):
        return
    import safetensors.numpy

    tensors = {}
    for i in range(LAYERS):
        rng = np.random.default_rng(1000 * i + (7 if i in changed else 0))
        tensors[f"model.layers.{i}.w"] = rng.integers(0, 1 << 16, (ROWS, COLS), dtype=np.uint16).view(np.float16)
    safetensors.numpy.save_file(tensors, path + ".part")
    os.rename(path + ".part", path)


def one(how, url, cache_dir):
    """One timed load in this process; prints JSON {secs, checksum}."""
    import ztserve

    opts = {"insecure": True} if url.startswith("quic") else {}
    t0 = time.perf_counter()
    if how == "whole-and-slice":
        got = ztserve.load(url, cache=False, **opts)
        cols = COLS // WORLD
        got = {k: np.ascontiguousarray(v[:, RANK * cols:(RANK + 1) * cols]) for k, v in got.items()}
    elif how == "shard":
        got = ztserve.load(url, cache=False, shard=(RANK, WORLD), dims={"*": 1}, **opts)
    elif how == "nocache":
        got = ztserve.load(url, cache=False, **opts)
    elif how == "cache":
        got = ztserve.load(url, cache_dir=cache_dir, **opts)
    elif how == "mmap":
        got = ztserve.load(url, cache_dir=cache_dir, mmap=True, **opts)
    else:
        raise SystemExit(f"unknown {how}")
    secs = time.perf_counter() - t0
    checksum = sum(int(v.view(np.uint8)[:: 1 << 12].sum()) for v in got.values())
    print(json.dumps({"secs": secs, "checksum": checksum, "n": len(got)}))


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    transport = sys.argv[2] if len(sys.argv) > 2 else "http"
    data = os.path.abspath("target/bench-data/shard-cache")
    root = os.path.join(data, "root")
    os.makedirs(root, exist_ok=True)
    write_model(os.path.join(root, "v1.safetensors"))
    write_model(os.path.join(root, "v2.safetensors"), changed=(5, 20))
    size = os.path.getsize(os.path.join(root, "v1.safetensors"))
    state = tempfile.mkdtemp()
    with open(os.path.join(state, "c.toml"), "w") as f:
        f.write('root = "/unused"\n[digests]\nrate_mib_s = 0\n')
    port = 17095
    daemon = subprocess.Popen([
        os.environ.get("ZT_DAEMON_BIN", "target/release/ztserve"), "--config", os.path.join(state, "c.toml"),
        "--root", root, "--listen", f"127.0.0.1:{port}", "--state-dir", state, "--log-level", "warn",
    ])
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/readyz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        for v in ("v1", "v2"):  # digests computed before any timing
            urllib.request.urlopen(f"{base}/v1/files/{v}.safetensors/manifest", timeout=600).read()

        def sent():
            text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
            return next(float(l.split()[1]) for l in text.splitlines() if l.startswith("ztserve_bytes_sent_total "))

        scheme = "quic" if transport == "quic" else "http"
        url = {v: f"{scheme}://127.0.0.1:{port}/{v}.safetensors" for v in ("v1", "v2")}

        def run(how, v, cache_dir=""):
            # The page cache's writeback of what the last load stored (a
            # GiB costs this VM seconds of kernel time) is not the next
            # load's to pay: each starts with nothing dirty.
            os.sync()
            before = sent()
            out = subprocess.run([sys.executable, __file__, "--one", how, url[v], cache_dir],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"{how} {v}: {out.stderr}")
            j = json.loads(out.stdout)
            return j["secs"], sent() - before, j

        keys = ["whole-and-slice", "shard-first", "shard", "first", "v2", "v2-mmap", "v2-again", "nocache", "cache",
                "mmap"]
        rows = {k: [] for k in keys}
        moved = {}

        def timed(key, how, v, cache_dir=""):
            s, b, _ = run(how, v, cache_dir)
            rows[key].append(s)
            moved[key] = b

        for r in range(rounds):
            timed("whole-and-slice", "whole-and-slice", "v1")
            # The daemon keeps each slice's digest: the first round's
            # shard has them computed, later rounds' find them kept.
            timed("shard-first" if r == 0 else "shard", "shard", "v1")
            cache = tempfile.mkdtemp(dir=data)
            timed("first", "cache", "v1", cache)
            timed("v2", "cache", "v2", cache)
            timed("v2-again", "mmap", "v2", cache)
            for how in ["nocache", "cache", "mmap"]:
                timed(how, how, "v1", cache)
            shutil.rmtree(cache)
            # v2 with mmap=True, v1 (only) in the cache.
            cache = tempfile.mkdtemp(dir=data)
            timed("first", "cache", "v1", cache)
            timed("v2-mmap", "mmap", "v2", cache)
            shutil.rmtree(cache)
        if rounds == 1:
            rows["shard"], moved["shard"] = rows["shard-first"], moved["shard-first"]
        med = {k: statistics.median(v) for k, v in rows.items()}
        print(f"# {transport}: {size} bytes, {LAYERS} layers of f16 [{ROWS}, {COLS}]; medians of {rounds} rounds, "
              "each load in a fresh process; bytes are the daemon's count")
        def line(label, k):
            print(f"{label:58s} {med[k]:7.3f} s  {moved[k] / 1e6:9.1f} MB on the wire")
        line("whole model, then every tensor's column block (peer)", "whole-and-slice")
        line(f"TP={WORLD} column shard, rank {RANK}, first request (digests computed)", "shard-first")
        line(f"TP={WORLD} column shard, rank {RANK}, again (slice digests kept)", "shard")
        print(f"  shard bytes / (1/{WORLD} of the model) = {moved['shard'] / (size / WORLD):.4f}   "
              f"time ratio shard / whole-and-slice = {med['shard-first'] / med['whole-and-slice']:.3f}x first, "
              f"{med['shard'] / med['whole-and-slice']:.3f}x again (goal <= 0.2x)")
        line("first load of v1, empty cache (peer)", "first")
        line("v2 (layers 5, 20 changed), v1 in the cache", "v2")
        line("v2, mmap=True, v1 in the cache", "v2-mmap")
        line("v2 again, mmap=True (all of it cached now)", "v2-again")
        print(f"  v2 bytes / (2/32 of the model) = {moved['v2'] / (size * 2 / LAYERS):.4f}   "
              f"time ratio v2 / first = {med['v2'] / med['first']:.3f}x, with mmap "
              f"{med['v2-mmap'] / med['first']:.3f}x (goal <= 0.2x)")
        line("v1 from the daemon, cache off (peer)", "nocache")
        line("v1 again from the cache", "cache")
        line("v1 again from the cache, mmap=True", "mmap")
        print(f"  speed-up from the cache = {med['nocache'] / med['cache']:.2f}x, with mmap "
              f"{med['nocache'] / med['mmap']:.2f}x (goal >= 2x)")
    finally:
        daemon.terminate()
        daemon.wait(10)
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        one(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) > 1 and sys.argv[1] == "--write":
        write_model(sys.argv[2])  # benches/fetch_cache.sh
    else:
        main()
