#!/usr/bin/env python3
"""Independent pure-PyTorch fp32 reference for Kimi K3 (`kimi_k3`) and Kimi Linear (`kimi_linear`).

Written from /work/shared/spec/kimi-architecture.md (the spec: §1.2, §2.3-§2.5, §3, §7, §8), not from rill's C++.
One module holds the whole forward so that it can be read top to bottom next to the spec:

  * checkpoint loading: flat Kimi Linear layout (`model.`, `lm_head.`) and the real K3 layout (nested config
    `model_type: kimi_k3` + `text_config`, `language_model.` prefix, vision tensors skipped, compressed-tensors
    `mxfp4-pack-quantized` experts dequantised exactly per spec §2.4, `A_log` [128] zero-padded and sliced);
  * KDA (chunked prefill, C = 64, spec §3.3 formulas, and the token recurrence for decode), MLA (NoPE, optional
    q-LoRA, K3 sigmoid output gate), the MoE router (sigmoid, bias for selection only, grouped top-k, renorm,
    scaling), SwiGLU / SiTU-GLU, the K3 latent MoE and K3 Block Attention Residuals;
  * an explicit per-sequence state (KDA conv windows + fp32 recurrent state, MLA latent cache) so prompts can be fed
    in one shot, in pieces, or token by token with identical results.

Everything runs in one working precision, fp32 by default or fp64 (`dtype=`); the fixture generator uses fp64 and
stores the logits as F32, so the stored reference carries no rounding noise of its own and an fp32 implementation
only has to be within its own noise of the exact answer. The bf16 roundings that the spec describes for the
production reference (KimiRMSNorm rounding the normalised activations to the activation dtype, bf16 snapshots/P in
AttnRes, bf16 expert sums, the bf16 MLA gate, ...) are all "round to the activation dtype", which is the identity
when the activation dtype is fp32/fp64, exactly as in transformers' fp32 Kimi Linear fixtures.

Why not literally subclass transformers' `kimi_linear` modules: their class layout changes between transformers
versions (packed conv, renamed gates, WIP K3 fields; see spec §8.2) and this file must run on the GPU machine in
one shot. Instead, the Kimi Linear mode of this same code is checked against the transformers 5.17-made fixtures
in tests/data/kimi_linear_tiny_{a,b} (`make_kimi_k3_fixtures.py --self-check` does it: logits of every position,
greedy continuations), which validates the KDA / MLA / MoE / router / conv / norm code that K3 shares with Kimi
Linear against transformers' own modules; and when transformers is importable, its pure-PyTorch `torch_chunk_kda`
/ `torch_recurrent_kda` kernels are compared with ours on random inputs. Only the K3 differences are new code.

SPEC AMBIGUITIES and how this file reads them (also listed in tools/reference/README.md):
  A1. `moe_renormalize` with top-k == 1: spec §3.5 says `if moe_renormalize and k > 1`; transformers renormalises
      for any k. Fixtures use k >= 2 so it never matters; we follow the spec.
  A2. Grouped top-k: active iff `num_expert_group > 1 and topk_group < num_expert_group` (spec §3.5); group score
      = sum of the top-2 *bias-corrected* scores of the group; non-selected groups masked with -inf (K3 code; spec
      says Kimi Linear's remote code masks with 0.0, transformers uses -inf).
  A3. MoE-vs-dense layer rule: `i >= first_k_dense_replace and i % moe_layer_freq == 0` (spec §1.1) for both models.
  A4. AttnRes scoring-norm eps = `rms_norm_eps` (spec §3.9 "eps = rms_norm_eps = 1e-5"); the weight vector is
      `*_res_norm.weight * *_res_proj.weight[0]` (fp32 product); the mix is of the raw candidates.
  A5. AttnRes snapshot rule `L % attn_res_block_size == 0` (so layer 0 always pushes the embedding). The final output
      mix uses all snapshots plus the last P.
  A6. `hidden_taps` (debug only): [0] = embedding, [i+1] = the layer-i output that feeds layer i+1 (for K3 that is
      the partial sum P, spec §3.9 "the layer output is P"), last entry = the final-normed hidden (after the output
      AttnRes mix and `model.norm`), mirroring transformers' hidden_states convention in the Kimi Linear fixtures.
  A7. MLA latent norms (`q_a_layernorm`, `kv_a_layernorm`) use eps 1e-6 regardless of `rms_norm_eps` (spec §3.0,
      §7.1), in both models; every other RMSNorm (incl. KDA `o_norm`, `routed_expert_norm`) uses `rms_norm_eps`.
  A8. SiTU when `activation_situ_linear_beta` is null: act(g) * u (spec §3.6). A missing `activation_situ_beta`
      with `hidden_act: situ` is an error (spec §7.10: "do not default").
  A9. `gate_lower_bound` is read from the config (the real value is -5.0); any negative value is accepted. K3 gate:
      g = LB * sigmoid(exp(A_log[h]) * (graw + dt_bias)); no softplus anywhere in K3.
  A10. The K3 MLA gate multiplies the concatenated head outputs [T, n*v_head_dim] elementwise by
      sigmoid(g_proj(u)) (g_proj: [n*v_head_dim, H]) before o_proj.
  A11. MXFP4 code 8 (-0) dequantises to -0.0 (value 0); scale byte 255 (NaN) is rejected.
  A12. Latent MoE: `latent_moe_use_norm` false (or absent) would skip `routed_expert_norm`; the fixtures set true.
       The routed expert width is `moe_intermediate_size`, the shared width `moe_intermediate_size *
       num_shared_experts`; shared experts see the full-width x, the router sees the full-width x.
"""
from __future__ import annotations

