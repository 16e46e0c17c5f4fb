#!/usr/bin/env python3
"""Seed corpora for the `tokenize` and `chat_template` fuzz targets.

tokenize: every oracle text of testdata/oracle/tokenize/*.jsonl, prefixed with the selector
byte (0 = SmolLM2 BPE, 1 = Gemma 3 SentencePiece), plus a few id-shaped byte strings.
chat_template: the models' own `tokenizer.chat_template` (read with the PyPI `gguf` package when
it is installed), the built-in ChatML / Gemma templates and the test templates of
crates/infr-tokenizer/tests/chat_template.rs.
Usage (from the repo root): python3 fuzz/scripts/make_text_seeds.py
"""
import glob
import hashlib
import json
import os
import re
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FUZZ = os.path.join(ROOT, "fuzz")


def put(target, data):
    d = os.path.join(FUZZ, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def tokenize_seeds():
    texts = set()
    for p in glob.glob(os.path.join(ROOT, "testdata/oracle/tokenize/*.jsonl")):
        for line in open(p, encoding="utf-8"):
            texts.add(json.loads(line)["text"])
    texts |= {"<|im_start|>user\nHi<|im_end|>\n", "<start_of_turn>user\nHi<end_of_turn>\n<bos><eos>",
              "  \t\n\r\n x", "\u00e9\u0301 \U0001f600\U0001f1eb\U0001f1f7 \u4e2d\u6587 \ud55c\uad6d\uc5b4 \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
              "<0x0A><unk><pad>", "don't I'm we've they're 123456 3.14"}
    for t in texts:
        for sel in (0, 1):
            put("tokenize", bytes([sel]) + t.encode())
    # Id-shaped inputs: small ids, byte tokens, ids past the vocabulary.
    for sel in (0, 1):
        put("tokenize", bytes([sel]) + b"".join(struct.pack("<I", i) for i in [1, 2, 3, 200, 49152, 262144, 0xFFFFFFFF]))
        put("tokenize", bytes([sel]) + b"".join(struct.pack("<I", i) for i in range(0, 300, 7)))
    print("tokenize:", len(os.listdir(os.path.join(FUZZ, "corpus", "tokenize"))), "seeds")


def chat_seeds():
    srcs = []
    try:
        import gguf  # noqa: F401

        for p in sorted(glob.glob(os.path.join(ROOT, "models/*.gguf"))):
            r = gguf.GGUFReader(p)
            f = r.fields.get("tokenizer.chat_template")
            if f is not None:
                srcs.append(bytes(f.parts[f.data[0]]).decode())
    except ImportError:
        print("gguf package missing: model templates skipped")
    builtin = open(os.path.join(ROOT, "crates/infr-tokenizer/src/chat/builtin.rs"), encoding="utf-8").read()
    for m in re.finditer(r'pub const \w+_TEMPLATE: &str = "\\\n(.*?)";', builtin, re.S):
        body = m.group(1)
        body = re.sub(r"\\\n\s*", "", body)  # Rust line continuations
        body = body.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
        srcs.append(body)
    tests = open(os.path.join(ROOT, "crates/infr-tokenizer/tests/chat_template.rs"), encoding="utf-8").read()
    srcs += re.findall(r'const \w+_TEMPLATE: &str = r#"(.*?)"#;', tests, re.S)
    srcs += ["{{ bos_token }}{% for m in messages %}{{ m['role'] | upper }}: {{ m.content | trim }}{% endfor %}",
             "{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}",
             "{% for i in range(10) %}{% for j in range(10) %}{{ i * j }}{% endfor %}{% endfor %}",
             "{{ messages | tojson(indent=2) }}{{ tools | tojson }}{{ strftime_now('%Y-%m-%d') }}",
             "{% set ns = namespace(x=0) %}{% for m in messages %}{% set ns.x = ns.x + 1 %}{% endfor %}{{ ns.x }}",
             "{% if x is not defined %}{{ raise_exception('no x') }}{% endif %}",
             "{% generation %}{{ messages[-1].content.split(' ') }}{% endgeneration %}"]
    for s in srcs:
        put("chat_template", s.encode())
    print("chat_template:", len(srcs), "seeds")


if __name__ == "__main__":
    tokenize_seeds()
    chat_seeds()
