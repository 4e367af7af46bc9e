"""A training implementation of Hugging Face's Qwen3NextForCausalLM (transformers v5 parameter names), written
for speed on one GPU:
  - Gated DeltaNet in the chunked (WY / UT-transform) form, vectorised over chunks: one batched triangular
    solve per layer for the intra-chunk system, a Python loop only over the ~10 chunks for the state;
  - MoE computed densely over all experts (weights exactly zero for unselected experts, so forward and
    gradients equal the sparse top-k computation) — no per-expert gather, no host synchronisation;
  - SDPA (flash) attention.
The math is the one of transformers' modeling_qwen3_next.py; tools/train/check_model.py compares the two.
export_hf() writes the original Qwen3-Next checkpoint layout (experts per expert, matrices bf16), which
transformers (and hypic) load.
"""
from __future__ import annotations

import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


def qwen3_next_config(vocab: int, bos: int, eos: int, hidden=256, layers=8, interval=4, heads=4, kv_heads=2,
                      head_dim=64, lin_k_heads=2, lin_v_heads=4, lin_k_dim=64, lin_v_dim=64, experts=8, top_k=2,
                      moe_inter=64, shared_inter=128, partial_rotary=0.25, rope_theta=10000.0) -> dict:
    c = dict(
        architectures=["Qwen3NextForCausalLM"], model_type="qwen3_next",
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, head_dim=head_dim, hidden_act="silu", rms_norm_eps=1e-6,
        max_position_embeddings=4096, attention_bias=False, attention_dropout=0.0, initializer_range=0.02,
        linear_conv_kernel_dim=4, full_attention_interval=interval, intermediate_size=4 * hidden,
        linear_num_key_heads=lin_k_heads, linear_num_value_heads=lin_v_heads, linear_key_head_dim=lin_k_dim,
        linear_value_head_dim=lin_v_dim, num_experts=experts, num_experts_per_tok=top_k, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[], moe_intermediate_size=moe_inter,
        shared_expert_intermediate_size=shared_inter, output_router_logits=False, router_aux_loss_coef=0.001,
        partial_rotary_factor=partial_rotary, rope_theta=rope_theta, rope_scaling=None,
        tie_word_embeddings=False, torch_dtype="bfloat16", use_sliding_window=False, use_cache=True,
        bos_token_id=bos, eos_token_id=eos, transformers_version="4.57.0.dev0",
    )
    return dict(sorted(c.items()))


def layer_types(cfg) -> list[str]:
    n, k = cfg["num_hidden_layers"], cfg["full_attention_interval"]
    return ["linear_attention" if (i + 1) % k else "full_attention" for i in range(n)]


class RMSNorm(nn.Module):  # Qwen3Next: (1 + w), zero-initialised
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (1.0 + self.weight.float())).type_as(x)


