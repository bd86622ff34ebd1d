#!/usr/bin/env python3
"""How far transformers' own bf16 Kimi Linear is from its fp32 run on the same checkpoint (GPU machine).

design.md §5 bounds rill's CUDA backend (bf16 activations) against the fp32 CPU reference by the per-position
relative L2 error of the logits and the top-1 agreement. This script measures the same two numbers for
transformers itself — the same model loaded with `dtype=torch.bfloat16` against `dtype=torch.float32` — so the
bound can be read against what a bf16 implementation of the model reaches on these tiny random checkpoints.
Nothing of rill is used: checkpoints and prompts come from the committed fixtures (tests/data/kimi_linear_tiny_*,
made by make_kimi_linear_fixtures.py) or, for other checkpoint directories, random prompts.

usage: transformers_bf16_error.py CHECKPOINT_DIR...
"""
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def prompts_of(dir_, vocab):
    ref = os.path.join(dir_, "reference.safetensors")
    if os.path.exists(ref):
        t = load_file(ref)
        keys = sorted((k for k in t if k.startswith("prompt_")), key=lambda k: int(k.split("_")[1]))
        return [(t[k].long(), t.get("logits_" + k.split("_")[1])) for k in keys]
    gen = torch.Generator().manual_seed(7)
    return [(torch.randint(3, vocab, (n,), generator=gen), None) for n in (7, 64, 65, 160, 300)]


def stats(got, ref):
    """Per-position relative L2 and argmax agreement of got against ref, both [T, V] fp32."""
    rel = ((got - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-30)).tolist()
    agree = (got.argmax(-1) == ref.argmax(-1)).tolist()
    return rel, agree


@torch.no_grad()
def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    worst_all = 0.0
    for dir_ in sys.argv[1:]:
        try:
            m32 = AutoModelForCausalLM.from_pretrained(dir_, dtype=torch.float32, attn_implementation="eager").to(dev).eval()
            m16 = AutoModelForCausalLM.from_pretrained(dir_, dtype=torch.bfloat16, attn_implementation="eager").to(dev).eval()
        except Exception as e:  # a checkpoint transformers cannot read: say so, measure the others
            print(f"{dir_}: not loadable by transformers: {type(e).__name__}: {e}")
            continue
        rel_all, agree_all, fixture_err = [], [], 0.0
        for ids, stored in prompts_of(dir_, m32.config.vocab_size):
            ids = ids.view(1, -1).to(dev)
            l32 = m32(input_ids=ids, use_cache=False).logits[0].float()
            l16 = m16(input_ids=ids, use_cache=False).logits[0].float()
            if stored is not None:  # the fp32 run here is the run that made the fixture
                fixture_err = max(fixture_err, (l32.cpu() - stored).abs().max().item())
            rel, agree = stats(l16, l32)
            rel_all += rel
            agree_all += agree
        rel_sorted = sorted(rel_all)
        median, worst = rel_sorted[len(rel_sorted) // 2], rel_sorted[-1]
        worst_all = max(worst_all, worst)
        print(f"{dir_}: transformers bf16 vs fp32 over {len(rel_all)} positions: per-position rel L2 median "
              f"{median:.4f}, worst {worst:.4f}; top-1 agreement {sum(agree_all) / len(agree_all):.4f}"
              f"; fp32 vs stored fixture logits max |diff| {fixture_err:.2e}")
    print(f"worst position over all checkpoints: {worst_all:.4f}")


if __name__ == "__main__":
    main()
