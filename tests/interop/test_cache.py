"""The client's component cache through the Python package and `zt`,
against a real daemon: a second load moves only the manifest (the
daemon's own byte count), a new version of a 32-layer model only the two
layers that changed (a .zt with sha256 digests, and a safetensors file
with the daemon's), a corrupt entry is discarded and fetched again, two
processes loading at once share one copy, the size bound holds, and
`mmap=True` hands cached tensors over without a copy."""
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy

import ztserve
from conftest import daemon, metric

LAYERS = 32
SHAPE = (256, 256)  # 256 KiB of f32 per layer


def model(version_of):
    """`layers.{l}.w` for each layer; `version_of(l)` picks its bytes."""
    return {
        f"layers.{l}.w": np.random.default_rng(l * 1000 + version_of(l)).standard_normal(SHAPE, dtype=np.float32)
        for l in range(LAYERS)
    }


V1 = model(lambda l: 0)
V2 = model(lambda l: 1 if l in (5, 20) else 0)
LAYER_BYTES = V1["layers.0.w"].nbytes


@pytest.fixture(scope="module")
def versions(tmp_path_factory, zt):
    """v1 and v2 as safetensors files (the daemon computes sha256 digests)
    and as .zt files with sha256 digests of their own, served; the port
    and the folder served."""
    base = tmp_path_factory.mktemp("cache")
    root = base / "root"
    root.mkdir()
    for name, tensors in [("v1", V1), ("v2", V2)]:
        safetensors.numpy.save_file(tensors, str(root / f"{name}.safetensors"))
        zt("pack", root / f"{name}.safetensors", "-o", root / f"{name}.zt", "--digest", "sha256")
    with daemon(root, base) as port:
        yield port, root


def urls(port, name):
    return [f"quic://127.0.0.1:{port}/{name}", f"http://127.0.0.1:{port}/{name}"]


def sent(port):
    return metric(port, "ztserve_bytes_sent_total")


def same(got, want):
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert np.array_equal(got[k], v), k


def entries(cache):
    return [p for p in pathlib.Path(cache).glob("sha256/*/*") if p.is_file()]


@pytest.mark.parametrize("ext", ["safetensors", "zt"])
@pytest.mark.parametrize("transport", [0, 1], ids=["quic", "http"])
def test_a_second_load_moves_only_the_manifest_and_a_new_version_only_what_changed(
    versions, component_cache, ext, transport
):
    port, _ = versions
    v1, v2 = urls(port, f"v1.{ext}")[transport], urls(port, f"v2.{ext}")[transport]
    before = sent(port)
    same(ztserve.load(v1, insecure=True), V1)
    first = sent(port) - before
    assert first >= LAYERS * LAYER_BYTES, first
    assert len(entries(component_cache)) == LAYERS

    before = sent(port)
    same(ztserve.load(v1, insecure=True), V1)
    assert sent(port) - before < 64 << 10, "the second load moved tensor bytes"

    before = sent(port)
    same(ztserve.load(v2, insecure=True), V2)
    moved = sent(port) - before
    assert 2 * LAYER_BYTES <= moved < 2 * LAYER_BYTES + (64 << 10), moved
    assert len(entries(component_cache)) == LAYERS + 2


def test_a_corrupt_entry_is_discarded_and_fetched_again(versions, component_cache):
    port, _ = versions
    url = urls(port, "v1.zt")[1]
    ztserve.load(url)
    victim = entries(component_cache)[7]
    data = bytearray(victim.read_bytes())
    data[100] ^= 0x01
    victim.write_bytes(bytes(data))
    before = sent(port)
    same(ztserve.load(url), V1)
    assert LAYER_BYTES <= sent(port) - before < LAYER_BYTES + (64 << 10)
    # Stored again, whole: every entry passes `zt cache verify`.
    assert len(entries(component_cache)) == LAYERS
    # The same with mmap=True: the entry is refused by its seal, not mapped.
    victim = entries(component_cache)[3]
    data = bytearray(victim.read_bytes())
    data[5] ^= 0x01
    victim.write_bytes(bytes(data))
    same(ztserve.load(url, mmap=True), V1)


def test_two_processes_loading_at_once_share_one_copy(versions, component_cache):
    port, _ = versions
    url = urls(port, "v1.safetensors")[1]
    script = (
        "import sys, numpy as np, safetensors.numpy, ztserve\n"
        "got = ztserve.load(sys.argv[1])\n"
        "want = safetensors.numpy.load_file(sys.argv[2])\n"
        "assert all(np.array_equal(got[k], v) for k, v in want.items()) and len(got) == len(want)\n"
    )
    original = str(versions[1] / "v1.safetensors")
    procs = [
        subprocess.Popen([sys.executable, "-c", script, url, original], stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    assert len(entries(component_cache)) == LAYERS
    assert not any((component_cache / "tmp").iterdir()), "a writer left a temporary file"


def test_the_size_bound_holds(versions, component_cache):
    port, _ = versions
    same(ztserve.load(urls(port, "v1.zt")[1], cache_max=8 * LAYER_BYTES), V1)
    held = sum(p.stat().st_size for p in entries(component_cache))
    assert 0 < held <= 8 * LAYER_BYTES, held


def test_cache_false_and_cache_dir(versions, component_cache, tmp_path):
    port, _ = versions
    url = urls(port, "v1.zt")[1]
    ztserve.load(url, cache=False)
    assert not entries(component_cache)
    other = tmp_path / "elsewhere"
    ztserve.load(url, cache_dir=str(other))
    assert len(entries(other)) == LAYERS and not entries(component_cache)
    before = sent(port)
    ztserve.load(url, cache=False)
    assert sent(port) - before >= LAYERS * LAYER_BYTES
    with pytest.raises(ValueError, match="cache_max"):
        ztserve.load(url, cache_max="lots")


@pytest.mark.parametrize("transport", [0, 1], ids=["quic", "http"])
def test_mmap_hands_cached_tensors_over_without_a_copy(versions, component_cache, transport):
    port, _ = versions
    url = urls(port, "v1.zt")[transport]
    # Cold: fetched as always (arrays of their own), and stored.
    cold = ztserve.load(url, insecure=True, mmap=True)
    same(cold, V1)
    assert all(a.flags.writeable for a in cold.values())
    before = sent(port)
    warm = ztserve.load(url, insecure=True, mmap=True)
    assert sent(port) - before < 64 << 10
    same(warm, V1)
    for name, a in warm.items():
        # Read-only views of the cache's pages, page aligned.
        assert not a.flags.writeable, name
        assert a.ctypes.data % 4096 == 0, name
        with pytest.raises(ValueError):
            a[0, 0] = 1.0
    # The cache's folders are the user's alone.
    assert (component_cache.stat().st_mode & 0o777) == 0o700
    # An entry others could write is not mapped: fetched again, an array of its own.
    victim = entries(component_cache)[0]
    victim.chmod(0o666)
    again = ztserve.load(url, insecure=True, mmap=True)
    same(again, V1)
    assert sum(a.flags.writeable for a in again.values()) == 1
    # The mapping outlives the handle and the entry (an unlinked file stays mapped).
    for p in entries(component_cache):
        p.unlink()
    same(warm, V1)
