# Builds the HF transformers DeepseekV4ForCausalLM (fp32, CPU, eager attention) that holds exactly the weights of
# an official-layout checkpoint: official config.json -> DeepseekV4Config, official tensor names -> HF names
# (docs/model.md §6), FP8/FP4 dequantized. The state dict is loaded strictly: a missing or unexpected key is
# an error, so a name-map gap can never silently leave an HF-initialised parameter in the oracle.
import json
import re

import numpy as np

from official_checkpoint import CheckpointError, linear_weight, read_checkpoint_dir, to_f32

# Official config keys that must not reach DeepseekV4Config for the fp32 oracle.
_DROP_CONFIG_KEYS = ("quantization_config", "expert_dtype", "torch_dtype", "architectures", "transformers_version",
                     "dtype")

_LAYER_MAP = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "hc_attn_fn": "attn_hc.fn", "hc_attn_base": "attn_hc.base", "hc_attn_scale": "attn_hc.scale",
    "hc_ffn_fn": "ffn_hc.fn", "hc_ffn_base": "ffn_hc.base", "hc_ffn_scale": "ffn_hc.scale",
    "attn.wq_a": "self_attn.q_a_proj.weight",
    "attn.q_norm.weight": "self_attn.q_a_norm.weight",
    "attn.wq_b": "self_attn.q_b_proj.weight",
    "attn.wkv": "self_attn.kv_proj.weight",
    "attn.kv_norm.weight": "self_attn.kv_norm.weight",
    "attn.wo_a": "self_attn.o_a_proj.weight",
    "attn.wo_b": "self_attn.o_b_proj.weight",
    "attn.attn_sink": "self_attn.sinks",
    "attn.compressor.wkv": "self_attn.compressor.kv_proj.weight",
    "attn.compressor.wgate": "self_attn.compressor.gate_proj.weight",
    "attn.compressor.ape": "self_attn.compressor.position_bias",
    "attn.compressor.norm.weight": "self_attn.compressor.kv_norm.weight",
    "attn.indexer.wq_b": "self_attn.compressor.indexer.q_b_proj.weight",
    "attn.indexer.weights_proj": "self_attn.compressor.indexer.scorer.weights_proj.weight",
    "attn.indexer.compressor.wkv": "self_attn.compressor.indexer.kv_proj.weight",
    "attn.indexer.compressor.wgate": "self_attn.compressor.indexer.gate_proj.weight",
    "attn.indexer.compressor.ape": "self_attn.compressor.indexer.position_bias",
    "attn.indexer.compressor.norm.weight": "self_attn.compressor.indexer.kv_norm.weight",
    "ffn.gate.weight": "mlp.gate.weight",
    "ffn.gate.bias": "mlp.gate.e_score_correction_bias",
    "ffn.gate.tid2eid": "mlp.gate.tid2eid",
    "ffn.shared_experts.w1": "mlp.shared_experts.gate_proj.weight",
    "ffn.shared_experts.w3": "mlp.shared_experts.up_proj.weight",
    "ffn.shared_experts.w2": "mlp.shared_experts.down_proj.weight",
}
# Linear modules: the official name is `<module>.weight` (+ `<module>.scale` when quantized).
_LINEARS = {"attn.wq_a", "attn.wq_b", "attn.wkv", "attn.wo_a", "attn.wo_b", "attn.compressor.wkv",
            "attn.compressor.wgate", "attn.indexer.wq_b", "attn.indexer.weights_proj", "attn.indexer.compressor.wkv",
            "attn.indexer.compressor.wgate", "ffn.shared_experts.w1", "ffn.shared_experts.w3",
            "ffn.shared_experts.w2"}
_GLOBAL_MAP = {"embed.weight": "model.embed_tokens.weight", "head.weight": "lm_head.weight",
               "norm.weight": "model.norm.weight", "hc_head_fn": "model.hc_head.hc_fn",
               "hc_head_base": "model.hc_head.hc_base", "hc_head_scale": "model.hc_head.hc_scale"}
