"""``hf://ORG/NAME[@REVISION]/PATH``: a file of a Hugging Face Hub
repository that a ztserve daemon serves, read through the daemon's own API
(manifests, digests, ztp/1) rather than the Hub's byte downloads.

The daemon is the ``endpoint=`` option, else ``$ZTSERVE_ENDPOINT``, else
``$HF_ENDPOINT`` (what the Hub's own clients are pointed at it with): an
``http(s)://`` or ``quic://`` URL. ``hf://ORG/NAME/PATH`` is then the
daemon's file ``ORG/NAME/PATH``, and ``hf://datasets/ORG/NAME/PATH`` its
file ``datasets/ORG/NAME/PATH``. A ``@REVISION`` other than ``main`` must
be the repository's current commit (the daemon keeps no older one): it
is checked with the Hub's API before the file is opened and again once
its manifest is read (``fetch``: once it is written), so that a
repository changed in between raises rather than hands over another
commit's bytes. A quic:// endpoint is asked over HTTP on the same port
(the daemon serves both there). Ids are ``ORG/NAME``.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request

from ._native import NotFoundError


def resolve(source, endpoint=None, token=None):
    """``source`` as the URL the client opens, and a check to run once it
    is open (``None`` when there is none): an ``hf://`` URL resolved
    against the endpoint, anything else as it is."""
    if not isinstance(source, str) or not source.startswith("hf://"):
        return source, None
    from ._handle import UsageError

    endpoint = endpoint or os.environ.get("ZTSERVE_ENDPOINT") or os.environ.get("HF_ENDPOINT")
    if not endpoint:
        raise UsageError(f"{source}: an hf:// URL needs a daemon: pass endpoint= or set HF_ENDPOINT")
    endpoint = endpoint.rstrip("/")
    parts = source[len("hf://"):].split("/")
    kind = "models"
    if parts and parts[0] == "datasets":
        kind, parts = "datasets", parts[1:]
    if len(parts) < 3 or not all(parts):
        raise UsageError(f"{source}: expected hf://[datasets/]ORG/NAME[@REVISION]/PATH")
    org, name, path = parts[0], parts[1], parts[2:]
    name, _, revision = name.partition("@")
    repo = f"{org}/{name}"
    check = None
    if revision and revision != "main":
        def check():
            _check_revision(endpoint, kind, repo, revision, token, source)

        check()
    prefix = "datasets/" if kind == "datasets" else ""
    quoted = "/".join(urllib.parse.quote(p, safe="") for p in [*repo.split("/"), *path])
    return f"{endpoint}/{prefix}{quoted}", check


def _check_revision(endpoint, kind, repo, revision, token, source):
    """Raises ``NotFoundError`` unless ``revision`` is the repository's
    current commit, as the daemon's Hub API says (over HTTP on the same
    port for a ``quic://`` endpoint, as the daemon serves both there)."""
    from ._native import RefusedError

    api = "http://" + endpoint[len("quic://"):] if endpoint.startswith("quic://") else endpoint
    url = f"{api}/api/{kind}/{repo}/revision/{urllib.parse.quote(revision, safe='')}"
    req = urllib.request.Request(url)
    token = token or os.environ.get("HF_TOKEN")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            sha = json.loads(r.read()).get("sha")
    except urllib.error.HTTPError as e:
        why = e.headers.get("X-Error-Message") or f"HTTP {e.code}"
        error = RefusedError if e.code in (401, 403) else NotFoundError
        raise error(f"{source}: {why}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise NotFoundError(f"{source}: cannot ask {url} for the revision: {e}") from None
    if sha != revision.lower():
        raise NotFoundError(f"{source}: revision {revision!r} is not {repo}'s current commit {sha}")