class RMSNormGated(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, gate):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * xf * F.silu(gate.float())).type_as(x)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def chunk_gated_delta_rule(q, k, v, g, beta, chunk: int = 64):
    """q, k: [B, T, H, dk] (already expanded to the value heads), v: [B, T, H, dv], g (log decay), beta: [B, T, H].
    Returns [B, T, H, dv] in fp32. Same math as transformers' torch_chunk_gated_delta_rule (with
    use_qk_l2norm_in_kernel=True, zero initial state)."""
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    q, k, v, g, beta = (x.float().transpose(1, 2) for x in (q, k, v, g, beta))  # [B, H, T, ...]
    q = l2norm(q) * dk ** -0.5
    k = l2norm(k)
    pad = (chunk - T % chunk) % chunk
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    N = (T + pad) // chunk
    q, k, v = (x.reshape(B, H, N, chunk, -1) for x in (q, k, v))
    g, beta = g.reshape(B, H, N, chunk), beta.reshape(B, H, N, chunk)
    gc = g.cumsum(-1)
    upper = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)
    decay = (gc.unsqueeze(-1) - gc.unsqueeze(-2)).masked_fill(upper, float("-inf")).exp()  # [B,H,N,C,C] i>=j
    k_beta = k * beta.unsqueeze(-1)
    system = (k_beta @ k.transpose(-1, -2)) * decay  # diagonal ignored (unitriangular)
    rhs = torch.cat([v * beta.unsqueeze(-1), k_beta * gc.exp().unsqueeze(-1)], dim=-1)
    sol = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    u, w = sol[..., :dv], sol[..., dv:]
    intra = (q @ k.transpose(-1, -2)) * decay
    q_d = q * gc.exp().unsqueeze(-1)
    k_d = k * (gc[..., -1:] - gc).exp().unsqueeze(-1)
    chunk_decay = gc[..., -1].exp()[..., None, None]  # [B,H,N,1,1]
    S = q.new_zeros(B, H, dk, dv)
    outs = []
    for i in range(N):
        v_new = u[:, :, i] - w[:, :, i] @ S
        outs.append(q_d[:, :, i] @ S + intra[:, :, i] @ v_new)
        S = S * chunk_decay[:, :, i] + k_d[:, :, i].transpose(-1, -2) @ v_new
    o = torch.stack(outs, dim=2).reshape(B, H, N * chunk, dv)[:, :, :T]
    return o.transpose(1, 2)


class GatedDeltaNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nv, self.nk = c["linear_num_value_heads"], c["linear_num_key_heads"]
        self.dk, self.dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        self.key_dim, self.value_dim = self.dk * self.nk, self.dv * self.nv
        self.K = c["linear_conv_kernel_dim"]
        self.conv_dim = 2 * self.key_dim + self.value_dim
        D = c["hidden_size"]
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.K, groups=self.conv_dim, bias=False,
                                padding=self.K - 1)
        self.in_proj_qkvz = nn.Linear(D, 2 * self.key_dim + 2 * self.value_dim, bias=False)
        self.in_proj_ba = nn.Linear(D, 2 * self.nv, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.nv))
        self.A_log = nn.Parameter(torch.empty(self.nv).uniform_(1, 16).log())
        self.norm = RMSNormGated(self.dv, c["rms_norm_eps"])
        self.out_proj = nn.Linear(self.value_dim, D, bias=False)

    def forward(self, x, pic=None):
        B, T, _ = x.shape
        r = self.nv // self.nk
        qkvz = self.in_proj_qkvz(x).view(B, T, self.nk, 2 * self.dk + 2 * r * self.dv)
        q, k, v, z = torch.split(qkvz, [self.dk, self.dk, r * self.dv, r * self.dv], dim=3)
        ba = self.in_proj_ba(x).view(B, T, self.nk, 2 * r)
        b, a = torch.split(ba, [r, r], dim=3)
        z = z.reshape(B, T, self.nv, self.dv)
        b, a = b.reshape(B, T, self.nv), a.reshape(B, T, self.nv)
        mixed = torch.cat([q.reshape(B, T, -1), k.reshape(B, T, -1), v.reshape(B, T, -1)], dim=-1).transpose(1, 2)
        if pic is None:
            mixed = F.conv1d(mixed, self.conv1d.weight.to(mixed.dtype), None, padding=self.K - 1,
                             groups=self.conv_dim)[:, :, :T]
        else:  # a cached block's conv sees only its own tokens; the tail sees everything before it
            w = self.conv1d.weight.to(mixed.dtype)[:, 0]  # [C, K]
            acc = mixed * w[:, self.K - 1, None]
            for j in range(1, self.K):
                shifted = F.pad(mixed, (j, 0))[:, :, :T] * pic["conv_keep"][j - 1][:, None, :].to(mixed.dtype)
                acc = acc + shifted * w[:, self.K - 1 - j, None]
            mixed = acc
        mixed = F.silu(mixed).transpose(1, 2)
        q, k, v = torch.split(mixed, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q, k = q.reshape(B, T, self.nk, self.dk), k.reshape(B, T, self.nk, self.dk)
        v = v.reshape(B, T, self.nv, self.dv)
        beta = b.float().sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())
        if r > 1:
            q, k = q.repeat_interleave(r, dim=2), k.repeat_interleave(r, dim=2)
        with torch.autocast(device_type=x.device.type, enabled=False):
            if pic is None:
                o = chunk_gated_delta_rule(q, k, v, g, beta)
            else:
                # Cached blocks' rows: their isolated prefill (the state reset where a block starts: decay
                # e^-30). Tail rows: the state composed over every block's isolated rows, which is what
                # running the same rows without resets gives (S = T S_prev + S_block, exactly).
                start = pic["start"][..., None]
                iso = chunk_gated_delta_rule(q, k, v, torch.where(start, torch.full_like(g, -30.0), g), beta)
                ctx = chunk_gated_delta_rule(q, k, v, g, beta)
                o = torch.where(pic["tail"][..., None, None], ctx, iso)
            o = self.norm(o, z)
        return self.out_proj(o.reshape(B, T, self.value_dim).to(x.dtype))


