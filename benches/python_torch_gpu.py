"""The Python package's torch path on a GPU (framework="pt", device="cuda:0"):
a 768 MiB safetensors model loaded onto the GPU through ztserve (local file,
HTTP and ztp/1 from a ztserve on loopback) against safetensors' own
load_file(device="cuda:0"); every tensor compared with the original.

Needs a CUDA GPU, torch, safetensors and the package (`pip install ./python`):
`ZT_DAEMON_BIN=target/release/ztserve python3 benches/python_torch_gpu.py`.
Not part of `.ci/run` (CI has no GPU)."""
import os, subprocess, sys, time, statistics, json
# Every load from the daemon or the file, none from the component cache
# (benches/torch_gpu_cache.py times the cache).
os.environ["ZTSERVE_CACHE"] = "off"
import torch
from safetensors.torch import save_file, load_file
import ztserve

out = os.environ.get("OUT", "/tmp")
root = "/tmp/models"; os.makedirs(root, exist_ok=True)
g = torch.Generator().manual_seed(0)
want = {}
for i in range(32):
    want[f"layers.{i}.w"] = torch.randn(2048, 2048, generator=g)
    want[f"layers.{i}.b"] = torch.randn(2048, 2048, generator=g).to(torch.bfloat16)
path = f"{root}/m.safetensors"
save_file(want, path)
size = os.path.getsize(path)
print(f"model {size} bytes, {len(want)} tensors; torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)

d = subprocess.Popen([os.environ.get("ZT_DAEMON_BIN", "target/release/ztserve"), "--root", root, "--listen", "127.0.0.1:7070", "--state-dir", "/tmp/state", "--log-level", "warn"])
for _ in range(300):
    try:
        ztserve.load("http://127.0.0.1:7070/m.safetensors", select=["layers.0.w"])
        break
    except Exception:
        time.sleep(0.2)

def check(got, label):
    assert set(got) == set(want), label
    for k, v in want.items():
        t = got[k]
        assert t.device.type == "cuda", (label, k, t.device)
        assert t.dtype == v.dtype and tuple(t.shape) == tuple(v.shape), (label, k)
        assert torch.equal(t.cpu(), v), (label, k)

def timed(label, f, rounds=5):
    got = f(); torch.cuda.synchronize(); check(got, label); del got
    ts = []
    for _ in range(rounds):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        got = f(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
        del got; torch.cuda.empty_cache()
    m = statistics.median(ts)
    print(f"{label:55s} {m:7.3f} s  {size/m/1e9:6.2f} GB/s", flush=True)
    return m

r = {}
r["safetensors load_file(cuda:0), local"] = timed("safetensors.torch.load_file(device=cuda:0), local", lambda: load_file(path, device="cuda:0"))
r["ztserve local"] = timed("ztserve.load(path, framework=pt, device=cuda:0)", lambda: ztserve.load(path, framework="pt", device="cuda:0"))
r["ztserve http"] = timed("ztserve.load(http://, pt, cuda:0), sha256 checked", lambda: ztserve.load("http://127.0.0.1:7070/m.safetensors", framework="pt", device="cuda:0"))
r["ztserve quic"] = timed("ztserve.load(quic://, pt, cuda:0), sha256 checked", lambda: ztserve.load("quic://127.0.0.1:7070/m.safetensors", framework="pt", device="cuda:0", insecure=True))
with ztserve.safe_open("http://127.0.0.1:7070/m.safetensors", framework="pt", device="cuda:0") as f:
    t = f.get_tensor("layers.5.w"); assert t.is_cuda and torch.equal(t.cpu(), want["layers.5.w"])
    s = f.get_slice("layers.5.w")[100:200]; assert s.is_cuda and torch.equal(s.cpu(), want["layers.5.w"][100:200])
print("safe_open get_tensor and get_slice on cuda:0: equal", flush=True)
base = r["safetensors load_file(cuda:0), local"]
for k, v in r.items():
    print(f"{k:40s} {base / v:6.3f}x safetensors local load_file", flush=True)
json.dump({"size": size, "median_s": r}, open(f"{out}/torch_path.json", "w"), indent=1)
d.terminate()
