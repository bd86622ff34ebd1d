#!/usr/bin/env python3
"""Peers of rill's prefill on the same GPU, for docs/PERF.md (issue #33): run on the GPU machine.

1. transformers' own KimiLinear (the installed version's modeling_kimi_linear, random bf16 weights on the GPU) on one
   prompt of --tokens at the shape of a rill config.json (`rill bench --preset kimi-linear-48b --print-config`),
   composed exactly as `rill bench --composed` composes rill's whole-model row (the 48B's bf16 weights do not fit an
   80 GB H100): the 1-layer slice (embedding, layer 0 with its dense MLP, final norm, the last position's logits)
   plus (KDA layers - 1) marginal KDA layers and (MLA layers) marginal MLA layers, each marginal layer = (2-layer
   slice) - (1-layer slice), every MoE layer's experts as configured. MLA attention through PyTorch's SDPA and the
   experts through torch's grouped GEMM where the installed transformers offers them (printed), else eager.
2. flash-linear-attention's `chunk_kda` alone (when `fla` is importable) on one sequence of each --kda-tokens x the
   config's KDA heads: the side-by-side row for rill's `kda chunk` op row of `rill bench --prefill-tokens T`.

Timing: CUDA events around each call, --reps timed runs after --warmup untimed ones, the median printed. Nothing of
rill runs here; the shapes come from its config.json only.

usage: peer_prefill.py CONFIG_JSON [--tokens 8192] [--kda-tokens 8192 32768] [--reps 5] [--warmup 2]
"""
import argparse
import inspect
import json
import statistics
import sys

import torch


def log(msg):
    print(msg, flush=True)


def time_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


# ------------------------------------------------------------------------------------------- transformers, composed
def slice_config(base, layer_types):
    """The config of a slice whose decoder layers have `layer_types`, read the way a checkpoint's config.json is
    (AutoConfig.from_pretrained: the Moonshot layout's 1-based kda_layers / full_attn_layers, first_k_dense_replace)."""
    import os
    import tempfile

    from transformers import AutoConfig

    d = json.loads(json.dumps(base))
    d["num_hidden_layers"] = len(layer_types)
    lac = d.setdefault("linear_attn_config", {})
    lac["kda_layers"] = [i + 1 for i, t in enumerate(layer_types) if t == "linear_attention"]
    lac["full_attn_layers"] = [i + 1 for i, t in enumerate(layer_types) if t == "full_attention"]
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(d, f)
        cfg = AutoConfig.from_pretrained(tmp)
    got = list(getattr(cfg, "layer_types", layer_types))
    if got != list(layer_types):
        raise SystemExit(f"transformers read the slice's layer types as {got}, not {layer_types}")
    return cfg


def make_model(cfg):
    """Random bf16 weights allocated on the GPU; SDPA attention and grouped-GEMM experts where offered."""
    from transformers import AutoModelForCausalLM

    tries = [dict(attn_implementation="sdpa", experts_implementation="grouped_mm"),
             dict(attn_implementation="sdpa"), dict(attn_implementation="eager"), {}]
    last = None
    for kw in tries:
        try:
            with torch.device("cuda"):
                m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, **kw)
            return m.eval(), kw
        except Exception as e:  # noqa: BLE001 - this transformers refuses the option: try the next
            last = e
    raise SystemExit(f"transformers could not build the model: {type(last).__name__}: {last}")


