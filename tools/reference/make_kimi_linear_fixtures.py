#!/usr/bin/env python3
"""Tiny Kimi Linear reference fixtures from Hugging Face transformers (run on the GPU machine).

Builds small random checkpoints in the ORIGINAL Moonshot layout (config.json with `linear_attn_config`,
1-based layer lists, `num_experts`, `moe_renormalize`, ...; tensors named `block_sparse_moe.experts.{e}.w1`,
`q_conv1d`, `f_a_proj`, ...), loads each with `AutoModelForCausalLM` (transformers converts the names on
load), and records, in fp32 on the CPU:
  * the logits of every prompt position (one forward over the whole prompt),
  * a 12-token greedy continuation produced with the model's cache (prefill, then one token per step),
    and the logits of each of those decode steps,
  * the hidden state after every decoder layer for one prompt (for layer-by-layer debugging).

Per-head dimensions are the real ones (KDA head_dim 128; MLA kv_lora 512, nope 128, rope 64, v 128) so the
same fixtures exercise the CUDA kernels; hidden size, heads, experts and vocabulary are tiny.

usage: make_kimi_linear_fixtures.py OUT_DIR
"""
import json
import math
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

PROMPT_LENGTHS = [1, 7, 64, 65, 160]
N_GREEDY = 12
HIDDEN_TAP_PROMPT = 3  # index into PROMPT_LENGTHS (65 tokens: one full chunk plus one token)

CONFIGS = {
    # q_proj (no q-LoRA), one dense layer, ungrouped routing, renormalised weights, one shared expert.
    "kimi_linear_tiny_a": dict(
        hidden_size=64, vocab_size=512, num_hidden_layers=4, kda_layers=[1, 2, 4], full_attn_layers=[3],
        kda_heads=2, mla_heads=2, q_lora_rank=None, intermediate_size=128, first_k_dense_replace=1,
        num_experts=8, num_experts_per_token=2, moe_intermediate_size=32, num_shared_experts=1,
        num_expert_group=1, topk_group=1, moe_renormalize=True, routed_scaling_factor=2.446, seed=1234,
        shards=1,
    ),
    # q-LoRA, two dense layers, grouped top-k (4 groups, keep 2), no renormalisation, two shared experts,
    # MLA both early and last, sharded over two files with an index.
    "kimi_linear_tiny_b": dict(
        hidden_size=64, vocab_size=512, num_hidden_layers=5, kda_layers=[1, 3, 4], full_attn_layers=[2, 5],
        kda_heads=2, mla_heads=2, q_lora_rank=32, intermediate_size=96, first_k_dense_replace=2,
        num_experts=16, num_experts_per_token=4, moe_intermediate_size=32, num_shared_experts=2,
        num_expert_group=4, topk_group=2, moe_renormalize=False, routed_scaling_factor=1.5, seed=4321,
        shards=2,
    ),
}

KDA_HEAD_DIM = 128
KV_LORA, NOPE, ROPE, VDIM = 512, 128, 64, 128
CONV_K = 4


def moonshot_config(c):
    return {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "vocab_size": c["vocab_size"],
        "hidden_size": c["hidden_size"],
        "intermediate_size": c["intermediate_size"],
        "num_hidden_layers": c["num_hidden_layers"],
        "num_attention_heads": c["mla_heads"],
        "num_key_value_heads": c["mla_heads"],
        "head_dim": c["hidden_size"] // c["mla_heads"],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "first_k_dense_replace": c["first_k_dense_replace"],
        "moe_layer_freq": 1,
        "moe_intermediate_size": c["moe_intermediate_size"],
        "num_experts": c["num_experts"],
        "num_experts_per_token": c["num_experts_per_token"],
        "num_shared_experts": c["num_shared_experts"],
        "moe_router_activation_func": "sigmoid",
        "moe_renormalize": c["moe_renormalize"],
        "routed_scaling_factor": c["routed_scaling_factor"],
        "use_grouped_topk": True,
        "num_expert_group": c["num_expert_group"],
        "topk_group": c["topk_group"],
        "q_lora_rank": c["q_lora_rank"],
        "kv_lora_rank": KV_LORA,
        "qk_nope_head_dim": NOPE,
        "qk_rope_head_dim": ROPE,
        "v_head_dim": VDIM,
        "mla_use_nope": True,
        "num_nextn_predict_layers": 0,
        "linear_attn_config": {
            "head_dim": KDA_HEAD_DIM,
            "num_heads": c["kda_heads"],
            "short_conv_kernel_size": CONV_K,
            "kda_layers": c["kda_layers"],
            "full_attn_layers": c["full_attn_layers"],
        },
        "model_max_length": 1048576,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "torch_dtype": "bfloat16",
    }


