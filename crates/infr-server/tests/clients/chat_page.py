"""The chat page at `GET /` of `infr serve`, in a real headless browser (Debian's chromium, driven
over the DevTools protocol): the page opened with `?q=...` asks the question, streams the reply
from /v1/chat/completions and renders it with its tokens/s; a screenshot is taken.

Usage: INFR_BIN=target/release/infr INFR_MODEL=models/smollm2-135m-instruct-q4_1.gguf \
       python3 chat_page.py [SCREENSHOT.png]
"""

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from websockets.sync.client import connect


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_http(url, seconds=120, method="GET"):
    end = time.time() + seconds
    while time.time() < end:
        try:
            req = urllib.request.Request(url, method=method)
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.read()
        except OSError:
            time.sleep(0.2)
    sys.exit(f"chat page: {url} did not answer")


def main():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        sys.exit("chat page: needs chromium (apt-get install chromium)")
    shot = sys.argv[1] if len(sys.argv) > 1 else None
    port, devtools = free_port(), free_port()
    tmp = tempfile.mkdtemp()
    env = {k: v for k, v in os.environ.items() if k not in ("INFR_API_KEY", "INFR_SERVER_API_KEY")}
    server = subprocess.Popen(
        [os.environ["INFR_BIN"], "serve", os.environ["INFR_MODEL"], "--dev", "cpu", "--host", "127.0.0.1",
         "--port", str(port), "--parallel", "1", "--ctx-size", "2048"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    chrome = subprocess.Popen(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         f"--remote-debugging-port={devtools}", f"--user-data-dir={tmp}/profile", "--window-size=900,700",
         "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.time() + 120
        while time.time() < end:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.3)
        wait_http(f"http://127.0.0.1:{devtools}/json/version")
        url = f"http://127.0.0.1:{port}/?q=What%20is%20the%20capital%20of%20France%3F"
        tab = json.loads(wait_http(f"http://127.0.0.1:{devtools}/json/new?{url}", method="PUT"))
        with connect(tab["webSocketDebuggerUrl"], max_size=64 << 20) as ws:
            ids = iter(range(1, 1 << 30))

            def call(method, **params):
                mid = next(ids)
                ws.send(json.dumps({"id": mid, "method": method, "params": params}))
                while True:
                    msg = json.loads(ws.recv(timeout=60))
                    if msg.get("id") == mid:
                        return msg.get("result", {})

            probe = """JSON.stringify({
                done: !!document.querySelector('.msg.assistant[data-done]'),
                reply: (document.querySelector('.msg.assistant') || {}).innerText || '',
                question: (document.querySelector('.msg.user') || {}).innerText || '',
                stats: document.getElementById('stats').innerText})"""
            state = {}
            end = time.time() + 180
            while time.time() < end:
                r = call("Runtime.evaluate", expression=probe, returnByValue=True)
                state = json.loads(r.get("result", {}).get("value", "{}"))
                if state.get("done"):
                    break
                time.sleep(0.5)
            assert state.get("done"), f"no finished reply: {state}"
            assert state["question"] == "What is the capital of France?", state
            assert state["reply"].strip() and "Error" not in state["reply"], state
            assert "tokens/s" in state["stats"], state
            # The page's markdown: code blocks escaped, inline code, bold, lists.
            md = call("Runtime.evaluate", returnByValue=True,
                      expression="markdown('**b** and `c`\\n- one\\n- two\\n```rust\\nlet x = a<b;\\n```')")
            html = md["result"]["value"]
            assert html == ("<p><b>b</b> and <code>c</code></p><ul><li>one</li><li>two</li></ul>"
                            "<pre><code>let x = a&lt;b;</code></pre>"), html
            png = base64.b64decode(call("Page.captureScreenshot", format="png")["data"])
            assert len(png) > 10000, f"screenshot of {len(png)} bytes"
            if shot:
                with open(shot, "wb") as f:
                    f.write(png)
            print(f"chat page: reply rendered ({state['stats']}): {state['reply'][:70]!r}; "
                  f"screenshot {len(png)} bytes")
    finally:
        for p in (chrome, server):
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