def rope_cos_sin(c, T, device):
    hd = c["head_dim"]
    rd = int(hd * c["partial_rotary_factor"])
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, rd, 2, dtype=torch.int64, device=device).float() / rd))
    f = torch.arange(T, device=device).float()[:, None] * inv[None, :]
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin):  # x [B, H, T, hd]; rotary on the first rd dims
    rd = cos.shape[-1]
    xr, xp = x[..., :rd], x[..., rd:]
    x1, x2 = xr[..., : rd // 2], xr[..., rd // 2:]
    rot = torch.cat([-x2, x1], dim=-1)
    return torch.cat([xr * cos + rot * sin, xp], dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        D, self.H, self.Hkv, self.hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.q_proj = nn.Linear(D, self.H * self.hd * 2, bias=False)
        self.k_proj = nn.Linear(D, self.Hkv * self.hd, bias=False)
        self.v_proj = nn.Linear(D, self.Hkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.H * self.hd, D, bias=False)
        self.q_norm = RMSNorm(self.hd, c["rms_norm_eps"])
        self.k_norm = RMSNorm(self.hd, c["rms_norm_eps"])

    def forward(self, x, cos, sin, pic=None):
        B, T, _ = x.shape
        q, gate = torch.chunk(self.q_proj(x).view(B, T, self.H, 2 * self.hd), 2, dim=-1)
        gate = gate.reshape(B, T, self.H * self.hd)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, self.Hkv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.Hkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos.to(q.dtype), sin.to(q.dtype)), apply_rope(k, cos.to(k.dtype), sin.to(k.dtype))
        if q.dtype != v.dtype:  # autocast: norms return the input dtype, v comes from a bf16 matmul
            q, k = q.to(v.dtype), k.to(v.dtype)
        rep = self.H // self.Hkv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if pic is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.hd ** -0.5)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=pic["attn_mask"], scale=self.hd ** -0.5)
        o = o.transpose(1, 2).reshape(B, T, self.H * self.hd) * torch.sigmoid(gate)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, D, I):
        super().__init__()
        self.gate_proj = nn.Linear(D, I, bias=False)
        self.up_proj = nn.Linear(D, I, bias=False)
        self.down_proj = nn.Linear(I, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Router(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(c["num_experts"], c["hidden_size"]))


class Experts(nn.Module):
    def __init__(self, c):
        super().__init__()
        E, D, I = c["num_experts"], c["hidden_size"], c["moe_intermediate_size"]
        self.gate_up_proj = nn.Parameter(torch.empty(E, 2 * I, D))
        self.down_proj = nn.Parameter(torch.empty(E, D, I))


class SparseMoe(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.E, self.k, self.I = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        self.norm_topk = c["norm_topk_prob"]
        self.gate = Router(c)
        self.experts = Experts(c)
        self.shared_expert = MLP(c["hidden_size"], c["shared_expert_intermediate_size"])
        self.shared_expert_gate = nn.Linear(c["hidden_size"], 1, bias=False)

    def forward(self, x):
        shp = x.shape
        h = x.reshape(-1, shp[-1])
        logits = F.linear(h, self.gate.weight)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        top_v, top_i = torch.topk(probs, self.k, dim=-1)
        if self.norm_topk:
            top_v = top_v / top_v.sum(-1, keepdim=True)
        wts = torch.zeros_like(probs).scatter(1, top_i, top_v)  # [N, E], zero for unselected experts
        E, I, D = self.E, self.I, shp[-1]
        gu = F.linear(h, self.experts.gate_up_proj.reshape(E * 2 * I, D)).view(-1, E, 2 * I)
        act = F.silu(gu[..., :I]) * gu[..., I:]
        act = act * wts.to(act.dtype).unsqueeze(-1)
        wd = self.experts.down_proj.permute(1, 0, 2).reshape(D, E * I)  # [D, E*I]
        out = F.linear(act.reshape(-1, E * I), wd)
        out = out + torch.sigmoid(self.shared_expert_gate(h)) * self.shared_expert(h)
        return out.view(shp)


class DecoderLayer(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        self.kind = kind
        if kind == "linear_attention":
            self.linear_attn = GatedDeltaNet(c)
        else:
            self.self_attn = Attention(c)
        self.mlp = SparseMoe(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin, pic=None):
        h = self.input_layernorm(x)
        h = self.linear_attn(h, pic) if self.kind == "linear_attention" else self.self_attn(h, cos, sin, pic)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([DecoderLayer(c, t) for t in layer_types(c)])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


def pic_masks(seg, conv_k: int) -> dict:
    """What hypic mode computes for a prompt of cached blocks and a tail, as masks of one forward pass.
    seg [B, T]: the index of the cached block a row belongs to (system = 0, documents 1, 2, ...), -1 for
    the tail (query, answers, follow-ups: run in context). A cached block is prefilled in isolation: its
    rows attend only to its own rows, its convolution sees only its own rows and its linear state starts
    from zero. The tail attends to every earlier row (the blocks' isolated K/V at their true positions:
    RoPE is relative, so re-rotated cached keys equal keys computed there) and continues the linear
    states composed over the blocks (transfer operators: exact for the isolated rows). No seam: hypic's
    seam recomputes the first tokens of a block in context, so a model trained for this is trained for
    the harder case."""
    B, T = seg.shape
    tail = seg < 0
    prev = F.pad(seg, (1, 0), value=-2)[:, :T]
    start = (seg != prev) & ~tail
    conv_keep = []
    for j in range(1, conv_k):
        back = F.pad(seg, (j, 0), value=-2)[:, :T]
        conv_keep.append(((back == seg) & (back != -2)) | (tail & (back != -2)))
    causal = torch.ones(T, T, dtype=torch.bool, device=seg.device).tril()
    same = seg[:, :, None] == seg[:, None, :]
    attn_mask = (causal & (same | tail[:, :, None]))[:, None]  # [B, 1, T, T]
    return {"tail": tail, "start": start, "conv_keep": conv_keep, "attn_mask": attn_mask}


class Qwen3Next(nn.Module):
    def __init__(self, c, gdn_init: str = "short"):
        """gdn_init "short": A ~ U(1, 16), dt_bias = 1 (per-token decay exp(-1.31 A) <= 0.27 at init: short
        memory — the shipped model's GDN heads stayed short-memory, see docs/quality.md). "long": A ~ U(1, 16),
        dt_bias = softplus^-1(dt), dt log-uniform in [1e-3, 1e-1] (Mamba/fla-style; decay 0.2..0.999)."""
        super().__init__()
        self.c = c
        self.gdn_init = gdn_init
        self.model = Backbone(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self):
        std = self.c["initializer_range"]
        for name, p in self.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(1, 16).log())
            elif name.endswith("dt_bias") and self.gdn_init == "long":
                dt = torch.exp(torch.empty_like(p).uniform_(math.log(1e-3), math.log(1e-1)))
                p.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
            elif name.endswith("dt_bias") or name.endswith("linear_attn.norm.weight"):
                p.fill_(1.0)
            elif name.endswith("norm.weight"):
                p.zero_()
            elif name.endswith("conv1d.weight"):
                p.uniform_(-0.5, 0.5)
            else:
                p.normal_(0.0, std)

    def hidden(self, ids, seg=None):
        """seg (optional, [B, T] int): the forward pass of hypic's position-independent composition (see
        pic_masks); rows whose seg is all -1 are the ordinary forward pass."""
        T = ids.shape[1]
        cos, sin = rope_cos_sin(self.c, T, ids.device)
        pic = None if seg is None else pic_masks(seg, self.c["linear_conv_kernel_dim"])
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, pic)
        return self.model.norm(x)

    def forward(self, ids, seg=None):
        return self.lm_head(self.hidden(ids, seg))


# ----------------------------------------------------------------------------------------------------------
# Export to the Hugging Face checkpoint layout
# ----------------------------------------------------------------------------------------------------------

def is_bf16_tensor(name: str, t: torch.Tensor) -> bool:
    return t.dim() >= 2 and not name.endswith("conv1d.weight")


def hf_state_dict(model: Qwen3Next) -> dict:
    """Original Qwen3-Next layout: experts per expert; matrices bf16, vectors and conv1d fp32."""
    c = model.c
    I = c["moe_intermediate_size"]
    out = {}
    for k, v in model.state_dict().items():
        v = v.detach().float().cpu()
        if k.endswith("mlp.experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            for e in range(v.shape[0]):
                out[f"{pre}{e}.gate_proj.weight"] = v[e, :I, :].contiguous()
                out[f"{pre}{e}.up_proj.weight"] = v[e, I:, :].contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{pre}{e}.down_proj.weight"] = v[e].contiguous()
        else:
            out[k] = v.contiguous()
    return {k: (v.to(torch.bfloat16) if is_bf16_tensor(k, v) else v) for k, v in sorted(out.items())}


@torch.no_grad()
def round_to_storage_(model: Qwen3Next):
    """Rounds the parameters that are stored in bf16, so the in-memory model equals the exported one."""
    for name, p in model.named_parameters():
        if is_bf16_tensor(name, p):
            p.copy_(p.to(torch.bfloat16).to(p.dtype))


def export_hf(model: Qwen3Next, out_dir: str):
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(model.c, f, indent=2)
        f.write("\n")
    save_file(hf_state_dict(model), os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})


def load_hf_into(model: Qwen3Next, path: str):
    """Loads an exported model.safetensors back (per-expert -> fused)."""
    from safetensors.torch import load_file
    sd = load_file(path)
    c = model.c
    E = c["num_experts"]
    fused = {}
    for k in list(sd):
        if ".mlp.experts.0.gate_proj.weight" in k:
            pre = k[: k.index(".mlp.experts.") + len(".mlp.experts.")]
            fused[pre + "gate_up_proj"] = torch.stack(
                [torch.cat([sd[f"{pre}{e}.gate_proj.weight"], sd[f"{pre}{e}.up_proj.weight"]], 0) for e in range(E)])
            fused[pre + "down_proj"] = torch.stack([sd[f"{pre}{e}.down_proj.weight"] for e in range(E)])
    sd = {k: v for k, v in sd.items() if ".mlp.experts." not in k or k.endswith(("gate_up_proj", "down_proj"))
          and not k.split(".mlp.experts.")[1][0].isdigit()}
    sd.update(fused)
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
