"""A PyTorch DataLoader whose forked workers read tensors through a handle
the parent opened (docs/python.md, "Processes"), the parent already using
CUDA: each worker's first read opens the source again in that worker; the
parent moves every tensor onto cuda:0 and compares it with the original.
The peer is the same DataLoader over safetensors' own safe_open of the
local file (workers reading the parent's mapping). A 1 GiB, 64-tensor
model (f16 [4096, 2048]); medians of ROUNDS epochs, each over fresh
workers.

Needs a CUDA GPU, torch, safetensors and the package (`pip install ./python`):
`ZT_DAEMON_BIN=target/release/ztserve python3 benches/torch_dataloader_fork.py [ROUNDS] [WORKERS]`.
Not part of `.ci/run` (CI has no GPU)."""
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch.utils.data import DataLoader, Dataset

import ztserve

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
import daemon  # noqa: E402

TENSORS, ROWS, COLS = 64, 4096, 2048
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
workers = int(sys.argv[2]) if len(sys.argv) > 2 else 8
# BENCH_CLONE=1: each worker hands over a copy of the tensor it read.
clone = os.environ.get("BENCH_CLONE") == "1"
root = tempfile.mkdtemp()
g = torch.Generator().manual_seed(0)
want = {f"layers.{i}.w": torch.randn(ROWS, COLS, generator=g).to(torch.float16) for i in range(TENSORS)}
path = os.path.join(root, "m.safetensors")
save_file(want, path)
size = os.path.getsize(path)
names = sorted(want)
on_gpu = {k: v.to("cuda:0") for k, v in want.items()}
torch.cuda.synchronize()
print(f"model {size} bytes, {TENSORS} tensors; torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
      f"{os.cpu_count()} cores, {workers} workers forked from a process using CUDA"
      + (", each tensor copied in the worker" if clone else ""), flush=True)

port = 7072
d, state = daemon.start(root, port, warm="m.safetensors")

class Tensors(Dataset):
    """One tensor per item, read through `handle` (opened in the parent)."""

    def __init__(self, handle):
        self.handle = handle

    def __len__(self):
        return len(names)

    def __getitem__(self, i):
        t = self.handle.get_tensor(names[i])
        return names[i], t.clone() if clone else t


def epoch(handle):
    """Every tensor through forked workers, onto cuda:0, compared there."""
    loader = DataLoader(Tensors(handle), batch_size=None, num_workers=workers,
                        multiprocessing_context="fork", pin_memory=False)
    seen = 0
    for name, t in loader:
        assert torch.equal(t.to("cuda:0", non_blocking=True), on_gpu[name]), name
        seen += 1
    torch.cuda.synchronize()
    assert seen == len(names), seen


handles = {
    "safetensors.safe_open(local) (peer)": lambda: safe_open(path, framework="pt"),
    "ztserve.safe_open(http)": lambda: ztserve.safe_open(f"http://127.0.0.1:{port}/m.safetensors",
                                                          framework="pt", cache=False),
    "ztserve.safe_open(quic)": lambda: ztserve.safe_open(f"quic://127.0.0.1:{port}/m.safetensors",
                                                          framework="pt", cache=False, insecure=True),
}
try:
    times = {}
    for label, open_it in handles.items():
        h = open_it()
        # The parent reads through the handle first, as a training script
        # does before it starts its loader.
        h.get_tensor(names[0])
        ts = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            epoch(h)
            ts.append(time.perf_counter() - t0)
        times[label] = statistics.median(ts)
        print(f"{label:40s} {times[label]:7.3f} s  {size / times[label] / 1e9:6.2f} GB/s  (rounds: "
              + ", ".join(f"{t:.3f}" for t in ts) + ")", flush=True)
    peer = times[next(iter(handles))]
    for label, t in list(times.items())[1:]:
        print(f"  {label}: {t / peer:.3f}x the peer's time", flush=True)
finally:
    daemon.stop(d, state)
    shutil.rmtree(root, ignore_errors=True)
