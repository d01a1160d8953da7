#!/usr/bin/env python3
"""Independent check of a checkpoint written by `flashseek gen-checkpoint` (test oracle, needs torch + safetensors).

Reads the files with the official `safetensors` library (which validates the headers itself), decodes FP8/E8M0 with
torch's own float8 dtypes and FP4 with the e2m1 table of the spec, and checks the generator's intent: the layout
rules of spec §3 (which tensors exist per layer) and weights ~ N(0, 1/in) after dequantization with varying block
scales. Prints one summary line; exits non-zero on the first violation.

Usage: scripts/check_checkpoint.py MODEL_DIR
"""
import json
import math
import os
import sys

import torch
from safetensors.torch import load_file

E2M1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float32)


def fail(msg):
    print("check_checkpoint: FAIL: " + msg)
    sys.exit(1)


def load(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        shards = sorted(set(json.load(open(index))["weight_map"].values()))
    else:
        shards = ["model.safetensors"]
    tensors = {}
    for s in shards:
        tensors.update(load_file(os.path.join(model_dir, s)))
    return tensors


def scale_values(s):
    if s.dtype == torch.float8_e8m0fnu:
        return s.float()
    if s.dtype == torch.float32:
        return s
    fail(f"scale dtype {s.dtype}")


def dequant(t, name):
    w, s = t[name + ".weight"], scale_values(t[name + ".scale"])
    if w.dtype == torch.float8_e4m3fn:
        out, inp = w.shape
        full = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[:out, :inp]
        return w.float() * full
    if w.dtype == torch.int8:
        b = w.view(torch.uint8).long()
        codes = torch.stack([b & 15, b >> 4], dim=-1).reshape(w.shape[0], w.shape[1] * 2)
        return E2M1[codes] * s.repeat_interleave(32, 1)
    fail(f"{name}: weight dtype {w.dtype}")


def main():
    model_dir = sys.argv[1]
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    t = load(model_dir)
    n_layers = cfg["num_hidden_layers"]
    ratios = cfg["compress_ratios"]
    D = cfg["hidden_size"]
    for L in range(n_layers):
        p = f"layers.{L}."
        hash_layer = L < cfg["num_hash_layers"]
        if (p + "ffn.gate.tid2eid" in t) != hash_layer or (p + "ffn.gate.bias" in t) == hash_layer:
            fail(f"layer {L}: hash-layer tensors wrong")
        if (p + "attn.compressor.ape" in t) != (ratios[L] > 0):
            fail(f"layer {L}: compressor presence wrong for ratio {ratios[L]}")
        if (p + "attn.indexer.weights_proj.weight" in t) != (ratios[L] == 4):
            fail(f"layer {L}: indexer presence wrong for ratio {ratios[L]}")
        if hash_layer:
            ids = t[p + "ffn.gate.tid2eid"]
            if ids.dtype != torch.int64 or ids.min() < 0 or ids.max() >= cfg["n_routed_experts"]:
                fail(f"{p}ffn.gate.tid2eid: ids out of range")
            srt = ids.sort(dim=1).values
            if (srt[:, 1:] == srt[:, :-1]).any():
                fail(f"{p}ffn.gate.tid2eid: repeated id in a row")
    rel, n_scales = [], set()
    for name in sorted(k[:-len(".scale")] for k in t if k.endswith(".scale")):
        W = dequant(t, name).double()
        r = W.std().item() * math.sqrt(W.shape[1])
        if not (0.6 < r < 1.6) or abs(W.mean().item()) * math.sqrt(W.shape[1]) > 0.15:
            fail(f"{name}: dequantized std*sqrt(in) = {r:.3f}, mean {W.mean().item():.4f}")
        rel.append(r * r)
        n_scales.update(scale_values(t[name + ".scale"]).flatten().tolist())
    mean_var = sum(rel) / len(rel)
    if not 0.9 < mean_var < 1.3:
        fail(f"mean of (std*sqrt(in))^2 over linears = {mean_var:.3f}")
    if len(n_scales) < 3:
        fail("block scales do not vary")
    for k, v in t.items():
        if k.endswith("norm.weight"):
            if abs(v.float().mean().item() - 1) > 0.05:
                fail(f"{k}: mean {v.float().mean().item():.3f}, expected about 1")
        if v.is_floating_point() and v.dtype != torch.float8_e8m0fnu and not torch.isfinite(v.float()).all():
            fail(f"{k}: non-finite values")
    emb = t["embed.weight"].float()
    if abs(emb.std().item() - 1) > 0.05 or emb.shape != (cfg["vocab_size"], D):
        fail("embed.weight statistics or shape")
    print(f"check_checkpoint: OK {len(t)} tensors, {len(rel)} quantized linears, "
          f"mean (std*sqrt(in))^2 = {mean_var:.3f}, {len(n_scales)} distinct scale values")


if __name__ == "__main__":
    main()