# Parameters HF initialises to a constant: the checkpoint must make them random or the test cannot see them.
_MUST_VARY = (r"\.sinks$", r"position_bias$", r"_hc\.base$", r"_hc\.scale$", r"hc_head\.hc_base$",
              r"e_score_correction_bias$")


_LAYER_TYPE = {0: "sliding_attention", 4: "compressed_sparse_attention"}
_HCA = "heavily_compressed_attention"


def hf_config_dict(official):
    """DeepseekV4Config kwargs from an official config.json dict.

    HF reads compress_ratios only with the values 0 / 4 / 128; any other non-overlapping ratio R (official meaning:
    one entry per R tokens, no indexer) goes through HF's explicit layer_types + compress_rates, which hold one HCA
    rate per model."""
    cfg = {k: v for k, v in official.items() if k not in _DROP_CONFIG_KEYS}
    ratios = cfg.get("compress_ratios")
    if ratios is not None:
        main = ratios[:official["num_hidden_layers"]]  # trailing entries belong to MTP layers, which HF lacks
        hca = sorted({r for r in main if r not in (0, 4)})
        if len(hca) > 1:
            raise CheckpointError(f"config.json: compress_ratios has the non-overlapping ratios {hca}: HF transformers "
                                  "holds one rate for all heavily compressed layers")
        if hca and hca[0] != 128:
            del cfg["compress_ratios"]
            cfg["layer_types"] = [_LAYER_TYPE.get(r, _HCA) for r in main]
            cfg["compress_rates"] = {"compressed_sparse_attention": 4, _HCA: hca[0]}
    return cfg


def make_hf_config(official):
    from transformers import DeepseekV4Config
    cfg = DeepseekV4Config(**hf_config_dict(official))
    cfg._attn_implementation = "eager"
    rope = official.get("qk_rope_head_dim")
    if rope is not None and cfg.qk_rope_head_dim != rope:
        # HF stores the rope width as the fraction qk_rope_head_dim / head_dim and truncates it back to an int.
        raise CheckpointError(f"config.json: HF transformers turns qk_rope_head_dim {rope} into "
                              f"{cfg.qk_rope_head_dim} (int(head_dim * {rope} / head_dim)); pick other sizes")
    if official["hidden_size"] % 4 or official["moe_intermediate_size"] % 4:
        # torch's grouped_mm (HF's default experts kernel on CPU) needs 16-byte row strides; the per-expert loop
        # is the same math (docs/oracle-notes.md: agreement within 8.6e-7).
        cfg._experts_implementation = "eager"
    return cfg


