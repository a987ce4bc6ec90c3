"""The Hugging Face Hub's protocol, driven by the Hub's own clients
(huggingface_hub, its `hf` command line, transformers; pinned in
requirements.txt) with nothing but `HF_ENDPOINT` (and `HF_TOKEN`) set.

Each client runs in a process of its own, as a user's would: the clients
read their settings from the environment when they are imported."""

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from conftest import daemon, metric, nginx_proxy, write_shards
from hubclient import CuttingProxy, client, digest, hub  # noqa: F401 (hub: a fixture)

REAL = "sentence-transformers/all-MiniLM-L6-v2"


def tree_digests(top):
    """Every regular file under `top` (symlinks followed), by relative path."""
    out = {}
    for d, _, files in os.walk(top):
        for name in files:
            p = os.path.join(d, name)
            out[os.path.relpath(p, top)] = digest(p)
    return out


@pytest.fixture(scope="module")
def layout(tmp_path_factory, real_repo):
    """A root laid out as repositories: the real model's, a small sharded
    one, a dataset, an old-style id, and files that must never be served."""
    import numpy as np

    base = tmp_path_factory.mktemp("hub")
    root = base / "root"
    shutil.copytree(real_repo, root / REAL)
    tiny = root / "org" / "tiny"
    tiny.mkdir(parents=True)
    rng = np.random.default_rng(7)
    weights = {f"layers.{i}.weight": rng.standard_normal((256, 256), dtype=np.float32) for i in range(4)}
    write_shards(weights, tiny, 2)
    (tiny / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 256}))
    (tiny / "tokenizer_config.json").write_text("{}")
    (tiny / "README.md").write_text("# tiny\n")
    (tiny / "notes").mkdir()
    (tiny / "notes" / "a b#?.txt").write_text("an awkward name\n")
    (tiny / ".secret").write_text("a dotfile is never served\n")
    (root / "datasets" / "org" / "data").mkdir(parents=True)
    (root / "datasets" / "org" / "data" / "train.csv").write_text("a,b\n1,2\n")
    (root / "solo").mkdir()
    (root / "solo" / "config.json").write_text('{"model_type": "bert"}')
    # Outside the root: a symlink to it is never followed.
    (base / "outside.txt").write_text("outside the root\n")
    os.symlink(base / "outside.txt", tiny / "escape.txt")
    return base, root


def test_snapshot_download_whole_and_by_pattern(hub, tmp_path):
    port, root = hub
    got = client(port, """
        import json
        from huggingface_hub import snapshot_download
        whole = snapshot_download("org/tiny")
        some = snapshot_download("org/tiny", allow_patterns=["*.json", "model-00001-of-00002.safetensors"],
                                 local_dir="picked")
        print(json.dumps([whole, some]))
    """, tmp_path)
    whole, some = got
    expected = tree_digests(root / "org" / "tiny")
    expected.pop(".secret")
    expected.pop("escape.txt")
    assert tree_digests(whole) == expected
    picked = {k: v for k, v in tree_digests(tmp_path / "picked").items() if not k.startswith(".cache")}
    assert sorted(picked) == sorted(
        ["config.json", "tokenizer_config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors"]
    )
    assert all(picked[k] == expected[k] for k in picked)


def test_behind_a_proxy_under_a_path(hub, tmp_path):
    """HF_ENDPOINT under a path of a reverse proxy (nginx passing /mirror/
    to the daemon, with X-Forwarded-Prefix): `main` resolves by a relative
    redirect that stays under the path, the Xet links name it too, and
    snapshots of a small repository and of the real model (its weights
    through Xet) arrive whole."""
    port, root = hub
    with nginx_proxy(tmp_path, port, "/mirror") as proxy:
        got = client(port, f"""
            import json
            from huggingface_hub import hf_hub_download, snapshot_download
            nested = hf_hub_download("org/tiny", "notes/a b#?.txt", revision="main")
            print(json.dumps([snapshot_download("org/tiny"), snapshot_download("{REAL}"), nested]))
        """, tmp_path, env={"HF_ENDPOINT": f"http://127.0.0.1:{proxy}/mirror"})
    tiny, real, nested = got
    assert digest(nested) == digest(root / "org" / "tiny" / "notes" / "a b#?.txt")
    expected = tree_digests(root / "org" / "tiny")
    expected.pop(".secret")
    expected.pop("escape.txt")
    assert tree_digests(tiny) == expected
    weights = "model.safetensors"
    assert digest(os.path.join(real, weights)) == digest(root / REAL / weights)
    assert os.path.getsize(root / REAL / weights) >= 10 << 20, "the weights come through Xet"


