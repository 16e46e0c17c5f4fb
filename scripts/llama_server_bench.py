#!/usr/bin/env python3
"""Measure llama.cpp's speed through llama-server's own timings, the way DESIGN.md's reference
numbers were taken: start `llama-server` on a model, send prompts of random token ids, and read
`timings.prompt_per_second` / `timings.predicted_per_second` from each /completion response.

usage: llama_server_bench.py --server PATH -m MODEL [-m MODEL ...] [-p 512] [-n 128] [-d 0]
                             [-r 3] [--warmup 1] [--ngl 99] [--port 18080] [--json OUT] [--log FILE]
                             ["--server-args=--n-cpu-moe 36"]

Tests mirror `infr bench`: pp<P> (prompt P tokens, 1 generated), tg<N> (generation of N tokens
after a 1-token prompt, or after D context tokens with -d). Only loopback is used; the server is
stopped at the end. Standard library only.
"""
import argparse
import json
import random
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request


def post(port, path, body, timeout=600):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_ready(port, proc, limit=300):
    t0 = time.time()
    while time.time() - t0 < limit:
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1)
    raise SystemExit("llama-server did not become ready")


def completion(port, ids, n_predict):
    body = {"prompt": ids, "n_predict": n_predict, "cache_prompt": False, "temperature": 0.0,
            "ignore_eos": True, "stream": False}
    return post(port, "/completion", body)["timings"]


def timed(port, make_ids, n_predict, key, attempts=5):
    """One sample of `key` from a completion of a fresh random prompt. A random-weight model
    can generate bytes that llama-server's output parser rejects (HTTP 500, "does not match
    the expected Content-only format"); such a request is retried with a new prompt."""
    for attempt in range(attempts):
        try:
            return completion(port, make_ids(), n_predict)[key]
        except urllib.error.HTTPError as e:
            if e.code != 500 or attempt == attempts - 1:
                raise
            print(f"llama-server answered {e.code}; retrying with a new prompt", file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("-m", "--model", action="append", required=True)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-d", type=int, default=0)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--ngl", type=int, default=99)
    ap.add_argument("--port", type=int, default=18080)
    ap.add_argument("--vocab", type=int, default=150000)
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed runs of each test first, at least 1 as llama-bench does (as infr bench "
                         "--warmup-runs: a GPU that idled ramps its clocks up)")
    ap.add_argument("--json")
    ap.add_argument("--log", help="append llama-server's log (device, matrix cores, ...) to this file")
    ap.add_argument("--server-args", default="", help="more llama-server arguments, one string (--server-args='--n-cpu-moe 36')")
    a = ap.parse_args()
    rng = random.Random(1234)
    records = []
    for model in a.model:
        ctx = max(a.p, a.d + a.n) + 64
        cmd = [a.server, "-m", model, "-ngl", str(a.ngl), "-c", str(ctx), "-np", "1", "-b", "2048", "-ub", "512",
               "--port", str(a.port), "--host", "127.0.0.1"] + a.server_args.split()
        # The log goes to a file (or nowhere): an unread pipe would stall the server once full.
        log = open(a.log, "a") if a.log else subprocess.DEVNULL
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
        try:
            wait_ready(a.port, proc)
            tok = lambda k: [rng.randrange(100, a.vocab) for _ in range(k)]
            timed(a.port, lambda: tok(32), 4, "predicted_per_second")  # warm-up
            tests = []
            if a.p > 0:
                tests.append(("pp%d" % a.p, lambda: timed(a.port, lambda: tok(a.p), 1, "prompt_per_second")))
            if a.n > 0:
                name = "tg%d" % a.n + (" @ d%d" % a.d if a.d else "")
                tests.append((name, lambda: timed(a.port, lambda: tok(max(a.d, 1)), a.n, "predicted_per_second")))
            for name, fn in tests:
                for _ in range(max(a.warmup, 1)):
                    fn()  # warm-up of this test's shapes (llama-bench also runs one first)
                samples = [fn() for _ in range(a.r)]
                rec = {"model": model, "test": name, "avg_ts": statistics.mean(samples),
                       "stddev_ts": statistics.stdev(samples) if len(samples) > 1 else 0.0, "samples_ts": samples}
                records.append(rec)
                shown = " ".join(f"{x:.1f}" for x in samples)
                print(f"{model} {name}: {rec['avg_ts']:.1f} ± {rec['stddev_ts']:.1f} t/s  [{shown}]", flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            if a.log:
                log.close()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