def transformers_composed(base, tokens, warmup, reps):
    import transformers
    from transformers.models.kimi_linear import modeling_kimi_linear as mkl

    kinds = base.get("linear_attn_config", {})
    n_layers = base["num_hidden_layers"]
    kda = set(kinds.get("kda_layers", []))
    n_kda = sum(1 for i in range(1, n_layers + 1) if i in kda)
    n_mla = n_layers - n_kda
    first = "linear_attention" if 1 in kda else "full_attention"
    slices = {"1-layer": [first], "KDA": [first, "linear_attention"], "MLA": [first, "full_attention"]}
    kda_fn = getattr(mkl, "chunk_kimi_delta_attention", None) or getattr(mkl, "chunk_kda", None)
    log(f"transformers {transformers.__version__}, torch {torch.__version__}, "
        f"{torch.cuda.get_device_name()}; KDA chunk kernel bound in modeling_kimi_linear: "
        f"{getattr(kda_fn, '__module__', '?')}.{getattr(kda_fn, '__name__', '?')}")
    ids = torch.randint(0, base["vocab_size"], (1, tokens), device="cuda")
    ms = {}
    for name, types in slices.items():
        model, kw = make_model(slice_config(base, types))
        if name == "1-layer":
            log(f"  model options: {kw or 'defaults'}")

        def run():
            with torch.inference_mode():
                try:
                    model(input_ids=ids, use_cache=False, logits_to_keep=1)
                except TypeError:  # a version without logits_to_keep: every position's logits (noted below)
                    model(input_ids=ids, use_cache=False)

        ms[name] = time_ms(run, warmup, reps)
        log(f"  slice {name:8s} ({'+'.join(types)}): {ms[name]:.2f} ms")
        del model
        torch.cuda.empty_cache()
    d_kda, d_mla = ms["KDA"] - ms["1-layer"], ms["MLA"] - ms["1-layer"]
    whole = ms["1-layer"] + (n_kda - (1 if first == "linear_attention" else 0)) * d_kda + \
        (n_mla - (1 if first == "full_attention" else 0)) * d_mla
    log(f"RESULT transformers composed prefill 1 x {tokens} tokens: {whole:.1f} ms = {tokens / whole * 1e3:.0f} "
        f"tokens/s (KDA layer {d_kda:.2f} ms, MLA layer {d_mla:.2f} ms, 1-layer slice {ms['1-layer']:.2f} ms; "
        f"{n_kda} KDA + {n_mla} MLA layers)")


# --------------------------------------------------------------------------------------------------- fla chunk_kda
def fla_chunk_kda(base, lengths, warmup, reps):
    try:
        from fla.ops.kda import chunk_kda
    except Exception as e:  # noqa: BLE001
        log(f"fla chunk_kda: not importable here ({type(e).__name__}: {e}); no side-by-side KDA row")
        return
    lac = base.get("linear_attn_config", {})
    H, D = lac.get("num_heads", 32), lac.get("head_dim", 128)
    params = inspect.signature(chunk_kda).parameters
    log(f"fla chunk_kda{inspect.signature(chunk_kda)}")
    for T in lengths:
        gen = torch.Generator(device="cuda").manual_seed(T)
        q = torch.nn.functional.normalize(torch.randn(1, T, H, D, device="cuda", generator=gen), dim=-1).bfloat16()
        k = torch.nn.functional.normalize(torch.randn(1, T, H, D, device="cuda", generator=gen), dim=-1).bfloat16()
        v = torch.randn(1, T, H, D, device="cuda", generator=gen).bfloat16()
        # Per-channel log decays as the model makes them: -exp(A) * softplus(.), here in [-0.5, 0).
        g = (-0.5 * torch.rand(1, T, H, D, device="cuda", generator=gen)).float()
        beta = torch.rand(1, T, H, device="cuda", generator=gen).bfloat16()
        kw = dict(q=q, k=k, v=v, g=g, beta=beta)
        if "output_final_state" in params:
            kw["output_final_state"] = True
        try:
            t = time_ms(lambda: chunk_kda(**kw), warmup, reps)
        except Exception as e:  # noqa: BLE001
            log(f"fla chunk_kda T={T}: failed ({type(e).__name__}: {e})")
            continue
        log(f"RESULT fla chunk_kda 1 x {T} tokens x {H} heads: {t:.3f} ms")
        del q, k, v, g, beta
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--kda-tokens", type=int, nargs="*", default=[8192, 32768])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--skip-transformers", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device")
    with open(a.config) as f:
        base = json.load(f)
    if a.kda_tokens:
        fla_chunk_kda(base, a.kda_tokens, a.warmup, a.reps)
    if not a.skip_transformers:
        transformers_composed(base, a.tokens, a.warmup, a.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
