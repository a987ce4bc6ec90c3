"""safetensors files served as they are, checked against the independent
`safetensors` package: files it writes (every dtype it has) and the real
all-MiniLM-L6-v2 model. Every tensor fetched over ztp/1 and HTTP with
`zt fetch` (verified against the digests the daemon computed) holds the
bytes the package reads from the original file."""
import json
import pathlib
import shutil
import urllib.request

import jsonschema
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

from conftest import daemon

REPO = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "crates/zt-format/schema/manifest.schema.json").read_text())

# Every dtype safetensors.numpy writes, bf16 and fp8 through ml_dtypes.
DTYPES = [
    np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8,
    np.uint64, np.uint32, np.uint16, np.uint8, np.bool_,
    ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
]


def zoo():
    rng = np.random.default_rng(7)
    out = {}
    for i, dt in enumerate(DTYPES):
        name = f"model.layers.{i}.{np.dtype(dt).name}"
        if np.dtype(dt) == np.bool_:
            out[name] = rng.integers(0, 2, size=(3, 5)).astype(np.bool_)
        else:
            out[name] = (rng.standard_normal((3, 5)) * 4).astype(dt)
    return out


def get_json(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.load(r)


@pytest.fixture(scope="module")
def served(tmp_path_factory, real_model):
    base = tmp_path_factory.mktemp("sources")
    root = base / "root"
    root.mkdir()
    tensors = zoo()
    safetensors.numpy.save_file(tensors, str(root / "zoo.safetensors"), metadata={"source": "test"})
    shutil.copy(real_model, root / "minilm.safetensors")
    with daemon(root, base) as port:
        yield port, root, tensors


def fetch_all(zt, port, name, out_dir):
    """The file fetched over ztp/1 and over HTTP; the paths written."""
    outs = []
    for i, url in enumerate([f"quic://127.0.0.1:{port}/{name}", f"http://127.0.0.1:{port}/{name}"]):
        out = out_dir / f"{i}.zt"
        zt("fetch", url, "-o", out, "--insecure", "--require-digest")
        outs.append(out)
    return outs


def test_every_safetensors_dtype_is_served_and_fetched_byte_for_byte(served, zt, tmp_path):
    port, root, tensors = served
    m = get_json(f"http://127.0.0.1:{port}/v1/files/zoo.safetensors/manifest")
    jsonschema.Draft202012Validator(SCHEMA).validate(m)
    assert m["source"] == "safetensors"
    assert m["attributes"] == {"source": "test"}
    reread = safetensors.numpy.load_file(str(root / "zoo.safetensors"))
    assert sorted(m["objects"]) == sorted(reread)
    for name, arr in reread.items():
        o = m["objects"][name]
        assert o["shape"] == list(arr.shape), name
        c = o["components"]["data"]
        assert c["digest_by"] == "server" and c["digest"].startswith("sha256:"), name
    for out in fetch_all(zt, port, "zoo.safetensors", tmp_path):
        for name, arr in reread.items():
            got = zt("cat", out, name, "--stored").stdout
            assert got == arr.tobytes(), f"{out}: {name}"


def test_the_real_model_is_served_as_is(served, zt, tmp_path):
    port, root, _ = served
    m = get_json(f"http://127.0.0.1:{port}/v1/files/minilm.safetensors/manifest")
    jsonschema.Draft202012Validator(SCHEMA).validate(m)
    original = safetensors.numpy.load_file(str(root / "minilm.safetensors"))
    assert sorted(m["objects"]) == sorted(original) and len(original) > 100
    import ztensor
    for out in fetch_all(zt, port, "minilm.safetensors", tmp_path):
        r = ztensor.Reader(str(out))
        for name, arr in original.items():
            back = r.read_numpy(name)
            assert back.dtype == arr.dtype and back.shape == arr.shape, name
            assert np.array_equal(back, arr), name
