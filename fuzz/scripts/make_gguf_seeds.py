#!/usr/bin/env python3
"""Write small valid GGUF files (a few KB each) as a seed corpus for the `gguf_parse` target.

Pure standard library (no `gguf` package), so the seeds do not depend on its version.
Usage: python3 fuzz/scripts/make_gguf_seeds.py fuzz/corpus/gguf_parse
"""
import os
import struct
import sys

# GGUF value type ids (enum gguf_type).
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
# ggml tensor types: id -> (block size, bytes per block).
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20),
        "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "Q6_K": (14, 256, 210), "I8": (24, 1, 1),
        "I32": (26, 1, 4), "F64": (28, 1, 8), "BF16": (30, 1, 2)}


def s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def value(ty, v):
    if ty == STR:
        return s(v)
    if ty == ARR:
        elem, items = v
        out = struct.pack("<IQ", elem, len(items))
        for it in items:
            out += value(elem, it)
        return out
    return struct.pack(SCALAR_FMT[ty], v)


def gguf(kvs, tensors=(), version=3, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, dims, type name, data bytes or None)]."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, ty, v in kvs:
        out += s(k) + struct.pack("<I", ty) + value(ty, v)
    align = lambda x: (x + alignment - 1) // alignment * alignment
    offset, blobs = 0, []
    for name, dims, tname, data in tensors:
        tid, bs, ts = GGML[tname]
        n = 1
        for d in dims:
            n *= d
        size = n // bs * ts
        if data is None:
            data = bytes((i * 7 + 3) & 0xFF for i in range(size))
        assert len(data) == size
        out += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", tid, offset)
        blobs.append((offset, data))
        offset = align(offset + size)
    out += b"\0" * (align(len(out)) - len(out))
    base = len(out)
    for off, data in blobs:
        out += b"\0" * (base + off - len(out)) + data
    out += b"\0" * (align(len(out)) - len(out))
    return out


ALL_SCALARS = [
    ("general.architecture", STR, "llama"),
    ("general.name", STR, "fuzz seed \u2581h\u00e9llo \U0001f600"),
    ("t.u8", U8, 200), ("t.i8", I8, -5), ("t.u16", U16, 65535), ("t.i16", I16, -32768),
    ("t.u32", U32, 4000000000), ("t.i32", I32, -123456), ("t.f32", F32, 1.5),
    ("t.bool", BOOL, True), ("t.bool0", BOOL, False), ("t.u64", U64, 2**63 + 5),
    ("t.i64", I64, -(2**62)), ("t.f64", F64, -0.1), ("t.empty_str", STR, ""),
    ("llama.context_length", U32, 2048), ("llama.embedding_length", U64, 64),
    ("llama.rope.freq_base", F32, 10000.0),
]
ALL_ARRAYS = [
    ("a.u8", ARR, (U8, [0, 1, 255])), ("a.i8", ARR, (I8, [-1, 0, 1])),
    ("a.u16", ARR, (U16, [1, 2])), ("a.i16", ARR, (I16, [-2, 2])),
    ("a.u32", ARR, (U32, [7, 8, 9])), ("a.i32", ARR, (I32, [-7, 8])),
    ("a.f32", ARR, (F32, [0.0, -1.0, 3.25])), ("a.bool", ARR, (BOOL, [True, False])),
    ("a.str", ARR, (STR, ["a", "", "\u00fc\u00f1\u00ee", "<|im_end|>"])),
    ("a.u64", ARR, (U64, [1, 2**40])), ("a.i64", ARR, (I64, [-(2**40)])),
    ("a.f64", ARR, (F64, [2.5, -1e300])), ("a.empty", ARR, (U32, [])),
    ("a.nested", ARR, (ARR, [(U8, [1, 2]), (STR, ["x", "y"]), (ARR, [(I32, [3])])])),
]
TOKENIZER = [
    ("tokenizer.ggml.model", STR, "gpt2"), ("tokenizer.ggml.pre", STR, "smollm"),
    ("tokenizer.ggml.tokens", ARR, (STR, ["<|endoftext|>", "a", "b", "ab", "\u0120", "\u0120a", "<|im_start|>"])),
    ("tokenizer.ggml.token_type", ARR, (I32, [3, 1, 1, 1, 1, 1, 3])),
    ("tokenizer.ggml.scores", ARR, (F32, [0.0, -1.0, -2.0, -0.5, -3.0, -0.25, 0.0])),
    ("tokenizer.ggml.merges", ARR, (STR, ["a b", "\u0120 a"])),
    ("tokenizer.ggml.bos_token_id", U32, 0), ("tokenizer.ggml.eos_token_id", U32, 0),
    ("tokenizer.chat_template", STR, "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"),
]


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "fuzz/corpus/gguf_parse"
    os.makedirs(outdir, exist_ok=True)
    tensors = [
        ("token_embd.weight", [4, 2], "F32", None),
        ("blk.0.attn_q.weight", [32, 2], "Q8_0", None),
        ("output_norm.weight", [8], "F16", None),
    ]
    seeds = {
        "all_types_v3": gguf(ALL_SCALARS + ALL_ARRAYS, tensors),
        "all_types_v2": gguf(ALL_SCALARS + ALL_ARRAYS, tensors, version=2),
        "align64": gguf([("general.alignment", U32, 64)] + ALL_SCALARS[:4], tensors, alignment=64),
        "align8_u64": gguf([("general.alignment", U64, 8)], [("x", [3], "F32", None), ("y", [5], "I8", None)], alignment=8),
        "tokenizer": gguf(ALL_SCALARS[:2] + TOKENIZER, tensors[:1]),
        "metadata_only": gguf(ALL_SCALARS + ALL_ARRAYS),
        "tensors_only": gguf([], [
            ("t4d", [2, 3, 2, 2], "F32", None), ("q4k", [256, 1], "Q4_K", None),
            ("q6k", [256], "Q6_K", None), ("q40", [64], "Q4_0", None), ("q41", [32], "Q4_1", None),
            ("bf", [16, 2], "BF16", None), ("i32", [4], "I32", None), ("f64", [2], "F64", None),
        ]),
        "empty": gguf([]),
        "one_kv": gguf([("k", STR, "v")]),
        "one_tensor": gguf([], [("w", [1], "F32", None)]),
    }
    for name, data in seeds.items():
        with open(os.path.join(outdir, name + ".gguf"), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