def build_tensors(c, gen):
    """Random weights with O(1) activations: matrices ~ N(0, 1/fan_in), embeddings ~ N(0, 1), norms ~ 1."""
    H, V = c["hidden_size"], c["vocab_size"]
    bf = torch.bfloat16

    def mat(out_f, in_f):
        return (torch.randn(out_f, in_f, generator=gen) / math.sqrt(in_f)).to(bf)

    def norm(n):
        return (1.0 + 0.1 * torch.randn(n, generator=gen)).to(bf)

    t = {
        "model.embed_tokens.weight": torch.randn(V, H, generator=gen).to(bf),
        "model.norm.weight": norm(H),
        "lm_head.weight": mat(V, H),
    }
    P = c["kda_heads"] * KDA_HEAD_DIM
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = norm(H)
        t[p + "post_attention_layernorm.weight"] = norm(H)
        a = p + "self_attn."
        if (i + 1) in c["kda_layers"]:
            for n in ("q", "k", "v"):
                t[a + f"{n}_proj.weight"] = mat(P, H)
                t[a + f"{n}_conv1d.weight"] = (torch.randn(P, 1, CONV_K, generator=gen) / math.sqrt(CONV_K)).float()
            t[a + "f_a_proj.weight"] = mat(KDA_HEAD_DIM, H)
            t[a + "f_b_proj.weight"] = mat(P, KDA_HEAD_DIM)
            t[a + "dt_bias"] = (0.5 * torch.randn(P, generator=gen)).float()
            t[a + "A_log"] = torch.log(torch.empty(1, 1, c["kda_heads"], 1).uniform_(0.3, 3.0, generator=gen)).float()
            t[a + "b_proj.weight"] = mat(c["kda_heads"], H)
            t[a + "g_a_proj.weight"] = mat(KDA_HEAD_DIM, H)
            t[a + "g_b_proj.weight"] = mat(P, KDA_HEAD_DIM)
            t[a + "o_norm.weight"] = norm(KDA_HEAD_DIM)
            t[a + "o_proj.weight"] = mat(H, P)
        else:
            n_h = c["mla_heads"]
            if c["q_lora_rank"] is None:
                t[a + "q_proj.weight"] = mat(n_h * (NOPE + ROPE), H)
            else:
                t[a + "q_a_proj.weight"] = mat(c["q_lora_rank"], H)
                t[a + "q_a_layernorm.weight"] = norm(c["q_lora_rank"])
                t[a + "q_b_proj.weight"] = mat(n_h * (NOPE + ROPE), c["q_lora_rank"])
            t[a + "kv_a_proj_with_mqa.weight"] = mat(KV_LORA + ROPE, H)
            t[a + "kv_a_layernorm.weight"] = norm(KV_LORA)
            t[a + "kv_b_proj.weight"] = mat(n_h * (NOPE + VDIM), KV_LORA)
            t[a + "o_proj.weight"] = mat(H, n_h * VDIM)
        if i < c["first_k_dense_replace"]:
            m = p + "mlp."
            t[m + "gate_proj.weight"] = mat(c["intermediate_size"], H)
            t[m + "up_proj.weight"] = mat(c["intermediate_size"], H)
            t[m + "down_proj.weight"] = mat(H, c["intermediate_size"])
        else:
            m = p + "block_sparse_moe."
            E, I = c["num_experts"], c["moe_intermediate_size"]
            # Router weights scaled up so the sigmoid scores spread out and top-k choices are not near-ties.
            t[m + "gate.weight"] = (3.0 * torch.randn(E, H, generator=gen) / math.sqrt(H)).to(bf)
            t[m + "gate.e_score_correction_bias"] = (0.2 * torch.randn(E, generator=gen)).float()
            for e in range(E):
                t[m + f"experts.{e}.w1.weight"] = mat(I, H)
                t[m + f"experts.{e}.w3.weight"] = mat(I, H)
                t[m + f"experts.{e}.w2.weight"] = mat(H, I)
            S = I * c["num_shared_experts"]
            t[m + "shared_experts.gate_proj.weight"] = mat(S, H)
            t[m + "shared_experts.up_proj.weight"] = mat(S, H)
            t[m + "shared_experts.down_proj.weight"] = mat(H, S)
    return {k: v.contiguous() for k, v in t.items()}


