# Development/self-test helper: writes a random checkpoint in the official DeepSeek-V4 layout (spec §3: FP8 e4m3
# with 128x128 E8M0 block scales, I8-packed FP4 experts with per-32 E8M0 scales, bf16/f32 elsewhere, I64 tid2eid)
# straight from numpy, independently of `flashseek gen-checkpoint`. It lets the converter be tested on its own
# (tests in selftest.py). Committed goldens never come from here; they come from `flashseek gen-checkpoint`.
import json
import struct

import numpy as np

from official_checkpoint import E2M1_TABLE, E4M3_TABLE


def _bf16_bits(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _nearest_code(values, table):
    """Index of the nearest table entry (finite entries only; table may contain NaN)."""
    finite = np.where(np.isnan(table), np.inf, table)
    return np.abs(values[..., None] - finite).argmin(axis=-1).astype(np.uint8)


def quant_fp8(w):
    out_dim, in_dim = w.shape
    nb_o, nb_i = -(-out_dim // 128), -(-in_dim // 128)
    scale = np.zeros((nb_o, nb_i), dtype=np.uint8)
    codes = np.zeros(w.shape, dtype=np.uint8)
    for bo in range(nb_o):
        for bi in range(nb_i):
            blk = w[bo * 128:(bo + 1) * 128, bi * 128:(bi + 1) * 128]
            e = int(np.ceil(np.log2(max(np.abs(blk).max(), 1e-30) / 448.0)))
            scale[bo, bi] = e + 127
            codes[bo * 128:(bo + 1) * 128, bi * 128:(bi + 1) * 128] = _nearest_code(blk / 2.0 ** e, E4M3_TABLE)
    return codes, scale


def quant_fp4(w):
    out_dim, in_dim = w.shape
    blocks = w.reshape(out_dim, in_dim // 32, 32)
    e = np.ceil(np.log2(np.maximum(np.abs(blocks).max(-1), 1e-30) / 6.0)).astype(np.int32)
    codes = _nearest_code(blocks / np.ldexp(1.0, e)[..., None], E2M1_TABLE).reshape(out_dim, in_dim)
    packed = (codes[:, 0::2] & 0xF) | (codes[:, 1::2] << 4)
    return packed.astype(np.uint8), (e + 127).astype(np.uint8)


def official_tensors(cfg, rng):
    """{name: (dtype, array)} for every tensor of the official layout (MTP excluded)."""
    D, V, H, d = cfg["hidden_size"], cfg["vocab_size"], cfg["num_attention_heads"], cfg["head_dim"]
    ql, ol, og = cfg["q_lora_rank"], cfg["o_lora_rank"], cfg["o_groups"]
    E, K, I = cfg["n_routed_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"]
    ih, idim, N = cfg["index_n_heads"], cfg["index_head_dim"], cfg["hc_mult"]
    t = {}

    def lin(name, out_dim, in_dim, kind):
        w = (rng.standard_normal((out_dim, in_dim)) / np.sqrt(in_dim)).astype(np.float32)
        if kind == "fp8":
            c, s = quant_fp8(w)
            t[name + ".weight"], t[name + ".scale"] = ("F8_E4M3", c), ("F8_E8M0", s)
        elif kind == "fp4":
            c, s = quant_fp4(w)
            t[name + ".weight"], t[name + ".scale"] = ("I8", c), ("F8_E8M0", s)
        else:
            t[name + ".weight"] = ("BF16", _bf16_bits(w))

    def vec(name, shape, kind, center=0.0, std=1.0):
        a = (center + std * rng.standard_normal(shape)).astype(np.float32)
        t[name] = ("BF16", _bf16_bits(a)) if kind == "bf16" else ("F32", a)

    t["embed.weight"] = ("BF16", _bf16_bits(rng.standard_normal((V, D)).astype(np.float32)))
    lin("head", V, D, "bf16")
    vec("norm.weight", (D,), "bf16", 1.0, 0.1)
    vec("hc_head_fn", (N, N * D), "f32", 0, 0.05)
    vec("hc_head_base", (N,), "f32", 0, 0.5)
    vec("hc_head_scale", (1,), "f32", 1.0, 0.2)
    for L, ratio in enumerate(cfg["compress_ratios"][:cfg["num_hidden_layers"]]):
        p = f"layers.{L}."
        vec(p + "attn_norm.weight", (D,), "bf16", 1.0, 0.1)
        vec(p + "ffn_norm.weight", (D,), "bf16", 1.0, 0.1)
        for hc in ("hc_attn", "hc_ffn"):
            vec(p + hc + "_fn", ((2 + N) * N, N * D), "f32", 0, 0.05)
            vec(p + hc + "_base", ((2 + N) * N,), "f32", 0, 0.5)
            vec(p + hc + "_scale", (3,), "f32", 1.0, 0.2)
        vec(p + "attn.attn_sink", (H,), "f32", 0, 1.0)
        vec(p + "attn.q_norm.weight", (ql,), "bf16", 1.0, 0.1)
        vec(p + "attn.kv_norm.weight", (d,), "bf16", 1.0, 0.1)
        lin(p + "attn.wq_a", ql, D, "fp8")
        lin(p + "attn.wq_b", H * d, ql, "fp8")
        lin(p + "attn.wkv", d, D, "fp8")
        lin(p + "attn.wo_a", og * ol, H * d // og, "fp8")
        lin(p + "attn.wo_b", D, og * ol, "fp8")
        if ratio:
            c = 2 if ratio == 4 else 1
            lin(p + "attn.compressor.wkv", c * d, D, "bf16")
            lin(p + "attn.compressor.wgate", c * d, D, "bf16")
            vec(p + "attn.compressor.ape", (ratio, c * d), "f32", 0, 0.5)
            vec(p + "attn.compressor.norm.weight", (d,), "bf16", 1.0, 0.1)
        if ratio == 4:
            lin(p + "attn.indexer.wq_b", ih * idim, ql, "fp8")
            lin(p + "attn.indexer.weights_proj", ih, D, "bf16")
            lin(p + "attn.indexer.compressor.wkv", 2 * idim, D, "bf16")
            lin(p + "attn.indexer.compressor.wgate", 2 * idim, D, "bf16")
            vec(p + "attn.indexer.compressor.ape", (4, 2 * idim), "f32", 0, 0.5)
            vec(p + "attn.indexer.compressor.norm.weight", (idim,), "bf16", 1.0, 0.1)
        lin(p + "ffn.gate", E, D, "bf16")
        if L < cfg["num_hash_layers"]:
            t[p + "ffn.gate.tid2eid"] = ("I64", np.stack([rng.permutation(E)[:K] for _ in range(V)]).astype(np.int64))
        else:
            vec(p + "ffn.gate.bias", (E,), "f32", 0, 0.1)
        for w, (o, i) in (("w1", (I, D)), ("w3", (I, D)), ("w2", (D, I))):
            lin(p + f"ffn.shared_experts.{w}", o, i, "fp8")
            for e in range(E):
                lin(p + f"ffn.experts.{e}.{w}", o, i, "fp4")
    return t


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, (dtype, arr) in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_dev_checkpoint(config_path, out_dir, seed):
    import os
    os.makedirs(out_dir, exist_ok=True)
    with open(config_path) as f:
        cfg = json.load(f)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), official_tensors(cfg, np.random.default_rng(seed)))
