#!/usr/bin/env python3
"""Generate the llama.cpp test vectors that `tests/llama_vectors.rs` checks infr-quant against.

The vectors are produced by llama.cpp itself: this script loads ggml's shared library with
ctypes and calls, for every ggml type, the reference dequantizer (`to_float` from
`ggml_get_type_traits`, or `dequantize_row_q8_K`) and the reference quantizer
(`from_float_ref`, or `quantize_row_q8_K_ref`). Stdlib only (ctypes, struct, random).

How to regenerate (from the repository root):

    python3 crates/infr-quant/tests/gen_vectors.py \
        --lib /work/llama/build/bin/libggml-base.so \
        --models models \
        --out crates/infr-quant/tests/vectors

`--lib` defaults to $GGML_BASE_LIB, then /work/llama/build/bin/libggml-base.so; `--models`
defaults to $INFR_TEST_MODELS, then <repo>/models. The library used for the committed vectors
is llama.cpp commit 0c1e57098 (the llama_cpp_python 0.3.36 vendor tree), built for x86-64
without -march=native (ggml-base is plain SSE2 scalar code, no FMA contraction). Output is
deterministic: the random inputs are seeded per type.

File format (all little-endian), one `<type>.bin` per ggml type:

    magic   b"IQV1"
    records until EOF:
        kind      u8     0 = dequantize: bytes -> floats is llama.cpp's to_float
                         1 = quantize:   floats -> bytes is llama.cpp's from_float_ref
        type id   u32    ggml_type
        n_elems   u32
        n_bytes   u32
        bytes     [n_bytes]
        floats    [n_elems] f32

and one `model_<file stem>.bin` per oracle model with records

    magic   b"IQM1"
    records until EOF:
        name_len u16, tensor name (utf-8)
        type id  u32
        offset   u64    absolute byte offset of the tensor data in the GGUF file
        row_elems u32, n_rows u32
        floats   [row_elems * n_rows] f32   llama.cpp's to_float of the first n_rows rows
"""

import argparse
import ctypes
import os
import random
import struct
import sys

QK_K = 256

# (name, id, block_size, type_size) for every type ggml defines (ggml.h / ggml-common.h).
TYPES = [
    ("f32", 0, 1, 4), ("f16", 1, 1, 2), ("q4_0", 2, 32, 18), ("q4_1", 3, 32, 20),
    ("q5_0", 6, 32, 22), ("q5_1", 7, 32, 24), ("q8_0", 8, 32, 34), ("q8_1", 9, 32, 36),
    ("q2_K", 10, 256, 84), ("q3_K", 11, 256, 110), ("q4_K", 12, 256, 144), ("q5_K", 13, 256, 176),
    ("q6_K", 14, 256, 210), ("q8_K", 15, 256, 292), ("iq2_xxs", 16, 256, 66), ("iq2_xs", 17, 256, 74),
    ("iq3_xxs", 18, 256, 98), ("iq1_s", 19, 256, 50), ("iq4_nl", 20, 32, 18), ("iq3_s", 21, 256, 110),
    ("iq2_s", 22, 256, 82), ("iq4_xs", 23, 256, 136), ("bf16", 30, 1, 2), ("iq1_m", 29, 256, 56),
    ("tq1_0", 34, 256, 54), ("tq2_0", 35, 256, 66), ("mxfp4", 39, 32, 17), ("nvfp4", 40, 64, 36),
    ("q1_0", 41, 128, 18), ("q2_0", 42, 64, 18),
]
BY_NAME = {t[0]: t for t in TYPES}
BY_ID = {t[1]: t for t in TYPES}

# Offsets of the f16 scale fields per type (byte offset inside a block) that must hold sane
# finite values; everything else in a block is random.
F16_FIELDS = {
    "q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q5_1": [0, 2], "q8_0": [0], "q8_1": [0, 2],
    "q2_K": [80, 82], "q3_K": [108], "q4_K": [0, 2], "q5_K": [0, 2], "q6_K": [208],
    "iq2_xxs": [0], "iq2_xs": [0], "iq2_s": [0], "iq3_xxs": [0], "iq3_s": [0], "iq1_s": [0],
    "iq4_nl": [0], "iq4_xs": [0], "tq1_0": [52], "tq2_0": [64], "q1_0": [0], "q2_0": [0],
}

DEQUANT_ELEMS = 4096
QUANT_ELEMS = 12288


class TypeTraits(ctypes.Structure):
    # struct ggml_type_traits in ggml/include/ggml.h
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


