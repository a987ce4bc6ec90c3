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
import numpy as np
import pytest
import safetensors.numpy

from conftest import daemon, fetch_both, write_shards

REPO = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "crates/zt-format/schema/manifest.schema.json").read_text())

# Every dtype the safetensors package writes (its TensorSpec names), with
# bits per element; F4 packs two elements per byte.
DTYPES = {
    "bool": 8, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32,
    "uint32": 32, "int64": 64, "uint64": 64, "float16": 16, "float32": 32,
    "float64": 64, "bfloat16": 16, "float8_e4m3fn": 8, "float8_e4m3fnuz": 8,
    "float8_e5m2": 8, "float8_e5m2fnuz": 8, "float8_e8m0fnu": 8,
    "float4_e2m1fn_x2": 8, "complex64": 64,
}
# The ones we have no dtype for: listed as opaque objects, served as stored.
OPAQUE = {"F8_E8M0", "F4"}


def write_zoo(path):
    """One tensor of each dtype, written by the safetensors package itself."""
    rng = np.random.default_rng(7)
    keep, specs = [], {}
    for i, (name, bits) in enumerate(DTYPES.items()):
        n = 3 * 5 * bits // 8
        data = rng.integers(0, 2, n) if name == "bool" else rng.integers(0, 256, n)
        buf = np.ascontiguousarray(data.astype(np.uint8))
        keep.append(buf)
        specs[f"model.layers.{i}.{name}"] = safetensors.TensorSpec(
            dtype=name, shape=[3, 5], data_ptr=buf.ctypes.data, data_len=n)
    safetensors.serialize_file(specs, str(path), {"source": "test"})


