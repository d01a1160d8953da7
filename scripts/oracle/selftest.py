#!/usr/bin/env python3
# Self-tests of the oracle: the number-format tables against torch's own float8 decoding, FP4 nibble order and
# block scales, the official -> HF name map (a strict load of a complete random checkpoint), and the spec facts
# the oracle relies on but could silently get wrong in HF (YaRN frequencies, Sinkhorn order, comb orientation,
# sliding-window width). Run: python3 scripts/oracle/selftest.py   (needs torch + transformers)
import json
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dev_checkpoint import quant_fp4, quant_fp8, write_dev_checkpoint  # noqa: E402
from official_checkpoint import (E4M3_TABLE, RawTensor, dequant_fp4, dequant_fp8, e8m0_to_f32,  # noqa: E402
                                 read_checkpoint_dir, CheckpointError)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEED = int.from_bytes(os.urandom(4), "little")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def test_e4m3_table():
    codes = torch.arange(256, dtype=torch.uint8)
    ref = codes.view(torch.float8_e4m3fn).float().numpy()
    same = np.array_equal(np.isnan(ref), np.isnan(E4M3_TABLE)) and np.array_equal(
        ref[~np.isnan(ref)], E4M3_TABLE[~np.isnan(E4M3_TABLE)])
    check(same, "e4m3 table equals torch.float8_e4m3fn for all 256 codes")
    e8 = torch.arange(255, dtype=torch.uint8).view(torch.float8_e8m0fnu).float().numpy()
    check(np.array_equal(e8, e8m0_to_f32(np.arange(255, dtype=np.uint8), "x")), "E8M0 equals torch.float8_e8m0fnu")
    try:
        e8m0_to_f32(np.array([255], dtype=np.uint8), "some.scale")
        check(False, "E8M0 byte 255 rejected")
    except CheckpointError as e:
        check("some.scale" in str(e), "E8M0 byte 255 rejected with the tensor name")


def test_fp4_nibbles_and_scales(rng):
    # One row, codes 0..15 then 15..0, packed low nibble first; scales 2^-1 for the first 32 elements, 2^3 after.
    codes = np.array(list(range(16)) + list(range(15, -1, -1)) + [3] * 32, dtype=np.uint8)
    packed = (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8)[None, :]
    scale = np.array([[126, 130]], dtype=np.uint8)
    w = dequant_fp4(RawTensor("w", "I8", packed.shape, packed), RawTensor("s", "F8_E8M0", scale.shape, scale))
    table = [0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6]
    want = np.array([table[c] * (0.5 if i < 32 else 8.0) for i, c in enumerate(codes)], dtype=np.float32)
    check(np.array_equal(w[0], want), "FP4: low nibble is the even element, per-32 E8M0 scales")
    # FP8 with partial edge blocks: dequant(quant(w)) is within half an e4m3 step of w, per 128x128 block.
    x = rng.standard_normal((200, 160)).astype(np.float32)
    c, s = quant_fp8(x)
    deq = dequant_fp8(RawTensor("w", "F8_E4M3", c.shape, c), RawTensor("w.scale", "F8_E8M0", s.shape, s))
    check(s.shape == (2, 2) and np.max(np.abs(deq - x) / (np.abs(x) + 1e-3)) < 0.07,
          "FP8 128x128 blocks with partial edge blocks round-trip")
    ref = (torch.from_numpy(c).view(torch.float8_e4m3fn).float().numpy()
           * np.repeat(np.repeat(np.ldexp(1.0, s.astype(np.int32) - 127), 128, 0), 128, 1)[:200, :160])
    check(np.array_equal(deq, ref.astype(np.float32)), "FP8 dequant equals torch decode x 2^(e-127)")
    x4 = rng.standard_normal((4, 64)).astype(np.float32)
    p4, s4 = quant_fp4(x4)
    d4 = dequant_fp4(RawTensor("w", "I8", p4.shape, p4), RawTensor("s", "F8_E8M0", s4.shape, s4))
    check(np.max(np.abs(d4 - x4)) <= np.max(np.abs(x4)) * 0.25, "FP4 quant/dequant round-trip")


def test_name_map_and_strict_load():
    from hf_model import load_hf_model
    for cfg_name in ("golden-a.json", "golden-b.json"):
        with tempfile.TemporaryDirectory() as d:
            write_dev_checkpoint(os.path.join(REPO, "tests/data/configs", cfg_name), d, SEED)
            model, official = load_hf_model(d)
            sd = model.state_dict()
            t = read_checkpoint_dir(d)
            # Spot-check one mapped tensor per kind against the raw checkpoint.
            emb = (t["embed.weight"].data.astype(np.uint32) << 16).view(np.float32)
            ok = np.array_equal(sd["model.embed_tokens.weight"].numpy(), emb)
            sink = t["layers.0.attn.attn_sink"].data
            ok &= np.array_equal(sd["model.layers.0.self_attn.sinks"].numpy(), sink)
            w1 = dequant_fp4(t["layers.0.ffn.experts.1.w1.weight"], t["layers.0.ffn.experts.1.w1.scale"])
            w3 = dequant_fp4(t["layers.0.ffn.experts.1.w3.weight"], t["layers.0.ffn.experts.1.w3.scale"])
            gu = sd["model.layers.0.mlp.experts.gate_up_proj"][1].numpy()
            ok &= np.array_equal(gu[:w1.shape[0]], w1) and np.array_equal(gu[w1.shape[0]:], w3)
            check(ok, f"{cfg_name}: strict load; embed, sink, expert gate_up = [w1; w3] map exactly")
            # Damaged checkpoint: a missing tensor must be named.
            os.remove(os.path.join(d, "model.safetensors"))
            try:
                load_hf_model(d)
                check(False, "missing weights detected")
            except CheckpointError as e:
                check("no .safetensors" in str(e), f"missing weights file named: {e}")


