#!/usr/bin/env python3
"""FP8 checkpoints made without rill (issue #35): quantize the committed bf16 fixture
tests/data/kimi_linear_tiny_a to FP8 E4M3 in the two layouts rill loads, and write the script's own
dequantized reference so tests/model/fp8_checkpoint_test.cc can check rill's load against it.

  kimi_linear_fp8_block/    DeepSeek-V3 layout: quant_method fp8, weight_block_size [128, 128],
                            F8_E4M3 `weight` + F32 `weight_scale_inv` [ceil(out/128), ceil(in/128)]
  kimi_linear_fp8_channel/  compressed-tensors float-quantized, strategy channel:
                            F8_E4M3 `weight` + BF16 `weight_scale` [out, 1]

Python 3 standard library only (no numpy, no torch). The E4M3 encoder is written from the format's definition
(every finite value listed, nearest chosen, ties to the even code), not from rill's. reference.json holds, per
quantized tensor, the FNV-1a 64 hash of its dequantized values (code value * scale, as little-endian float32) and a
few sample values; values are exact in float32 because an E4M3 value has a 4-bit significand.

Run from the repository root:  python3 tools/fp8_fixture/make_fp8_checkpoint.py
"""
import bisect
import json
import os
import struct
from array import array

SRC = "tests/data/kimi_linear_tiny_a"
E4M3_MAX = 448.0


def e4m3_value(code):
    s = -1.0 if code & 0x80 else 1.0
    e = (code >> 3) & 0xF
    m = code & 7
    if e == 0xF and m == 7:
        return float("nan")
    if e == 0:
        return s * m * 2.0 ** -9
    return s * (1 + m / 8.0) * 2.0 ** (e - 7)


# Non-negative finite codes 0..126 in increasing value order (the E4M3 codes are monotone in their bits).
POS = [e4m3_value(c) for c in range(127)]


def e4m3_encode(x):
    """Nearest E4M3 code, ties to even, saturating at +-448."""
    sign = 0x80 if (x < 0 or (x == 0 and str(x).startswith("-"))) else 0
    a = abs(x)
    if a >= E4M3_MAX:
        return sign | 126
    i = bisect.bisect_left(POS, a)  # POS[i-1] < a <= POS[i]
    if POS[i] == a:
        return sign | i
    lo, hi = i - 1, i
    dl, dh = a - POS[lo], POS[hi] - a
    if dl < dh:
        c = lo
    elif dh < dl:
        c = hi
    else:
        c = lo if lo % 2 == 0 else hi
    return sign | c


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16_bits_to_float(b):
    return struct.unpack("<f", struct.pack("<I", b << 16))[0]


def float_to_bf16_bits(x):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u += 0x7FFF + ((u >> 16) & 1)
    return (u >> 16) & 0xFFFF


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[b:e])
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt", "producer": "tools/fp8_fixture/make_fp8_checkpoint.py"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def to_floats(dtype, raw):
    if dtype == "BF16":
        return [bf16_bits_to_float(b) for b in array("H", raw)]
    if dtype == "F32":
        return list(array("f", raw))
    raise ValueError(dtype)


def quantize(vals, rows, cols, brow, bcol, scale_dtype):
    """Codes [rows*cols] and scales [ceil(rows/brow), ceil(cols/bcol)] (as stored) with their float values."""
    sr, sc = -(-rows // brow), -(-cols // bcol)
    scales = [0.0] * (sr * sc)
    for bi in range(sr):
        for bj in range(sc):
            amax = 0.0
            for r in range(bi * brow, min(rows, (bi + 1) * brow)):
                for c in range(bj * bcol, min(cols, (bj + 1) * bcol)):
                    amax = max(amax, abs(vals[r * cols + c]))
            s = f32(amax / E4M3_MAX) if amax > 0 else 1.0
            if scale_dtype == "BF16":
                s = bf16_bits_to_float(float_to_bf16_bits(s))
            scales[bi * sc + bj] = s
    codes = bytearray(rows * cols)
    for r in range(rows):
        for c in range(cols):
            codes[r * cols + c] = e4m3_encode(f32(vals[r * cols + c] / scales[(r // brow) * sc + c // bcol]))
    deq = [f32(e4m3_value(codes[r * cols + c]) * scales[(r // brow) * sc + c // bcol])
           for r in range(rows) for c in range(cols)]
    return bytes(codes), scales, [sr, sc], deq


def is_quantized(name, ignore_suffixes):
    if not name.endswith(".weight"):
        return False
    module = name[: -len(".weight")]
    if module.endswith("embed_tokens") or module.endswith("lm_head"):
        return False
    if any(module.endswith(s) for s in ignore_suffixes):
        return False
    # Matrices only: norms and conv taps are vectors (rank 1, or the 3-D conv weights).
    return True


def make(variant):
    src = read_safetensors(os.path.join(SRC, "model.safetensors"))
    with open(os.path.join(SRC, "config.json")) as f:
        config = json.load(f)
    if variant == "block":
        brow, bcol, scale_dtype, scale_suffix = 128, 128, "F32", "weight_scale_inv"
        config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                         "weight_block_size": [128, 128],
                                         "modules_to_not_convert": ["lm_head", "gate"]}
        ignore = [".gate"]
    else:
        brow, bcol, scale_dtype, scale_suffix = 1, None, "BF16", "weight_scale"
        config["quantization_config"] = {
            "quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {
                "targets": ["Linear"], "format": "float-quantized",
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
                            "dynamic": False},
                "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True,
                                      "symmetric": True}}},
            "ignore": ["lm_head", "re:.*block_sparse_moe\\.gate$"]}
        ignore = [".block_sparse_moe.gate"]
    out, ref = {}, {}
    for name, (dtype, shape, raw) in sorted(src.items()):
        if len(shape) != 2 or not is_quantized(name, ignore):
            out[name] = (dtype, shape, raw)
            continue
        rows, cols = shape
        vals = to_floats(dtype, raw)
        codes, scales, sshape, deq = quantize(vals, rows, cols, brow, bcol or cols, scale_dtype)
        out[name] = ("F8_E4M3", shape, codes)
        if scale_dtype == "F32":
            sraw = array("f", scales).tobytes()
        else:
            sraw = array("H", [float_to_bf16_bits(s) for s in scales]).tobytes()
        out[name[: -len("weight")] + scale_suffix] = (scale_dtype, sshape, sraw)
        blob = array("f", deq).tobytes()
        ref[name] = {"fnv1a64": "%016x" % fnv1a64(blob), "numel": len(deq),
                     "first": [repr(v) for v in deq[:4]], "last": repr(deq[-1])}
    dst = os.path.join("tests/data", "kimi_linear_fp8_" + variant)
    os.makedirs(dst, exist_ok=True)
    write_safetensors(os.path.join(dst, "model.safetensors"), out)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(os.path.join(dst, "reference.json"), "w") as f:
        json.dump({"producer": "tools/fp8_fixture/make_fp8_checkpoint.py",
                   "values": "FNV-1a 64 of the dequantized float32 values, little-endian, row-major",
                   "tensors": ref}, f, indent=1, sort_keys=True)
        f.write("\n")
    print(dst, len(ref), "quantized tensors")


if __name__ == "__main__":
    # The encoder against the definition: every code decodes and re-encodes to itself (NaN aside).
    for c in range(256):
        v = e4m3_value(c)
        if v == v and not (c == 0x80):
            assert e4m3_encode(v) == c, (c, v)
    make("block")
    make("channel")
