"""Writes the Hub benchmark's repositories under ROOT, if missing (about
2 GiB of random bytes; docs/benchmarks.md):
  bench/sharded: 4 safetensors shards of 256 MiB (8 f16 tensors of
    32 MiB each), their index, a config and a tokenizer file;
  bench/single: one 1 GiB safetensors file (32 tensors of 32 MiB)."""
import json
import os
import struct
import sys

root = sys.argv[1]


def safetensors(path, names, size):
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    header = {n: {"dtype": "F16", "shape": [size // 2], "data_offsets": [i * size, (i + 1) * size]}
              for i, n in enumerate(names)}
    h = json.dumps(header).encode()
    with open(path + ".part", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _ in names:
            f.write(os.urandom(size))
    os.rename(path + ".part", path)


mib32 = 32 << 20
sharded = os.path.join(root, "bench", "sharded")
weight_map = {}
for k in range(4):
    shard = f"model-{k + 1:05}-of-00004.safetensors"
    names = [f"model.layers.{8 * k + i}.w" for i in range(8)]
    safetensors(os.path.join(sharded, shard), names, mib32)
    weight_map.update({n: shard for n in names})
with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": 32 * mib32}, "weight_map": weight_map}, f)
with open(os.path.join(sharded, "config.json"), "w") as f:
    json.dump({"model_type": "llama", "num_hidden_layers": 32}, f)
with open(os.path.join(sharded, "tokenizer.json"), "w") as f:
    json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": {f"t{i}": i for i in range(20000)}}}, f)
safetensors(os.path.join(root, "bench", "single", "model.safetensors"),
            [f"model.layers.{i}.w" for i in range(32)], mib32)