def write_checkpoint(dir_, cfg_json, tensors, shards):
    os.makedirs(dir_, exist_ok=True)
    with open(os.path.join(dir_, "config.json"), "w") as f:
        json.dump(cfg_json, f, indent=2)
    if shards == 1:
        save_file(tensors, os.path.join(dir_, "model.safetensors"), metadata={"format": "pt"})
        return
    names = list(tensors)
    weight_map, total = {}, 0
    for s in range(shards):
        part = names[s::shards]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file({k: tensors[k] for k in part}, os.path.join(dir_, fname), metadata={"format": "pt"})
        for k in part:
            weight_map[k] = fname
            total += tensors[k].numel() * tensors[k].element_size()
    with open(os.path.join(dir_, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)


def check_effective_config(model, c):
    """transformers renames the Moonshot fields; make sure every value it uses is the one we wrote."""
    cfg = model.config
    want = {
        "num_local_experts": c["num_experts"],
        "num_experts_per_tok": c["num_experts_per_token"],
        "n_shared_experts": c["num_shared_experts"],
        "norm_topk_prob": c["moe_renormalize"],
        "n_group": c["num_expert_group"],
        "topk_group": c["topk_group"],
        "q_lora_rank": c["q_lora_rank"],
        "routed_scaling_factor": c["routed_scaling_factor"],
        "linear_num_heads": c["kda_heads"],
        "linear_head_dim": KDA_HEAD_DIM,
        "linear_conv_kernel_dim": CONV_K,
    }
    bad = {k: (getattr(cfg, k, None), v) for k, v in want.items() if getattr(cfg, k, None) != v}
    layer_types = ["linear_attention" if (i + 1) in c["kda_layers"] else "full_attention"
                   for i in range(c["num_hidden_layers"])]
    if list(cfg.layer_types) != layer_types:
        bad["layer_types"] = (cfg.layer_types, layer_types)
    mlp_types = ["dense" if i < c["first_k_dense_replace"] else "sparse" for i in range(c["num_hidden_layers"])]
    if list(cfg.mlp_layer_types) != mlp_types:
        bad["mlp_layer_types"] = (cfg.mlp_layer_types, mlp_types)
    if bad:
        raise SystemExit(f"transformers read the config differently from what was written: {bad}")


@torch.no_grad()
def greedy_with_cache(model, ids):
    out = model(input_ids=ids, use_cache=True)
    cache = out.past_key_values
    tokens, step_logits = [], []
    nxt = out.logits[:, -1].argmax(-1)
    for _ in range(N_GREEDY):
        tokens.append(int(nxt))
        out = model(input_ids=nxt.view(1, 1), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        step_logits.append(out.logits[0, -1].float())
        nxt = out.logits[:, -1].argmax(-1)
    return torch.tensor(tokens, dtype=torch.int32), torch.stack(step_logits)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_root = sys.argv[1]
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    for name, c in CONFIGS.items():
        gen = torch.Generator().manual_seed(c["seed"])
        tensors = build_tensors(c, gen)
        dir_ = os.path.join(out_root, name)
        write_checkpoint(dir_, moonshot_config(c), tensors, c["shards"])

        model, info = AutoModelForCausalLM.from_pretrained(
            dir_, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
        problems = {k: v for k, v in info.items() if v}
        if problems:
            raise SystemExit(f"{name}: loading info not clean: {problems}")
        model.eval()
        check_effective_config(model, c)

        ref = {}
        for p, n in enumerate(PROMPT_LENGTHS):
            ids = torch.randint(3, c["vocab_size"], (1, n), generator=gen)
            with torch.no_grad():
                out = model(input_ids=ids, use_cache=False, output_hidden_states=(p == HIDDEN_TAP_PROMPT))
            ref[f"prompt_{p}"] = ids[0].to(torch.int32)
            ref[f"logits_{p}"] = out.logits[0].float().contiguous()
            if p == HIDDEN_TAP_PROMPT:
                # hidden_states[0] is the embedding, [i+1] the output of layer i (the last one after model.norm).
                ref["hidden_taps"] = torch.stack([h[0].float() for h in out.hidden_states]).contiguous()
                ref["hidden_taps_prompt"] = torch.tensor([p], dtype=torch.int32)
            greedy, step_logits = greedy_with_cache(model, ids)
            ref[f"greedy_{p}"] = greedy
            ref[f"decode_logits_{p}"] = step_logits.contiguous()
            # The cached path must agree with the uncached forward on the first generated token.
            assert int(out.logits[0, -1].argmax()) == int(greedy[0])
        save_file(ref, os.path.join(dir_, "reference.safetensors"), metadata={
            "producer": "tools/reference/make_kimi_linear_fixtures.py",
            "transformers": transformers.__version__, "torch": torch.__version__,
            "prompt_lengths": json.dumps(PROMPT_LENGTHS), "n_greedy": str(N_GREEDY)})
        print(f"{name}: ok ({sum(v.numel() for v in tensors.values())} params)")


if __name__ == "__main__":
    main()