def official_to_hf_state_dict(tensors, official_cfg):
    """{hf_name: fp32/int64 numpy array} from {official_name: RawTensor}. MTP tensors are dropped (HF has no MTP)."""
    n_layers = official_cfg["num_hidden_layers"]
    n_experts = official_cfg["n_routed_experts"]
    out = {}
    used = set()

    def take(name):
        used.add(name)
        return tensors[name]

    for name in tensors:
        if name in _GLOBAL_MAP:
            out[_GLOBAL_MAP[name]] = to_f32(take(name))
    layer_re = re.compile(r"^layers\.(\d+)\.(.+)$")
    expert_re = re.compile(r"^ffn\.experts\.(\d+)\.(w[123])\.weight$")
    experts = {}
    for name in list(tensors):
        m = layer_re.match(name)
        if not m:
            continue
        layer, rest = int(m.group(1)), m.group(2)
        if layer >= n_layers:
            raise CheckpointError(f"tensor {name}: layer {layer} >= num_hidden_layers {n_layers}")
        prefix = f"model.layers.{layer}."
        em = expert_re.match(rest)
        if em:
            e, w = int(em.group(1)), em.group(2)
            used.add(name)
            used.add(name[:-len(".weight")] + ".scale")
            experts[(layer, e, w)] = linear_weight(tensors, name[:-len(".weight")])
            continue
        if rest.endswith(".scale") and (rest[:-len(".scale")] in _LINEARS
                                        or re.match(r"^ffn\.experts\.\d+\.w[123]\.scale$", rest)):
            continue  # consumed with its weight
        module = rest[:-len(".weight")] if rest.endswith(".weight") else rest
        if module in _LINEARS:
            used.add(name)
            used.add(f"layers.{layer}.{module}.scale")
            out[prefix + _LAYER_MAP[module]] = linear_weight(tensors, f"layers.{layer}.{module}")
        elif rest in _LAYER_MAP:
            t = take(name)
            out[prefix + _LAYER_MAP[rest]] = t.data.astype(np.int64) if t.dtype == "I64" else to_f32(t)
        else:
            raise CheckpointError(f"tensor {name}: no HF equivalent known (name map, spec §6)")
    for layer in range(n_layers):
        gate_up, down = [], []
        for e in range(n_experts):
            for w in ("w1", "w2", "w3"):
                if (layer, e, w) not in experts:
                    raise CheckpointError(f"missing tensor layers.{layer}.ffn.experts.{e}.{w}.weight")
            gate_up.append(np.concatenate([experts[(layer, e, "w1")], experts[(layer, e, "w3")]], axis=0))
            down.append(experts[(layer, e, "w2")])
        out[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = np.stack(gate_up)
        out[f"model.layers.{layer}.mlp.experts.down_proj"] = np.stack(down)
    leftover = sorted(n for n in tensors if n not in used and not n.startswith("mtp.") and n not in _GLOBAL_MAP
                      and not n.endswith(".scale"))
    if leftover:
        raise CheckpointError(f"tensors not converted: {leftover[:10]}")
    return out


def check_randomized(state_dict):
    """Parameters that HF initialises to 0 or 1 must hold varied values, or the golden cannot test them."""
    problems = []
    for name, arr in state_dict.items():
        if any(re.search(p, name) for p in _MUST_VARY):
            if arr.size > 1 and float(np.std(arr)) == 0.0:
                problems.append(f"{name} is constant ({float(arr.flat[0])})")
            elif arr.size == 1 and float(arr.flat[0]) in (0.0, 1.0):
                problems.append(f"{name} = {float(arr.flat[0])} (HF's init value)")
    if problems:
        raise CheckpointError("checkpoint leaves HF-initialised parameters untested: " + "; ".join(problems))


def load_hf_model(model_dir, n_layers=None):
    """(model, official_config_dict) for the checkpoint folder `model_dir`; fp32, eval mode, strict load.
    n_layers: keep only the first N layers (then hc_head, norm, head), as `flashseek logits --layers N`."""
    import torch
    from transformers import DeepseekV4ForCausalLM

    with open(f"{model_dir}/config.json") as f:
        official = json.load(f)
    tensors = read_checkpoint_dir(model_dir)
    if n_layers:
        if not 1 <= n_layers <= official["num_hidden_layers"]:
            raise CheckpointError(f"n_layers {n_layers} outside [1, {official['num_hidden_layers']}]")
        official = dict(official, num_hidden_layers=n_layers,
                        num_hash_layers=min(n_layers, official.get("num_hash_layers", 3)))
        keep = re.compile(r"^layers\.(\d+)\.")
        tensors = {k: v for k, v in tensors.items()
                   if not keep.match(k) or int(keep.match(k).group(1)) < n_layers}
    sd = official_to_hf_state_dict(tensors, official)
    check_randomized(sd)
    config = make_hf_config(official)
    torch.manual_seed(0)
    model = DeepseekV4ForCausalLM(config).to(torch.float32).eval()
    expected = model.state_dict()
    missing = sorted(set(expected) - set(sd))
    unexpected = sorted(set(sd) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"HF state dict mismatch: missing {missing[:10]}, unexpected {unexpected[:10]}")
    torch_sd = {}
    for k, v in sd.items():
        if tuple(v.shape) != tuple(expected[k].shape):
            raise CheckpointError(f"{k}: shape {v.shape} from the checkpoint, HF expects {tuple(expected[k].shape)}")
        torch_sd[k] = torch.from_numpy(np.ascontiguousarray(v)).to(expected[k].dtype)
    model.load_state_dict(torch_sd, strict=True)
    return model, official