def test_spec_facts_in_hf():
    from transformers import DeepseekV4Config
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as m
    with open(os.path.join(REPO, "tests/data/configs/golden-a.json")) as f:
        official = json.load(f)
    from hf_model import make_hf_config
    cfg = make_hf_config(official)
    # YaRN per spec §2.10: f_i = theta^(-2i/r); ramp over [low, high]; f_i <- f_i (1 - ramp) + f_i/16 ramp.
    r = official["qk_rope_head_dim"]
    base = np.float64(official["compress_rope_theta"])
    f = base ** (-np.arange(0, r, 2, dtype=np.float64) / r)
    rs = official["rope_scaling"]

    def corr(beta):
        return r * np.log(rs["original_max_position_embeddings"] / (beta * 2 * np.pi)) / (2 * np.log(base))
    low, high = max(np.floor(corr(rs["beta_fast"])), 0), min(np.ceil(corr(rs["beta_slow"])), r - 1)
    ramp = np.clip((np.arange(r // 2) - low) / (high - low), 0, 1)
    want = f * (1 - ramp) + f / rs["factor"] * ramp
    rot = m.DeepseekV4RotaryEmbedding(cfg)
    got = rot.compress_inv_freq.double().numpy()
    check(np.allclose(got, want, rtol=1e-6) and rot.compress_attention_scaling == 1.0,
          f"HF compress RoPE = spec YaRN (low {low:.0f}, high {high:.0f}), no mscale")
    main = rot.main_inv_freq.double().numpy()
    check(np.allclose(main, 10000.0 ** (-np.arange(0, r, 2) / r), rtol=1e-6), "HF main RoPE = theta 10000, no YaRN")
    # Sinkhorn per spec §2.2: row softmax + eps, column normalise, then (iters-1) x (row, column).
    torch.manual_seed(SEED)
    hc = m.DeepseekV4HyperConnection(cfg).float()
    with torch.no_grad():
        hc.fn.normal_(0, 0.05)
        hc.base.normal_(0, 0.5)
        hc.scale.normal_(1, 0.2)
        X = torch.randn(1, 3, cfg.hc_mult, cfg.hidden_size)
        post, comb, collapsed = hc(X)
    x = X.double().numpy().reshape(1, 3, -1)
    x = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + cfg.rms_norm_eps)
    mu = x @ hc.fn.detach().double().numpy().T
    N, eps = cfg.hc_mult, cfg.hc_eps
    sc, b = hc.scale.detach().double().numpy(), hc.base.detach().double().numpy()
    C = (mu[..., 2 * N:] * sc[2] + b[2 * N:]).reshape(1, 3, N, N)
    C = np.exp(C - C.max(-1, keepdims=True))
    C = C / C.sum(-1, keepdims=True) + eps
    C = C / (C.sum(-2, keepdims=True) + eps)
    for _ in range(cfg.hc_sinkhorn_iters - 1):
        C = C / (C.sum(-1, keepdims=True) + eps)
        C = C / (C.sum(-2, keepdims=True) + eps)
    pre = 1 / (1 + np.exp(-(mu[..., :N] * sc[0] + b[:N]))) + eps
    check(np.allclose(comb.double().numpy(), C, rtol=1e-5, atol=1e-7), "HF Sinkhorn order = spec §2.2 step 3")
    check(np.allclose(collapsed.double().numpy(), (pre[..., None] * X.double().numpy()).sum(2), rtol=1e-5,
                      atol=1e-6), "HF pre = sigmoid + eps, collapse = sum_j pre_j X_j")
    src = open(m.__file__).read()
    check("comb.to(dtype).transpose(-1, -2), hidden_states" in src,
          "HF decoder layer consumes comb transposed (X'_k = sum_j C[j,k] X_j, spec §2.2 step 5)")
    # Sliding window: W tokens including the current one (spec §2.4 step 5) in HF's prefill mask.
    from transformers.masking_utils import create_sliding_window_causal_mask
    emb = torch.zeros(1, 40, cfg.hidden_size)
    mask = create_sliding_window_causal_mask(config=cfg, inputs_embeds=emb, attention_mask=None, cache=None,
                                             position_ids=torch.arange(40)[None])
    allowed = (mask[0, 0] == 0).numpy() if mask.dtype != torch.bool else mask[0, 0].numpy()
    W = cfg.sliding_window
    want = np.array([[p - W < j <= p for j in range(40)] for p in range(40)])
    check(np.array_equal(allowed, want), f"HF prefill mask: query p sees keys p-{W - 1}..p ({W} incl. current)")


def main():
    print(f"oracle selftest, seed {SEED}")
    rng = np.random.default_rng(SEED)
    test_e4m3_table()
    test_fp4_nibbles_and_scales(rng)
    test_spec_facts_in_hf()
    test_name_map_and_strict_load()
    if failures:
        print(f"{len(failures)} FAILED (seed {SEED})")
        sys.exit(1)
    print("all oracle self-tests passed")


if __name__ == "__main__":
    main()
