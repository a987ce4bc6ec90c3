"""Every manifest the daemon and `zt info --json` render validates against
the JSON Schema the daemon serves, checked by an independent validator
(the `jsonschema` package, draft 2020-12)."""
import copy
import json
import pathlib
import shutil
import urllib.request

import jsonschema
import numpy as np
import pytest
import safetensors.numpy
import ztensor

from conftest import daemon
from test_ztensor_interop import reference_objects

REPO = pathlib.Path(__file__).resolve().parents[2]
SCHEMA_FILE = REPO / "crates/zt-format/schema/manifest.schema.json"


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r), r.headers


@pytest.fixture(scope="module")
def served(tmp_path_factory, zt):
    """A root of varied files: the sample model, every format and dtype
    ztensor writes, zstd with crc32c digests, no digests at all (the
    daemon computes them), and a safetensors file."""
    base = tmp_path_factory.mktemp("schema")
    root = base / "root"
    root.mkdir()
    sample = REPO / "models/sample.zt"
    shutil.copy(sample, root / "sample.zt")
    with ztensor.Writer(str(root / "reference.zt")) as w:
        for name, (t, _) in reference_objects().items():
            w.write(name, t, checksum="sha256")
    zt("pack", sample, "-o", root / "zstd.zt", "--compress", "zstd", "--digest", "crc32c")
    zt("pack", sample, "-o", root / "plain.zt", "--digest", "none")
    tensors = {"model.layers.0.w": np.arange(6, dtype=np.float32).reshape(2, 3), "ids": np.arange(3)}
    safetensors.numpy.save_file(tensors, str(root / "model.safetensors"), metadata={"k": "v"})
    with daemon(root, base) as port:
        yield port, root


def validator(schema):
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_daemon_serves_the_schema_in_the_repository(served):
    port, _ = served
    schema, headers = get_json(f"http://127.0.0.1:{port}/v1/schema/manifest.json")
    assert headers["Content-Type"] == "application/schema+json"
    assert schema == json.loads(SCHEMA_FILE.read_text())
    validator(schema)


def test_every_manifest_rendering_validates(served, zt):
    port, root = served
    v = validator(json.loads(SCHEMA_FILE.read_text()))
    listing, _ = get_json(f"http://127.0.0.1:{port}/v1/files")
    # Files whose digests are still being computed are listed apart.
    paths = [f["path"] for f in listing["files"]]
    assert sorted(paths) == ["model.safetensors", "plain.zt", "reference.zt", "sample.zt", "zstd.zt"]
    checked = 0
    for path in paths:
        for query in ["", "?select=model.layers.0.*"]:
            doc, _ = get_json(f"http://127.0.0.1:{port}/v1/files/{path}/manifest{query}")
            v.validate(doc)
            checked += 1
        doc = json.loads(zt("info", "--json", root / path).stdout)
        v.validate(doc)
        checked += 1
    assert checked == 15
    # What the renderings hold is what the schema describes, not less.
    doc, _ = get_json(f"http://127.0.0.1:{port}/v1/files/zstd.zt/manifest")
    encodings = {c["encoding"] for o in doc["objects"].values() for c in o["components"].values()}
    assert "zstd" in encodings


def test_the_schema_refuses_what_the_rendering_never_writes(served):
    """The check can fail: altered documents are refused."""
    port, _ = served
    v = validator(json.loads(SCHEMA_FILE.read_text()))
    doc, _ = get_json(f"http://127.0.0.1:{port}/v1/files/sample.zt/manifest")
    name = next(iter(doc["objects"]))
    breaks = [
        lambda d: d.pop("schema"),
        lambda d: d.update(origin="v2"),
        lambda d: d["objects"][name]["components"]["data"].update(dtype="float32"),
        lambda d: d["objects"][name]["components"]["data"].update(offset=-1),
        lambda d: d["objects"][name]["components"]["data"].update(encoding="gzip"),
        lambda d: d["objects"][name].update(shape=[2, "3"]),
        lambda d: d["objects"][name].update(unexpected=True),
    ]
    for i, broken in enumerate(breaks):
        d = copy.deepcopy(doc)
        broken(d)
        assert not v.is_valid(d), f"alteration {i} passed"
