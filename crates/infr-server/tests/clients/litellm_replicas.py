"""Two `infr serve` replicas behind LiteLLM's router (the scale-out recipe of the README), on
loopback: requests through the router reach both replicas; a replica stopped (SIGTERM) and
started again does not fail requests (the router retries on the other one) and answers
/health 503 until its model is loaded; a draining replica answers /health 503 while the
request it is running still completes.

Usage: INFR_BIN=target/release/infr INFR_MODEL=models/smollm2-135m-instruct-q4_1.gguf \
       python3 litellm_replicas.py
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: the bundled map
import litellm
from litellm import Router

BIN = os.environ["INFR_BIN"]
MODEL = os.environ["INFR_MODEL"]
litellm.suppress_debug_info = True


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None, ""


def start(port):
    # Replicas without a key (run.sh exports one for the SDK checks).
    env = {k: v for k, v in os.environ.items() if k not in ("INFR_API_KEY", "INFR_SERVER_API_KEY")}
    return subprocess.Popen(
        [BIN, "serve", MODEL, "--dev", "cpu", "--host", "127.0.0.1", "--port", str(port), "--parallel", "2",
         "--ctx-size", "2048", "--metrics", "--set", "server.shutdown_grace_s=20"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def wait_ready(port, proc):
    """Poll /health until 200; returns the statuses seen before (503 while loading)."""
    seen = []
    for _ in range(2400):
        status, body = get(port, "/health")
        if status == 200:
            return seen
        if status is not None:
            seen.append((status, json.loads(body).get("status") if body.startswith("{") else body))
        if proc.poll() is not None:
            sys.exit(f"replica on {port} exited with {proc.returncode}")
        time.sleep(0.01)
    sys.exit(f"replica on {port} did not become ready")


def served_requests(port):
    """Completed chat requests of a replica, from its /metrics."""
    _, text = get(port, "/metrics")
    total = 0
    for line in text.splitlines():
        if line.startswith("infr_requests_total") and 'endpoint="chat_completions",status="200"' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def main():
    ports = [free_port(), free_port()]
    procs = [start(p) for p in ports]
    try:
        for p, proc in zip(ports, procs):
            seen = wait_ready(p, proc)
            assert all(s == (503, "loading") for s in seen), seen
        router = Router(
            model_list=[{"model_name": "infr", "litellm_params": {
                "model": "openai/smollm2", "api_base": f"http://127.0.0.1:{p}/v1", "api_key": "none"}}
                for p in ports],
            num_retries=3, retry_after=0, allowed_fails=1, cooldown_time=2, routing_strategy="simple-shuffle")

        def ask(text):
            r = router.completion(model="infr", messages=[{"role": "user", "content": text}], max_tokens=8,
                                  temperature=0)
            assert r.choices[0].message.content, r
            return r

        # The router shuffles at random: 8 requests all land on one replica once in 128 runs,
        # so ask until both have served (all of 40 on one: once in 2^39).
        sent = 0
        counts = [0, 0]
        while sent < 40 and (sent < 8 or not all(c > 0 for c in counts)):
            ask(f"Say hello {sent}")
            sent += 1
            counts = [served_requests(p) for p in ports]
        assert all(c > 0 for c in counts), f"both replicas serve: {counts}"
        print(f"litellm: {sent} requests over two replicas ({counts[0]} + {counts[1]})")

        # Restart replica 0: requests keep succeeding meanwhile, and it answers 503 until ready.
        procs[0].send_signal(signal.SIGTERM)
        procs[0].wait(timeout=60)
        for i in range(4):
            ask(f"During the restart {i}")
        procs[0] = start(ports[0])
        seen = wait_ready(ports[0], procs[0])
        assert all(s == (503, "loading") for s in seen), seen
        for i in range(4):
            ask(f"After the restart {i}")
        print(f"litellm: restart of one replica, no failed request; its /health before ready: "
              f"{sorted(set(seen)) or 'ready at the first probe'}")

        # Draining: a long request runs on replica 1 while it gets SIGTERM.
        body = json.dumps({"prompt": "aa ab ac", "max_tokens": 200, "temperature": 0}).encode()
        result = {}

        def long_request():
            req = urllib.request.Request(f"http://127.0.0.1:{ports[1]}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                result["status"] = r.status
                result["json"] = json.loads(r.read())

        t = threading.Thread(target=long_request)
        t.start()
        time.sleep(0.5)
        procs[1].send_signal(signal.SIGTERM)
        statuses = set()
        while t.is_alive():
            status, text = get(ports[1], "/health")
            if status is not None:
                statuses.add((status, json.loads(text).get("status")))
            time.sleep(0.05)
        t.join()
        assert result.get("status") == 200, result
        assert result["json"]["choices"][0]["finish_reason"] in ("length", "stop"), result
        assert (503, "draining") in statuses, statuses
        print(f"litellm: a draining replica answered /health {sorted(statuses)} and finished its request")
        # The router may still hold replica 0 in its 2 s cooldown (a pooled connection from before
        # its restart fails once); with replica 1 gone a request in that window has no deployment
        # left, so wait the cooldown out as a client would.
        time.sleep(2.5)
        ask("Served by the remaining replica")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    main()
