"""One timed load of the 1 GiB bench model, in a fresh process (so its
peak RSS is its own); prints JSON: seconds, seconds to the first tensor
(where it applies), peak RSS in bytes, and a checksum of what was loaded.
Run by benches/python.sh.

    python_load.py ztserve URL [OPTIONS_JSON]    ztserve.load
    python_load.py first URL [OPTIONS_JSON]      ztserve.safe_open(...).tensors()
    python_load.py curl URL FILE                 curl -o FILE, then safetensors.numpy.load_file
    python_load.py requests URL FILE             requests (streamed to FILE), then load_file
"""
import json
import resource
import subprocess
import sys
import time


def checksum(tensors):
    return sum(int(v.view("uint8")[:: 1 << 16].sum()) for v in tensors.values())


def main():
    how, url = sys.argv[1], sys.argv[2]
    t0 = time.perf_counter()
    first = None
    if how == "ztserve":
        import ztserve

        options = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
        got = ztserve.load(url, **options)
    elif how == "first":
        import ztserve

        options = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
        got = {}
        with ztserve.safe_open(url, **options) as f:
            for name, t in f.tensors():
                if first is None:
                    first = time.perf_counter() - t0
                got[name] = t
    else:
        import safetensors.numpy

        out = sys.argv[3]
        if how == "curl":
            subprocess.run(["curl", "-sf", "-o", out, url], check=True)
        else:
            import requests

            with requests.get(url, stream=True) as r, open(out, "wb") as f:
                r.raise_for_status()
                for chunk in r.iter_content(1 << 20):
                    f.write(chunk)
        got = safetensors.numpy.load_file(out)
    secs = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"secs": secs, "first": first, "rss": rss, "sum": checksum(got), "n": len(got)}))


main()
