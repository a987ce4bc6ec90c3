"""Files whose names need percent-encoding in a URL (issue 26, item 3),
opened and fetched by the Python package over ztp/1 and HTTP: spaces,
`+`, `=`, `%`, non-ASCII and nested directories, each URL spelled as a
user types it and fully percent-encoded. ztp/1's `get.path` is the
decoded name; the package goes through zt-client, which used to send the
URL's still-encoded path (`not_found: no file "sub%20dir/m.zt"`)."""
import urllib.parse

import numpy as np
import pytest
import safetensors.numpy

import ztserve
from conftest import daemon

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


@pytest.fixture(scope="module")
def served(tmp_path_factory, zt):
    """Every name of NAMES under a local root, served; (port, tensors)."""
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
    with daemon(root, base) as port:
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
