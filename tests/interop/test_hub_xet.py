"""The Xet protocol (docs/hub.md): `huggingface_hub` 2.4 with `hf_xet` 1.8
(pinned in requirements.txt), unmodified, downloading a repository's large
files from the daemon through it. The file hashes are checked against
`hf_xet`'s own `hash_files`, the Hugging Face reference implementation."""
import http.client
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request

import hf_xet
import numpy as np
import pytest
import ztensor

from conftest import daemon
from hubclient import CuttingProxy, client, digest, hub  # noqa: F401 (hub: a fixture)

BIG = 24 << 20


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    base = tmp_path_factory.mktemp("xet")
    root = base / "root"
    big = root / "org" / "big"
    big.mkdir(parents=True)
    rng = np.random.default_rng(11)
    (big / "weights.bin").write_bytes(rng.bytes(BIG))
    # Low-entropy bytes too: chunks cut at their longest.
    (big / "zeros.bin").write_bytes(bytes(12 << 20) + rng.bytes(1 << 20))
    (big / "config.json").write_text('{"model_type": "bert"}')
    return base, root


def head(port, path, token=None, busy_ok=False):
    """The headers of a HEAD of `path`, its relative redirects followed
    as HEADs (as huggingface_hub follows them). With `busy_ok`, None for
    a 503 with Retry-After: the daemon's answer for a file it caught in
    the middle of a change, to be asked again."""
    for _ in range(5):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("HEAD", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        r = c.getresponse()
        r.read()
        c.close()
        if busy_ok and r.status == 503 and r.headers["Retry-After"]:
            return None
        if r.status != 302:
            assert r.status == 200, (path, r.status)
            return r.headers
        # Resolved against the URL asked, as huggingface_hub does.
        path = urllib.parse.urljoin(path, r.headers["Location"])
    raise AssertionError(f"{path}: too many redirects")


def requests_by_route(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("ztserve_http_requests_total{"):
            labels, value = line.rsplit(" ", 1)
            route = labels.split('route="')[1].split('"')[0]
            status = labels.split('status="')[1].split('"')[0]
            out[(route, status)] = out.get((route, status), 0) + float(value)
    return out


def xorb_gets(port):
    return sum(v for (r, s), v in requests_by_route(port).items() if r.endswith("/xorbs") and s == "206")


DOWNLOAD = """
    import json
    from huggingface_hub import hf_hub_download
    print(json.dumps(hf_hub_download("org/big", "%s")))
"""


def test_xet_hashes_are_the_reference_implementations(hub):
    port, root = hub
    for name in ("weights.bin", "zeros.bin"):
        h = head(port, f"/org/big/resolve/main/{name}")
        want = hf_xet.hash_files([str(root / "org/big" / name)])[0].hash
        assert h["X-Xet-Hash"] == want, name
        assert 'rel="xet-auth"' in h["Link"] and "/api/models/org/big/xet-read-token/" in h["Link"]
        assert h["Link"].split(">")[0].endswith(f"?file={name.replace('.', '%2E')}"), h["Link"]
    # Small files are plain downloads, as the Hub's are.
    assert "X-Xet-Hash" not in head(port, "/org/big/resolve/main/config.json")


def test_hf_hub_download_goes_through_xet(hub, tmp_path):
    port, root = hub
    before = xorb_gets(port)
    for name in ("weights.bin", "zeros.bin"):
        path = client(port, DOWNLOAD % name, tmp_path)
        assert digest(path) == digest(root / "org/big" / name)
    assert xorb_gets(port) > before, "the downloads did not fetch xorbs"
    # With Xet turned off in the client, the same bytes over plain HTTP.
    path = client(port, DOWNLOAD % "weights.bin", tmp_path, cache="plain", env={"HF_HUB_DISABLE_XET": "1"})
    assert digest(path) == digest(root / "org/big/weights.bin")


def test_a_cut_xorb_transfer_is_fetched_again(hub, tmp_path):
    port, root = hub
    # hf_xet spreads the file's 24 one-MiB xorbs over its connections (4
    # to 8 of them here): the first to carry 1.5 MiB is cut in its second
    # xorb, whatever the spread (6 MiB, a quarter of the file, was missed
    # when no connection carried more than its quarter).
    proxy = CuttingProxy(port, cut=3 << 19)
    path = client(proxy.port, DOWNLOAD % "weights.bin", tmp_path)
    assert proxy.cuts == 1
    assert digest(path) == digest(root / "org/big/weights.bin")
    xorbs = [h for h in proxy.heads if "/xorbs/" in h.split("\r\n")[0]]
    assert len(xorbs) >= 2, "the cut xorb range was not asked for again"


def test_snapshot_download_and_the_cache(hub, tmp_path):
    port, root = hub
    code = """
        import json
        from huggingface_hub import snapshot_download
        print(json.dumps(snapshot_download("org/big")))
    """
    path = client(port, code, tmp_path)
    for name in ("weights.bin", "zeros.bin", "config.json"):
        assert digest(os.path.join(path, name)) == digest(root / "org/big" / name)
    before = xorb_gets(port)
    assert client(port, code, tmp_path) == path
    assert xorb_gets(port) == before, "a cached file was fetched again"


def test_a_changed_file_has_a_new_hash_and_its_old_reconstruction_is_gone(layout, tmp_path):
    base, root = layout
    repo = root / "org" / "moving"
    repo.mkdir()
    (repo / "w.bin").write_bytes(os.urandom(11 << 20))
    (base / "moving").mkdir()
    with daemon(root, base / "moving") as port:
        old = head(port, "/org/moving/resolve/main/w.bin")
        first = client(port, DOWNLOAD.replace("org/big", "org/moving") % "w.bin", tmp_path)
        stale = f"{token_route(port, 'org/moving', old['X-Repo-Commit'])['casUrl']}/v1/reconstructions/{old['X-Xet-Hash']}"
        (repo / "w.bin").write_bytes(os.urandom(11 << 20))
        deadline = time.time() + 20
        # The rewrite may be caught half done: 503, Retry-After, ask again.
        while (seen := head(port, "/org/moving/resolve/main/w.bin", busy_ok=True)) is None or seen[
            "X-Repo-Commit"
        ] == old["X-Repo-Commit"]:
            assert time.time() < deadline, "the change was not seen"
            time.sleep(0.3)
        new = head(port, "/org/moving/resolve/main/w.bin")
        assert new["X-Xet-Hash"] != old["X-Xet-Hash"]
        assert new["X-Xet-Hash"] == hf_xet.hash_files([str(repo / "w.bin")])[0].hash
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(stale, timeout=30)
        assert e.value.code == 404 and e.value.headers["X-Error-Code"] == "RevisionNotFound"
        second = client(port, DOWNLOAD.replace("org/big", "org/moving") % "w.bin", tmp_path)
    assert digest(second) == digest(repo / "w.bin") != digest(first)


def token_route(port, repo, commit, token=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/models/{repo}/xet-read-token/{commit}")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=30) as r:
        body = json.loads(r.read())
        assert r.headers["X-Xet-Cas-Url"] == body["casUrl"]
        assert r.headers["X-Xet-Access-Token"] == body["accessToken"]
        return body


def link_url(headers):
    return headers["Link"].split(">")[0].lstrip("<")


def test_another_replica_finds_the_file_its_urls_name(hub, layout):
    """A replica that never saw the HEAD answers the reconstruction the
    first replica's URLs lead to, by the file they name; asked for a
    hash through a URL that names no file, it looks through nothing."""
    port, root = hub
    base, _ = layout
    h = head(port, "/org/big/resolve/main/weights.bin")
    with urllib.request.urlopen(link_url(h), timeout=30) as r:
        cas = json.loads(r.read())["casUrl"]
    assert "/weights.bin" in cas or "/weights%2Ebin" in cas, cas
    (base / "replica").mkdir(exist_ok=True)
    with daemon(root, base / "replica") as other:
        cas_other = cas.replace(f":{port}/", f":{other}/")
        rec = urllib.request.Request(f"{cas_other}/v2/reconstructions/{h['X-Xet-Hash']}",
                                     headers={"Range": "bytes=0-99"})
        fetch = json.loads(urllib.request.urlopen(rec, timeout=60).read())
        xorb = next(iter(fetch["xorbs"].values()))[0]
        assert f":{other}/" in xorb["url"] and "weights" in xorb["url"]
        b = xorb["ranges"][0]["bytes"]
        ranged = urllib.request.Request(xorb["url"], headers={"Range": f"bytes={b['start']}-{b['end']}"})
        with urllib.request.urlopen(ranged, timeout=30) as r:
            assert r.read()[8:108] == (root / "org/big/weights.bin").read_bytes()[:100]
        # The storage of the whole repository: only what this replica
        # indexed itself (weights.bin, just now), never a search.
        plain = token_route(other, "org/big", h["X-Repo-Commit"])["casUrl"]
        z = head(port, "/org/big/resolve/main/zeros.bin")["X-Xet-Hash"]
        for asked, code in ((h["X-Xet-Hash"], 200), (z, 404)):
            req = urllib.request.Request(f"{plain}/v1/reconstructions/{asked}", headers={"Range": "bytes=0-9"})
            try:
                status = urllib.request.urlopen(req, timeout=30).status
            except urllib.error.HTTPError as e:
                status = e.code
                assert e.headers["X-Error-Code"] == "EntryNotFound"
            assert status == code, asked
        # The same file asked for under another hash, or a file not there.
        wrong = f"{cas_other}/v1/reconstructions/{z}"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(wrong, timeout=30)
        assert e.value.code == 404 and e.value.headers["X-Error-Code"] == "EntryNotFound"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(link_url(h).replace("weights", "nothing").replace(f":{port}/", f":{other}/"), timeout=30)
        assert e.value.code == 404 and e.value.headers["X-Error-Code"] == "EntryNotFound"


def test_tokens_and_signed_xorb_urls(layout, tmp_path):
    base, root = layout
    tokens = base / "xet-tokens"
    tokens.write_text("xet-secret\n")
    (base / "xet-token").mkdir()
    with daemon(root, base / "xet-token", ["--token-file", str(tokens)]) as port:
        path = client(port, DOWNLOAD % "weights.bin", tmp_path, token="xet-secret")
        assert digest(path) == digest(root / "org/big/weights.bin")
        missing = client(port, """
            import json
            from huggingface_hub import hf_hub_download
            from huggingface_hub.errors import RepositoryNotFoundError
            try:
                hf_hub_download("org/big", "weights.bin")
            except RepositoryNotFoundError:
                print(json.dumps("RepositoryNotFoundError"))
        """, tmp_path, cache="anonymous")
        assert missing == "RepositoryNotFoundError"
        h = head(port, "/org/big/resolve/main/weights.bin", token="xet-secret")
        cas = token_route(port, "org/big", h["X-Repo-Commit"], token="xet-secret")["casUrl"]
        rec = urllib.request.Request(f"{cas}/v2/reconstructions/{h['X-Xet-Hash']}",
                                     headers={"Authorization": "Bearer xet-secret", "Range": "bytes=0-99"})
        fetch = json.loads(urllib.request.urlopen(rec, timeout=30).read())
        xorb = next(iter(fetch["xorbs"].values()))[0]
        ranged = {"Range": "bytes=%d-%d" % (xorb["ranges"][0]["bytes"]["start"], xorb["ranges"][0]["bytes"]["end"])}
        # Signed: fetched without a token, as hf_xet fetches.
        with urllib.request.urlopen(urllib.request.Request(xorb["url"], headers=ranged), timeout=30) as r:
            assert r.status == 206
            first = r.read()
        # The chunk header: version 0, uncompressed (scheme 0), its length twice.
        assert first[0] == 0 and first[4] == 0 and first[1:4] == first[5:8]
        length = int.from_bytes(first[1:4], "little")
        assert first[8:8 + 100] == (root / "org/big/weights.bin").read_bytes()[:100] and length >= 100
        unsigned = xorb["url"].split("?")[0]
        tampered = xorb["url"][:-4] + ("0000" if not xorb["url"].endswith("0000") else "1111")
        for url, code in ((unsigned, 401), (tampered, 403)):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(urllib.request.Request(url, headers=ranged), timeout=30)
            assert e.value.code == code, url


def test_a_corrupt_component_is_never_sent(layout, tmp_path):
    base, root = layout
    repo = root / "org" / "corrupt"
    repo.mkdir()
    path = repo / "model.zt"
    with ztensor.Writer(str(path)) as w:
        w.write("w", ztensor.Tensor({"data": np.arange(3 << 20, dtype=np.float32)}), checksum="sha256")
    data = bytearray(path.read_bytes())
    off = ztensor.Reader(str(path)).metadata("w").components["data"]["offset"]
    data[off + (5 << 20)] ^= 0xFF
    path.write_bytes(bytes(data))
    (base / "corrupt").mkdir()
    with daemon(root, base / "corrupt") as port:
        p = client(port, DOWNLOAD.replace("org/big", "org/corrupt") % "model.zt", tmp_path, check=False)
        assert p is None, "a corrupt file was downloaded"
        assert xorb_gets(port) == 0
        blobs = tmp_path / "cache" / "models--org--corrupt" / "blobs"
        complete = [b for b in os.listdir(blobs) if not b.endswith(".incomplete")] if blobs.exists() else []
        assert complete == [], "a corrupt download was left looking complete"
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
