#!/usr/bin/env python3
"""Times the peer kernels on the same shapes as hypic_bench_kernels and prints one JSON object.

  - flash-linear-attention's chunk_gated_delta_rule (the fla-core wheel), one GDN layer of
    Qwen3.5-35B-A3B: 16 q/k heads expanded to 32 v heads, dims 128; with and without the second call
    that a non-fused transfer build would need (v = 0, initial state = I per head column block); launched
    from Python and replayed from a CUDA graph (its kernels without the launch overhead);
  - torch scaled_dot_product_attention, 16 q heads, 2 kv heads, dim 256, with the backend torch picks by
    default (on the H200: cuDNN, what a user gets), cuDNN and FA2 ("flash") forced: causal prefill over T
    fresh tokens, and the stitch's shape (the last 256 positions' queries over all T keys, causal aligned
    to the end: hypic_bench_kernels' "stitch" variant).

Usage: python3 tools/bench/bench_peers.py [--tokens 8192,32768] [--iters 20]
"""
import argparse
import json

import torch
import torch.nn.functional as F


def time_ms(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / iters


def time_graph_ms(fn, iters):
    """ms of one replay of fn captured in a CUDA graph (after warm-up, so Triton's autotuning is done): the
    kernels without Python's launch overhead, which at 8k tokens is a visible part of fla's time."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return time_ms(graph.replay, iters)


def bench_gdn(T, iters, seqs=1):
    """seqs > 1: the T tokens as that many equal sequences of one varlen call (fla's cu_seqlens), as
    hypic_bench_kernels --gdn-seqs splits them."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    H, Hk, D = 32, 16, 128
    dev, bf = "cuda", torch.bfloat16
    g_ = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(1, T, Hk, D, device=dev, dtype=bf, generator=g_)
    k = torch.randn(1, T, Hk, D, device=dev, dtype=bf, generator=g_)
    # Qwen3-Next expands q/k to the value heads before the kernel (repeat_interleave).
    q = F.normalize(q.float(), dim=-1).to(bf).repeat_interleave(H // Hk, dim=2).contiguous()
    k = F.normalize(k.float(), dim=-1).to(bf).repeat_interleave(H // Hk, dim=2).contiguous()
    v = torch.randn(1, T, H, D, device=dev, dtype=bf, generator=g_)
    g = -torch.rand(1, T, H, device=dev, dtype=torch.float32, generator=g_) * 0.69 - 0.01
    beta = (torch.rand(1, T, H, device=dev, dtype=torch.float32, generator=g_) * 0.9 + 0.05).to(bf)
    h0 = torch.zeros(seqs, H, D, D, device=dev, dtype=torch.float32)
    length = (T + seqs - 1) // seqs
    cu = cu_cpu = None
    if seqs > 1:  # the host copy too, so that fla needs no device-to-host read (a CUDA graph can hold the call)
        cu_cpu = torch.tensor([min(T, n * length) for n in range(seqs + 1)], dtype=torch.long)
        cu = cu_cpu.to(dev)

    def run():
        return chunk_gated_delta_rule(q, k, v, g, beta, scale=D ** -0.5, initial_state=h0,
                                      output_final_state=True, cu_seqlens=cu, cu_seqlens_cpu=cu_cpu)

    ms = time_ms(run, iters)
    # Transfer operator the non-fused way: the same kernel again with v = 0 and S0 = I (dk x dk per head).
    v0 = torch.zeros_like(v)
    eye = torch.eye(D, device=dev, dtype=torch.float32).expand(seqs, H, D, D).contiguous()

    def run_t():
        run()
        return chunk_gated_delta_rule(q, k, v0, g, beta, scale=D ** -0.5, initial_state=eye,
                                      output_final_state=True, cu_seqlens=cu, cu_seqlens_cpu=cu_cpu)

    ms_t = time_ms(run_t, iters)
    try:
        graphed = (time_graph_ms(run, iters), time_graph_ms(run_t, iters))
    except Exception as e:  # a capture fla refuses: the launched times stand alone
        graphed = repr(e)
    return ms, ms_t, graphed


SDPA_BACKENDS = ("default", "cudnn", "flash")


def bench_sdpa(T, iters, backend, Tq=None):
    """ms of one call; Tq: queries at the last Tq positions over all T keys (causal, aligned to the end)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    dev, bf = "cuda", torch.bfloat16
    Hq, Hkv, D = 16, 2, 256
    nq = T if Tq is None else Tq
    q = torch.randn(1, Hq, nq, D, device=dev, dtype=bf)
    k = torch.randn(1, Hkv, T, D, device=dev, dtype=bf).repeat_interleave(Hq // Hkv, dim=1)
    v = torch.randn(1, Hkv, T, D, device=dev, dtype=bf).repeat_interleave(Hq // Hkv, dim=1)
    mask = None if Tq is None else causal_lower_right(nq, T)
    forced = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}.get(backend)

    def call():
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def run():
        if forced is None:
            return call()
        with sdpa_kernel(forced):
            return call()

    return time_ms(run, iters)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="8192,32768")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--ops", default="gdn,sdpa", help="which peers: gdn (fla), sdpa (torch), or both")
    ap.add_argument("--gdn-seqs", default="1", help="gdn: the tokens as this many equal sequences, comma-separated")
    a = ap.parse_args()
    ops = set(a.ops.split(","))
    res = []
    for T in [int(t) for t in a.tokens.split(",")]:
        for seqs in ([int(n) for n in a.gdn_seqs.split(",")] if "gdn" in ops else ()):
            fla = "fla_chunk_gated_delta_rule"
            sv = f", {seqs} sequences" if seqs > 1 else ""
            try:
                ms, ms_t, graphed = bench_gdn(T, a.iters, seqs)
                res.append({"op": fla, "tokens": T, "variant": "out+state" + sv, "ms": round(ms, 4)})
                res.append({"op": fla, "tokens": T, "variant": "out+state+transfer(2nd call)" + sv,
                            "ms": round(ms_t, 4)})
                if isinstance(graphed, str):
                    res.append({"op": fla, "tokens": T, "variant": "cuda graph" + sv, "error": graphed})
                else:
                    res.append({"op": fla, "tokens": T, "variant": "out+state" + sv + ", cuda graph",
                                "ms": round(graphed[0], 4)})
                    res.append({"op": fla, "tokens": T, "variant": "out+state+transfer(2nd call)" + sv + ", cuda graph",
                                "ms": round(graphed[1], 4)})
            except Exception as e:  # report and keep going: the attention peer is independent
                res.append({"op": fla, "tokens": T, "variant": "out+state" + sv, "error": repr(e)})
        for backend in (SDPA_BACKENDS if "sdpa" in ops else ()):
            for variant, Tq, flops in (("causal", None, 4.0 * T * T / 2 * 16 * 256),
                                       ("stitch", 256, 4.0 * 256 * T * 16 * 256)):
                try:
                    ms = bench_sdpa(T, a.iters, backend, Tq)
                    res.append({"op": f"torch_sdpa_{backend}", "tokens": T, "variant": variant, "ms": round(ms, 4),
                                "tflops": round(flops / (ms * 1e-3) / 1e12, 1)})
                except Exception as e:  # a backend that refuses the shape: reported, the rest goes on
                    res.append({"op": f"torch_sdpa_{backend}", "tokens": T, "variant": variant, "error": repr(e)})
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": res}, indent=1))


if __name__ == "__main__":
    main()
