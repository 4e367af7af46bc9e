// Times the CUDA prefill kernels with CUDA events and prints one JSON object.
//   GDN chunked prefill at Qwen3.5-35B-A3B shapes (16 q/k heads, 32 v heads, dims 128), with and without
//   the fused transfer build; attention prefill (16 q heads, 2 kv heads, dim 256), causal over fresh tokens;
//   lightning chunked prefill at Ring-flash-linear-2.0 shapes (32 heads of 128, per-head decay);
//   KDA chunked prefill at Kimi-Linear-48B-A3B shapes (32 heads of 128), with and without the transfer operator;
//   the decode step's one-row products at Qwen3.5-35B-A3B shapes, cuda::gemv against cuBLAS (bandwidth);
//   decode attention of one row at the same shapes over 8k and 32k cached keys (bandwidth);
//   the routed experts of one MoE layer at Qwen3.5-35B-A3B shapes (256 experts, 8 per token, 2048 x 512)
//   for 1 to 2048 tokens, on every path the CUDA model has (few-row GEMVs, expert-major on CUDA cores and
//   on tensor cores, cuBLAS grouped GEMM with its host round trip), routing included;
//   one GDN layer's segment chain of an all-hit stitch (cuda::state_chain: 17 cached blocks, each a seam of
//   8 rows then its body's transfer operator and state, then 22 question rows), and its two halves alone (the
//   products also with one operator for every step, and over one 32-column tile a head);
//   the dense products of a stitch and of batched decode (8-256 rows), cuda::gemm_skinny against cuBLASLt.
// Usage: hypic_bench_kernels [--tokens 8192,32768] [--iters 20]
//        [--only gdn|attention|lightning|kda|gemv|decode_attention|moe|chain|skinny]
//        [--gdn-seqs 1,16]   (GDN: the tokens as that many equal sequences of one launch)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_prefill_sm90.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/engine_state_ops.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_skinny_sm90.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/kda.h"
#include "kernels/cuda/lightning.h"
#include "kernels/cuda/memory.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/moe_grouped_mma.h"
#include "kernels/cuda/moe_small.h"
#include "kernels/cuda/moe_tiled.h"
#include "kernels/cuda/moe_tiled_sm90.h"
#include "kernels/cuda/sm90_host.h"
#include "kernels/cuda/activation.h"
#include "tools/common/options.h"

using namespace hypic::cuda;

