# Runs the HF oracle the way `flashseek logits` runs the engine: the first P tokens in one forward (prefill), then
# one teacher-forced decode step per remaining token through HF's own cache. Also runs HF's full uncached forward
# over all T tokens as a self-consistency check, and records how close every discrete decision came to flipping
# (router top-k, indexer top-k) so a golden whose result hinges on a near-tie can be rejected.
import numpy as np
import torch
import torch.nn.functional as F


class DecisionMargins:
    """Forward hooks that record the smallest gap between the k-th and (k+1)-th candidate of every top-k choice."""

    def __init__(self, model):
        from transformers.models.deepseek_v4 import modeling_deepseek_v4 as m
        self.router_min = float("inf")      # relative gap of (score + bias) at the top-k boundary
        self.indexer_min = float("inf")     # relative gap of the index score at the top-k boundary
        self.indexer_choices = 0            # queries whose valid entries outnumbered index_topk
        self.swiglu_clamped = 0             # routed + shared expert pre-activations beyond the limit
        self.swiglu_total = 0
        self._handles = []
        self._positions = {}
        for name, mod in model.named_modules():
            if isinstance(mod, m.DeepseekV4TopKRouter):
                self._handles.append(mod.register_forward_hook(self._router_hook))
            elif isinstance(mod, m.DeepseekV4Indexer):
                self._handles.append(mod.register_forward_pre_hook(self._indexer_pre_hook))
                self._handles.append(mod.scorer.register_forward_hook(self._make_scorer_hook(mod)))
            elif isinstance(mod, m.DeepseekV4Experts):
                self._handles.append(mod.register_forward_hook(self._experts_hook))
            elif isinstance(mod, m.DeepseekV4MLP):
                self._handles.append(mod.gate_proj.register_forward_hook(self._make_clamp_hook(mod.limit, "gate")))
                self._handles.append(mod.up_proj.register_forward_hook(self._make_clamp_hook(mod.limit, "up")))

    def close(self):
        for h in self._handles:
            h.remove()

    def _router_hook(self, mod, args, out):
        logits = out[0]
        scores = mod.score_fn(logits) + mod.e_score_correction_bias
        top = scores.sort(dim=-1, descending=True).values
        k = mod.top_k
        if top.shape[-1] > k:
            gap = (top[:, k - 1] - top[:, k]) / top[:, k - 1].abs().clamp_min(1e-30)
            self.router_min = min(self.router_min, float(gap.min()))

    def _indexer_pre_hook(self, mod, args):
        self._positions[id(mod)] = args[2]

    def _make_scorer_hook(self, indexer):
        def hook(mod, args, scores):
            pos = self._positions[id(indexer)]  # [B, S]
            n_entries = scores.shape[-1]
            valid = (pos + 1) // indexer.compress_rate  # entries visible to each query
            k = indexer.index_topk
            if k == 0:
                return  # top-0 selects nothing whatever the scores: no decision to be close to a tie
            for b in range(scores.shape[0]):
                for s in range(scores.shape[1]):
                    nv = min(int(valid[b, s]), n_entries)
                    if nv <= k:
                        continue
                    row = scores[b, s, :nv].sort(descending=True).values
                    gap = float((row[k - 1] - row[k]) / row[0].abs().clamp_min(1e-30))
                    self.indexer_min = min(self.indexer_min, gap)
                    self.indexer_choices += 1
        return hook

    def _experts_hook(self, mod, args, out):
        hidden, idx = args[0], args[1]
        for e in idx.unique().tolist():
            if e >= mod.num_experts:
                continue
            rows = (idx == e).any(dim=-1)
            gate, up = F.linear(hidden[rows], mod.gate_up_proj[e]).chunk(2, dim=-1)
            self.swiglu_clamped += int((gate > mod.limit).sum()) + int((up.abs() > mod.limit).sum())
            self.swiglu_total += gate.numel() + up.numel()

    def _make_clamp_hook(self, limit, which):
        def hook(mod, args, out):
            bad = (out > limit) if which == "gate" else (out.abs() > limit)
            self.swiglu_clamped += int(bad.sum())
            self.swiglu_total += out.numel()
        return hook


@torch.no_grad()
def run_prefill_decode(model, tokens, prefill):
    """[T, vocab] fp32 logits: tokens[:prefill] in one forward, then one cached decode step per token."""
    ids = torch.tensor(np.asarray(tokens, dtype=np.int64)).unsqueeze(0)
    out = model(input_ids=ids[:, :prefill], use_cache=True)
    cache = out.cache if hasattr(out, "cache") else out.past_key_values
    rows = [out.logits[0]]
    for t in range(prefill, ids.shape[1]):
        out = model(input_ids=ids[:, t:t + 1], cache=cache, use_cache=True)
        cache = out.cache if hasattr(out, "cache") else out.past_key_values
        rows.append(out.logits[0])
    return torch.cat(rows, dim=0).float().numpy()


@torch.no_grad()
def run_full(model, tokens):
    ids = torch.tensor(np.asarray(tokens, dtype=np.int64)).unsqueeze(0)
    return model(input_ids=ids, use_cache=False).logits[0].float().numpy()


def per_position_rel_err(ours, golden):
    num = np.linalg.norm(ours.astype(np.float64) - golden.astype(np.float64), axis=-1)
    den = np.linalg.norm(golden.astype(np.float64), axis=-1)
    return num / np.maximum(den, 1e-30)