import json
import math
import os
import struct

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    raise SystemExit("kimi_k3_reference.py needs PyTorch (the GPU machine has it): " + str(e))

# ---------------------------------------------------------------------------------------------------------------
# safetensors I/O: a tiny self-contained reader/writer (the format is a JSON header + raw little-endian bytes), so
# this file needs nothing but torch. The writer uses the `safetensors` package when it is importable.

_ST_DTYPES = {
    "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "U8": torch.uint8, "I8": torch.int8,
    "I32": torch.int32, "I64": torch.int64, "I16": torch.int16, "F64": torch.float64,
}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}


def read_safetensors(path):
    """Returns ({name: tensor}, metadata dict)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, info in header.items():
        dt = _ST_DTYPES.get(info["dtype"])
        if dt is None:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {info['dtype']}")
        b, e = info["data_offsets"]
        buf = bytearray(data[base + b:base + e])
        shape = list(info["shape"])
        numel = 1
        for s in shape:
            numel *= s
        if numel == 0:
            out[name] = torch.zeros(shape, dtype=dt)
            continue
        t = torch.frombuffer(buf, dtype=dt).clone()
        out[name] = t.reshape(shape)
    return out, meta


def _tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    try:
        from safetensors.torch import save_file  # the same writer as the Kimi Linear fixtures
        save_file(tensors, path, metadata=metadata)
        return
    except ImportError:
        pass
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        b = _tensor_bytes(t)
        header[name] = {"dtype": _ST_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------------------------------------------------------
# MXFP4 (compressed-tensors `mxfp4-pack-quantized`), spec §2.4.

FP4_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
MXFP4_GROUP = 32


def fp4_code_values():
    """[16] fp32: value of each 4-bit E2M1 code (bit 3 = sign; code 8 is -0.0)."""
    mags = torch.tensor(FP4_E2M1, dtype=torch.float32)
    return torch.cat([mags, -mags])


def mxfp4_dequantize(packed, scale):
    """packed U8 [rows, cols/2], scale U8 (E8M0) [rows, cols/32] -> fp32 [rows, cols].

    Low nibble of byte j = column 2j, high nibble = column 2j+1; group g (32 columns along the input dim) of row r
    is scaled by 2^(scale[r, g] - 127)."""
    if packed.dtype != torch.uint8 or scale.dtype != torch.uint8:
        raise ValueError(f"MXFP4 tensors must be U8 (got {packed.dtype}, {scale.dtype})")
    rows, half = packed.shape
    cols = 2 * half
    if cols % MXFP4_GROUP or tuple(scale.shape) != (rows, cols // MXFP4_GROUP):
        raise ValueError(f"MXFP4 shape mismatch: packed {tuple(packed.shape)} scale {tuple(scale.shape)}")
    if bool((scale == 255).any()):
        raise ValueError("MXFP4 scale byte 255 (NaN) present")
    p = packed.to(torch.int64)
    codes = torch.stack([p & 0xF, p >> 4], dim=-1).reshape(rows, cols)  # (low, high) = (2j, 2j+1)
    vals = fp4_code_values()[codes]
    exps = scale.to(torch.float64) - 127.0
    mult = torch.pow(torch.tensor(2.0, dtype=torch.float64), exps).to(torch.float32)  # exact powers of two
    return vals * mult.repeat_interleave(MXFP4_GROUP, dim=1)


def mxfp4_pack(w, scale):
    """Inverse of mxfp4_dequantize for weights that are exactly representable with the given E8M0 scales.
    w fp32 [rows, cols], scale U8 [rows, cols/32] -> packed U8 [rows, cols/2]. Raises if a value is not exact."""
    rows, cols = w.shape
    mult = torch.pow(torch.tensor(2.0, dtype=torch.float64), scale.to(torch.float64) - 127.0)
    q = w.to(torch.float64) / mult.repeat_interleave(MXFP4_GROUP, dim=1)
    mags = torch.tensor(FP4_E2M1, dtype=torch.float64)
    idx = (q.abs().unsqueeze(-1) - mags).abs().argmin(-1)
    if not torch.equal(mags[idx], q.abs()):
        raise ValueError("mxfp4_pack: value not representable as FP4 E2M1 x 2^(s-127)")
    codes = idx + 8 * torch.signbit(q).to(torch.int64)
    codes = codes.reshape(rows, cols // 2, 2)
    return (codes[..., 0] | (codes[..., 1] << 4)).to(torch.uint8)


# ---------------------------------------------------------------------------------------------------------------
# Configuration (spec §1)


class RefConfig:
    """The fields the forward uses, read from a flat `kimi_linear` config or a nested `kimi_k3` one."""

    def __init__(self, cfg: dict):
        root = cfg
        if cfg.get("model_type") == "kimi_k3":
            if "text_config" not in cfg:
                raise ValueError("kimi_k3 config without text_config")
            tc = cfg["text_config"]
            self.is_k3_layout = True
            self.prefix = "language_model."
        elif cfg.get("model_type") == "kimi_linear":
            tc = cfg
            self.is_k3_layout = False
            self.prefix = ""
        else:
            raise ValueError(f"unsupported model_type {cfg.get('model_type')!r}")
        self.root = root
        self.text = tc

        def req(k):
            if k not in tc:
                raise ValueError(f"config field {k} missing")
            return tc[k]

        self.vocab_size = int(req("vocab_size"))
        self.hidden_size = int(req("hidden_size"))
        self.num_layers = int(req("num_hidden_layers"))
        self.intermediate_size = int(req("intermediate_size"))
        self.rms_norm_eps = float(tc.get("rms_norm_eps", 1e-5))
        self.hidden_act = tc.get("hidden_act", "silu")
        if self.hidden_act == "situ":
            if tc.get("activation_situ_beta") is None:
                raise ValueError("hidden_act situ without activation_situ_beta (spec §7.10: do not default)")
            self.situ_beta = float(tc["activation_situ_beta"])
            lb = tc.get("activation_situ_linear_beta")
            self.situ_linear_beta = None if lb is None else float(lb)
        elif self.hidden_act != "silu":
            raise ValueError(f"unsupported hidden_act {self.hidden_act}")
        # MLA
        self.mla_heads = int(req("num_attention_heads"))
        self.q_lora_rank = tc.get("q_lora_rank")
        self.kv_lora_rank = int(req("kv_lora_rank"))
        self.qk_nope = int(req("qk_nope_head_dim"))
        self.qk_rope = int(req("qk_rope_head_dim"))
        self.v_head_dim = int(req("v_head_dim"))
        self.mla_use_output_gate = bool(tc.get("mla_use_output_gate", False))
        # MoE
        self.first_k_dense_replace = int(tc.get("first_k_dense_replace", 0))
        self.moe_layer_freq = int(tc.get("moe_layer_freq", 1))
        self.num_experts = int(req("num_experts"))
        self.top_k = int(req("num_experts_per_token"))
        self.num_shared_experts = int(tc.get("num_shared_experts", 0) or 0)
        self.moe_intermediate_size = int(req("moe_intermediate_size"))
        self.router_act = tc.get("moe_router_activation_func", "sigmoid")
        self.moe_renormalize = bool(tc.get("moe_renormalize", True))
        self.routed_scaling_factor = float(tc.get("routed_scaling_factor", 1.0))
        self.use_grouped_topk = bool(tc.get("use_grouped_topk", False))
        self.num_expert_group = int(tc.get("num_expert_group", 1) or 1)
        self.topk_group = int(tc.get("topk_group", 1) or 1)
        self.latent_dim = tc.get("routed_expert_hidden_size")  # presence => latent MoE
        self.latent_moe_use_norm = bool(tc.get("latent_moe_use_norm", False))
        # AttnRes
        self.attn_res_block_size = tc.get("attn_res_block_size")  # presence => Block AttnRes
        # KDA
        la = req("linear_attn_config")
        self.kda_heads = int(la["num_heads"])
        self.kda_head_dim = int(la["head_dim"])
        self.conv_k = int(la["short_conv_kernel_size"])
        self.kda_layers = [int(x) for x in la["kda_layers"]]
        self.full_attn_layers = [int(x) for x in la["full_attn_layers"]]
        self.gate_lower_bound = la.get("gate_lower_bound")
        self.use_full_rank_gate = bool(la.get("use_full_rank_gate", False))
        if sorted(self.kda_layers + self.full_attn_layers) != list(range(1, self.num_layers + 1)):
            raise ValueError("kda_layers + full_attn_layers must partition 1..num_hidden_layers (1-based)")
        self.quantization_config = tc.get("quantization_config")

    def is_kda(self, i):  # spec §1.1: 1-based lists
        return (i + 1) in self.kda_layers

    def is_moe(self, i):
        return i >= self.first_k_dense_replace and i % self.moe_layer_freq == 0

    def n_snapshots(self):
        s = self.attn_res_block_size
        return 0 if not s else (self.num_layers + s - 1) // s


# ---------------------------------------------------------------------------------------------------------------
# Checkpoint loading (spec §2)

SKIP_PREFIXES = ("vision_tower.", "mm_projector.")


def load_raw_tensors(dir_):
    """All tensors of a checkpoint directory (single file or index + shards), names as in the files."""
    idx = os.path.join(dir_, "model.safetensors.index.json")
    files = []
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        t, _ = read_safetensors(os.path.join(dir_, fn))
        for k in t:
            if k in out:
                raise ValueError(f"tensor {k} in two shards")
        out.update(t)
    return out


def canonical_weights(cfg: RefConfig, raw: dict, check_a_log_tail=True):
    """Strip the K3 prefix, skip vision tensors, dequantise MXFP4, slice padded A_log; returns fp32 tensors named
    `model.…` / `lm_head.weight` (the Moonshot names)."""
    w = {}
    for name, t in raw.items():
        if cfg.is_k3_layout:
            if name.startswith(SKIP_PREFIXES):
                continue
            if name.startswith("language_model.layers."):  # defensive alias (vLLM), spec §2.1
                name = "language_model.model." + name[len("language_model."):]
            if not name.startswith(cfg.prefix):
                raise ValueError(f"unexpected tensor outside {cfg.prefix!r}: {name}")
            name = name[len(cfg.prefix):]
        w[name] = t
    out = {}
    for name, t in w.items():
        if name.endswith(".weight_scale"):
            continue
        if name.endswith(".weight_packed"):
            base = name[: -len("weight_packed")]
            sc = w.get(base + "weight_scale")
            if sc is None:
                raise ValueError(f"{name} without {base}weight_scale")
            out[base + "weight"] = mxfp4_dequantize(t, sc)
            continue
        out[name] = t.to(torch.float32)
    for name in list(out):
        if name.endswith("self_attn.A_log"):
            a = out[name].reshape(-1)
            if a.numel() != cfg.kda_heads:
                if a.numel() < cfg.kda_heads:
                    raise ValueError(f"{name}: {a.numel()} entries < {cfg.kda_heads} heads")
                if check_a_log_tail and bool((a[cfg.kda_heads:] != 0).any()):
                    raise ValueError(f"{name}: padded tail of A_log is not zero (spec §2.5.1)")
            out[name] = a[: cfg.kda_heads].clone()
    return out


def load_model(dir_, device="cpu", dtype=torch.float32):
    with open(os.path.join(dir_, "config.json")) as f:
        cfg = RefConfig(json.load(f))
    return KimiReference(cfg, canonical_weights(cfg, load_raw_tensors(dir_)), device=device, dtype=dtype)


# ---------------------------------------------------------------------------------------------------------------
# Math primitives (spec §3.0, §3.6)


def rms_norm(x, w, eps):
    """KimiRMSNorm in the working precision (the bf16 rounding of the normalised value is the identity here)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def l2norm(x, eps=1e-6):  # eps added to the sum of squares (FLA)
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def linear(x, w):
    return x @ w.t()


