"""Files whose names need percent-encoding in a URL (issue 26, item 3),
opened and fetched by the Python package over ztp/1 and HTTP: spaces,
`+`, `=`, `%`, non-ASCII and nested directories, each URL spelled as a
user types it and fully percent-encoded, from a local root and from an
object-storage root (moto's S3 server, keys uploaded as they are).
ztp/1's `get.path` is the decoded name; the package goes through
zt-client, which used to send the URL's still-encoded path
(`not_found: no file "sub%20dir/m.zt"`)."""
import contextlib
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest
import safetensors.numpy

import ztserve
from conftest import daemon, free_port

NAMES = [
    "with space.safetensors",
    "plus+sign.safetensors",
    "eq=sign.safetensors",
    "per%cent.safetensors",
    "café.safetensors",
    "sub dir/nested/ü é+=%.safetensors",
    "zt dir/café+=% x.zt",
]


def tensors():
    rng = np.random.default_rng(3)
    return {
        "layers.0.weight": rng.standard_normal((8, 4)).astype(np.float32),
        "layers.1.weight": rng.standard_normal((8, 4)).astype(np.float32),
    }


@contextlib.contextmanager
def moto_root(root, base):
    """moto's S3 server holding every file under `root` as a key under
    `prod/` of bucket `models`, keys as they are; yields the daemon's
    `--root` URL, with the store's variables set for the daemon."""
    port = free_port()
    server = os.path.join(os.path.dirname(sys.executable), "moto_server")
    log = open(base / "moto.log", "wb")
    proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ACCESS_KEY_ID": "zt-test-key",
        "AWS_SECRET_ACCESS_KEY": "zt-test-secret",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT": endpoint,
        "AWS_ALLOW_HTTP": "true",
    }
    saved = {k: os.environ.get(k) for k in env}
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(urllib.request.Request(f"{endpoint}/models", method="PUT"), timeout=1)
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, (base / "moto.log").read_text()
                time.sleep(0.1)
        import boto3  # installed with moto

        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
        for path in root.rglob("*"):
            if path.is_file():
                s3.put_object(Bucket="models", Key=f"prod/{path.relative_to(root).as_posix()}", Body=path.read_bytes())
        os.environ.update(env)
        yield "s3://models/prod"
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module", params=["local", "s3"])
def served(request, tmp_path_factory, zt):
    """Every name of NAMES under a root, served; (port, tensors)."""
    base = tmp_path_factory.mktemp("names")
    root = base / "root"
    original = tensors()
    for name in NAMES:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".zt"):
            plain = base / "plain.safetensors"
            safetensors.numpy.save_file(original, str(plain))
            zt("pack", plain, "-o", path, "--digest", "sha256")
        else:
            safetensors.numpy.save_file(original, str(path))
    with contextlib.ExitStack() as stack:
        served_root = root
        if request.param == "s3":
            served_root = stack.enter_context(moto_root(root, base))
        port = stack.enter_context(daemon(served_root, base))
        yield port, original


def spellings(name):
    """As typed (only `%` escaped) and fully percent-encoded (`+` as
    `%2B`, `=` as `%3D`, `/` kept)."""
    return [name.replace("%", "%25"), urllib.parse.quote(name, safe="/")]


@pytest.mark.parametrize("scheme", ["quic", "http"])
@pytest.mark.parametrize("name", NAMES)
def test_names_that_need_percent_encoding(served, tmp_path, scheme, name):
    port, original = served
    for i, path in enumerate(spellings(name)):
        url = f"{scheme}://127.0.0.1:{port}/{path}"
        got = ztserve.load(url, insecure=True)
        assert sorted(got) == sorted(original), url
        for k, v in original.items():
            assert np.array_equal(got[k], v), (url, k)
        out = tmp_path / f"{i}.zt"
        w = ztserve.fetch(url, out, insecure=True)
        assert w["objects"] == len(original), url
        again = ztserve.load(out)
        for k, v in original.items():
            assert np.array_equal(again[k], v), (url, k)


def test_a_path_that_decodes_to_no_name_is_refused_by_name(served):
    port, _ = served
    for path, why in [("caf%E9.zt", "not UTF-8"), ("a%00b.zt", "NUL")]:
        with pytest.raises(ztserve.Error, match=why):
            ztserve.load(f"quic://127.0.0.1:{port}/{path}", insecure=True)
