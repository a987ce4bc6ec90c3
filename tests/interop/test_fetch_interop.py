"""Files written by `zt fetch`, over both transports, read by ztensor 1.2.3."""

import numpy as np
import pytest
import ztensor

from conftest import daemon
from test_ztensor_interop import reference_objects

RNG = np.random.default_rng(99)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """ztserve ($ZT_DAEMON_BIN) serving one reference file; yields (port, objects)."""
    base = tmp_path_factory.mktemp("served")
    root = base / "root"
    root.mkdir()
    objs = reference_objects()
    # Large components: the fetched file places them on page boundaries.
    for i, shape in enumerate([(1024, 512), (300, 1025)]):
        a = RNG.standard_normal(shape).astype(np.float32)
        objs[f"model.layers.{i}.mlp.weight"] = (ztensor.Tensor({"data": a}), {"data": a.tobytes()})
    with ztensor.Writer(str(root / "ref.zt")) as w:
        for name, (t, _) in objs.items():
            w.write(name, t, checksum="sha256")
    with daemon(root, base) as port:
        yield port, objs


@pytest.mark.parametrize("via", ["quic", "http"])
@pytest.mark.parametrize("io", [[], ["--no-direct-io"]])
def test_fetched_files_read_by_reference(tmp_path, zt, served, via, io):
    port, objs = served
    url = f"quic://127.0.0.1:{port}/ref.zt" if via == "quic" else f"http://127.0.0.1:{port}/v1/files/ref.zt"
    out = tmp_path / "fetched.zt"
    zt("fetch", url, "--insecure", "-o", out, *io)
    zt("verify", "--require-digest", out)
    r = ztensor.Reader(str(out))
    assert sorted(r.keys()) == sorted(objs)
    for name, (_, comps) in objs.items():
        for role, expected in comps.items():
            buf, _ = r._inner._read_component_raw(name, role)
            assert bytes(buf) == expected, f"{via}: {name}/{role}"
    assert not list(tmp_path.glob("*.part*")), "no part file or journal left"