def situ(g, u, beta, linear_beta):
    act = beta * torch.tanh(g / beta) * torch.sigmoid(g)
    lin = u if linear_beta is None else linear_beta * torch.tanh(u / linear_beta)
    return act * lin


# ---------------------------------------------------------------------------------------------------------------
# KDA core (spec §3.3 step 6 and the chunked formulas). q, k: [T, Hk, dk] already L2-normalised (q also scaled);
# v: [T, Hk, dv]; g: [T, Hk, dk] log-decay (<= 0); beta: [T, Hk]; S: [Hk, dk, dv] fp32. Returns (o [T,Hk,dv], S').


def kda_recurrent(q, k, v, g, beta, S):
    outs = []
    for t in range(q.shape[0]):
        S = S * torch.exp(g[t]).unsqueeze(-1)                          # decay row c (key channel) by exp(g_t[c])
        e = v[t] - torch.einsum("hkv,hk->hv", S, k[t])                 # prediction error
        S = S + beta[t][:, None, None] * k[t].unsqueeze(-1) * e.unsqueeze(-2)
        outs.append(torch.einsum("hkv,hk->hv", S, q[t]))               # read the UPDATED state
    return torch.stack(outs), S


def kda_chunked(q, k, v, g, beta, S, chunk=64):
    T = q.shape[0]
    outs = []
    for s in range(0, T, chunk):
        e_ = min(s + chunk, T)
        n = e_ - s
        qc, kc, vc, gc = (x[s:e_].transpose(0, 1) for x in (q, k, v, g))  # [Hk, n, d]
        bc = beta[s:e_].transpose(0, 1)                                    # [Hk, n]
        G = gc.cumsum(1)                                                   # Γ_i, [Hk, n, dk]
        i_idx = torch.arange(n, device=q.device)
        upper = i_idx[None, :] > i_idx[:, None]                           # j > i
        diff = (G.unsqueeze(2) - G.unsqueeze(1)).masked_fill(upper[None, :, :, None], float("-inf"))
        E = torch.exp(diff)                                                # exp(Γ_i - Γ_j) for j <= i, else 0
        KK = torch.einsum("hic,hjc,hijc->hij", kc, kc, E)
        QK = torch.einsum("hic,hjc,hijc->hij", qc, kc, E)                  # diagonal included
        strict = (i_idx[None, :] < i_idx[:, None]).to(q.dtype)             # j < i
        L = bc.unsqueeze(-1) * KK * strict
        eye = torch.eye(n, dtype=q.dtype, device=q.device).expand_as(L)
        Tm = torch.linalg.solve_triangular(eye + L, torch.diag_embed(bc), upper=False, unitriangular=True)
        eG = torch.exp(G)
        W = Tm @ (eG * kc)
        U = Tm @ vc
        Vnew = U - W @ S
        O = (qc * eG) @ S + QK @ Vnew
        G_last = G[:, -1:, :]                                              # [Hk, 1, dk]
        S = torch.exp(G_last).transpose(1, 2) * S + (torch.exp(G_last - G) * kc).transpose(1, 2) @ Vnew
        outs.append(O.transpose(0, 1))
    return torch.cat(outs, 0), S


