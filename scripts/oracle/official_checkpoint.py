# Reads a DeepSeek-V4 checkpoint in the official layout (docs/model.md §3) into fp32 numpy arrays.
# The safetensors header is parsed here and every number format is decoded with explicit tables (bf16 by bit
# shift, FP8 e4m3 and FP4 e2m1 by lookup, E8M0 as 2^(e-127)), so this oracle does not share any decoding code
# with the engine or depend on torch's float8 support. FP8/FP4 weights are dequantized exactly (every product
# of a code and a power-of-two scale is representable in fp32).
import json
import os
import struct

import numpy as np


def _e4m3_table():
    table = np.zeros(256, dtype=np.float32)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        exp = (b >> 3) & 0xF
        man = b & 0x7
        if exp == 15 and man == 7:
            table[b] = np.nan
        elif exp == 0:
            table[b] = sign * man * 2.0 ** -9
        else:
            table[b] = sign * (8 + man) * 2.0 ** (exp - 10)
    return table


E4M3_TABLE = _e4m3_table()
E2M1_TABLE = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)
_RAW_DTYPES = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "F64": np.float64, "F8_E4M3": np.uint8,
               "F8_E8M0": np.uint8, "I8": np.uint8, "U8": np.uint8, "I16": np.int16, "I32": np.int32,
               "I64": np.int64, "BOOL": np.bool_}


class CheckpointError(Exception):
    pass


def e8m0_to_f32(raw, name):
    raw = np.asarray(raw, dtype=np.uint8)
    if np.any(raw == 255):
        raise CheckpointError(f"{name}: E8M0 scale byte 255 (NaN)")
    return np.ldexp(np.float32(1.0), raw.astype(np.int32) - 127).astype(np.float32)


class RawTensor:
    def __init__(self, name, dtype, shape, data):
        self.name, self.dtype, self.shape, self.data = name, dtype, tuple(shape), data


def read_safetensors(path):
    """Returns {name: RawTensor} with the raw element arrays (bf16/fp8 kept as unsigned integers)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise CheckpointError(f"{path}: too short for a safetensors header")
    (hlen,) = struct.unpack("<Q", blob[:8])
    if 8 + hlen > len(blob):
        raise CheckpointError(f"{path}: header length {hlen} exceeds the file")
    header = json.loads(blob[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        if dt not in _RAW_DTYPES:
            raise CheckpointError(f"{path}: tensor {name}: unsupported dtype {dt}")
        start, end = info["data_offsets"]
        arr = np.frombuffer(blob, dtype=_RAW_DTYPES[dt], count=(end - start) // np.dtype(_RAW_DTYPES[dt]).itemsize,
                            offset=base + start)
        shape = info["shape"]
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise CheckpointError(f"{path}: tensor {name}: {arr.size} elements for shape {shape}")
        out[name] = RawTensor(name, dt, shape, arr.reshape(shape))
    return out


def read_checkpoint_dir(model_dir):
    """All tensors of a checkpoint folder (one model.safetensors or the shards of model.safetensors.index.json)."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    if not files:
        raise CheckpointError(f"{model_dir}: no .safetensors files")
    tensors = {}
    for fn in files:
        for name, t in read_safetensors(os.path.join(model_dir, fn)).items():
            if name in tensors:
                raise CheckpointError(f"{model_dir}: tensor {name} appears in two files")
            tensors[name] = t
    return tensors


def to_f32(t):
    """Plain (unquantized) tensor to fp32: bf16 by bit shift, f16/f32 by cast."""
    if t.dtype == "BF16":
        return (t.data.astype(np.uint32) << 16).view(np.float32)
    if t.dtype in ("F32", "F16", "F64"):
        return t.data.astype(np.float32)
    raise CheckpointError(f"{t.name}: expected a float tensor, got {t.dtype}")


def _scale_f32(scale):
    if scale.dtype == "F8_E8M0":
        return e8m0_to_f32(scale.data, scale.name)
    if scale.dtype == "F32":
        return scale.data.astype(np.float32)
    raise CheckpointError(f"{scale.name}: scale dtype {scale.dtype} is not F8_E8M0 or F32")


def dequant_fp8(weight, scale, block=128):
    """F8_E4M3 [out, in] with a [ceil(out/128), ceil(in/128)] block scale."""
    w = E4M3_TABLE[weight.data]
    if np.any(np.isnan(w)):
        raise CheckpointError(f"{weight.name}: FP8 NaN code")
    out_dim, in_dim = weight.shape
    s = _scale_f32(scale)
    want = (-(-out_dim // block), -(-in_dim // block))
    if s.shape != want:
        raise CheckpointError(f"{scale.name}: shape {s.shape}, expected {want} for weight {weight.shape}")
    s_full = np.repeat(np.repeat(s, block, axis=0), block, axis=1)[:out_dim, :in_dim]
    return (w * s_full).astype(np.float32)


def dequant_fp4(weight, scale, block=32):
    """I8 [out, in/2] packed e2m1 (low nibble = even element) with an [out, in/32] scale."""
    packed = weight.data.astype(np.uint8)
    out_dim, half = packed.shape
    codes = np.empty((out_dim, half * 2), dtype=np.uint8)
    codes[:, 0::2] = packed & 0x0F
    codes[:, 1::2] = packed >> 4
    w = E2M1_TABLE[codes]
    s = _scale_f32(scale)
    if s.shape != (out_dim, half * 2 // block):
        raise CheckpointError(f"{scale.name}: shape {s.shape}, expected {(out_dim, half * 2 // block)}")
    return (w * np.repeat(s, block, axis=1)).astype(np.float32)


def linear_weight(tensors, prefix):
    """Dequantized fp32 weight of the linear `prefix` (prefix.weight plus prefix.scale when quantized)."""
    name = prefix + ".weight"
    if name not in tensors:
        raise CheckpointError(f"missing tensor {name}")
    w = tensors[name]
    if w.dtype == "F8_E4M3":
        return dequant_fp8(w, _need(tensors, prefix + ".scale"))
    if w.dtype == "I8":
        return dequant_fp4(w, _need(tensors, prefix + ".scale"))
    return to_f32(w)


def _need(tensors, name):
    if name not in tensors:
        raise CheckpointError(f"missing tensor {name}")
    return tensors[name]
