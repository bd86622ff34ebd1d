#!/usr/bin/env python3
"""Tiny Kimi K3 reference fixtures from the independent PyTorch reference (tools/reference/kimi_k3_reference.py).

Builds small random checkpoints in the REAL Kimi K3 layout (root config `model_type: kimi_k3` with `text_config`
(`model_type: kimi_linear`) and `quantization_config` (compressed-tensors `mxfp4-pack-quantized`) inside it; tensors
under `language_model.`; routed experts as MXFP4 `weight_packed` U8 + E8M0 `weight_scale` U8; `A_log` F32 [128]
zero-padded; conv / dt_bias / A_log / o_norm / e_score_correction_bias F32, the rest BF16), reads them back with
the reference's own loader and records (computed in fp64, stored as F32) exactly what the Kimi Linear fixtures record
(tools/reference/make_kimi_linear_fixtures.py; read by tests/model/fixture.{h,cc}):
  prompt_N          I32 [len]        random prompt ids in [3, vocab)
  logits_N          F32 [len, vocab] logits of every prompt position (one forward over the whole prompt)
  greedy_N          I32 [12]         greedy continuation through the state (prefill, then one token per step)
  decode_logits_N   F32 [12, vocab]  logits of each of those decode steps (step i fed greedy_N[i])
  hidden_taps       F32 [L+1, 65, H] per-layer hidden states of prompt 3 (see kimi_k3_reference.py note A6)
  hidden_taps_prompt I32 [1]         = 3
with prompt lengths 1, 7, 64, 65, 160 (one KDA chunk, chunk + 1, 2.5 chunks).

Prompts are redrawn (deterministically) until no MoE top-k / group choice is within 1e-4 of a tie and no greedy
argmax is within 2e-3 of a tie and the continuation avoids eos, so a correct fp32 implementation cannot flip them.

usage (GPU machine, or any machine with PyTorch >= 1.13):
  python3 tools/reference/make_kimi_k3_fixtures.py --out tests/data      # write + verify the fixtures
  python3 tools/reference/make_kimi_k3_fixtures.py --self-check          # all checks, fixtures in a temp dir only
Verification (always run, fatal on failure): MXFP4 pack/unpack round trip; chunked vs recurrent KDA; the Kimi
Linear mode of the reference vs the transformers-made tests/data/kimi_linear_tiny_* fixtures; per K3 fixture:
config parses back, tensor names/dtypes/shapes of the real layout, A_log tail zero, vision tensors skipped,
one-shot vs token-by-token vs split-prefill logits (<= 1e-4), decode logits vs uncached forward, non-degenerate
logits.
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the GPU machine has no internet; never wait on the hub

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kimi_k3_reference import (  # noqa: E402
    KimiReference, RefConfig, canonical_weights, fp4_code_values, kda_chunked, kda_recurrent, l2norm,
    load_model, load_raw_tensors, mxfp4_dequantize, mxfp4_pack, read_safetensors, try_transformers_kda_kernels,
    write_safetensors)
import torch  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PROMPT_LENGTHS = [1, 7, 64, 65, 160]
N_GREEDY = 12
HIDDEN_TAP_PROMPT = 3
ROUTER_MARGIN = 1e-4
GREEDY_MARGIN = 2e-3
TOL = 1e-4          # Kimi Linear fixture agreement (transformers ran in fp32)
TOL_FP64 = 1e-9     # self-consistency of the fp64 reference (one-shot vs token-by-token, ...)
TOL_FP32 = 5e-4     # the same checks when run with --dtype float32 (fp32 rounding noise)
FP32_VS_FIXTURE = 1e-3  # an fp32 run of this reference must be this close to the fp64 fixture

KDA_HEAD_DIM = 128
KV_LORA, NOPE, ROPE, VDIM = 512, 128, 64, 128
CONV_K = 4
BOS, EOS, PAD, MEDIA = 1, 2, 0, 3

CONFIGS = {
    # Real K3 betas / lower bound / scaling; block size 2 over 7 layers (snapshots at 0,2,4,6 -> 4 blocks, final
    # mix over 5 candidates); MLA at 1-based 3, 6, 7 (the double-MLA tail); 2 KDA heads, 1 MLA head; ungrouped
    # routing; 2 shared experts; latent width 32 != hidden 64; a larger gate gain so the SiTU tanh cap matters.
    "kimi_k3_tiny_a": dict(
        hidden_size=64, vocab_size=512, num_hidden_layers=7, full_attn_layers=[3, 6, 7], attn_res_block_size=2,
        kda_heads=2, mla_heads=1, q_lora_rank=32, intermediate_size=128, first_k_dense_replace=1,
        num_experts=8, num_experts_per_token=2, moe_intermediate_size=32, routed_expert_hidden_size=32,
        num_shared_experts=2, num_expert_group=1, topk_group=1, moe_renormalize=True, routed_scaling_factor=1.0,
        situ_beta=4.0, situ_linear_beta=25.0, gate_lower_bound=-5.0, gate_gain=2.5, seed=31337, shards=1,
        vision_tensors=False,
    ),
    # Non-default betas (1.5 / 3.0: both soft caps active) and lower bound (-4); block size 3 over 8 layers
    # (snapshots at 0,3,6); MLA only at 1-based 7, 8; 1 KDA head, 2 MLA heads; two dense layers; grouped top-k
    # (4 groups, keep 2) of 16 experts, top-4, no renormalisation, scaling 2.5; 3 shared experts; latent 96 > hidden;
    # two shards with an index; two vision tensors that loaders must skip.
    "kimi_k3_tiny_b": dict(
        hidden_size=64, vocab_size=512, num_hidden_layers=8, full_attn_layers=[7, 8], attn_res_block_size=3,
        kda_heads=1, mla_heads=2, q_lora_rank=48, intermediate_size=96, first_k_dense_replace=2,
        num_experts=16, num_experts_per_token=4, moe_intermediate_size=32, routed_expert_hidden_size=96,
        num_shared_experts=3, num_expert_group=4, topk_group=2, moe_renormalize=False, routed_scaling_factor=2.5,
        situ_beta=1.5, situ_linear_beta=3.0, gate_lower_bound=-4.0, gate_gain=1.0, seed=27182, shards=2,
        vision_tensors=True,
    ),
    # Issue #15's configuration, where the CUDA path once diverged from the CPU at the second MLA layer: hidden
    # 256 and vocab 1024, 2 MLA heads with q-LoRA 64 at the real head dims, MLA at 1-based 4 (isolated) and 6, 7
    # (adjacent), 2 KDA heads, 16 experts top-4 ungrouped, 2 shared, expert width 64, latent 128, scaling 1.5.
    "kimi_k3_tiny_c": dict(
        hidden_size=256, vocab_size=1024, num_hidden_layers=7, full_attn_layers=[4, 6, 7], attn_res_block_size=3,
        kda_heads=2, mla_heads=2, q_lora_rank=64, intermediate_size=512, first_k_dense_replace=1,
        num_experts=16, num_experts_per_token=4, moe_intermediate_size=64, routed_expert_hidden_size=128,
        num_shared_experts=2, num_expert_group=1, topk_group=1, moe_renormalize=True, routed_scaling_factor=1.5,
        situ_beta=4.0, situ_linear_beta=25.0, gate_lower_bound=-5.0, gate_gain=1.0, seed=15015, shards=1,
        vision_tensors=False,
    ),
}

QUANTIZATION_CONFIG = {
    "quant_method": "compressed-tensors",
    "format": "mxfp4-pack-quantized",
    "quantization_status": "compressed",
    "config_groups": {
        "group_0": {
            "format": "mxfp4-pack-quantized",
            "targets": ["Linear"],
            "weights": {"type": "float", "num_bits": 4, "strategy": "group", "group_size": 32, "symmetric": True,
                        "dynamic": False, "scale_dtype": "torch.uint8", "actorder": None, "block_structure": None},
            "input_activations": None,
            "output_activations": None,
        }
    },
    "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", r"re:.*mlp\.(gate|up|gate_up|down)_proj.*",
               "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*"],
}


def kda_layers_of(c):
    return [i for i in range(1, c["num_hidden_layers"] + 1) if i not in c["full_attn_layers"]]


def k3_config(c):
    H = c["hidden_size"]
    text = {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "vocab_size": c["vocab_size"],
        "hidden_size": H,
        "num_hidden_layers": c["num_hidden_layers"],
        "intermediate_size": c["intermediate_size"],
        "num_attention_heads": c["mla_heads"],
        "num_key_value_heads": c["mla_heads"],
        "head_dim": H // c["mla_heads"],
        "hidden_act": "situ",
        "activation_situ_beta": c["situ_beta"],
        "activation_situ_linear_beta": c["situ_linear_beta"],
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 1048576,
        "q_lora_rank": c["q_lora_rank"],
        "kv_lora_rank": KV_LORA,
        "qk_nope_head_dim": NOPE,
        "qk_rope_head_dim": ROPE,
        "v_head_dim": VDIM,
        "mla_use_nope": True,
        "mla_use_output_gate": True,
        "first_k_dense_replace": c["first_k_dense_replace"],
        "moe_layer_freq": 1,
        "num_experts": c["num_experts"],
        "num_experts_per_token": c["num_experts_per_token"],
        "num_shared_experts": c["num_shared_experts"],
        "moe_intermediate_size": c["moe_intermediate_size"],
        "routed_expert_hidden_size": c["routed_expert_hidden_size"],
        "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid",
        "moe_renormalize": c["moe_renormalize"],
        "routed_scaling_factor": c["routed_scaling_factor"],
        "use_grouped_topk": True,
        "num_expert_group": c["num_expert_group"],
        "topk_group": c["topk_group"],
        "topk_method": "noaux_tc",
        "num_nextn_predict_layers": 0,
        "attn_res_block_size": c["attn_res_block_size"],
        "tie_word_embeddings": False,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "linear_attn_config": {
            "head_dim": KDA_HEAD_DIM,
            "num_heads": c["kda_heads"],
            "short_conv_kernel_size": CONV_K,
            "gate_lower_bound": c["gate_lower_bound"],
            "use_full_rank_gate": True,
            "kda_layers": kda_layers_of(c),
            "full_attn_layers": c["full_attn_layers"],
        },
        "quantization_config": QUANTIZATION_CONFIG,
        "torch_dtype": "bfloat16",
    }
    return {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "model_type": "kimi_k3",
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "media_placeholder_token_id": MEDIA,
        "tie_word_embeddings": False,
        "text_config": text,
        # Out of scope for text-only loaders; present because the real config has it.
        "vision_config": {"model_type": "moonvit", "patch_size": 14, "vt_hidden_size": 16,
                          "vt_num_hidden_layers": 1, "mm_projector_type": "patchmergerv2"},
        "torch_dtype": "bfloat16",
    }


def random_mxfp4(out_f, in_f, gen, gain=1.0):
    """Random MXFP4 weight with std ~ gain / sqrt(in_f): uniform random E2M1 codes (including -0) and per-group
    E8M0 scales around the matching power of two. Returns (packed U8 [out, in/2], scale U8 [out, in/32])."""
    assert in_f % 32 == 0
    codes = torch.randint(0, 16, (out_f, in_f), generator=gen)
    code_rms = float(fp4_code_values().pow(2).mean().sqrt())
    s0 = 127 + round(math.log2(gain / math.sqrt(in_f) / code_rms))
    scale = (s0 + torch.randint(-1, 2, (out_f, in_f // 32), generator=gen)).to(torch.uint8)
    c2 = codes.reshape(out_f, in_f // 2, 2)
    packed = (c2[..., 0] | (c2[..., 1] << 4)).to(torch.uint8)
    return packed, scale


def build_tensors(c, gen):
    """The checkpoint tensors under their real K3 names and dtypes (spec §2.3)."""
    H, V = c["hidden_size"], c["vocab_size"]
    bf, f32 = torch.bfloat16, torch.float32
    pre = "language_model."

    def mat(out_f, in_f, gain=1.0):
        return (gain * torch.randn(out_f, in_f, generator=gen) / math.sqrt(in_f)).to(bf)

    def norm(n, dtype=bf):
        return (1.0 + 0.1 * torch.randn(n, generator=gen)).to(dtype)

    def res_proj():  # AttnRes pseudo-query: |w| ~ 1.5 so the depth softmax is neither uniform nor one-hot
        return (1.5 * torch.randn(1, H, generator=gen) / math.sqrt(H)).to(bf)

    t = {
        pre + "model.embed_tokens.weight": torch.randn(V, H, generator=gen).to(bf),
        pre + "model.norm.weight": norm(H),
        pre + "model.output_attn_res_norm.weight": norm(H),
        pre + "model.output_attn_res_proj.weight": res_proj(),
        pre + "lm_head.weight": mat(V, H),
    }
    Hk = c["kda_heads"]
    P = Hk * KDA_HEAD_DIM
    for i in range(c["num_hidden_layers"]):
        p = pre + f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = norm(H)
        t[p + "post_attention_layernorm.weight"] = norm(H)
        t[p + "self_attention_res_norm.weight"] = norm(H)
        t[p + "self_attention_res_proj.weight"] = res_proj()
        t[p + "mlp_res_norm.weight"] = norm(H)
        t[p + "mlp_res_proj.weight"] = res_proj()
        a = p + "self_attn."
        if (i + 1) not in c["full_attn_layers"]:
            for n in ("q", "k", "v"):
                t[a + f"{n}_proj.weight"] = mat(P, H)
                t[a + f"{n}_conv1d.weight"] = (torch.randn(P, 1, CONV_K, generator=gen) / math.sqrt(CONV_K)).to(f32)
            t[a + "f_a_proj.weight"] = mat(KDA_HEAD_DIM, H)
            t[a + "f_b_proj.weight"] = mat(P, KDA_HEAD_DIM)
            # Negative dt_bias: most decays are slow (state carries across chunks), some channels forget fast.
            t[a + "dt_bias"] = (-2.5 + 0.5 * torch.randn(P, generator=gen)).to(f32)
            a_log = torch.zeros(KDA_HEAD_DIM, dtype=f32)  # padded to head_dim, tail exactly 0 (spec §2.3)
            a_log[:Hk] = torch.log(torch.empty(Hk).uniform_(0.3, 3.0, generator=gen))
            t[a + "A_log"] = a_log
            t[a + "b_proj.weight"] = mat(Hk, H)
            t[a + "g_proj.weight"] = mat(P, H)
            t[a + "o_norm.weight"] = norm(KDA_HEAD_DIM, f32)
            t[a + "o_proj.weight"] = mat(H, P)
        else:
            n_h = c["mla_heads"]
            t[a + "q_a_proj.weight"] = mat(c["q_lora_rank"], H)
            t[a + "q_a_layernorm.weight"] = norm(c["q_lora_rank"])
            t[a + "q_b_proj.weight"] = mat(n_h * (NOPE + ROPE), c["q_lora_rank"])
            t[a + "kv_a_proj_with_mqa.weight"] = mat(KV_LORA + ROPE, H)
            t[a + "kv_a_layernorm.weight"] = norm(KV_LORA)
            t[a + "kv_b_proj.weight"] = mat(n_h * (NOPE + VDIM), KV_LORA)
            t[a + "g_proj.weight"] = mat(n_h * VDIM, H)
            t[a + "o_proj.weight"] = mat(H, n_h * VDIM)
        gg = c["gate_gain"]
        if i < c["first_k_dense_replace"]:
            m = p + "mlp."
            t[m + "gate_proj.weight"] = mat(c["intermediate_size"], H, gg)
            t[m + "up_proj.weight"] = mat(c["intermediate_size"], H)
            t[m + "down_proj.weight"] = mat(H, c["intermediate_size"])
        else:
            m = p + "block_sparse_moe."
            E, I, X = c["num_experts"], c["moe_intermediate_size"], c["routed_expert_hidden_size"]
            t[m + "gate.weight"] = (3.0 * torch.randn(E, H, generator=gen) / math.sqrt(H)).to(bf)
            t[m + "gate.e_score_correction_bias"] = (0.2 * torch.randn(E, generator=gen)).to(f32)
            t[m + "routed_expert_down_proj.weight"] = mat(X, H)
            t[m + "routed_expert_norm.weight"] = norm(X)
            t[m + "routed_expert_up_proj.weight"] = mat(H, X)
            for e in range(E):
                for wn, (o_f, i_f, g) in (("w1", (I, X, gg)), ("w3", (I, X, 1.0)), ("w2", (X, I, 1.0))):
                    pk, sc = random_mxfp4(o_f, i_f, gen, g)
                    t[m + f"experts.{e}.{wn}.weight_packed"] = pk
                    t[m + f"experts.{e}.{wn}.weight_scale"] = sc
            S = I * c["num_shared_experts"]
            t[m + "shared_experts.gate_proj.weight"] = mat(S, H, gg)
            t[m + "shared_experts.up_proj.weight"] = mat(S, H)
            t[m + "shared_experts.down_proj.weight"] = mat(H, S)
    if c["vision_tensors"]:
        t["vision_tower.patch_embed.proj.weight"] = (0.1 * torch.randn(16, 3, 2, 2, generator=gen)).to(bf)
        t["mm_projector.proj.0.weight"] = (0.1 * torch.randn(H, 16, generator=gen)).to(bf)
    return {k: v.contiguous() for k, v in t.items()}


def write_checkpoint(dir_, cfg_json, tensors, shards):
    os.makedirs(dir_, exist_ok=True)
    for fn in os.listdir(dir_):  # stale shards from an older layout would confuse loaders
        if fn.startswith("model") and (fn.endswith(".safetensors") or fn.endswith(".index.json")):
            os.remove(os.path.join(dir_, fn))
    with open(os.path.join(dir_, "config.json"), "w") as f:
        json.dump(cfg_json, f, indent=2)
    meta = {"format": "pt"}
    if shards == 1:
        write_safetensors(os.path.join(dir_, "model.safetensors"), tensors, meta)
        return
    names = sorted(tensors)
    weight_map, total = {}, 0
    for s in range(shards):
        part = names[s::shards]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(dir_, fname), {k: tensors[k] for k in part}, meta)
        for k in part:
            weight_map[k] = fname
            total += tensors[k].numel() * tensors[k].element_size()
    with open(os.path.join(dir_, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)


class CheckFailed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise CheckFailed(msg)


def top2_gap(row):
    v = row.topk(2)[0]
    return float(v[0] - v[1])


# ---------------------------------------------------------------------------------------------------------------
# Generation


def record_prompts(model, c, gen, log):
    ref = {}
    worst = {"expert": float("inf"), "group": float("inf"), "greedy": float("inf"), "redraws": 0}
    for p, n in enumerate(PROMPT_LENGTHS):
        for attempt in range(64):
            ids = torch.randint(3, c["vocab_size"], (n,), generator=gen)
            model.stats = {}
            logits, toks, steps = model.greedy(ids, N_GREEDY)
            stats, model.stats = model.stats, None
            rows = torch.cat([logits[-1:], steps[:-1]])
            gap = min(top2_gap(r) for r in rows)
            ok = (stats.get("expert", 1.0) >= ROUTER_MARGIN and stats.get("group", 1.0) >= ROUTER_MARGIN
                  and gap >= GREEDY_MARGIN and EOS not in toks.tolist())
            if ok:
                break
            worst["redraws"] += 1
        else:
            raise SystemExit(f"prompt {p}: no prompt without near-ties after 64 draws")
        worst["expert"] = min(worst["expert"], stats.get("expert", float("inf")))
        worst["group"] = min(worst["group"], stats.get("group", float("inf")))
        worst["greedy"] = min(worst["greedy"], gap)
        ref[f"prompt_{p}"] = ids.to(torch.int32)
        ref[f"logits_{p}"] = logits.float().cpu().contiguous()
        ref[f"greedy_{p}"] = toks
        ref[f"decode_logits_{p}"] = steps.float().cpu().contiguous()
        if p == HIDDEN_TAP_PROMPT:
            taps = []
            model.forward(ids, taps=taps)
            ref["hidden_taps"] = torch.stack(taps).float().cpu().contiguous()
            ref["hidden_taps_prompt"] = torch.tensor([p], dtype=torch.int32)
        spread = logits.max(-1)[0] - logits.min(-1)[0]
        log(f"  prompt {p} ({n:3d} tokens): logit spread min {float(spread.min()):.2f} max {float(spread.max()):.2f}"
            f", std {float(logits.std(-1).mean()):.2f}; greedy {toks.tolist()}")
    log(f"  min margins: router top-k {worst['expert']:.2e}, group {worst['group']:.2e}, greedy top-2 "
        f"{worst['greedy']:.2e} ({worst['redraws']} prompt redraws)")
    return ref


def make_fixture(name, c, out_root, device, dtype, log):
    gen = torch.Generator().manual_seed(c["seed"])
    tensors = build_tensors(c, gen)
    dir_ = os.path.join(out_root, name)
    write_checkpoint(dir_, k3_config(c), tensors, c["shards"])
    model = load_model(dir_, device=device, dtype=dtype)  # read back through the real-layout loader
    log(f"{name}: {sum(v.numel() for v in tensors.values())} stored elements, "
        f"{sum(os.path.getsize(os.path.join(dir_, f)) for f in os.listdir(dir_)) / 1e6:.2f} MB checkpoint")
    ref = record_prompts(model, c, gen, log)
    try:
        import transformers
        tv = transformers.__version__
    except Exception:  # noqa: BLE001
        tv = "n/a"
    write_safetensors(os.path.join(dir_, "reference.safetensors"), ref, {
        "producer": "tools/reference/make_kimi_k3_fixtures.py",
        "reference": "tools/reference/kimi_k3_reference.py (pure PyTorch)", "compute_dtype": str(dtype),
        "torch": torch.__version__, "transformers": tv, "device": str(device),
        "prompt_lengths": json.dumps(PROMPT_LENGTHS), "n_greedy": str(N_GREEDY)})
    return dir_, tensors


# ---------------------------------------------------------------------------------------------------------------
# Checks


def check_mxfp4(log):
    g = torch.Generator().manual_seed(7)
    packed = torch.randint(0, 256, (24, 48), generator=g).to(torch.uint8)
    scale = torch.randint(100, 140, (24, 3), generator=g).to(torch.uint8)
    w = mxfp4_dequantize(packed, scale)
    check(tuple(w.shape) == (24, 96), "mxfp4 dequant shape")
    check(torch.equal(mxfp4_pack(w, scale), packed), "mxfp4 pack(dequant(x)) != x")
    # bf16 round trip is lossless (spec §2.4)
    check(torch.equal(w.to(torch.bfloat16).float(), w), "mxfp4 values not exact in bf16")
    # Known values: byte 0x2A = low nibble 0xA (-1.0, column 0), high nibble 0x2 (+1.0, column 1); byte 0x8F = low
    # 0xF (-6, column 2), high 0x8 (-0, column 3); scale 125 -> x 0.25 for group 0, 128 -> x 2 for group 1.
    pk = torch.zeros(1, 32, dtype=torch.uint8)
    pk[0, 0], pk[0, 1], pk[0, 16] = 0x2A, 0x8F, 0x71
    sc = torch.tensor([[125, 128]], dtype=torch.uint8)
    d = mxfp4_dequantize(pk, sc)[0]
    check(d[:4].tolist() == [-0.25, 0.25, -1.5, 0.0] and bool(torch.signbit(d[3])), f"mxfp4 known values {d[:4]}")
    check(d[32:34].tolist() == [1.0, 12.0], f"mxfp4 group-1 values {d[32:34]}")  # 0x71: low 1 (0.5), high 7 (6), x2
    try:
        mxfp4_pack(torch.full((1, 32), 0.3), torch.full((1, 1), 127, dtype=torch.uint8))
        raise CheckFailed("mxfp4_pack accepted a non-representable value")
    except ValueError:
        pass
    log("check: MXFP4 pack/unpack round trip exact, nibble order and E8M0 scale as spec §2.4")


def check_kda_kernels(log):
    g = torch.Generator().manual_seed(11)
    T, Hk, d = 150, 2, 32
    q = l2norm(torch.randn(T, Hk, d, generator=g))
    k = l2norm(torch.randn(T, Hk, d, generator=g))
    v = torch.randn(T, Hk, d, generator=g)
    gl = -5.0 * torch.sigmoid(torch.randn(T, Hk, d, generator=g) - 1.0)
    beta = torch.sigmoid(torch.randn(T, Hk, generator=g))
    S0 = 0.3 * torch.randn(Hk, d, d, generator=g)
    o_r, S_r = kda_recurrent(q * d ** -0.5, k, v, gl, beta, S0)
    for C in (64, 16, 7):
        o_c, S_c = kda_chunked(q * d ** -0.5, k, v, gl, beta, S0, C)
        err = max(float((o_c - o_r).abs().max()), float((S_c - S_r).abs().max()))
        check(err <= 1e-4, f"chunked (C={C}) vs recurrent KDA differ by {err:.2e}")
    log(f"check: chunked (C=64/16/7) vs recurrent KDA core agree (state carried in, {T} tokens)")
    fns, why = try_transformers_kda_kernels()
    if fns is None:
        log(f"note: transformers KDA kernel cross-check skipped: {why}")
        return
    try:
        ch, rc = fns
        args = [x.unsqueeze(0) for x in (q, k, v, gl, beta)]  # [1, T, H, ...]; their q scale is applied inside
        o_t, S_t = ch(*args, chunk_size=64, initial_state=S0.unsqueeze(0).clone(), output_final_state=True,
                      use_qk_l2norm_in_kernel=False)
        o_t2, S_t2 = rc(*args, initial_state=S0.unsqueeze(0).clone(), output_final_state=True,
                        use_qk_l2norm_in_kernel=False)
        e1 = max(float((o_t[0] - o_r).abs().max()), float((S_t[0] - S_r).abs().max()))
        e2 = max(float((o_t2[0] - o_r).abs().max()), float((S_t2[0] - S_r).abs().max()))
        msg = f"transformers ({why}) torch_chunk_kda / torch_recurrent_kda vs ours: {e1:.2e} / {e2:.2e}"
        log(("check: " if max(e1, e2) <= 1e-4 else "WARNING (not fatal): ") + msg)
    except Exception as e:  # noqa: BLE001 - their signature may differ between versions; informative only
        log(f"note: transformers KDA kernel cross-check could not run ({type(e).__name__}: {e})")


def check_kimi_linear_fixtures(device, log):
    """The Kimi Linear mode of the reference vs the transformers 5.17-made fixtures (validates the KDA, MLA, MoE,
    router, conv and norm code that K3 shares with Kimi Linear against transformers' own modules)."""
    found = 0
    for name in ("kimi_linear_tiny_a", "kimi_linear_tiny_b"):
        d = os.path.join(REPO, "tests", "data", name)
        if not os.path.exists(os.path.join(d, "reference.safetensors")):
            continue
        found += 1
        m = load_model(d, device=device)
        ref, _ = read_safetensors(os.path.join(d, "reference.safetensors"))
        worst = 0.0
        p = 0
        while f"prompt_{p}" in ref:
            ids = ref[f"prompt_{p}"].long()
            logits, toks, steps = m.greedy(ids, ref[f"greedy_{p}"].numel())
            worst = max(worst, float((logits.cpu() - ref[f"logits_{p}"]).abs().max()),
                        float((steps.cpu() - ref[f"decode_logits_{p}"]).abs().max()))
            check(torch.equal(toks, ref[f"greedy_{p}"]), f"{name} prompt {p}: greedy differs from transformers")
            p += 1
        check(worst <= TOL, f"{name}: reference (Kimi Linear mode) vs transformers logits differ by {worst:.2e}")
        log(f"check: {name}: Kimi Linear mode of the reference matches the transformers fixture "
            f"({p} prompts, max |dlogit| {worst:.2e}, greedy identical)")
    if not found:
        log("note: tests/data/kimi_linear_tiny_* not found; transformers agreement not checked")


def check_fixture(name, c, dir_, tensors, device, dtype, log):
    with open(os.path.join(dir_, "config.json")) as f:
        cfg_json = json.load(f)
    check(cfg_json["model_type"] == "kimi_k3" and cfg_json["architectures"] == ["KimiK3ForConditionalGeneration"],
          "root model_type / architectures")
    tc = cfg_json["text_config"]
    check(tc["model_type"] == "kimi_linear" and tc["quantization_config"] == QUANTIZATION_CONFIG,
          "text_config model_type / quantization_config")
    check("quantization_config" not in cfg_json, "quantization_config must be inside text_config only")
    rc = RefConfig(cfg_json)
    want = dict(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], num_layers=c["num_hidden_layers"],
                mla_heads=c["mla_heads"], q_lora_rank=c["q_lora_rank"], kda_heads=c["kda_heads"],
                num_experts=c["num_experts"], top_k=c["num_experts_per_token"],
                num_shared_experts=c["num_shared_experts"], latent_dim=c["routed_expert_hidden_size"],
                attn_res_block_size=c["attn_res_block_size"], situ_beta=c["situ_beta"],
                situ_linear_beta=c["situ_linear_beta"], gate_lower_bound=c["gate_lower_bound"],
                use_full_rank_gate=True, mla_use_output_gate=True, latent_moe_use_norm=True,
                num_expert_group=c["num_expert_group"], topk_group=c["topk_group"],
                moe_renormalize=c["moe_renormalize"], routed_scaling_factor=c["routed_scaling_factor"],
                first_k_dense_replace=c["first_k_dense_replace"], prefix="language_model.", is_k3_layout=True,
                full_attn_layers=c["full_attn_layers"])
    bad = {k: (getattr(rc, k), v) for k, v in want.items() if getattr(rc, k) != v}
    check(not bad, f"config does not parse back: {bad}")
    L = c["num_hidden_layers"]
    check(not rc.is_kda(L - 1) and not rc.is_kda(L - 2), "last two layers must be MLA")
    check(rc.n_snapshots() >= 2, "need >= 2 AttnRes blocks")

    raw = load_raw_tensors(dir_)
    check(set(raw) == set(tensors), "tensor set on disk differs from what was written")
    for k, t in tensors.items():
        check(raw[k].dtype == t.dtype and torch.equal(raw[k], t), f"{k}: round trip through the file")
    f32_suffixes = ("conv1d.weight", ".dt_bias", ".A_log", "o_norm.weight", "e_score_correction_bias")
    for k, t in raw.items():
        check(k.startswith(("language_model.model.", "language_model.lm_head.", "vision_tower.", "mm_projector.")),
              f"{k}: unexpected prefix")
        if k.endswith((".weight_packed", ".weight_scale")):
            check(".block_sparse_moe.experts." in k and t.dtype == torch.uint8, f"{k}: packed tensors are U8 experts")
        elif k.endswith(f32_suffixes):
            check(t.dtype == torch.float32, f"{k}: must be F32")
        else:
            check(t.dtype == torch.bfloat16, f"{k}: must be BF16")
        check(not (".experts." in k and k.endswith(".weight")), f"{k}: routed experts must be packed")
        if k.endswith(".A_log"):
            check(tuple(t.shape) == (KDA_HEAD_DIM,), f"{k}: A_log must be [{KDA_HEAD_DIM}]")
            check(bool((t[c["kda_heads"]:] == 0).all()) and bool((t[:c["kda_heads"]] != 0).all()),
                  f"{k}: A_log padding (tail must be exactly 0, heads non-zero)")
    X, I = c["routed_expert_hidden_size"], c["moe_intermediate_size"]
    e0 = f"language_model.model.layers.{L - 1}.block_sparse_moe.experts.0."
    for wn, (o_f, i_f) in (("w1", (I, X)), ("w3", (I, X)), ("w2", (X, I))):
        check(tuple(raw[e0 + wn + ".weight_packed"].shape) == (o_f, i_f // 2), f"{wn}.weight_packed shape")
        check(tuple(raw[e0 + wn + ".weight_scale"].shape) == (o_f, i_f // 32), f"{wn}.weight_scale shape")
    has_vision = any(k.startswith(("vision_tower.", "mm_projector.")) for k in raw)
    check(has_vision == c["vision_tensors"], "vision tensors")
    w = canonical_weights(rc, raw)
    check(not any(k.startswith(("vision", "mm_")) for k in w), "vision tensors must be skipped")
    bad_a = [k for k in raw if k.endswith(".A_log")][0]
    raw2 = dict(raw)
    raw2[bad_a] = raw[bad_a].clone()
    raw2[bad_a][-1] = 1.0
    try:
        canonical_weights(rc, raw2)
        raise CheckFailed("a non-zero A_log tail was accepted")
    except ValueError:
        pass

    tol = TOL_FP64 if dtype == torch.float64 else TOL_FP32
    model = load_model(dir_, device=device, dtype=dtype)
    ref, _ = read_safetensors(os.path.join(dir_, "reference.safetensors"))
    ids = ref["prompt_4"].long()  # 160 tokens: 2.5 KDA chunks
    one = model.forward(ids)
    check(float((one.float().cpu() - ref["logits_4"]).abs().max()) <= 1e-6, "reference logits not reproducible")
    # What an fp32 implementation should see: this same reference run in fp32 vs the stored (fp64) logits.
    m32 = load_model(dir_, device=device, dtype=torch.float32)
    e32 = max(float((m32.forward(ref[f"prompt_{p}"].long()).cpu() - ref[f"logits_{p}"]).abs().max())
              for p in range(len(PROMPT_LENGTHS)))
    check(e32 <= FP32_VS_FIXTURE, f"fp32 run of the reference is {e32:.2e} from the fixture logits")
    del m32
    st = model.new_state()
    tbt = torch.cat([model.forward(ids[t:t + 1], st) for t in range(ids.numel())])
    e_tbt = float((tbt - one).abs().max())
    st = model.new_state()
    split = torch.cat([model.forward(ids[a:b], st) for a, b in ((0, 50), (50, 51), (51, 130), (130, 160))])
    e_split = float((split - one).abs().max())
    e_rec = float((model.forward(ids, mode="recurrent") - one).abs().max())
    check(max(e_tbt, e_split, e_rec) <= tol,
          f"one-shot vs token-by-token {e_tbt:.2e}, vs split prefill {e_split:.2e}, vs recurrent-mode {e_rec:.2e}")
    # decode step i of prompt 1 == last row of an uncached forward over prompt + greedy[:i+1]
    p1, g1, d1 = ref["prompt_1"].long(), ref["greedy_1"].long(), ref["decode_logits_1"]
    e_dec = 0.0
    for i in (0, 5, N_GREEDY - 1):
        full = model.forward(torch.cat([p1, g1[:i + 1]]))
        e_dec = max(e_dec, float((full[-1].float().cpu() - d1[i]).abs().max()))
    check(e_dec <= max(tol, 1e-6), f"decode logits vs uncached forward differ by {e_dec:.2e}")
    for p in range(len(PROMPT_LENGTHS)):
        lg = ref[f"logits_{p}"]
        check(bool(torch.isfinite(lg).all()) and float(lg.std(-1).min()) > 0.1, f"prompt {p}: degenerate logits")
        check(tuple(lg.shape) == (PROMPT_LENGTHS[p], c["vocab_size"]), f"logits_{p} shape")
        check(tuple(ref[f"decode_logits_{p}"].shape) == (N_GREEDY, c["vocab_size"]), f"decode_logits_{p} shape")
        check(ref[f"greedy_{p}"].dtype == torch.int32 and ref[f"prompt_{p}"].dtype == torch.int32, "int32 ids")
    check(tuple(ref["hidden_taps"].shape) == (L + 1, PROMPT_LENGTHS[HIDDEN_TAP_PROMPT], c["hidden_size"]),
          "hidden_taps shape")
    # The K3 pieces must matter: dropping each one changes the logits (guards against a silently ignored field).
    for field, alt in (("gate_lower_bound", None), ("situ_linear_beta", None), ("latent_moe_use_norm", False),
                       ("mla_use_output_gate", False)):
        saved = getattr(model.cfg, field)
        setattr(model.cfg, field, alt)
        try:
            diff = float((model.forward(ids[:70]) - one[:70]).abs().max())
        except KeyError:
            diff = float("inf")
        setattr(model.cfg, field, saved)
        check(diff > 1e-3, f"changing {field} does not change the logits ({diff:.2e})")
    log(f"check: {name}: config parses back, real-layout names/dtypes/shapes, A_log tail zero, vision skipped; "
        f"one-shot vs token-by-token {e_tbt:.1e}, split {e_split:.1e}, recurrent {e_rec:.1e}, decode {e_dec:.1e}; "
        f"fp32 run vs fixture {e32:.1e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the fixtures to OUT/kimi_k3_tiny_{a,b} (e.g. tests/data)")
    ap.add_argument("--self-check", action="store_true", help="run every check; fixtures go to a temp dir only")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="make only these fixtures (e.g. kimi_k3_tiny_c)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda (TF32 disabled)")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"],
                    help="working precision of the reference (default float64; logits are stored as F32)")
    args = ap.parse_args()
    if not args.out and not args.self_check:
        ap.error("give --out DIR or --self-check")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(min(16, os.cpu_count() or 1))

    def log(s):
        print(s, flush=True)

    dtype = getattr(torch, args.dtype)
    log(f"torch {torch.__version__}, device {args.device}, dtype {args.dtype}")
    tmp = None
    out_root = args.out
    if args.self_check:
        tmp = tempfile.mkdtemp(prefix="k3fx_")
        out_root = tmp
    try:
        check_mxfp4(log)
        check_kda_kernels(log)
        check_kimi_linear_fixtures(args.device, log)
        for name, c in CONFIGS.items():
            if args.only and name not in args.only:
                continue
            dir_, tensors = make_fixture(name, c, out_root, args.device, dtype, log)
            check_fixture(name, c, dir_, tensors, args.device, dtype, log)
        log("ALL CHECKS PASSED" + ("" if args.self_check else f"; fixtures written under {out_root}"))
    except CheckFailed as e:
        log(f"CHECK FAILED: {e}")
        sys.exit(1)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
