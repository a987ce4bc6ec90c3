"""A real model: all-MiniLM-L6-v2's safetensors (the `real_model` fixture
in conftest.py), packed with `zt pack` and compared tensor by tensor."""
import numpy as np
import pytest
import safetensors.numpy
import ztensor


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