def get_json(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.load(r)


@pytest.fixture(scope="module")
def served(tmp_path_factory, real_model):
    base = tmp_path_factory.mktemp("sources")
    root = base / "root"
    root.mkdir()
    write_zoo(root / "zoo.safetensors")
    shutil.copy(real_model, root / "minilm.safetensors")
    with daemon(root, base) as port:
        yield port, root


def test_every_safetensors_dtype_is_served_and_fetched_byte_for_byte(served, zt, tmp_path):
    port, root = served
    m = get_json(f"http://127.0.0.1:{port}/v1/files/zoo.safetensors/manifest")
    jsonschema.Draft202012Validator(SCHEMA).validate(m)
    assert m["source"] == "safetensors"
    assert m["attributes"] == {"source": "test"}
    # What the package itself reads from the file: name, dtype, shape, bytes.
    reread = dict(safetensors.deserialize((root / "zoo.safetensors").read_bytes()))
    assert len(reread) == len(DTYPES) and sorted(m["objects"]) == sorted(reread)
    for name, t in reread.items():
        o = m["objects"][name]
        assert o["shape"] == t["shape"], name
        if t["dtype"] in OPAQUE:
            assert o["format"] == "opaque" and o["attributes"]["source_type"] == t["dtype"], name
        else:
            assert o["format"] == "dense", name
        c = o["components"]["data"]
        assert c["length"] == len(t["data"]), name
        assert c["digest_by"] == "server" and c["digest"].startswith("sha256:"), name
    for out in fetch_both(zt, port, "zoo.safetensors", tmp_path):
        for name, t in reread.items():
            got = zt("cat", out, name, "--stored").stdout
            assert got == bytes(t["data"]), f"{out}: {name}"


def test_the_real_model_is_served_as_is(served, zt, tmp_path):
    port, root = served
    m = get_json(f"http://127.0.0.1:{port}/v1/files/minilm.safetensors/manifest")
    jsonschema.Draft202012Validator(SCHEMA).validate(m)
    original = safetensors.numpy.load_file(str(root / "minilm.safetensors"))
    assert sorted(m["objects"]) == sorted(original) and len(original) > 100
    import ztensor
    for out in fetch_both(zt, port, "minilm.safetensors", tmp_path):
        r = ztensor.Reader(str(out))
        for name, arr in original.items():
            back = r.read_numpy(name)
            assert back.dtype == arr.dtype and back.shape == arr.shape, name
            assert np.array_equal(back, arr), name


def test_a_byte_identical_copy_of_the_real_model(served, zt, tmp_path):
    """`zt fetch URL -o OUT.safetensors` writes the served file itself:
    the same sha256 as the original, and the safetensors package reads it."""
    import hashlib
    port, root = served
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()
    for i, url in enumerate([f"http://127.0.0.1:{port}/minilm.safetensors", f"quic://127.0.0.1:{port}/minilm.safetensors"]):
        out = tmp_path / f"copy{i}.safetensors"
        zt("fetch", url, "-o", out, "--insecure")
        assert digest(out) == digest(root / "minilm.safetensors"), url
        assert sorted(safetensors.numpy.load_file(str(out))) == sorted(safetensors.numpy.load_file(str(root / "minilm.safetensors")))


def test_a_sharded_checkpoint_whole_and_by_selection(tmp_path, zt, real_model):
    """The real model split into three shards by the safetensors package,
    with a Hugging Face style index: one model at the index's path,
    fetched whole and by selection over both transports."""
    base = tmp_path / "srv"
    root = base / "root" / "minilm"
    root.mkdir(parents=True)
    original = safetensors.numpy.load_file(real_model)
    names = sorted(original)
    write_shards(original, root, 3)
    import ztensor
    with daemon(base / "root", base) as port:
        m = get_json(f"http://127.0.0.1:{port}/v1/files/minilm/model.safetensors.index.json/manifest")
        jsonschema.Draft202012Validator(SCHEMA).validate(m)
        assert m["source"] == "safetensors-index" and len(m["files"]) == 3
        for out in fetch_both(zt, port, "minilm/model.safetensors.index.json", tmp_path):
            r = ztensor.Reader(str(out))
            assert sorted(r.keys()) == names
            for n in names:
                assert np.array_equal(r.read_numpy(n), original[n]), n
        for i, url in enumerate([f"quic://127.0.0.1:{port}/minilm/model.safetensors.index.json",
                                 f"http://127.0.0.1:{port}/minilm/model.safetensors.index.json"]):
            out = tmp_path / f"sel{i}.zt"
            zt("fetch", url, "-o", out, "--insecure", "--select", "*.layer.0.*")
            r = ztensor.Reader(str(out))
            want = [n for n in names if ".layer.0." in n]
            assert sorted(r.keys()) == want and want
            for n in want:
                assert np.array_equal(r.read_numpy(n), original[n]), n


def crc32c(data):
    """CRC-32C (Castagnoli), written out here: no code of ours computes it."""
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def test_blake3_digests_load_and_fetch_into_files_ztensor_reads(tmp_path, zt):
    """A daemon computing BLAKE3 (`digests.algorithm = "blake3"`): every
    digest it sends names the algorithm; the Python package loads over
    both transports, verifying them; `zt fetch -o out.zt` writes crc32c
    digests (the format names no blake3) of the verified bytes, which
    `ztensor` 1.2.3 reads and a CRC-32C written out here agrees with."""
    import ztensor
    import ztserve
    root = tmp_path / "root"
    root.mkdir()
    rng = np.random.default_rng(3)
    original = {
        f"model.layers.{i}.w": rng.standard_normal((64, 48)).astype(dtype)
        for i, dtype in enumerate([np.float32, np.float16, np.int8, np.float64])
    }
    safetensors.numpy.save_file(original, str(root / "zoo.safetensors"))
    raw = (root / "zoo.safetensors").read_bytes()
    with daemon(root, tmp_path, env={"ZTSERVE_DIGESTS_ALGORITHM": "blake3"}) as port:
        m = get_json(f"http://127.0.0.1:{port}/v1/files/zoo.safetensors/manifest")
        jsonschema.Draft202012Validator(SCHEMA).validate(m)
        comps = {n: o["components"]["data"] for n, o in m["objects"].items()}
        for name, c in comps.items():
            assert c["digest_by"] == "server" and c["digest"].startswith("blake3:"), name
            assert len(c["digest"]) == len("blake3:") + 64, name
        for url in [f"http://127.0.0.1:{port}/zoo.safetensors", f"quic://127.0.0.1:{port}/zoo.safetensors"]:
            got = ztserve.load(url, insecure=True)
            assert sorted(got) == sorted(original), url
            for name, arr in original.items():
                assert got[name].dtype == arr.dtype and np.array_equal(got[name], arr), (url, name)
        for out in fetch_both(zt, port, "zoo.safetensors", tmp_path):
            zt("verify", "--require-digest", out)
            info = json.loads(zt("info", "--json", out).stdout)
            r = ztensor.Reader(str(out))
            for name, c in comps.items():
                mine = info["objects"][name]["components"]["data"]
                data = raw[c["offset"]:c["offset"] + c["length"]]
                assert mine["digest"] == f"crc32c:0x{crc32c(data):08X}", (out, name)
                assert mine["digest_by"] == "file", (out, name)
                assert np.array_equal(r.read_numpy(name), original[name]), (out, name)
