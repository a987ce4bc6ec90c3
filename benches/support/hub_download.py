"""One download through huggingface_hub (HF_ENDPOINT and HF_HUB_CACHE come
from the environment), timed around the call itself: prints JSON with
`secs` (the call), `bytes` (what it wrote), and the process's system
time and minor page faults so far (`sys`, `faults`: memory touched for
the first time, which costs far more on some virtual machines than on
others; docs/benchmarks.md, thirtieth session).
  hub_download.py snapshot REPO
  hub_download.py file REPO FILENAME
  hub_download.py httpx URL OUT   the client's own HTTP stack (httpx2, as
                                  huggingface_hub drives it: 10 MiB reads
                                  written to a file), from any server"""
import json
import os
import resource
import sys
import time

from huggingface_hub import hf_hub_download, snapshot_download

how, repo = sys.argv[1], sys.argv[2]
t = time.perf_counter()
if how == "httpx":
    import httpx2

    path = sys.argv[3]
    with httpx2.Client() as c, c.stream("GET", repo, follow_redirects=True) as r, open(path, "wb") as f:
        r.raise_for_status()
        for chunk in r.iter_bytes(chunk_size=10 << 20):
            f.write(chunk)
elif how == "snapshot":
    path = snapshot_download(repo)
else:
    path = hf_hub_download(repo, sys.argv[3])
secs = time.perf_counter() - t
total = 0
for d, _, files in os.walk(path):
    total += sum(os.path.getsize(os.path.join(d, f)) for f in files)
if os.path.isfile(path):
    total = os.path.getsize(path)
use = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"secs": secs, "bytes": total, "sys": use.ru_stime, "faults": use.ru_minflt}))
