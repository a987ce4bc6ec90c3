"""Shards and the component cache on a GPU (framework="pt",
device="cuda:0"): a 1 GiB, 32-layer safetensors model of f16 [4096, 4096]
tensors served by ztserve on loopback, loaded onto the GPU
- whole, by safetensors' own load_file(device="cuda:0") from the local file (the peer);
- whole over HTTP with the cache off, then again from a warm cache, and
  from the cache with mmap=True;
- as a TP=8 column shard (rank 3) against the whole model loaded and sliced on the GPU.
Every tensor is compared with the original; medians of ROUNDS.

Needs a CUDA GPU, torch, safetensors and the package (`pip install ./python`):
`ZT_DAEMON_BIN=target/release/ztserve python3 benches/torch_gpu_cache.py [ROUNDS]`.
Not part of `.ci/run` (CI has no GPU)."""
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
from safetensors.torch import load_file, save_file

import ztserve

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
import daemon  # noqa: E402

LAYERS, ROWS, COLS, WORLD, RANK = 32, 4096, 4096, 8, 3
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
root = tempfile.mkdtemp()
g = torch.Generator().manual_seed(0)
want = {f"model.layers.{i}.w": torch.randn(ROWS, COLS, generator=g).to(torch.float16) for i in range(LAYERS)}
path = os.path.join(root, "m.safetensors")
save_file(want, path)
size = os.path.getsize(path)
print(f"model {size} bytes; torch {torch.__version__}, {torch.cuda.get_device_name(0)}, {os.cpu_count()} cores", flush=True)

d, state = daemon.start(root, 7071, warm="m.safetensors")
url = "http://127.0.0.1:7071/m.safetensors"
cache = tempfile.mkdtemp()
cols = COLS // WORLD


def check(got, expect, label):
    assert set(got) == set(expect), label
    for k, v in expect.items():
        t = got[k]
        assert t.device.type == "cuda", (label, k, t.device)
        assert t.dtype == v.dtype and tuple(t.shape) == tuple(v.shape), (label, k, t.shape)
        assert torch.equal(t.cpu(), v), (label, k)


sharded = {k: v[:, RANK * cols:(RANK + 1) * cols].contiguous() for k, v in want.items()}
loaders = {
    "safetensors.torch.load_file(local, cuda:0) (peer)": (lambda: load_file(path, device="cuda:0"), want),
    "ztserve.load(http, cuda:0), cache off": (
        lambda: ztserve.load(url, framework="pt", device="cuda:0", cache=False), want),
    "ztserve.load(http, cuda:0), from the cache": (
        lambda: ztserve.load(url, framework="pt", device="cuda:0", cache_dir=cache), want),
    "ztserve.load(http, cuda:0), from the cache, mmap=True": (
        lambda: ztserve.load(url, framework="pt", device="cuda:0", cache_dir=cache, mmap=True), want),
    "whole over http (cache off), sliced on the GPU (shard peer)": (
        lambda: {k: v[:, RANK * cols:(RANK + 1) * cols].contiguous()
                 for k, v in ztserve.load(url, framework="pt", device="cuda:0", cache=False).items()}, sharded),
    f"TP={WORLD} column shard rank {RANK}: load(shard=, dims=), cuda:0": (
        lambda: ztserve.load(url, framework="pt", device="cuda:0", cache=False, shard=(RANK, WORLD),
                             dims={"*": 1}), sharded),
}
try:
    times = {}
    for label, (f, expect) in loaders.items():
        got = f()
        torch.cuda.synchronize()
        check(got, expect, label)
        del got
        ts = []
        for _ in range(rounds):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            got = f()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
            del got
            torch.cuda.empty_cache()
        times[label] = statistics.median(ts)
        print(f"{label:62s} {times[label]:7.3f} s", flush=True)
    labels = list(loaders)
    peer = times[labels[0]]
    for label in labels[1:4]:
        print(f"  {label}: {peer / times[label]:.3f}x the peer's speed")
    print(f"  from the cache vs cache off: {times[labels[1]] / times[labels[2]]:.2f}x faster; "
          f"mmap: {times[labels[1]] / times[labels[3]]:.2f}x faster")
    print(f"  shard / (whole + slice on the GPU) = {times[labels[5]] / times[labels[4]]:.3f}x")
finally:
    daemon.stop(d, state)
    for p in (root, cache):
        shutil.rmtree(p, ignore_errors=True)
