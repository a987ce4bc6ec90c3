"""Writes the 1 GiB bench model as safetensors, if missing: 32 layers of
one 32 MiB f16 tensor of random bytes (`model.layers.{i}.w`). Shared by
benches/sources.sh and benches/python.sh."""
import json
import os
import struct
import sys

path = sys.argv[1]
if not os.path.exists(path):
    n, size = 32, 32 << 20
    header = {
        f"model.layers.{i}.w": {"dtype": "F16", "shape": [size // 2], "data_offsets": [i * size, (i + 1) * size]}
        for i in range(n)
    }
    h = json.dumps(header).encode()
    with open(path + ".part", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _ in range(n):
            f.write(os.urandom(size))
    os.rename(path + ".part", path)