# ---------------------------------------------------------------------------------------------------------------
# The model


class KimiReference:
    """fp32 forward of one sequence with an explicit state. `forward(ids, state)` feeds len(ids) new tokens."""

    CHUNK = 64

    def __init__(self, cfg: RefConfig, weights: dict, device="cpu", dtype=torch.float32):
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = dtype
        self.w = {k: v.to(device=self.device, dtype=dtype) for k, v in weights.items()}
        self._check_weights()
        # AttnRes score vectors: norm.weight ⊙ proj.weight[0] (spec §3.9), fp32.
        self.res_w = {}
        if cfg.attn_res_block_size:
            for i in range(cfg.num_layers):
                p = f"model.layers.{i}."
                self.res_w[(i, "attn")] = self.w[p + "self_attention_res_norm.weight"] * \
                    self.w[p + "self_attention_res_proj.weight"][0]
                self.res_w[(i, "mlp")] = self.w[p + "mlp_res_norm.weight"] * self.w[p + "mlp_res_proj.weight"][0]
            self.res_w["out"] = self.w["model.output_attn_res_norm.weight"] * \
                self.w["model.output_attn_res_proj.weight"][0]
        self.stats = None

    # -- sanity of the tensor set ------------------------------------------------------------------------------
    def expected_shapes(self):
        c = self.cfg
        H, P = c.hidden_size, c.kda_heads * c.kda_head_dim
        qk = c.qk_nope + c.qk_rope
        s = {"model.embed_tokens.weight": (c.vocab_size, H), "model.norm.weight": (H,),
             "lm_head.weight": (c.vocab_size, H)}
        if c.attn_res_block_size:
            s["model.output_attn_res_norm.weight"] = (H,)
            s["model.output_attn_res_proj.weight"] = (1, H)
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            s[p + "input_layernorm.weight"] = (H,)
            s[p + "post_attention_layernorm.weight"] = (H,)
            if c.attn_res_block_size:
                for n in ("self_attention_res", "mlp_res"):
                    s[p + n + "_norm.weight"] = (H,)
                    s[p + n + "_proj.weight"] = (1, H)
            a = p + "self_attn."
            if c.is_kda(i):
                for n in "qkv":
                    s[a + f"{n}_proj.weight"] = (P, H)
                    s[a + f"{n}_conv1d.weight"] = (P, 1, c.conv_k)
                s[a + "f_a_proj.weight"] = (c.kda_head_dim, H)
                s[a + "f_b_proj.weight"] = (P, c.kda_head_dim)
                s[a + "dt_bias"] = (P,)
                s[a + "A_log"] = (c.kda_heads,)  # after slicing / flattening
                s[a + "b_proj.weight"] = (c.kda_heads, H)
                if c.use_full_rank_gate:
                    s[a + "g_proj.weight"] = (P, H)
                else:
                    s[a + "g_a_proj.weight"] = (c.kda_head_dim, H)
                    s[a + "g_b_proj.weight"] = (P, c.kda_head_dim)
                s[a + "o_norm.weight"] = (c.kda_head_dim,)
                s[a + "o_proj.weight"] = (H, P)
            else:
                n_h = c.mla_heads
                if c.q_lora_rank is None:
                    s[a + "q_proj.weight"] = (n_h * qk, H)
                else:
                    s[a + "q_a_proj.weight"] = (c.q_lora_rank, H)
                    s[a + "q_a_layernorm.weight"] = (c.q_lora_rank,)
                    s[a + "q_b_proj.weight"] = (n_h * qk, c.q_lora_rank)
                s[a + "kv_a_proj_with_mqa.weight"] = (c.kv_lora_rank + c.qk_rope, H)
                s[a + "kv_a_layernorm.weight"] = (c.kv_lora_rank,)
                s[a + "kv_b_proj.weight"] = (n_h * (c.qk_nope + c.v_head_dim), c.kv_lora_rank)
                if c.mla_use_output_gate:
                    s[a + "g_proj.weight"] = (n_h * c.v_head_dim, H)
                s[a + "o_proj.weight"] = (H, n_h * c.v_head_dim)
            if not c.is_moe(i):
                m = p + "mlp."
                s[m + "gate_proj.weight"] = (c.intermediate_size, H)
                s[m + "up_proj.weight"] = (c.intermediate_size, H)
                s[m + "down_proj.weight"] = (H, c.intermediate_size)
            else:
                m = p + "block_sparse_moe."
                E, I = c.num_experts, c.moe_intermediate_size
                X = int(c.latent_dim) if c.latent_dim else H
                s[m + "gate.weight"] = (E, H)
                s[m + "gate.e_score_correction_bias"] = (E,)
                if c.latent_dim:
                    s[m + "routed_expert_down_proj.weight"] = (X, H)
                    s[m + "routed_expert_up_proj.weight"] = (H, X)
                    if c.latent_moe_use_norm:
                        s[m + "routed_expert_norm.weight"] = (X,)
                for e in range(E):
                    s[m + f"experts.{e}.w1.weight"] = (I, X)
                    s[m + f"experts.{e}.w3.weight"] = (I, X)
                    s[m + f"experts.{e}.w2.weight"] = (X, I)
                if c.num_shared_experts:
                    S = I * c.num_shared_experts
                    s[m + "shared_experts.gate_proj.weight"] = (S, H)
                    s[m + "shared_experts.up_proj.weight"] = (S, H)
                    s[m + "shared_experts.down_proj.weight"] = (H, S)
        return s

    def _check_weights(self):
        want = self.expected_shapes()
        missing = [k for k in want if k not in self.w]
        extra = [k for k in self.w if k not in want]
        bad = [(k, tuple(self.w[k].shape), v) for k, v in want.items() if k in self.w and tuple(self.w[k].shape) != v]
        if missing or extra or bad:
            raise ValueError(f"checkpoint tensors do not match the config: missing {missing[:8]}, "
                             f"unexpected {extra[:8]}, wrong shapes {bad[:8]}")

    # -- state ---------------------------------------------------------------------------------------------------
    def new_state(self):
        c, dev, dt = self.cfg, self.device, self.dtype
        st = []
        P = c.kda_heads * c.kda_head_dim
        for i in range(c.num_layers):
            if c.is_kda(i):
                st.append({"conv": torch.zeros(3, c.conv_k - 1, P, device=dev, dtype=dt),  # pre-conv q0,k0,v0
                           "S": torch.zeros(c.kda_heads, c.kda_head_dim, c.kda_head_dim, device=dev, dtype=dt)})
            else:
                st.append({"c": torch.zeros(0, c.kv_lora_rank, device=dev, dtype=dt),
                           "kpe": torch.zeros(0, c.qk_rope, device=dev, dtype=dt)})
        return {"layers": st, "pos": 0}

    # -- mixers ----------------------------------------------------------------------------------------------------
    def kda(self, i, u, st, mode):
        c, w = self.cfg, self.w
        a = f"model.layers.{i}.self_attn."
        T = u.shape[0]
        Hk, d, K = c.kda_heads, c.kda_head_dim, c.conv_k
        convs = []
        new_win = []
        for j, n in enumerate("qkv"):
            x0 = linear(u, w[a + f"{n}_proj.weight"])                        # [T, P] pre-conv
            xe = torch.cat([st["conv"][j], x0], 0)                            # [K-1+T, P]
            cw = w[a + f"{n}_conv1d.weight"][:, 0, :]                         # [P, K]; tap K-1 = current token
            y = sum(xe[tap:tap + T] * cw[:, tap] for tap in range(K))
            convs.append(F.silu(y).reshape(T, Hk, d))
            new_win.append(xe[-(K - 1):])
        st["conv"] = torch.stack(new_win)
        q, k, v = convs
        graw = linear(linear(u, w[a + "f_a_proj.weight"]), w[a + "f_b_proj.weight"]).reshape(T, Hk, d)
        A = w[a + "A_log"].reshape(Hk, 1)
        dt = w[a + "dt_bias"].reshape(Hk, d)
        if c.gate_lower_bound is not None:   # K3 bounded gate, spec §3.3.3 / §7.5
            g = float(c.gate_lower_bound) * torch.sigmoid(torch.exp(A) * (graw + dt))
        else:                                # Kimi Linear: softplus (threshold 20, linear above)
            g = -torch.exp(A) * F.softplus(graw + dt, beta=1.0, threshold=20.0)
        beta = torch.sigmoid(linear(u, w[a + "b_proj.weight"]))             # [T, Hk]
        qn = l2norm(q) * (d ** -0.5)
        kn = l2norm(k)
        if mode == "recurrent" or (mode == "auto" and T == 1):
            o, st["S"] = kda_recurrent(qn, kn, v, g, beta, st["S"])
        else:
            o, st["S"] = kda_chunked(qn, kn, v, g, beta, st["S"], self.CHUNK)
        if c.use_full_rank_gate:
            G = linear(u, w[a + "g_proj.weight"])
        else:
            G = linear(linear(u, w[a + "g_a_proj.weight"]), w[a + "g_b_proj.weight"])
        G = G.reshape(T, Hk, d)
        on = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps) * w[a + "o_norm.weight"]
        on = on * torch.sigmoid(G)
        return linear(on.reshape(T, Hk * d), w[a + "o_proj.weight"])

    def mla(self, i, u, st):
        c, w = self.cfg, self.w
        a = f"model.layers.{i}.self_attn."
        T = u.shape[0]
        n, nope, rope, vd, r = c.mla_heads, c.qk_nope, c.qk_rope, c.v_head_dim, c.kv_lora_rank
        if c.q_lora_rank is None:
            Q = linear(u, w[a + "q_proj.weight"])
        else:
            Q = linear(rms_norm(linear(u, w[a + "q_a_proj.weight"]), w[a + "q_a_layernorm.weight"], 1e-6),
                       w[a + "q_b_proj.weight"])
        Q = Q.reshape(T, n, nope + rope)                                      # q_pe NOT rotated (NoPE)
        ckv = linear(u, w[a + "kv_a_proj_with_mqa.weight"])
        cl = rms_norm(ckv[:, :r], w[a + "kv_a_layernorm.weight"], 1e-6)
        kpe = ckv[:, r:]
        past = st["c"].shape[0]
        st["c"] = torch.cat([st["c"], cl], 0)
        st["kpe"] = torch.cat([st["kpe"], kpe], 0)
        Tall = past + T
        kv = linear(st["c"], w[a + "kv_b_proj.weight"]).reshape(Tall, n, nope + vd)
        Kh = torch.cat([kv[..., :nope], st["kpe"].unsqueeze(1).expand(Tall, n, rope)], -1)   # [Tall, n, 192]
        Vh = kv[..., nope:]
        scores = torch.einsum("thd,shd->hts", Q, Kh) * (nope + rope) ** -0.5
        qpos = past + torch.arange(T, device=u.device)
        kpos = torch.arange(Tall, device=u.device)
        scores = scores.masked_fill((kpos[None, :] > qpos[:, None])[None], float("-inf"))
        p = torch.softmax(scores, dim=-1)
        o = torch.einsum("hts,shd->thd", p, Vh).reshape(T, n * vd)
        if c.mla_use_output_gate:                                            # K3 sigmoid output gate
            o = o * torch.sigmoid(linear(u, w[a + "g_proj.weight"]))
        return linear(o, w[a + "o_proj.weight"])

    # -- FFNs ------------------------------------------------------------------------------------------------------
    def glu(self, x, wg, wu, wd):
        gt, ut = linear(x, wg), linear(x, wu)
        if self.cfg.hidden_act == "situ":
            h = situ(gt, ut, self.cfg.situ_beta, self.cfg.situ_linear_beta)
        else:
            h = F.silu(gt) * ut
        return linear(h, wd)

    def route(self, i, x):
        """spec §3.5. Returns (idx [T,k] long, weights [T,k] fp32)."""
        c, w = self.cfg, self.w
        m = f"model.layers.{i}.block_sparse_moe."
        logits = linear(x, w[m + "gate.weight"])  # fp32 (or fp64) router logits, spec §7.2
        if c.router_act == "sigmoid":
            s = torch.sigmoid(logits)
        elif c.router_act == "softmax":
            s = torch.softmax(logits, -1)
        else:
            raise ValueError(f"unsupported moe_router_activation_func {c.router_act}")
        sel = s + w[m + "gate.e_score_correction_bias"]
        E, k = c.num_experts, c.top_k
        ng, tg = c.num_expert_group, c.topk_group
        if c.use_grouped_topk and ng > 1 and tg < ng:
            gs = sel.reshape(-1, ng, E // ng).topk(2, dim=-1)[0].sum(-1)        # [T, ng]
            if self.stats is not None:
                srt = gs.sort(-1, descending=True)[0]
                self._margin("group", (srt[:, tg - 1] - srt[:, tg]).min())
            gidx = gs.topk(tg, dim=-1)[1]
            gmask = torch.zeros_like(gs, dtype=torch.bool).scatter_(1, gidx, True)
            emask = gmask.unsqueeze(-1).expand(-1, ng, E // ng).reshape(-1, E)
            sel = sel.masked_fill(~emask, float("-inf"))
        if self.stats is not None and k < E:
            srt = sel.sort(-1, descending=True)[0]
            self._margin("expert", (srt[:, k - 1] - srt[:, k]).min())
        idx = sel.topk(k, dim=-1)[1]
        wt = s.gather(1, idx)                                                   # UNBIASED scores
        if c.moe_renormalize and k > 1:
            wt = wt / (wt.sum(-1, keepdim=True) + 1e-20)
        return idx, wt * c.routed_scaling_factor

    def _margin(self, key, v):
        v = float(v)
        self.stats[key] = min(self.stats.get(key, float("inf")), v)

    def moe(self, i, x):
        c, w = self.cfg, self.w
        m = f"model.layers.{i}.block_sparse_moe."
        idx, wt = self.route(i, x)
        xe = linear(x, w[m + "routed_expert_down_proj.weight"]) if c.latent_dim else x
        y = torch.zeros_like(xe)
        for t in range(x.shape[0]):
            for j in range(c.top_k):
                e = int(idx[t, j])
                p = m + f"experts.{e}."
                y[t] += wt[t, j] * self.glu(xe[t:t + 1], w[p + "w1.weight"], w[p + "w3.weight"], w[p + "w2.weight"])[0]
        if c.latent_dim:
            if c.latent_moe_use_norm:
                y = rms_norm(y, w[m + "routed_expert_norm.weight"], c.rms_norm_eps)
            y = linear(y, w[m + "routed_expert_up_proj.weight"])
        if c.num_shared_experts:
            y = y + self.glu(x, w[m + "shared_experts.gate_proj.weight"], w[m + "shared_experts.up_proj.weight"],
                             w[m + "shared_experts.down_proj.weight"])
        return y

    def ffn(self, i, x):
        if self.cfg.is_moe(i):
            return self.moe(i, x)
        p = f"model.layers.{i}.mlp."
        return self.glu(x, self.w[p + "gate_proj.weight"], self.w[p + "up_proj.weight"], self.w[p + "down_proj.weight"])

    # -- AttnRes (spec §3.9) ------------------------------------------------------------------------------------------
    def mix(self, B, P, wvec):
        V = torch.stack(list(B) + [P])                                         # [n+1, T, H]
        Kn = V * torch.rsqrt(V.pow(2).mean(-1, keepdim=True) + self.cfg.rms_norm_eps)
        z = (Kn * wvec).sum(-1)                                                # [n+1, T]
        p = torch.softmax(z, dim=0)
        return (p.unsqueeze(-1) * V).sum(0)

    # -- whole model ---------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, ids, state=None, mode="auto", taps=None):
        """ids: 1-D int tensor/list of new tokens. Returns fp32 logits [T, vocab]. `taps` (a list) receives the
        per-layer hidden states (see A6)."""
        c, w = self.cfg, self.w
        if state is None:
            state = self.new_state()
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device).reshape(-1)
        if int(ids.min()) < 0 or int(ids.max()) >= c.vocab_size:
            raise ValueError("token id out of range")
        x = w["model.embed_tokens.weight"][ids]
        if taps is not None:
            taps.append(x.clone())

        def mixer(i, u):
            st = state["layers"][i]
            return self.kda(i, u, st, mode) if c.is_kda(i) else self.mla(i, u, st)

        L = c.num_layers
        if not c.attn_res_block_size:
            for i in range(L):
                p = f"model.layers.{i}."
                x = x + mixer(i, rms_norm(x, w[p + "input_layernorm.weight"], c.rms_norm_eps))
                x = x + self.ffn(i, rms_norm(x, w[p + "post_attention_layernorm.weight"], c.rms_norm_eps))
                if taps is not None and i < L - 1:
                    taps.append(x.clone())
            h = x
        else:
            S_blk = int(c.attn_res_block_size)
            B, P = [], x
            for i in range(L):
                p = f"model.layers.{i}."
                h = P if not B else self.mix(B, P, self.res_w[(i, "attn")])
                if i % S_blk == 0:
                    B.append(P)
                    P = None
                a = mixer(i, rms_norm(h, w[p + "input_layernorm.weight"], c.rms_norm_eps))
                P = a if P is None else P + a
                h2 = self.mix(B, P, self.res_w[(i, "mlp")])
                P = P + self.ffn(i, rms_norm(h2, w[p + "post_attention_layernorm.weight"], c.rms_norm_eps))
                if taps is not None and i < L - 1:
                    taps.append(P.clone())
            assert len(B) == c.n_snapshots()
            h = self.mix(B, P, self.res_w["out"])
        hn = rms_norm(h, w["model.norm.weight"], c.rms_norm_eps)
        if taps is not None:
            taps.append(hn.clone())
        state["pos"] += int(ids.numel())
        return linear(hn, w["lm_head.weight"])

    @torch.no_grad()
    def greedy(self, ids, n_new, mode="auto"):
        """Prefill, then n_new incremental decode steps with the state (token chosen from the previous logits).
        Returns (prefill_logits [T,V], tokens [n_new] int32, step_logits [n_new, V])."""
        st = self.new_state()
        logits = self.forward(ids, st, mode=mode)
        nxt = int(logits[-1].argmax())
        toks, steps = [], []
        for _ in range(n_new):
            toks.append(nxt)
            out = self.forward([nxt], st, mode=mode)
            steps.append(out[0])
            nxt = int(out[0].argmax())
        return logits, torch.tensor(toks, dtype=torch.int32), torch.stack(steps)


def try_transformers_kda_kernels():
    """transformers' pure-PyTorch KDA kernels (chunk, recurrent) if this transformers has them, else a reason."""
    try:
        import transformers  # noqa: F401
        from transformers.models.kimi_linear import modeling_kimi_linear as mkl
    except Exception as e:  # noqa: BLE001
        return None, f"transformers kimi_linear not importable ({type(e).__name__}: {e})"
    ch = getattr(mkl, "torch_chunk_kda", None)
    rc = getattr(mkl, "torch_recurrent_kda", None)
    if ch is None or rc is None:
        return None, "transformers kimi_linear has no torch_chunk_kda/torch_recurrent_kda"
    return (ch, rc), "transformers " + transformers.__version__