def test_list_repo_files_and_repo_info(hub, tmp_path):
    port, root = hub
    got = client(port, """
        import json
        from huggingface_hub import HfApi, list_repo_files
        api = HfApi()
        info = api.model_info("org/tiny", files_metadata=True)
        ds = api.dataset_info("org/data")
        print(json.dumps([list_repo_files("org/tiny"), info.sha, {s.rfilename: s.size for s in info.siblings},
                          list_repo_files("org/data", repo_type="dataset"), ds.sha, list_repo_files("solo")]))
    """, tmp_path)
    files, sha, sizes, dataset, dataset_sha, solo = got
    assert files == sorted(["README.md", "config.json", "tokenizer_config.json", "notes/a b#?.txt",
                            "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                            "model-00002-of-00002.safetensors"])
    assert len(sha) == 40 and int(sha, 16) >= 0
    assert sizes["config.json"] == (root / "org" / "tiny" / "config.json").stat().st_size
    assert dataset == ["train.csv"] and len(dataset_sha) == 40
    assert solo == ["config.json"]


def test_typed_errors(hub, tmp_path):
    port, _ = hub
    got = client(port, """
        import json
        from huggingface_hub import hf_hub_download, HfApi
        from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError
        out = []
        for repo, name, rev in [("org/nope", "config.json", None), ("org/tiny", "config.json", "v9"),
                                ("org/tiny", "nope.json", None), ("org/tiny", ".secret", None),
                                ("org/tiny", "escape.txt", None), ("org/tiny", "config.json", "refs/heads/main")]:
            try:
                hf_hub_download(repo, name, revision=rev)
                out.append("downloaded")
            except (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError) as e:
                out.append(next(c.__name__ for c in (RepositoryNotFoundError, RevisionNotFoundError,
                                                     EntryNotFoundError) if isinstance(e, c)))
        try:
            HfApi().model_info("org/tiny", revision="0" * 40)
        except RevisionNotFoundError:
            out.append("RevisionNotFoundError")
        print(json.dumps(out))
    """, tmp_path)
    assert got == ["RepositoryNotFoundError", "RevisionNotFoundError", "EntryNotFoundError",
                   "EntryNotFoundError", "EntryNotFoundError", "downloaded", "RevisionNotFoundError"]


def test_hf_hub_download_resumes_after_a_cut(layout, tmp_path):
    base, root = layout
    # The plain HTTP download, from a daemon offering no Xet (with Xet, the
    # client downloads through it: test_hub_xet.py cuts that route).
    (base / "no-xet").mkdir(exist_ok=True)
    with daemon(root, base / "no-xet", ["--no-xet"]) as port:
        # The client writes what it read in pieces of 10 MiB: cut past two.
        proxy = CuttingProxy(port, cut=24 << 20)
        path = client(proxy.port, """
            import json
            from huggingface_hub import hf_hub_download
            print(json.dumps(hf_hub_download("%s", "model.safetensors")))
        """ % REAL, tmp_path)
        sha = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/models/{REAL}").read())["sha"]
    assert proxy.cuts == 1
    assert digest(path) == digest(root / REAL / "model.safetensors")
    ranged = [h for h in proxy.heads if h.startswith("GET ") and "range: bytes=" in h.lower()]
    assert ranged, "the download was not resumed with a Range request"
    start = int(ranged[0].lower().split("range: bytes=")[1].split("-")[0])
    assert 0 < start <= 24 << 20
    # Resumed at the commit's URL, where `main` led: a file changed since
    # fails the resume by name instead of mixing two versions' bytes.
    assert ranged[0].startswith(f"GET /{REAL}/resolve/{sha}/model.safetensors "), ranged[0]


def test_hf_file_system_stream_resumes_after_a_cut(hub, tmp_path):
    port, root = hub
    # HfFileSystem's streaming read resumes by the `main` URL with
    # `Range: bytes=N-` and appends what comes back whatever its status:
    # only the rest of the same file, from the commit's URL, is right.
    proxy = CuttingProxy(port, cut=24 << 20)
    got = client(proxy.port, """
        import hashlib, json
        from huggingface_hub import HfFileSystem
        h = hashlib.sha256()
        with HfFileSystem().open("%s/model.safetensors", "rb", block_size=0) as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        print(json.dumps(h.hexdigest()))
    """ % REAL, tmp_path)
    assert proxy.cuts == 1
    assert got == digest(root / REAL / "model.safetensors")
    ranged = [h for h in proxy.heads if h.startswith("GET ") and "range: bytes=" in h.lower()]
    assert ranged and ranged[0].startswith(f"GET /{REAL}/resolve/main/model.safetensors "), ranged


def test_a_second_download_comes_from_the_cache(hub, tmp_path):
    port, _ = hub
    code = """
        import json
        from huggingface_hub import hf_hub_download, snapshot_download
        print(json.dumps([hf_hub_download("%s", "model.safetensors"), snapshot_download("org/tiny")]))
    """ % REAL
    first = client(port, code, tmp_path)
    before = metric(port, "ztserve_bytes_sent_total")
    second = client(port, code, tmp_path)
    assert second == first
    assert metric(port, "ztserve_bytes_sent_total") == before, "a cached file's body was sent again"


def test_hf_file_system_reads_a_header_and_one_tensor(hub, tmp_path):
    port, root = hub
    import numpy as np
    import safetensors.numpy

    before = metric(port, "ztserve_bytes_sent_total")
    got = client(port, """
        import json, struct
        from huggingface_hub import HfFileSystem
        fs = HfFileSystem()
        with fs.open("%s/model.safetensors", "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            header.pop("__metadata__", None)
            # The small tensor stored last: far from the header.
            small = [k for k, v in header.items() if v["data_offsets"][1] - v["data_offsets"][0] < 1 << 16]
            name = max(small, key=lambda k: header[k]["data_offsets"][0])
            a, b = header[name]["data_offsets"]
            f.seek(8 + n + a)
            data = f.read(b - a)
        print(json.dumps([name, header[name], data.hex(), fs.info("%s/model.safetensors")["size"]]))
    """ % (REAL, REAL), tmp_path)
    name, meta, data, size = got
    local = root / REAL / "model.safetensors"
    assert size == local.stat().st_size
    want = safetensors.numpy.load_file(str(local))[name]
    assert np.frombuffer(bytes.fromhex(data), dtype=np.float32).tolist() == want.tolist()
    assert meta["shape"] == list(want.shape)
    sent = metric(port, "ztserve_bytes_sent_total") - before
    assert sent < size / 10, f"{sent} bytes sent for a header and one tensor of {size}"


def test_hf_command_line_downloads_a_repository(hub, tmp_path):
    port, root = hub
    hf = os.path.join(os.path.dirname(sys.executable), "hf")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HOME=str(tmp_path / "home"),
               HF_HUB_DISABLE_UPDATE_CHECK="1", HF_HUB_DISABLE_TELEMETRY="1")
    p = subprocess.run([hf, "download", "org/tiny", "--local-dir", str(tmp_path / "out")],
                       env=env, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    got = {k: v for k, v in tree_digests(tmp_path / "out").items() if not k.startswith(".cache")}
    expected = tree_digests(root / "org" / "tiny")
    expected.pop(".secret")
    expected.pop("escape.txt")
    assert got == expected


def test_transformers_loads_config_and_tokenizer(hub, tmp_path, real_repo):
    port, _ = hub
    got = client(port, """
        import json
        from transformers import AutoConfig, AutoTokenizer
        config = AutoConfig.from_pretrained("%s")
        tok = AutoTokenizer.from_pretrained("%s")
        local = AutoTokenizer.from_pretrained(%r)
        text = "ztserve speaks the Hub's protocol."
        print(json.dumps([config.model_type, config.hidden_size, tok(text)["input_ids"], local(text)["input_ids"]]))
    """ % (REAL, REAL, real_repo), tmp_path)
    model_type, hidden, ids, local_ids = got
    assert (model_type, hidden) == ("bert", 384)
    assert ids == local_ids and len(ids) > 5


def test_transformers_loads_the_model_with_torch(hub, tmp_path, real_repo):
    pytest.importorskip("torch", reason="torch is not installed: AutoModel is not tried")
    port, _ = hub
    got = client(port, """
        import json, torch
        from transformers import AutoModel, AutoTokenizer
        tok = AutoTokenizer.from_pretrained("%s")
        batch = tok(["one output compared"], return_tensors="pt")
        with torch.no_grad():
            remote = AutoModel.from_pretrained("%s")(**batch).last_hidden_state
            local = AutoModel.from_pretrained(%r)(**batch).last_hidden_state
        print(json.dumps(torch.equal(remote, local)))
    """ % (REAL, REAL, real_repo), tmp_path)
    assert got is True


def test_tokens_from_the_environment(layout, tmp_path):
    base, root = layout
    tokens = base / "tokens"
    tokens.write_text("hub-secret\n")
    code = """
        import json
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import RepositoryNotFoundError, HfHubHTTPError
        try:
            print(json.dumps(open(hf_hub_download("org/tiny", "config.json")).read()))
        except RepositoryNotFoundError:
            print(json.dumps("RepositoryNotFoundError"))
        except HfHubHTTPError as e:
            print(json.dumps(e.response.status_code))
    """
    (base / "with-token").mkdir(exist_ok=True)
    with daemon(root, base / "with-token", ["--token-file", str(tokens)]) as port:
        assert client(port, code, tmp_path, token="hub-secret", cache="c1") == (root / "org/tiny/config.json").read_text()
        assert client(port, code, tmp_path, cache="c2") == "RepositoryNotFoundError"
        assert client(port, code, tmp_path, token="wrong", cache="c3") == 401


def test_a_changed_file_makes_a_new_commit(layout, tmp_path):
    base, root = layout
    repo = root / "org" / "changing"
    repo.mkdir()
    (repo / "config.json").write_text('{"version": 1}')
    (repo / "weights.bin").write_bytes(os.urandom(1 << 20))
    code = """
        import json
        from huggingface_hub import snapshot_download, HfApi
        path = snapshot_download("org/changing")
        print(json.dumps([HfApi().model_info("org/changing").sha, path, open(path + "/config.json").read()]))
    """
    (base / "changing").mkdir(exist_ok=True)
    with daemon(root, base / "changing") as port:
        sha1, path1, text1 = client(port, code, tmp_path)
        assert client(port, code, tmp_path)[0] == sha1, "the commit changed while no file did"
        (repo / "config.json").write_text('{"version": 2}')
        deadline = time.time() + 20
        while True:
            # A snapshot that asked for the repository's commit just before
            # the daemon saw the change fails as RevisionNotFound (that
            # commit is gone, and the daemon serves no other): asked again.
            # The daemon may also see the change between the snapshot and
            # the `model_info` after it: what counts is the snapshot's own
            # commit (its folder's name); and the write may be caught half
            # done (the file emptied first), a commit of its own.
            try:
                sha2, path2, text2 = client(port, code, tmp_path)
                new = os.path.basename(path2) != sha1 and text2 == '{"version": 2}'
                if new or time.time() > deadline:
                    break
            except AssertionError as e:
                if "RevisionNotFoundError" not in str(e) or time.time() > deadline:
                    raise
            time.sleep(0.5)
    assert sha2 != sha1 and path2 != path1 and os.path.basename(path2) == sha2
    assert (text1, text2) == ('{"version": 1}', '{"version": 2}')
    # The old snapshot keeps the old bytes; the new one has the new blob.
    assert open(os.path.join(path1, "config.json")).read() == '{"version": 1}'
    assert os.path.realpath(os.path.join(path1, "config.json")) != os.path.realpath(os.path.join(path2, "config.json"))
    # The unchanged file is the same blob in both.
    assert os.path.realpath(os.path.join(path1, "weights.bin")) == os.path.realpath(os.path.join(path2, "weights.bin"))


def status_of(url, method="GET"):
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_hostile_names_serve_nothing_outside_the_repository(hub):
    port, root = hub
    base = f"http://127.0.0.1:{port}"
    secret = b"outside the root"
    cases = {
        "/org/tiny/resolve/main/../../solo/config.json": "EntryNotFound",
        "/org/tiny/resolve/main/..%2F..%2Fsolo%2Fconfig.json": "EntryNotFound",
        "/org/tiny/resolve/main/%2E%2E/%2E%2E/solo/config.json": "EntryNotFound",
        "/org/tiny/resolve/main/notes%2Fa%20b%23%3F.txt": "EntryNotFound",
        "/org/tiny/resolve/main/escape.txt": "EntryNotFound",
        "/org/tiny/resolve/main/.secret": "EntryNotFound",
        "/org/tiny/resolve/" + "a" * 5000 + "/config.json": "RevisionNotFound",
        "/org/tiny/resolve/" + "0" * 40 + "/config.json": "RevisionNotFound",
        "/org/..%2Forg%2Ftiny/resolve/main/config.json": "RepoNotFound",
        "/api/models/org/tiny/tree/main/..%2F..": "EntryNotFound",
    }
    for path, code in cases.items():
        status, headers, body = status_of(base + path)
        assert status == 404, (path, status)
        assert headers.get("x-error-code") == code, (path, headers)
        assert secret not in body
    # The awkward name itself is served, by its encoded path.
    status, headers, body = status_of(base + "/org/tiny/resolve/main/notes/a%20b%23%3F.txt")
    assert (status, body) == (200, b"an awkward name\n")
    assert len(headers["x-repo-commit"]) == 40
    # paths-info never names a path outside the repository.
    form = b"paths=../solo/config.json&paths=escape.txt&paths=config.json&paths=notes"
    req = urllib.request.Request(base + "/api/models/org/tiny/paths-info/main", data=form, method="POST")
    got = json.loads(urllib.request.urlopen(req, timeout=10).read())
    assert [(e["type"], e["path"]) for e in got] == [("file", "config.json"), ("directory", "notes")]


def test_the_python_package_reads_hf_urls_through_the_daemons_api(hub, monkeypatch):
    """`hf://ORG/NAME/PATH` with `HF_ENDPOINT` set: the daemon's file read
    through its own API (manifest first, every tensor verified), over
    HTTP or ztp/1."""
    import numpy as np
    import safetensors.numpy

    import ztserve

    port, root = hub
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    want = safetensors.numpy.load_file(str(root / REAL / "model.safetensors"))
    got = ztserve.load(f"hf://{REAL}/model.safetensors")
    assert list(got) == list(want) or sorted(got) == sorted(want)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    # A sharded checkpoint by its index, over ztp/1.
    tiny = root / "org" / "tiny"
    shards = {}
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        shards.update(safetensors.numpy.load_file(str(tiny / name)))
    got = ztserve.load("hf://org/tiny/model.safetensors.index.json", endpoint=f"quic://127.0.0.1:{port}",
                       insecure=True)
    assert sorted(got) == sorted(shards)
    assert all(np.array_equal(got[k], shards[k]) for k in shards)
    # The current commit names the file; any other is refused by name.
    sha = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/models/org/tiny").read())["sha"]
    one = ztserve.load(f"hf://org/tiny@{sha}/model-00001-of-00002.safetensors")
    assert sorted(one) == sorted(safetensors.numpy.load_file(str(tiny / "model-00001-of-00002.safetensors")))
    with pytest.raises(ztserve.NotFoundError, match="RevisionNotFound|not .*current commit|Invalid rev"):
        ztserve.load("hf://org/tiny@" + "0" * 40 + "/model-00001-of-00002.safetensors")
    monkeypatch.delenv("HF_ENDPOINT")
    with pytest.raises(ztserve.UsageError, match="HF_ENDPOINT"):
        ztserve.load("hf://org/tiny/config.json")
