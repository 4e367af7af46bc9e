#!/usr/bin/env python3
"""Times flash-linear-attention's kernels for the lightning and KDA prefill on the shapes of
hypic_bench_kernels --only lightning / --only kda, and prints one JSON object in the same format.

  - lightning: fla.ops.simple_gla.chunk_simple_gla with a per-head constant log decay (g_gamma, the form
    chunk_lightning_attn calls), one Ring-flash-linear-2.0 layer: 32 heads of 128, the slopes
    -(8 / H)(1 - l / L) h of a middle layer (l / L = 1/2), as the hypic bench;
  - KDA: fla.ops.kda.chunk_kda, one Kimi-Linear-48B-A3B layer: 32 heads of 128, per-channel log decay in
    [-0.7, -0.01], beta in [0.05, 0.95], l2-normalised q and k; with and without the second call that a
    non-fused transfer build would need (v = 0, initial state = I per head).

Usage: python3 tools/bench/bench_linear_peers.py [--tokens 8192,32768] [--iters 20] [--only lightning|kda]
"""
import argparse
import json

import torch
import torch.nn.functional as F

H, D, C = 32, 128, 64


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


def tflops(flops, ms):
    return round(flops / (ms * 1e-3) / 1e12, 1)


def bench_lightning(T, iters):
    from fla.ops.simple_gla import chunk_simple_gla

    dev, bf = "cuda", torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(1, T, H, D, device=dev, dtype=bf, generator=gen) * 0.0884
    k = torch.randn(1, T, H, D, device=dev, dtype=bf, generator=gen) * 0.0884
    v = torch.randn(1, T, H, D, device=dev, dtype=bf, generator=gen)
    g_gamma = -(8.0 / H) * 0.5 * torch.arange(H, device=dev, dtype=torch.float32)
    h0 = torch.zeros(1, H, D, D, device=dev, dtype=torch.float32)

    def run():
        return chunk_simple_gla(q, k, v, g_gamma=g_gamma, scale=1.0, initial_state=h0, output_final_state=True)

    return time_ms(run, iters)


def bench_kda(T, iters):
    from fla.ops.kda import chunk_kda

    dev, bf = "cuda", torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(0)
    q = F.normalize(torch.randn(1, T, H, D, device=dev, generator=gen), dim=-1).to(bf)
    k = F.normalize(torch.randn(1, T, H, D, device=dev, generator=gen), dim=-1).to(bf)
    v = torch.randn(1, T, H, D, device=dev, dtype=bf, generator=gen)
    g = -torch.rand(1, T, H, D, device=dev, dtype=torch.float32, generator=gen) * 0.69 - 0.01
    beta = (torch.rand(1, T, H, device=dev, dtype=torch.float32, generator=gen) * 0.9 + 0.05).to(bf)
    h0 = torch.zeros(1, H, D, D, device=dev, dtype=torch.float32)

    def run():
        return chunk_kda(q=q, k=k, v=v, g=g, beta=beta, scale=D ** -0.5, initial_state=h0, output_final_state=True)

    ms = time_ms(run, iters)
    v0 = torch.zeros_like(v)
    eye = torch.eye(D, device=dev, dtype=torch.float32).expand(1, H, D, D).contiguous()

    def run_t():
        run()
        return chunk_kda(q=q, k=k, v=v0, g=g, beta=beta, scale=D ** -0.5, initial_state=eye, output_final_state=True)

    return ms, time_ms(run_t, iters)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="8192,32768")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--only", choices=["lightning", "kda"])
    a = ap.parse_args()
    res = []
    for T in [int(t) for t in a.tokens.split(",")]:
        # Nominal work, counted as in hypic_bench_kernels.
        if a.only in (None, "lightning"):
            flops = T * H * (4.0 * D * D + 2.0 * C * 2 * D)
            try:
                ms = bench_lightning(T, a.iters)
                res.append({"op": "fla_chunk_simple_gla", "tokens": T, "variant": "out+state", "ms": round(ms, 4),
                            "tflops": tflops(flops, ms)})
            except Exception as e:  # report and keep going: the other peer is independent
                res.append({"op": "fla_chunk_simple_gla", "tokens": T, "error": repr(e)})
        if a.only in (None, "kda"):
            flops = T * H * (6.0 * D * D + 2.0 * C * 4 * D)
            try:
                ms, ms_t = bench_kda(T, a.iters)
                res.append({"op": "fla_chunk_kda", "tokens": T, "variant": "out+state", "ms": round(ms, 4),
                            "tflops": tflops(flops, ms)})
                res.append({"op": "fla_chunk_kda", "tokens": T, "variant": "out+state+transfer(2nd call)",
                            "ms": round(ms_t, 4), "tflops": tflops(flops, ms_t)})
            except Exception as e:
                res.append({"op": "fla_chunk_kda", "tokens": T, "error": repr(e)})
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": res}, indent=1))


if __name__ == "__main__":
    main()