namespace {

// Random bf16 / fp32 fill on the host (seeded), uploaded once.
void fill_bf16(DeviceBuffer& b, size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<bf16> h(n);
  for (auto& x : h) x = __float2bfloat16(d(rng));
  HYPIC_CUDA_CHECK(cudaMemcpy(b.get(), h.data(), 2 * n, cudaMemcpyHostToDevice));
}
void fill_f32(DeviceBuffer& b, size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> h(n);
  for (auto& x : h) x = d(rng);
  HYPIC_CUDA_CHECK(cudaMemcpy(b.get(), h.data(), 4 * n, cudaMemcpyHostToDevice));
}

template <class F>
double time_ms(F&& f, int iters, cudaStream_t s) {
  for (int i = 0; i < 3; ++i) f();  // warm-up (smem attributes, caches)
  Event a, b;
  a.record(s);
  for (int i = 0; i < iters; ++i) f();
  b.record(s);
  b.synchronize();
  return b.elapsed_ms(a) / iters;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> tokens = {8192, 32768};
  std::vector<int64_t> gdn_seqs = {1};
  int iters = 20;
  std::string only;
  CLI::App app("CUDA kernel timings: GDN, attention, lightning and KDA prefill (one JSON object on stdout)",
               "hypic_bench_kernels");
  hypic::tools::configure(app, /*uses_model=*/false);
  hypic::tools::add_int(app, "--iters", iters, "timed iterations per case", 1, 1 << 20);
  app.add_option("--only", only, "run one family (default: all)")
      ->check(CLI::IsMember({"gdn", "attention", "lightning", "kda", "gemv", "decode_attention", "moe", "chain", "skinny"}));
  app.add_option("--tokens", tokens, "sequence lengths, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--gdn-seqs", gdn_seqs,
                 "GDN: the tokens split into this many equal sequences of one varlen launch (a batch of prompts, or "
                 "the blocks a cache builds), comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  hypic::tools::parse_or_exit(app, argc, argv);
  if (!device_available()) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  HYPIC_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  DevicePool pool;
  Stream st;
  std::printf("{\"device\": \"%s\", \"sms\": %d, \"results\": [\n", prop.name, prop.multiProcessorCount);
  bool first = true;
  // form: which of an op's forms ran, where it has several (printed after the fixed keys, which scripts match).
  auto emit = [&](const char* op, int64_t T, const char* variant, double ms, double flops, const char* form = nullptr) {
    std::printf("%s  {\"op\": \"%s\", \"tokens\": %lld, \"variant\": \"%s\", \"ms\": %.4f, \"tflops\": %.1f%s%s%s}",
                first ? "" : ",\n", op, static_cast<long long>(T), variant, ms, flops / (ms * 1e-3) / 1e12,
                form ? ", \"form\": \"" : "", form ? form : "", form ? "\"" : "");
    first = false;
  };
  if (only.empty() || only == "gemv") {
    // One-row products of a decode step. Each case cycles through enough copies of its weights (>= 256 MB)
    // that no iteration finds them in the 60 MB L2: a decode step reads every weight once.
    struct Mat {
      int64_t rows, K;
      GemvEpilogue epi;
    };
    struct Case {
      const char* name;
      std::vector<Mat> mats;
    };
    const std::vector<Case> cases = {
        {"gdn_in_proj qkv+z+ba 12352x2048", {{8192, 2048, GemvEpilogue::Store}, {4096, 2048, GemvEpilogue::Store},
                                            {64, 2048, GemvEpilogue::Store}}},
        {"gdn_out_proj 2048x4096 (+=)", {{2048, 4096, GemvEpilogue::Add}}},
        {"attn_qkv 9216x2048", {{8192, 2048, GemvEpilogue::Store}, {512, 2048, GemvEpilogue::Store},
                                {512, 2048, GemvEpilogue::Store}}},
        {"router+shared_gate_up+gate 1281x2048", {{256, 2048, GemvEpilogue::Store}, {512, 2048, GemvEpilogue::SwiGlu},
                                                   {1, 2048, GemvEpilogue::Store}}},
        {"shared_down 2048x512 (+=)", {{2048, 512, GemvEpilogue::Add}}},
        {"lm_head 248320x2048", {{248320, 2048, GemvEpilogue::Store}}},
    };
    Blas blas;
    DeviceBuffer x(pool, 2 * kGemvMaxK);
    fill_bf16(x, kGemvMaxK, 31, 1.0f);
    for (const Case& c : cases) {
      int64_t bytes = 0;
      for (const Mat& m : c.mats) bytes += (m.epi == GemvEpilogue::SwiGlu ? 2 * m.rows : m.rows) * m.K * 2;
      const int64_t copies = std::max<int64_t>(1, ((int64_t{256} << 20) + bytes - 1) / bytes);
      std::vector<std::vector<DeviceBuffer>> w(copies);
      for (int64_t i = 0; i < copies; ++i)
        for (size_t j = 0; j < c.mats.size(); ++j) {
          const Mat& m = c.mats[j];
          const int64_t n = (m.epi == GemvEpilogue::SwiGlu ? 2 * m.rows : m.rows) * m.K;
          w[i].emplace_back(pool, 2 * n);
          fill_bf16(w[i].back(), n, uint32_t(100 + i * 7 + j), 0.02f);
        }
      std::vector<DeviceBuffer> y;
      for (const Mat& m : c.mats) y.emplace_back(pool, 4 * (m.epi == GemvEpilogue::SwiGlu ? 2 * m.rows : m.rows));
      int64_t it = 0;
      bool swiglu = false;
      for (const Mat& m : c.mats) swiglu = swiglu || m.epi == GemvEpilogue::SwiGlu;
      std::vector<std::pair<std::string, double>> times;
      for (const int R : {0, 1, 2, 4}) {  // 0: the shape's default
        if (R == 1 && swiglu) continue;
        const double ms = time_ms([&] {
          const auto& wc = w[it++ % copies];
          GemvTarget t[kGemvMaxTargets];
          for (size_t j = 0; j < c.mats.size(); ++j) {
            const Mat& m = c.mats[j];
            const bool f32 = m.epi == GemvEpilogue::Add || (m.epi == GemvEpilogue::Store && m.rows < 1024);
            t[j] = {wc[j].as<bf16>(), m.rows, y[j].get(), f32 ? hypic::DType::F32 : hypic::DType::BF16, m.epi};
          }
          GemvInput in;
          in.x = x.as<bf16>();
          gemv(in, c.mats[0].K, t, int(c.mats.size()), st, R);
        }, iters * 10, st);
        times.emplace_back(R == 0 ? std::string("hypic gemv") : "hypic gemv, " + std::to_string(R) + " rows per warp",
                           ms);
      }
      it = 0;
      const double ms_blas = time_ms([&] {
        const auto& wc = w[it++ % copies];
        for (size_t j = 0; j < c.mats.size(); ++j) {
          const Mat& m = c.mats[j];
          const int64_t wr = m.epi == GemvEpilogue::SwiGlu ? 2 * m.rows : m.rows;
          const bool add = m.epi == GemvEpilogue::Add;
          gemm_xwt(blas, x.as<bf16>(), 1, m.K, m.K, wc[j].as<bf16>(), wr, y[j].get(),
                   add || wr < 1024 ? hypic::DType::F32 : hypic::DType::BF16, wr, add, st);
        }
      }, iters * 10, st);
      times.emplace_back("cublas", ms_blas);
      for (const auto& [variant, t] : times) {
        std::printf("%s  {\"op\": \"decode_product\", \"shape\": \"%s\", \"variant\": \"%s\", \"ms\": %.4f, "
                    "\"gb_per_s\": %.0f, \"launches\": %d}",
                    first ? "" : ",\n", c.name, variant.c_str(), t, bytes / (t * 1e-3) / 1e9,
                    variant == "cublas" ? int(c.mats.size()) : 1);
        first = false;
      }
    }
  }
  if (only.empty() || only == "decode_attention") {
    // One query row of 16 heads over 2 kv heads of 256 (Qwen3.5-35B-A3B's attention layers), as a captured
    // decode step runs it: the launch sized by a cache of twice the keys present, the count read on the
    // device. The caches cycle through copies (>= 256 MB) so that no iteration finds its keys in L2.
    // HYPIC_CUDA_DECODE_ATTN_MMA=0 times the CUDA-core walk instead of the tensor-core one.
    const int64_t Hq = 16, Hkv = 2, d = 256;
    for (const int64_t keys : {int64_t{8192}, int64_t{32768}}) {
      const int64_t cap = 2 * keys, bytes = 2 * keys * Hkv * d * 2;
      const int64_t copies = std::max<int64_t>(2, ((int64_t{256} << 20) + bytes - 1) / bytes);
      std::vector<DeviceBuffer> kc, vc;
      for (int64_t i = 0; i < copies; ++i) {
        kc.emplace_back(pool, 2 * cap * Hkv * d);
        vc.emplace_back(pool, 2 * cap * Hkv * d);
        fill_bf16(kc.back(), cap * Hkv * d, uint32_t(700 + 2 * i), 1.0f);
        fill_bf16(vc.back(), cap * Hkv * d, uint32_t(701 + 2 * i), 1.0f);
      }
      std::vector<int64_t> kpos(cap);
      for (int64_t j = 0; j < cap; ++j) kpos[j] = j;
      DeviceBuffer kp(pool, 8 * cap), qp(pool, 8), qv(pool, 2 * Hq * d), out(pool, 2 * Hq * d), n(pool, 4);
      HYPIC_CUDA_CHECK(cudaMemcpy(kp.get(), kpos.data(), 8 * cap, cudaMemcpyHostToDevice));
      const int64_t qpos = keys - 1;
      const int32_t count = int32_t(keys);
      HYPIC_CUDA_CHECK(cudaMemcpy(qp.get(), &qpos, 8, cudaMemcpyHostToDevice));
      HYPIC_CUDA_CHECK(cudaMemcpy(n.get(), &count, 4, cudaMemcpyHostToDevice));
      fill_bf16(qv, Hq * d, 702, 1.0f);
      const AttentionShape s{1, cap, Hq, Hkv, d};
      DeviceBuffer ws(pool, attention_decode_workspace_bytes(s));
      int64_t it = 0;
      const double ms = time_ms([&] {
        const int64_t c = it++ % copies;
        attention_decode(s, qv.as<bf16>(), kc[c].as<bf16>(), vc[c].as<bf16>(), qp.as<int64_t>(), kp.as<int64_t>(),
                         0.0625f, out.as<bf16>(), ws.get(), st, n.as<int32_t>());
      }, iters * 10, st);
      const char* e = std::getenv("HYPIC_CUDA_DECODE_ATTN_MMA");
      const bool mma = !(e && std::strcmp(e, "0") == 0);
      std::printf("%s  {\"op\": \"decode_attention\", \"keys\": %lld, \"variant\": \"%s\", \"ms\": %.4f, "
                  "\"gb_per_s\": %.0f}",
                  first ? "" : ",\n", static_cast<long long>(keys), mma ? "tensor cores" : "cuda cores", ms,
                  bytes / (ms * 1e-3) / 1e9);
      first = false;
    }
  }
  if (only.empty() || only == "chain") {
    // Qwen3.5-35B-A3B's GDN layer: 32 value heads, 16 q/k heads, dims 128. Every block's T and B are distinct
    // (68 MB in all: more than L2), as in a stitch that reads them from the segment store.
    const int64_t H = 32, Hk = 16, dk = 128, dv = 128, blocks = 17, seam = 8, question = 22;
    const int64_t rows = blocks * seam + question;
    std::vector<DeviceBuffer> Ts, Bs;
    std::vector<float> eye(H * dk * dk);
    std::mt19937 rng(51);
    std::normal_distribution<float> nd(0.0f, 0.01f);
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < dk * dk; ++i) eye[h * dk * dk + i] = nd(rng) + (i / dk == i % dk ? 0.9f : 0.0f);
      Ts.emplace_back(pool, 4 * H * dk * dk);
      HYPIC_CUDA_CHECK(cudaMemcpy(Ts.back().get(), eye.data(), 4 * eye.size(), cudaMemcpyHostToDevice));
      Bs.emplace_back(pool, 4 * H * dk * dv);
      fill_f32(Bs.back(), H * dk * dv, uint32_t(60 + b), -0.1f, 0.1f);
    }
    DeviceBuffer q(pool, 2 * rows * Hk * dk), k(pool, 2 * rows * Hk * dk), v(pool, 2 * rows * H * dv),
        g(pool, 4 * rows * H), beta(pool, 4 * rows * H), o(pool, 2 * rows * H * dv), S(pool, 4 * H * dk * dv);
    fill_bf16(q, rows * Hk * dk, 71, 0.01f);
    fill_bf16(k, rows * Hk * dk, 72, 0.088f);  // about unit rows
    fill_bf16(v, rows * H * dv, 73, 1.0f);
    fill_f32(g, rows * H, 74, -0.5f, -0.01f);
    fill_f32(beta, rows * H, 75, 0.1f, 0.9f);
    fill_f32(S, H * dk * dv, 76, -0.1f, 0.1f);
    auto span = [&](int64_t r0, int64_t n) {
      StateStep s{nullptr, nullptr, nullptr, nullptr, 0};
      s.q = q.as<bf16>() + r0 * Hk * dk;
      s.k = k.as<bf16>() + r0 * Hk * dk;
      s.v = v.as<bf16>() + r0 * H * dv;
      s.g = g.as<float>() + r0 * H;
      s.beta = beta.as<float>() + r0 * H;
      s.o = o.as<bf16>() + r0 * H * dv;
      s.n = static_cast<int>(n);
      return s;
    };
    std::vector<StateStep> all, products, spans;
    for (int64_t b = 0; b < blocks; ++b) {
      all.push_back(span(b * seam, seam));
      spans.push_back(all.back());
      all.push_back({Ts[b].as<float>(), Bs[b].as<float>(), nullptr, nullptr, 0});
      products.push_back(all.back());
    }
    all.push_back(span(blocks * seam, question));
    spans.push_back(all.back());
    // The last two bound a product step: the same 17 products with one T and B shared by every step (read from
    // L2 after the first), and over one 32-column tile a head (dv 32: no two blocks read the same T).
    std::vector<StateStep> shared(products.size(), StateStep{Ts[0].as<float>(), Bs[0].as<float>(), nullptr, nullptr, 0});
    using ChainCase = std::tuple<const char*, const std::vector<StateStep>*, int64_t>;
    for (const auto& [variant, list, width] : {ChainCase{"seams, products, question", &all, dv},
                                               ChainCase{"products only", &products, dv},
                                               ChainCase{"row spans only", &spans, dv},
                                               ChainCase{"products only, one T and B (L2)", &shared, dv},
                                               ChainCase{"products only, one column tile a head", &products, 32}}) {
      DeviceBuffer d(pool, sizeof(StateStep) * list->size());
      HYPIC_CUDA_CHECK(cudaMemcpy(d.get(), list->data(), sizeof(StateStep) * list->size(), cudaMemcpyHostToDevice));
      const double ms = time_ms([&] {
        state_chain(H, dk, width, d.as<StateStep>(), static_cast<int64_t>(list->size()), S.as<float>(), st, Hk);
      }, iters * 5, st);
      const bool with_rows = list == &all || list == &spans;
      std::printf("%s  {\"op\": \"state_chain\", \"variant\": \"%s\", \"steps\": %zu, \"rows\": %lld, "
                  "\"ms\": %.4f}",
                  first ? "" : ",\n", variant, list->size(), static_cast<long long>(with_rows ? rows : 0), ms);
      first = false;
    }
  }
  const bool skinny_here = current_device_is_sm90();  // gemm_skinny runs on sm_90 only
  if ((only.empty() || only == "skinny") && !skinny_here)
    std::fprintf(stderr, "skinny: not an sm_90 device, the few-row products are not timed\n");
  if ((only.empty() || only == "skinny") && skinny_here) {
    // The dense products of a stitch (100-160 rows) and of batched decode (8-32 rows) at Qwen3.5-35B-A3B
    // shapes: cuda::gemm_skinny against cuBLASLt (gemm_xwt, its heuristic's algorithm). Each case cycles
    // through >= 256 MB of weight copies, so every iteration reads its weights from memory.
    struct Shape {
      const char* name;
      int64_t N, K;
      hypic::DType yt;
      bool add;
    };
    const Shape shapes[] = {
        {"gdn qkv / attn q+gate 8192x2048", 8192, 2048, hypic::DType::BF16, false},
        {"gdn z 4096x2048", 4096, 2048, hypic::DType::BF16, false},
        {"out 2048x4096 (+=, f32)", 2048, 4096, hypic::DType::F32, true},
        {"shared gate_up 1024x2048", 1024, 2048, hypic::DType::BF16, false},
        {"shared down 2048x512", 2048, 512, hypic::DType::BF16, false},
        {"attn k 512x2048", 512, 2048, hypic::DType::BF16, false},
        {"router 256x2048 (f32)", 256, 2048, hypic::DType::F32, false},
        {"gdn ba 64x2048 (f32)", 64, 2048, hypic::DType::F32, false},
    };
    Blas blas;
    const int64_t kMaxRows = 256;
    DeviceBuffer x(pool, 2 * kMaxRows * 4096), y(pool, 4 * kMaxRows * 8192);
    fill_bf16(x, kMaxRows * 4096, 51, 1.0f);
    HYPIC_CUDA_CHECK(cudaMemset(y.get(), 0, 4 * kMaxRows * 8192));
    for (const Shape& s : shapes) {
      const int64_t bytes = 2 * s.N * s.K;
      const int64_t copies = std::max<int64_t>(1, ((int64_t{256} << 20) + bytes - 1) / bytes);
      DeviceBuffer w(pool, size_t(bytes) * copies);
      fill_bf16(w, size_t(s.N * s.K) * copies, 52, 0.02f);
      for (const int64_t M : {8, 32, 64, 102, 158, 256}) {
        // The plan gemm_skinny chooses, then every block width and split cap it could take (a sweep for
        // tuning the choice), then cuBLAS.
        struct Variant {
          std::string name;
          bool skinny;
          GemmSkinnyPlan plan;
        };
        const GemmSkinnyPlan chosen = gemm_skinny_plan(M, s.N, s.K, prop.multiProcessorCount);
        std::vector<Variant> variants = {{"hypic skinny", true, chosen}};
        for (const int cols : {128, 256})
          for (const int cap : {1, 2, 4, 8}) {
            if (cols == 256 && chosen.rows_padded > 160) continue;
            const GemmSkinnyPlan p = gemm_skinny_plan(M, s.N, s.K, prop.multiProcessorCount, cols, cap);
            bool seen = false;
            for (const Variant& v : variants)
              seen = seen || (v.skinny && v.plan.block_cols == p.block_cols && v.plan.splits == p.splits);
            if (!seen)
              variants.push_back({"hypic skinny, " + std::to_string(cols) + " columns x " + std::to_string(p.splits) +
                                      " splits", true, p});
          }
        variants.push_back({"cublas", false, chosen});
        for (const Variant& v : variants) {
          int64_t it = 0;
          const double ms = time_ms([&] {
            const bf16* wc = w.as<bf16>() + (it++ % copies) * s.N * s.K;
            if (v.skinny)
              gemm_skinny(x.as<bf16>(), M, s.K, s.K, wc, s.N, y.get(), s.yt, s.N, s.add, st, &v.plan);
            else
              gemm_xwt(blas, x.as<bf16>(), M, s.K, s.K, wc, s.N, y.get(), s.yt, s.N, s.add, st);
          }, iters * 10, st);
          std::printf("%s  {\"op\": \"skinny_product\", \"shape\": \"%s\", \"rows\": %lld, \"variant\": \"%s\", "
                      "\"blocks\": %d, \"ms\": %.4f, \"gb_per_s\": %.0f, \"tflops\": %.1f}",
                      first ? "" : ",\n", s.name, static_cast<long long>(M), v.name.c_str(),
                      v.skinny ? v.plan.tiles * v.plan.splits : 0, ms, bytes / (ms * 1e-3) / 1e9,
                      2.0 * M * s.N * s.K / (ms * 1e-3) / 1e12);
          first = false;
        }
      }
    }
  }
  if ((only.empty() || only == "skinny") && skinny_here) {
    // A layer's input projections (and the MoE's router with the shared expert's gate/up and one-column gate)
    // as the CUDA model runs them up to 160 rows: the three products in one gemm_skinny_many
    // launch, three gemm_skinny launches, three cuBLASLt calls (weights cycled as above).
    struct Group {
      const char* name;
      std::vector<std::pair<int64_t, hypic::DType>> mats;  // rows of weights, output type
    };
    const Group groups[] = {
        {"gdn in-proj qkv+z+ba 12352x2048", {{8192, hypic::DType::BF16}, {4096, hypic::DType::BF16},
                                             {64, hypic::DType::F32}}},
        {"attn in-proj q+k+v 9216x2048", {{8192, hypic::DType::BF16}, {512, hypic::DType::BF16},
                                          {512, hypic::DType::BF16}}},
        {"moe router+shared gate_up+gate 1281x2048", {{256, hypic::DType::F32}, {1024, hypic::DType::BF16},
                                                      {1, hypic::DType::F32}}},
    };
    const int64_t K = 2048, kMaxRows = 256;
    Blas blas;
    DeviceBuffer x(pool, 2 * kMaxRows * K);
    fill_bf16(x, kMaxRows * K, 53, 1.0f);
    for (const Group& g : groups) {
      int64_t bytes = 0;
      for (const auto& m : g.mats) bytes += 2 * m.first * K;
      const int64_t copies = std::max<int64_t>(1, ((int64_t{256} << 20) + bytes - 1) / bytes);
      std::vector<DeviceBuffer> w, y;
      for (size_t j = 0; j < g.mats.size(); ++j) {
        w.emplace_back(pool, size_t(2 * g.mats[j].first * K) * copies);
        fill_bf16(w.back(), size_t(g.mats[j].first * K) * copies, uint32_t(54 + j), 0.02f);
        y.emplace_back(pool, size_t(4 * kMaxRows * g.mats[j].first));
      }
      for (const int64_t M : {8, 32, 158, 256}) {
        const char* const names[3] = {"hypic skinny, one launch", "hypic skinny, one launch each", "cublas"};
        for (int form = 0; form < 3; ++form) {
          int64_t it = 0;
          const double ms = time_ms([&] {
            const int64_t c = it++ % copies;
            GemmSkinnyTarget t[kGemmSkinnyMaxTargets];
            for (size_t j = 0; j < g.mats.size(); ++j) {
              const int64_t N = g.mats[j].first;
              t[j] = {w[j].as<bf16>() + c * N * K, N, y[j].get(), g.mats[j].second, N, false};
            }
            if (form == 0) {
              gemm_skinny_many(x.as<bf16>(), M, K, K, t, int(g.mats.size()), st);
            } else {
              for (size_t j = 0; j < g.mats.size(); ++j) {
                if (form == 1)
                  gemm_skinny(x.as<bf16>(), M, K, K, t[j].w, t[j].N, t[j].y, t[j].yt, t[j].N, false, st);
                else
                  gemm_xwt(blas, x.as<bf16>(), M, K, K, t[j].w, t[j].N, t[j].y, t[j].yt, t[j].N, false, st);
              }
            }
          }, iters * 10, st);
          std::printf("%s  {\"op\": \"skinny_group\", \"shape\": \"%s\", \"rows\": %lld, \"variant\": \"%s\", "
                      "\"ms\": %.4f, \"gb_per_s\": %.0f}",
                      first ? "" : ",\n", g.name, static_cast<long long>(M), names[form], ms,
                      bytes / (ms * 1e-3) / 1e9);
          first = false;
        }
      }
    }
  }
  if (only.empty() || only == "moe") {
    const int64_t E = 256, K = 8, D = 2048, I = 512, kSets = 16, kMaxT = 8192;
    DeviceBuffer gate_up(pool, 2 * E * 2 * I * D), down(pool, 2 * E * D * I);
    fill_bf16(gate_up, E * 2 * I * D, 41, 0.02f);
    fill_bf16(down, E * D * I, 42, 0.02f);
    std::vector<const bf16*> gu_ptrs(E), down_ptrs(E);
    for (int64_t e = 0; e < E; ++e) {
      gu_ptrs[e] = gate_up.as<bf16>() + e * 2 * I * D;
      down_ptrs[e] = down.as<bf16>() + e * D * I;
    }
    const int64_t R = kMaxT * K;
    DeviceBuffer x(pool, 2 * kMaxT * D), logits(pool, 4 * kMaxT * E), ids(pool, 4 * kSets * R),
        wts(pool, 4 * kSets * R), ws(pool, moe_plan_workspace_bytes(kMaxT, K, E)), list(pool, 4 * E),
        xs(pool, 2 * R * D), h(pool, 2 * R * 2 * I), act(pool, 2 * R * I), ys(pool, 2 * R * D), y(pool, 2 * kMaxT * D),
        tiles(pool, 8 * moe_tile_slots(R, E));
    fill_bf16(x, kMaxT * D, 43, 1.0f);
    Blas blas;
    std::vector<int32_t> counts(E);
    for (const int64_t T : {1, 8, 16, 32, 96, 158, 256, 512, 1024, 2048, 4096, 8192}) {
      // kSets routings, so that consecutive iterations read mostly different experts (L2 is 60 MB).
      double expert_bytes = 0;
      for (int64_t k = 0; k < kSets; ++k) {
        fill_f32(logits, T * E, uint32_t(500 + k), -2.0f, 2.0f);
        int32_t* id = ids.as<int32_t>() + k * R;
        moe_route(logits.as<float>(), T, E, K, true, id, wts.as<float>() + k * R, st);
        std::vector<int32_t> host(T * K);
        HYPIC_CUDA_CHECK(cudaMemcpy(host.data(), id, 4 * T * K, cudaMemcpyDeviceToHost));
        std::vector<char> hit(E, 0);
        for (const int32_t e : host) hit[e] = 1;
        expert_bytes += double(std::count(hit.begin(), hit.end(), 1)) * 3 * I * D * 2 / kSets;
      }
      const double flops = 2.0 * T * K * 3 * I * D;
      const MoePlan plan = moe_plan_from_workspace(ws.get(), T, K, E);
      const int64_t slots = std::min(E, T * K);
      int64_t it = 0;
      auto ids_of = [&](int64_t i) { return ids.as<int32_t>() + (i % kSets) * R; };
      auto wts_of = [&](int64_t i) { return wts.as<float>() + (i % kSets) * R; };
      auto expert_major = [&](bool mma) {
        const int32_t* id = ids_of(it);
        moe_plan(id, T, K, E, plan, nullptr, st);
        moe_expert_list(plan.offsets, E, slots, list.as<int32_t>(), st);
        moe_gather(x.as<bf16>(), T, K, D, plan, xs.as<bf16>(), st);
        if (mma) {
          moe_grouped_gate_up_mma(xs.as<bf16>(), D, plan.offsets, list.as<int32_t>(), slots, gate_up.as<bf16>(), I,
                                  act.as<bf16>(), st);
          moe_grouped_down_mma(act.as<bf16>(), I, plan.offsets, list.as<int32_t>(), slots, down.as<bf16>(), D,
                               ys.as<bf16>(), st);
        } else {
          moe_grouped_gate_up(xs.as<bf16>(), D, plan.offsets, list.as<int32_t>(), slots, gate_up.as<bf16>(), I,
                              act.as<bf16>(), st);
          moe_grouped_down(act.as<bf16>(), I, plan.offsets, list.as<int32_t>(), slots, down.as<bf16>(), D,
                           ys.as<bf16>(), st);
        }
        moe_combine(ys.as<bf16>(), T, K, D, plan, wts_of(it), y.as<bf16>(), false, st);
        ++it;
      };
      std::vector<std::pair<const char*, double>> times;
      if (T * K <= 2048)
        times.emplace_back("few-row gemv", time_ms([&] {
          moe_small_gate_up(x.as<bf16>(), T, D, D, ids_of(it), K, gate_up.as<bf16>(), I, act.as<bf16>(), st);
          moe_small_down_combine(act.as<bf16>(), T, K, I, ids_of(it), wts_of(it), down.as<bf16>(), D, y.as<bf16>(), st);
          ++it;
        }, iters, st));
      if (T * K <= 4096) times.emplace_back("expert-major cuda cores", time_ms([&] { expert_major(false); }, iters, st));
      if (T * K <= 16384)
        times.emplace_back("expert-major tensor cores", time_ms([&] { expert_major(true); }, iters, st));
      // The tiled kernels in both forms: the Hopper one (where the device and shape take it) and mma.sync.
      if (T * K >= 64 && moe_tiled_supported(D, I, T * K, E))
        for (const bool sm90 : {true, false}) {
          if (sm90 && !(moe_tiled_sm90_gate_up_applies(D, I) && moe_tiled_sm90_down_applies(D, I))) continue;
          setenv("HYPIC_CUDA_MOE_SM90", sm90 ? "1" : "0", 1);
          times.emplace_back(sm90 ? "tiled wgmma (sm90)" : "tiled tensor cores", time_ms([&] {
            const int32_t* id = ids_of(it);
            const int64_t tslots = moe_tile_slots(T * K, E);
            int2* tl = tiles.as<int2>();
            moe_plan(id, T, K, E, plan, nullptr, st);
            moe_tile_list(plan.offsets, E, tl, tslots, st);
            moe_tiled_gate_up(x.as<bf16>(), D, plan.src_token, plan.offsets, E, tl, tslots, gate_up.as<bf16>(), I,
                              act.as<bf16>(), st);
            moe_tiled_down(act.as<bf16>(), I, plan.offsets, E, tl, tslots, down.as<bf16>(), D, ys.as<bf16>(), st);
            moe_combine(ys.as<bf16>(), T, K, D, plan, wts_of(it), y.as<bf16>(), false, st);
            ++it;
          }, iters, st));
          unsetenv("HYPIC_CUDA_MOE_SM90");
        }
      times.emplace_back("cublas grouped gemm (host sync)", time_ms([&] {
        const int32_t* id = ids_of(it);
        moe_plan(id, T, K, E, plan, counts.data(), st);
        moe_gather(x.as<bf16>(), T, K, D, plan, xs.as<bf16>(), st);
        moe_grouped_gemm(blas, xs.as<bf16>(), D, gu_ptrs.data(), 2 * I, counts.data(), E, h.as<bf16>(), st);
        swiglu(h.as<bf16>(), 2 * I, h.as<bf16>() + I, 2 * I, act.as<bf16>(), I, T * K, I, st);
        moe_grouped_gemm(blas, act.as<bf16>(), I, down_ptrs.data(), D, counts.data(), E, ys.as<bf16>(), st);
        moe_combine(ys.as<bf16>(), T, K, D, plan, wts_of(it), y.as<bf16>(), false, st);
        ++it;
      }, iters, st));
      for (const auto& [variant, t] : times) {
        std::printf("%s  {\"op\": \"moe_experts\", \"tokens\": %lld, \"rows\": %lld, \"variant\": \"%s\", "
                    "\"ms\": %.4f, \"gb_per_s\": %.0f, \"tflops\": %.1f}",
                    first ? "" : ",\n", static_cast<long long>(T), static_cast<long long>(T * K), variant, t,
                    expert_bytes / (t * 1e-3) / 1e9, flops / (t * 1e-3) / 1e12);
        first = false;
      }
    }
  }
  for (const int64_t T : tokens) {
    // Gated DeltaNet, one layer; N equal sequences of one varlen launch.
    if (only.empty() || only == "gdn") {
      for (const int64_t N : gdn_seqs) {
        const GdnShape s{T, N, 32, 16, 128, 128};
        const int64_t len = (T + N - 1) / N;
        std::vector<int32_t> offsets(N + 1);
        for (int64_t n = 0; n <= N; ++n) offsets[n] = int32_t(std::min(T, n * len));
        DeviceBuffer q(pool, 2 * T * 16 * 128), k(pool, 2 * T * 16 * 128), v(pool, 2 * T * 32 * 128),
            g(pool, 4 * T * 32), beta(pool, 4 * T * 32), state(pool, 4 * N * 32 * 128 * 128),
            transfer(pool, 4 * N * 32 * 128 * 128), out(pool, 2 * T * 32 * 128), ws(pool, gdn_chunked_workspace_bytes(s)),
            cu(pool, 4 * (N + 1));
        HYPIC_CUDA_CHECK(cudaMemcpy(cu.get(), offsets.data(), 4 * (N + 1), cudaMemcpyHostToDevice));
        const int32_t* cu_seqlens = N > 1 ? cu.as<int32_t>() : nullptr;
        // q/k rows of norm ~1 (l2-normalised inputs): N(0, 1/sqrt(128)).
        fill_bf16(q, T * 16 * 128, 1, 0.0884f);
        fill_bf16(k, T * 16 * 128, 2, 0.0884f);
        fill_bf16(v, T * 32 * 128, 3, 1.0f);
        fill_f32(g, T * 32, 4, -0.7f, -0.01f);
        fill_f32(beta, T * 32, 5, 0.05f, 0.95f);
        HYPIC_CUDA_CHECK(cudaMemset(state.get(), 0, 4 * N * 32 * 128 * 128));
        HYPIC_CUDA_CHECK(cudaMemset(transfer.get(), 0, 4 * N * 32 * 128 * 128));
        // Useful work of the chunked form (as FLA counts it, roughly): per token and head ~ 6 dk dv + 2 C (dk + dv).
        const double flops = double(T) * 32 * (6.0 * 128 * 128 + 2.0 * 64 * 256);
        const double ms = time_ms([&] {
          gdn_chunked_prefill(s, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), g.as<float>(), beta.as<float>(), cu_seqlens,
                              len, state.as<float>(), out.as<bf16>(), nullptr, ws.get(), st);
        }, iters, st);
        // Prep beside the walk, or prep then the walk (docs/cuda_kernels.md).
        auto form = [&](bool with_t) {
          return gdn_chunked_prefill_overlaps(s, q.as<bf16>(), k.as<bf16>(), out.as<bf16>(), with_t, len, ws.get())
                     ? "prep beside walk"
                     : "prep then walk";
        };
        const std::string var = N > 1 ? ", " + std::to_string(N) + " sequences" : "";
        emit("gdn_chunked_prefill", T, ("out+state" + var).c_str(), ms, flops, form(false));
        const double ms_t = time_ms([&] {
          gdn_chunked_prefill(s, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), g.as<float>(), beta.as<float>(), cu_seqlens,
                              len, state.as<float>(), out.as<bf16>(), transfer.as<float>(), ws.get(), st);
        }, iters, st);
        emit("gdn_chunked_prefill", T, ("out+state+transfer" + var).c_str(), ms_t, flops, form(true));
      }
    }
    // Attention, one layer, causal prefill over T fresh tokens.
    if (only.empty() || only == "attention") {
      const AttentionShape s{T, T, 16, 2, 256};
      DeviceBuffer q(pool, 2 * T * 16 * 256), k(pool, 2 * T * 2 * 256), v(pool, 2 * T * 2 * 256),
          out(pool, 2 * T * 16 * 256), pos(pool, 8 * T);
      fill_bf16(q, T * 16 * 256, 6, 1.0f);
      fill_bf16(k, T * 2 * 256, 7, 1.0f);
      fill_bf16(v, T * 2 * 256, 8, 1.0f);
      std::vector<int64_t> hp(T);
      for (int64_t i = 0; i < T; ++i) hp[i] = i;
      HYPIC_CUDA_CHECK(cudaMemcpy(pos.get(), hp.data(), 8 * T, cudaMemcpyHostToDevice));
      const double flops = 4.0 * double(T) * double(T) / 2 * 16 * 256;  // causal: half of QK^T and PV
      // The stitch's shape: the last 256 positions' queries (seams and question) over all T cached keys.
      constexpr int64_t Tq = 256;
      const AttentionShape ss{Tq, T, 16, 2, 256};
      const double flops_s = 4.0 * double(Tq) * double(T) * 16 * 256;
      // Each row runs whichever form the environment selects at the time (HYPIC_CUDA_ATTN_SM90*).
      auto causal = [&](const std::string& name) {
        const double ms = time_ms([&] {
          attention_prefill(s, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), pos.as<int64_t>(), pos.as<int64_t>(),
                            0.0625f, out.as<bf16>(), st);
        }, iters, st);
        emit("attention_prefill", T, name.c_str(), ms, flops);
      };
      // The stitch's shape in the split form (keys cut over blocks, then a combine pass), the split count the
      // engine would take.
      auto stitch_split = [&](const std::string& suffix) {
        const int64_t splits = attention_prefill_splits(ss, prop.multiProcessorCount);
        DeviceBuffer ws(pool, std::max<size_t>(16, attention_prefill_workspace_bytes(ss, splits)));
        const double ms = time_ms([&] {
          attention_prefill_split(ss, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), pos.as<int64_t>() + (T - Tq),
                                  pos.as<int64_t>(), 0.0625f, splits, ws.get(), out.as<bf16>(), st);
        }, iters, st);
        emit("attention_prefill", T, ("stitch split " + std::to_string(splits) + suffix).c_str(), ms, flops_s);
      };
      causal("causal");
      // The block order without sections of kv heads (the default keeps a long prefill's K and V in L2).
      setenv("HYPIC_CUDA_ATTN_SM90_L2_MB", "0", 1);
      causal("causal one section");
      unsetenv("HYPIC_CUDA_ATTN_SM90_L2_MB");
      const double ms_s = time_ms([&] {
        attention_prefill(ss, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), pos.as<int64_t>() + (T - Tq), pos.as<int64_t>(),
                          0.0625f, out.as<bf16>(), st);
      }, iters, st);
      emit("attention_prefill", T, "stitch", ms_s, flops_s);
      stitch_split("");
      // Where the Hopper form ran the rows above: its consumer schedules with and without block pairs
      // (HYPIC_CUDA_ATTN_SM90_SCHEDULE / _CLUSTER), then the mma.sync form of the same calls (what runs for
      // other head dims and other GPUs), side by side in this process.
      if (attention_prefill_sm90_applies(s)) {
        for (const char* variant : {"0 0", "1 0", "2 0", "0 1", "1 1", "2 1"}) {  // schedule, clusters of two
          const std::string sched(variant, 1), cluster(variant + 2);
          setenv("HYPIC_CUDA_ATTN_SM90_SCHEDULE", sched.c_str(), 1);
          setenv("HYPIC_CUDA_ATTN_SM90_CLUSTER", cluster.c_str(), 1);
          causal("causal schedule " + sched + " cluster " + cluster);
          stitch_split(" schedule " + sched + " cluster " + cluster);
        }
        unsetenv("HYPIC_CUDA_ATTN_SM90_SCHEDULE");
        unsetenv("HYPIC_CUDA_ATTN_SM90_CLUSTER");
        setenv("HYPIC_CUDA_ATTN_SM90", "0", 1);
        causal("causal mma.sync");
        stitch_split(" mma.sync");
        unsetenv("HYPIC_CUDA_ATTN_SM90");
      }
    }
    // Lightning attention, one layer of Ring-flash-linear-2.0: 32 heads of 128, per-head decay (the slopes
    // -(8 / H)(1 - l / L) h of a middle layer, l / L = 1/2; bench_linear_peers.py uses the same).
    if (only.empty() || only == "lightning") {
      constexpr int64_t H = 32, D = 128;
      const GdnShape s{T, 1, H, H, D, D};
      DeviceBuffer q(pool, 2 * T * H * D), k(pool, 2 * T * H * D), v(pool, 2 * T * H * D), lam(pool, 4 * H),
          state(pool, 4 * H * D * D), out(pool, 2 * T * H * D);
      fill_bf16(q, T * H * D, 11, 0.0884f);
      fill_bf16(k, T * H * D, 12, 0.0884f);
      fill_bf16(v, T * H * D, 13, 1.0f);
      std::vector<float> hl(H);
      for (int64_t h = 0; h < H; ++h) hl[h] = -(8.0f / H) * 0.5f * float(h);
      HYPIC_CUDA_CHECK(cudaMemcpy(lam.get(), hl.data(), 4 * H, cudaMemcpyHostToDevice));
      HYPIC_CUDA_CHECK(cudaMemset(state.get(), 0, 4 * H * D * D));
      // Per token and head: Q S and K^T V (2 dk dv each) and the causal intra-chunk Q K^T and P V (2 C (dk + dv)).
      const double flops = double(T) * H * (4.0 * D * D + 2.0 * 64 * 2 * D);
      const double ms = time_ms([&] {
        lightning_chunked_prefill(s, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), lam.as<float>(), nullptr, T,
                                  state.as<float>(), out.as<bf16>(), st);
      }, iters, st);
      emit("lightning_chunked_prefill", T, "out+state", ms, flops);
    }
    // KDA, one layer of Kimi-Linear-48B-A3B: 32 heads of 128, per-channel decay.
    if (only.empty() || only == "kda") {
      constexpr int64_t H = 32, D = 128;
      const GdnShape s{T, 1, H, H, D, D};
      DeviceBuffer q(pool, 2 * T * H * D), k(pool, 2 * T * H * D), v(pool, 2 * T * H * D), g(pool, 4 * T * H * D),
          beta(pool, 4 * T * H), state(pool, 4 * H * D * D), transfer(pool, 4 * H * D * D), out(pool, 2 * T * H * D),
          ws(pool, kda_chunked_workspace_bytes(s));
      fill_bf16(q, T * H * D, 21, 0.0884f);
      fill_bf16(k, T * H * D, 22, 0.0884f);
      fill_bf16(v, T * H * D, 23, 1.0f);
      fill_f32(g, T * H * D, 24, -0.7f, -0.01f);
      fill_f32(beta, T * H, 25, 0.05f, 0.95f);
      HYPIC_CUDA_CHECK(cudaMemset(state.get(), 0, 4 * H * D * D));
      HYPIC_CUDA_CHECK(cudaMemset(transfer.get(), 0, 4 * H * D * D));
      // Per token and head: K S, Q S, K^T Delta (2 dk dv each) and the chunk's Akk, Aqk (2 C dk each), M R and
      // Aqk Delta (2 C dv each), counted whole as FLA's chunk forms are.
      const double flops = double(T) * H * (6.0 * D * D + 2.0 * 64 * (2 * D + 2 * D));
      const double ms = time_ms([&] {
        kda_chunked_prefill(s, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), g.as<float>(), beta.as<float>(), nullptr, T,
                            state.as<float>(), out.as<bf16>(), nullptr, ws.get(), st);
      }, iters, st);
      emit("kda_chunked_prefill", T, "out+state", ms, flops);
      const double ms_t = time_ms([&] {
        kda_chunked_prefill(s, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), g.as<float>(), beta.as<float>(), nullptr, T,
                            state.as<float>(), out.as<bf16>(), transfer.as<float>(), ws.get(), st);
      }, iters, st);
      emit("kda_chunked_prefill", T, "out+state+transfer", ms_t, flops);
    }
  }
  std::printf("\n]}\n");
  return 0;
}