ROW_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class Ggml:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
        self.lib.ggml_get_type_traits.argtypes = [ctypes.c_int]

    def traits(self, type_id):
        return self.lib.ggml_get_type_traits(type_id).contents

    def to_float_fn(self, name):
        t = BY_NAME[name]
        if name == "q8_K":
            return ROW_FN(ctypes.cast(self.lib.dequantize_row_q8_K, ctypes.c_void_p).value)
        tr = self.traits(t[1])
        assert tr.blck_size == t[2] and tr.type_size == t[3], name
        return ROW_FN(tr.to_float) if tr.to_float else None

    def from_float_fn(self, name):
        t = BY_NAME[name]
        if name == "q8_K":
            return ROW_FN(ctypes.cast(self.lib.quantize_row_q8_K_ref, ctypes.c_void_p).value)
        tr = self.traits(t[1])
        return ROW_FN(tr.from_float_ref) if tr.from_float_ref else None

    def dequantize(self, name, data):
        _, _, bs, ts = BY_NAME[name]
        assert len(data) % ts == 0
        n = len(data) // ts * bs
        src = ctypes.create_string_buffer(bytes(data), len(data))
        dst = (ctypes.c_float * n)()
        self.to_float_fn(name)(ctypes.addressof(src), ctypes.addressof(dst), n)
        return bytes(dst)

    def quantize(self, name, floats_bytes):
        _, _, bs, ts = BY_NAME[name]
        n = len(floats_bytes) // 4
        assert n % bs == 0
        src = ctypes.create_string_buffer(floats_bytes, len(floats_bytes))
        dst = ctypes.create_string_buffer(n // bs * ts)  # zero-filled
        self.from_float_fn(name)(ctypes.addressof(src), ctypes.addressof(dst), n)
        return dst.raw


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def sane_f16(rng):
    mag = 10 ** rng.uniform(-3, 0)
    return f16_bits(mag if rng.random() < 0.5 else -mag)


def random_blocks(name, nblocks, rng):
    """Random bytes for `nblocks` blocks with the scale fields forced to sane values."""
    _, _, bs, ts = BY_NAME[name]
    out = bytearray()
    for ib in range(nblocks):
        b = bytearray(rng.getrandbits(8) for _ in range(ts))
        for off in F16_FIELDS.get(name, []):
            b[off:off + 2] = struct.pack("<H", sane_f16(rng))
        if name == "q8_K":
            mag = 10 ** rng.uniform(-5, -1)
            b[0:4] = struct.pack("<f", mag if rng.random() < 0.5 else -mag)
        elif name == "iq1_m":
            # The f16 scale lives in the top nibble of each of the four u16 at offset 48.
            d = sane_f16(rng)
            for k in range(4):
                w = struct.unpack_from("<H", b, 48 + 2 * k)[0]
                w = (w & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12)
                struct.pack_into("<H", b, 48 + 2 * k, w)
        elif name == "mxfp4":
            # E8M0 exponent: edge values in the first blocks, then around 2^0.
            edges = [0, 1, 2, 127, 200, 254, 255]
            b[0] = edges[ib] if ib < len(edges) else rng.randint(100, 150)
        out += b
    return bytes(out)


def plain_dequant_input(name, rng):
    if name == "f16":
        return struct.pack("<65536H", *range(65536))  # every half, including NaN/inf/subnormals
    if name == "bf16":
        specials = [0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x0001, 0x8001, 0x3f80]
        vals = specials + [rng.getrandbits(16) for _ in range(DEQUANT_ELEMS - len(specials))]
        return struct.pack("<%dH" % len(vals), *vals)
    raise ValueError(name)


def quant_input(name, rng):
    """Rows exercising the quantizers' paths: gaussians of many scales, one-signed blocks, all
    zeros, constants, outliers, sparse blocks. Block 0 is never all zero."""
    _, _, bs, _ = BY_NAME[name]
    if bs == 1:
        if name in ("f16", "bf16"):
            vals = []
            while len(vals) < QUANT_ELEMS // 2:
                v = struct.unpack("<f", struct.pack("<I", rng.getrandbits(32)))[0]
                vals.append(v)  # any bit pattern: NaN, inf, subnormals
            vals += [rng.gauss(0, 1) * 10 ** rng.uniform(-8, 5) for _ in range(QUANT_ELEMS // 2)]
            vals[:6] = [65504.0, 65520.0, 6.0e-8, 2.9e-8, -0.0, 1.0 + 2 ** -11]
            return struct.pack("<%df" % len(vals), *vals)
        raise ValueError(name)
    group = max(bs, 32)
    vals = []
    ngroups = QUANT_ELEMS // group
    for g in range(ngroups):
        kind = g % 11
        scale = 10 ** rng.uniform(-3, 1)
        if kind in (0, 1, 2, 3) or g == 0:
            blk = [rng.gauss(0, scale) for _ in range(group)]
        elif kind == 4:
            blk = [rng.uniform(0.1, 1) * scale for _ in range(group)]
        elif kind == 5:
            blk = [0.0] * group
        elif kind == 6:
            blk = [scale] * group
        elif kind == 7:
            blk = [rng.gauss(0, scale * 0.01) for _ in range(group)]
            blk[rng.randrange(group)] = scale * rng.choice([-1, 1]) * 5
        elif kind == 8:
            blk = [rng.gauss(0, scale) if rng.random() < 0.1 else 0.0 for _ in range(group)]
        elif kind == 9:
            blk = [-abs(rng.gauss(0, scale)) for _ in range(group)]
        else:
            # Mixed sub-blocks of 32: gaussian, zero, constant, tiny.
            blk = []
            for _ in range(group // 32):
                c = rng.randrange(4)
                s = 10 ** rng.uniform(-3, 1)
                blk += [[rng.gauss(0, s) for _ in range(32)], [0.0] * 32, [s] * 32,
                        [rng.gauss(0, 1e-7) for _ in range(32)]][c]
        vals += blk
    vals = [struct.unpack("<f", struct.pack("<f", v))[0] for v in vals]
    return struct.pack("<%df" % len(vals), *vals)


def record(kind, type_id, qbytes, fbytes):
    return struct.pack("<BIII", kind, type_id, len(fbytes) // 4, len(qbytes)) + qbytes + fbytes


def gen_type(g, name, out_dir):
    _, tid, bs, ts = BY_NAME[name]
    rng = random.Random(0x1F0 + tid)
    recs = []
    if g.to_float_fn(name) is not None:
        if bs == 1:
            data = plain_dequant_input(name, rng)
        else:
            data = random_blocks(name, DEQUANT_ELEMS // bs, rng)
        recs.append(record(0, tid, data, g.dequantize(name, data)))
    if g.from_float_fn(name) is not None and name not in ("iq2_s", "iq3_xxs", "iq3_s"):
        fl = quant_input(name, rng)
        recs.append(record(1, tid, g.quantize(name, fl), fl))
    if not recs:
        return None
    path = os.path.join(out_dir, name + ".bin")
    with open(path, "wb") as f:
        f.write(b"IQV1" + b"".join(recs))
    return path, [("dequant", "quant")[r[0]] for r in recs]


# ---- minimal GGUF reader (just enough to find tensor data) ----

def gguf_tensors(path):
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # header and tensor table are far smaller

    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def take_str():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def skip_value(vt):
        nonlocal pos
        if vt in scalar:
            return take(scalar[vt])
        if vt == 8:
            return take_str()
        if vt == 9:
            et = take("I")
            n = take("Q")
            return [skip_value(et) for _ in range(n)]
        raise ValueError("bad gguf value type %d" % vt)

    assert data[:4] == b"GGUF"
    pos = 4
    _version = take("I")
    n_tensors = take("Q")
    n_kv = take("Q")
    alignment = 32
    for _ in range(n_kv):
        key = take_str()
        v = skip_value(take("I"))
        if key == "general.alignment":
            alignment = v
    tensors = []
    for _ in range(n_tensors):
        name = take_str()
        nd = take("I")
        dims = [take("Q") for _ in range(nd)]
        ty = take("I")
        off = take("Q")
        tensors.append((name, dims, ty, off))
    data_start = (pos + alignment - 1) // alignment * alignment
    return data_start, tensors


MODELS = [
    "smollm2-135m-instruct-q4_1.gguf",
    "gemma3-270m-q4_k_m.gguf",
    "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf",
]


def gen_model(g, model_path, out_dir, n_rows=2):
    data_start, tensors = gguf_tensors(model_path)
    seen = {}
    for name, dims, ty, off in tensors:
        if ty not in seen and ty in BY_ID and len(dims) >= 2:
            seen[ty] = (name, dims, ty, off)
    for name, dims, ty, off in tensors:  # 1-d only types (norm weights)
        if ty not in seen and ty in BY_ID:
            seen[ty] = (name, dims, ty, off)
    recs = []
    summary = []
    with open(model_path, "rb") as f:
        for ty in sorted(seen):
            name, dims, _, off = seen[ty]
            tname, _, bs, ts = BY_ID[ty]
            row = dims[0]
            rows = min(n_rows, max(1, int(__import__("math").prod(dims[1:]))))
            nbytes = row // bs * ts * rows
            f.seek(data_start + off)
            raw = f.read(nbytes)
            if tname == "f32":
                fl = raw  # ggml-base has no to_float for F32: it is the identity
            else:
                fl = g.dequantize(tname, raw)
            nb = name.encode()
            recs.append(struct.pack("<H", len(nb)) + nb + struct.pack("<IQII", ty, data_start + off, row, rows) + fl)
            summary.append("%s:%s" % (tname, name))
    stem = os.path.basename(model_path)[: -len(".gguf")]
    path = os.path.join(out_dir, "model_%s.bin" % stem)
    with open(path, "wb") as f:
        f.write(b"IQM1" + b"".join(recs))
    return path, summary


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.abspath(os.path.join(here, "..", "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=os.environ.get("GGML_BASE_LIB", "/work/llama/build/bin/libggml-base.so"))
    ap.add_argument("--models", default=os.environ.get("INFR_TEST_MODELS", os.path.join(repo, "models")))
    ap.add_argument("--out", default=os.path.join(here, "vectors"))
    args = ap.parse_args()

    g = Ggml(args.lib)
    os.makedirs(args.out, exist_ok=True)
    for name, *_ in TYPES:
        r = gen_type(g, name, args.out)
        print("%-8s %s" % (name, "-" if r is None else " ".join(r[1])))
    for m in MODELS:
        p = os.path.join(args.models, m)
        if not os.path.exists(p):
            print("missing model %s: not generating its vectors" % p, file=sys.stderr)
            continue
        path, summary = gen_model(g, p, args.out)
        print(os.path.basename(path), " ".join(summary))


if __name__ == "__main__":
    main()
