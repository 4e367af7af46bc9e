// The batched ops of the stitch and of isolated prefills (kernels/cuda/conv1d.h varlen form,
// kernels/cuda/engine_state_ops.h) against the CPU reference: the varlen conv must equal the one-sequence
// CPU conv run on each sequence with its own tail, and the state chain must equal the chain's affine maps
// applied one by one in fp32.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <string>
#include <vector>

#include "kernels/conv1d.h"
#include "kernels/delta_rule.h"
#include "kernels/cuda/conv1d.h"
#include "kernels/cuda/engine_state_ops.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/sm90_host.h"
#include "kernels/rope.h"
#include "tests/kernels/cuda/harness.h"
#include "tests/kernels/test_util.h"

namespace hypic::cuda::test {
namespace {

using hypic::test::rel_err;

template <class T>
DevArray<T> device_array(DevicePool& pool, const std::vector<T>& v) {
  return DevArray<T>(pool, v);
}

// Runs `body` once under each form of a dk = 128 chain (HYPIC_CUDA_CHAIN_TC: the CUDA cores, mma.sync, and
// the warpgroup form where the device has it, its product steps in one group or two,
// HYPIC_CUDA_CHAIN_WG_GROUPS; the tensor-core forms with their row steps token by token and chunked,
// HYPIC_CUDA_CHAIN_SPANS), the variables restored after.
template <class F>
void for_each_chain_form(F body) {
  const char* names[3] = {"HYPIC_CUDA_CHAIN_TC", "HYPIC_CUDA_CHAIN_SPANS", "HYPIC_CUDA_CHAIN_WG_GROUPS"};
  const char* was[3];
  std::string saved[3];
  for (int i = 0; i < 3; ++i) {
    was[i] = std::getenv(names[i]);
    saved[i] = was[i] ? was[i] : "";
  }
  std::vector<std::array<const char*, 3>> forms{{"0", "tokens", "1"}, {"1", "tokens", "1"}, {"1", "chunked", "1"}};
  if (current_device_is_sm90())
    for (const char* groups : {"1", "2"})
      for (const char* spans : {"tokens", "chunked"}) forms.push_back({"wg", spans, groups});
  for (const auto& f : forms) {
    SCOPED_TRACE(std::string("HYPIC_CUDA_CHAIN_TC=") + f[0] + " HYPIC_CUDA_CHAIN_SPANS=" + f[1] +
                 " HYPIC_CUDA_CHAIN_WG_GROUPS=" + f[2]);
    for (int i = 0; i < 3; ++i) setenv(names[i], f[i], 1);
    body();
  }
  for (int i = 0; i < 3; ++i) {
    if (was[i]) setenv(names[i], saved[i].c_str(), 1);
    else unsetenv(names[i]);
  }
}

TEST_F(CudaOps, CausalConvVarlenMatchesCpuPerSequence) {
  Stream st;
  // C 200: 8 channels per thread (16-byte rows); C 203: one channel per thread. Lengths below, at and above
  // the tail length, an empty one and a long one; sequence 1 starts from a zero tail; the short ones share one
  // thread's span of rows. The kernel finds a block's sequence with one load a lane up to 32 sequences and
  // by a search beyond: the third case has 40.
  std::vector<int64_t> many;
  for (int i = 0; i < 40; ++i) many.push_back(std::vector<int64_t>{37, 1, 0, 2, 3, 9}[i % 6]);
  struct Case {
    int64_t C;
    std::vector<int64_t> lens;
  };
  for (const Case& cs : {Case{200, {37, 1, 0, 2, 3, 100}}, Case{203, {37, 1, 0, 2, 3, 100}}, Case{200, many}}) {
  const int64_t C = cs.C, K = 4, P = K - 1;
  const std::vector<int64_t>& lens = cs.lens;
  const int64_t N = static_cast<int64_t>(lens.size());
  std::vector<int32_t> cu(1, 0);
  for (int64_t n : lens) cu.push_back(cu.back() + static_cast<int32_t>(n));
  const int64_t T = cu.back();
  const auto x = randn_bf16(T * C, 21);
  const auto w = randn_bf16(C * K, 22, 0.5f);
  std::vector<std::vector<float>> tails;
  for (int64_t i = 0; i < N; ++i) tails.push_back(randn_bf16(P * C, 30 + uint32_t(i)));
  tails[1].assign(P * C, 0.0f);
  auto dx = to_device_bf16(pool, x);
  auto dw = to_device_bf16(pool, w);
  std::vector<DevArray<bf16>> din, dout;
  std::vector<const bf16*> pin;
  std::vector<bf16*> pout;
  for (int64_t i = 0; i < N; ++i) {
    din.push_back(to_device_bf16(pool, tails[i]));
    dout.emplace_back(pool, P * C);
    pin.push_back(i == 1 ? nullptr : din.back().get());
    pout.push_back(dout.back().get());
  }
  auto dcu = device_array(pool, cu);
  auto dpin = device_array(pool, pin);
  auto dpout = device_array(pool, pout);
  DevArray<bf16> dy(pool, T * C);
  causal_conv1d_silu_varlen(dx.get(), dcu.get(), N, T, C, dw.get(), K, dpin.get(), dpout.get(), dy.get(), st);
  const auto y = from_device_bf16(dy);
  for (int64_t i = 0; i < N; ++i) {
    std::vector<float> tail = tails[i], ref(lens[i] * C);
    cpu::causal_conv1d_silu(x.data() + cu[i] * C, lens[i], C, w.data(), K, tail.data(), ref.data());
    std::vector<float> got(y.begin() + cu[i] * C, y.begin() + cu[i + 1] * C);
    EXPECT_LT(rel_err(got, ref), 1.2e-2f) << "C " << C << " sequence " << i;
    EXPECT_EQ(rel_err(from_device_bf16(dout[i]), tail), 0.0f) << "tail of sequence " << i;
    EXPECT_EQ(rel_err(from_device_bf16(din[i]), tails[i]), 0.0f) << "input tail " << i << " untouched";
  }
  }
}

TEST_F(CudaOps, StateChainMatchesStepByStepFp32) {
  Stream st;
  // dk 128 and 36 (a tile of fewer rows than the kernel's 128); dv 80: a full 32-column tile, a second
  // one and a partial third.
  for (const int64_t dk : {int64_t{128}, int64_t{36}}) {
  SCOPED_TRACE("dk " + std::to_string(dk));
  const int64_t H = 3, dv = 80, ns = H * dk * dv, no = H * dk * dk;
  auto S0 = hypic::test::randn(ns, 40);
  // Steps: transfer + body recording the state before (a rows sequence), naive sum (no T), a whole state
  // loaded (replace), transfer with no body, a transfer + body recording after, and a save.
  struct Host {
    std::vector<float> T, B;
    bool before = false, after = false, replace = false;
  };
  std::vector<Host> hs(6);
  auto op = [&](uint32_t seed) {  // a contraction-like operator: identity plus small noise
    auto t = hypic::test::randn(no, seed, 0.05f);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < dk; ++i) t[h * dk * dk + i * dk + i] += 0.9f;
    return t;
  };
  hs[0] = {op(41), hypic::test::randn(ns, 42), true, false};
  hs[1] = {{}, hypic::test::randn(ns, 43), false, false};
  hs[2] = {{}, {}, false, true};
  hs[3] = {op(44), {}, false, false};
  hs[4] = {op(45), hypic::test::randn(ns, 46), true, true};
  hs[5] = {op(47), hypic::test::randn(ns, 48), false, true, true};  // a whole state loaded: T ignored
  std::swap(hs[2], hs[5]);  // the load in the middle of the chain
  std::vector<DevArray<float>> keep;
  std::vector<StateStep> steps;
  std::vector<std::vector<float>> ref_before, ref_after;
  std::vector<float> S = S0;
  std::vector<float*> before_dev(hs.size(), nullptr), after_dev(hs.size(), nullptr);
  for (size_t i = 0; i < hs.size(); ++i) {
    StateStep s{nullptr, nullptr, nullptr, nullptr, hs[i].replace ? 1 : 0};
    if (!hs[i].T.empty()) s.T = keep.emplace_back(pool, hs[i].T).get();
    if (!hs[i].B.empty()) s.B = keep.emplace_back(pool, hs[i].B).get();
    if (hs[i].before) s.before = before_dev[i] = keep.emplace_back(pool, ns).get();
    if (hs[i].after) s.after = after_dev[i] = keep.emplace_back(pool, ns).get();
    steps.push_back(s);
    // The reference, in double.
    ref_before.push_back(S);
    std::vector<float> next(ns);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < dk; ++r)
        for (int64_t c = 0; c < dv; ++c) {
          double v = 0;
          if (hs[i].replace) {
            v = 0;
          } else if (hs[i].T.empty()) {
            v = S[h * dk * dv + r * dv + c];
          } else {
            for (int64_t k = 0; k < dk; ++k)
              v += double(hs[i].T[h * dk * dk + r * dk + k]) * S[h * dk * dv + k * dv + c];
          }
          if (!hs[i].B.empty()) v += hs[i].B[h * dk * dv + r * dv + c];
          next[h * dk * dv + r * dv + c] = float(v);
        }
    S = next;
    ref_after.push_back(S);
  }
  auto dsteps = device_array(pool, steps);
  for_each_chain_form([&] {
  DevArray<float> dS(pool, S0);
  state_chain(H, dk, dv, dsteps.get(), static_cast<int64_t>(steps.size()), dS.get(), st);
  const float tol = 1e-5f;
  EXPECT_LT(rel_err(dS.download(), S), tol) << "final state";
  for (size_t i = 0; i < hs.size(); ++i) {
    auto fetch = [&](float* p) {
      std::vector<float> h(ns);
      HYPIC_CUDA_CHECK(cudaDeviceSynchronize());
      HYPIC_CUDA_CHECK(cudaMemcpy(h.data(), p, sizeof(float) * ns, cudaMemcpyDeviceToHost));
      return h;
    };
    if (before_dev[i]) {
      EXPECT_LT(rel_err(fetch(before_dev[i]), ref_before[i]), tol) << "before step " << i;
    }
    if (after_dev[i]) {
      EXPECT_LT(rel_err(fetch(after_dev[i]), ref_after[i]), tol) << "after step " << i;
    }
  }
  });
  }
}

// Row spans inside the chain: the recurrent delta rule of kernels/delta_rule.h (fp32, on the same bf16
// inputs) between affine steps, with grouped q/k heads, spans shorter than, equal to and crossing the
// kernel's staging of 16 tokens, and the states recorded before and after a span.
TEST_F(CudaOps, StateChainRowSpansFollowTheRecurrentRule) {
  Stream st;
  // dk 128: every lane of a row step holds 16 rows; dk 36: some lanes hold fewer or none.
  for (const int64_t dk : {int64_t{128}, int64_t{36}}) {
  SCOPED_TRACE("dk " + std::to_string(dk));
  const int64_t H = 4, Hk = 2, dv = 80, ns = H * dk * dv, no = H * dk * dk;
  auto S = hypic::test::randn(ns, 60, 0.3f);
  const std::vector<float> S0 = S;
  auto op = [&](uint32_t seed) {
    auto t = hypic::test::randn(no, seed, 0.03f);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < dk; ++i) t[h * dk * dk + i * dk + i] += 0.9f;
    return t;
  };
  struct Span {
    std::vector<float> q, k, v, g, beta;  // q, k [n, Hk, dk] (unit rows, q scaled), v [n, H, dv], g, beta [n, H]
    int64_t n;
  };
  auto span = [&](int64_t n, uint32_t seed, float decay) {
    Span sp{hypic::test::randn(n * Hk * dk, seed), hypic::test::randn(n * Hk * dk, seed + 1),
            randn_bf16(n * H * dv, seed + 2), hypic::test::randn(n * H, seed + 3, 0.3f),
            hypic::test::randn(n * H, seed + 4), n};
    for (auto* x : {&sp.q, &sp.k})
      for (int64_t r = 0; r < n * Hk; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < dk; ++i) ss += double((*x)[r * dk + i]) * (*x)[r * dk + i];
        const float scale = (x == &sp.q ? 1.0f / std::sqrt(float(dk)) : 1.0f) / float(std::sqrt(ss));
        for (int64_t i = 0; i < dk; ++i) (*x)[r * dk + i] *= scale;
      }
    round_bf16(sp.q);
    round_bf16(sp.k);
    for (auto& x : sp.g) x = -std::fabs(x) * decay;           // log decays
    for (auto& x : sp.beta) x = 1.0f / (1.0f + std::exp(-x));  // in (0, 1)
    return sp;
  };
  // Affine step (T, B) and span steps, in order; spans of 5, 16, 37 and 1 rows, 9 rows whose state decays by
  // up to e^-10 a token (the chunked form's e^{G_j} underflow), and 32 (one whole staged piece).
  std::deque<DevArray<float>> keepf;  // a deque: the steps keep pointers into it
  std::deque<DevArray<bf16>> keepb;
  std::vector<StateStep> steps;
  std::vector<std::vector<float>> ref_out;
  std::vector<DevArray<bf16>*> out_dev;
  std::vector<float> ref_before, ref_after;
  float *before_dev = nullptr, *after_dev = nullptr;
  auto affine = [&](const std::vector<float>& T, const std::vector<float>& B) {
    StateStep s{keepf.emplace_back(pool, T).get(), B.empty() ? nullptr : keepf.emplace_back(pool, B).get(), nullptr,
                nullptr, 0};
    steps.push_back(s);
    std::vector<float> next(ns);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < dk; ++r)
        for (int64_t c = 0; c < dv; ++c) {
          double v = B.empty() ? 0.0 : B[h * dk * dv + r * dv + c];
          for (int64_t k = 0; k < dk; ++k) v += double(T[h * dk * dk + r * dk + k]) * S[h * dk * dv + k * dv + c];
          next[h * dk * dv + r * dv + c] = float(v);
        }
    S = next;
  };
  std::vector<Span> spans;
  spans.reserve(6);
  auto rows = [&](int64_t n, uint32_t seed, bool record, float decay = 1.0f) {
    const Span& sp = spans.emplace_back(span(n, seed, decay));
    StateStep s{nullptr, nullptr, nullptr, nullptr, 0};
    s.q = keepb.emplace_back(to_device_bf16(pool, sp.q)).get();
    s.k = keepb.emplace_back(to_device_bf16(pool, sp.k)).get();
    s.v = keepb.emplace_back(to_device_bf16(pool, sp.v)).get();
    s.g = keepf.emplace_back(pool, sp.g).get();
    s.beta = keepf.emplace_back(pool, sp.beta).get();
    out_dev.push_back(&keepb.emplace_back(pool, n * H * dv));
    s.o = out_dev.back()->get();
    s.n = static_cast<int>(n);
    if (record) {
      s.before = before_dev = keepf.emplace_back(pool, ns).get();
      s.after = after_dev = keepf.emplace_back(pool, ns).get();
      ref_before = S;
    }
    steps.push_back(s);
    // The CPU rule takes q and k per value head.
    std::vector<float> qe(n * H * dk), ke(n * H * dk), out(n * H * dv);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < dk; ++i) {
          qe[(t * H + h) * dk + i] = sp.q[(t * Hk + h / (H / Hk)) * dk + i];
          ke[(t * H + h) * dk + i] = sp.k[(t * Hk + h / (H / Hk)) * dk + i];
        }
    hypic::cpu::delta_rule_recurrent({n, H, dk, dv}, qe.data(), ke.data(), sp.v.data(), sp.g.data(), sp.beta.data(),
                                     S.data(), out.data());
    ref_out.push_back(out);
    if (record) ref_after = S;
  };
  affine(op(61), hypic::test::randn(ns, 62, 0.3f));
  rows(5, 70, false);
  affine(op(63), {});
  rows(16, 80, true);
  rows(37, 90, false);
  affine(op(64), hypic::test::randn(ns, 65, 0.3f));
  rows(1, 100, false);
  rows(9, 110, false, 12.0f);
  rows(32, 120, false);
  auto dsteps = device_array(pool, steps);
  for_each_chain_form([&] {
  DevArray<float> dS(pool, S0);
  state_chain(H, dk, dv, dsteps.get(), static_cast<int64_t>(steps.size()), dS.get(), st, Hk);
  EXPECT_LT(rel_err(dS.download(), S), 1e-4f) << "final state";
  for (size_t i = 0; i < ref_out.size(); ++i)
    EXPECT_LT(rel_err(from_device_bf16(*out_dev[i]), ref_out[i]), 1.2e-2f) << "outputs of span " << i;
  auto fetch = [&](float* p) {
    std::vector<float> h(ns);
    HYPIC_CUDA_CHECK(cudaDeviceSynchronize());
    HYPIC_CUDA_CHECK(cudaMemcpy(h.data(), p, sizeof(float) * ns, cudaMemcpyDeviceToHost));
    return h;
  };
  EXPECT_LT(rel_err(fetch(before_dev), ref_before), 1e-4f) << "state before a span";
  EXPECT_LT(rel_err(fetch(after_dev), ref_after), 1e-4f) << "state after a span";
  });
  }
}

TEST_F(CudaOps, CopyBatched) {
  Stream st;
  // Copies of an odd byte count (the byte path) and of a 16-byte multiple (the vector path).
  for (const size_t bytes : {size_t{1000}, size_t{4096 + 3}}) {
    std::vector<DevArray<char>> src, dst;
    std::vector<const void*> ps;
    std::vector<void*> pd;
    for (int i = 0; i < 3; ++i) {
      std::vector<char> h(bytes);
      for (size_t j = 0; j < bytes; ++j) h[j] = static_cast<char>((j * 7 + i * 13) & 0x7f);
      src.emplace_back(pool, h);
      dst.emplace_back(pool, bytes);
      ps.push_back(src.back().get());
      pd.push_back(i == 1 ? nullptr : dst.back().get());  // a null destination is skipped
    }
    auto dps = device_array(pool, ps);
    auto dpd = device_array(pool, pd);
    copy_batched(dps.get(), dpd.get(), nullptr, 3, bytes, st);
    for (int i = 0; i < 3; i += 2) EXPECT_EQ(dst[i].download(), src[i].download()) << bytes << " bytes, copy " << i;
    // Per-copy sizes: copy i moves bytes - 16 * i bytes and leaves the rest of its destination alone.
    std::vector<int64_t> sizes;
    for (int i = 0; i < 3; ++i) sizes.push_back(static_cast<int64_t>(bytes) - 16 * i);
    auto dsz = device_array(pool, sizes);
    std::vector<DevArray<char>> dst2;
    std::vector<void*> pd2;
    for (int i = 0; i < 3; ++i) {
      dst2.emplace_back(pool, std::vector<char>(bytes, 1));
      pd2.push_back(dst2.back().get());
    }
    auto dpd2 = device_array(pool, pd2);
    copy_batched(dps.get(), dpd2.get(), dsz.get(), 3, bytes, st);
    for (int i = 0; i < 3; ++i) {
      auto want = src[i].download();
      std::fill(want.begin() + sizes[i], want.end(), char{1});
      EXPECT_EQ(dst2[i].download(), want) << bytes << " bytes, sized copy " << i;
    }
  }
}

// The 35B-A3B's keys (two heads of 256, 64 rotated: 8 elements a load), a shape whose rotated halves are not
// whole 8-element groups (one element a load), and ranges whose rows sit off 16-byte alignment (the loads of
// those ranges' rows element by element in a launch that takes 8 at a time elsewhere).
TEST_F(CudaOps, KvAppendRangesMatchesCpuRopeShift) {
  struct Shape {
    int64_t heads, hd, rot;
    bool misalign;
  };
  for (const Shape sh : {Shape{2, 256, 64, false}, Shape{3, 72, 36, false}, Shape{2, 256, 64, true}}) {
    SCOPED_TRACE(::testing::Message() << sh.heads << " x " << sh.hd << ", " << sh.rot << " rotated"
                                      << (sh.misalign ? ", misaligned rows" : ""));
    Stream st;
    const int64_t heads = sh.heads, hd = sh.hd, rot = sh.rot, w = heads * hd, first = 5;
    const double theta = 1e7;
    // Three ranges: rotated forward, not rotated, rotated by a large delta.
    const std::vector<int64_t> ns = {7, 3, 12}, pos0 = {100, 3, 4000}, rotate = {100, 0, 3990};
    std::vector<DevArray<bf16>> keep;
    std::vector<KvRange> ranges;
    std::vector<float> tables, refK, refV;
    std::vector<int64_t> refpos;
    int64_t row = first;
    for (size_t i = 0; i < ns.size(); ++i) {
      auto k = randn_bf16(ns[i] * w, 60 + uint32_t(i)), v = randn_bf16(ns[i] * w, 70 + uint32_t(i));
      // Misaligned: the first and last ranges' rows start one element into their buffers.
      const int64_t off = sh.misalign && i != 1 ? 1 : 0;
      std::vector<float> kp(off, 0.0f), vp(off, 0.0f);
      kp.insert(kp.end(), k.begin(), k.end());
      vp.insert(vp.end(), v.begin(), v.end());
      const bf16* dk = keep.emplace_back(to_device_bf16(pool, kp)).get() + off;
      const bf16* dv = keep.emplace_back(to_device_bf16(pool, vp)).get() + off;
      ranges.push_back({dk, dv, pos0[i], row, ns[i], rotate[i]});
      row += ns[i];
      tables.resize(tables.size() + rot);
      rope_shift_table(rot, rotate[i], theta, tables.data() + tables.size() - rot,
                       tables.data() + tables.size() - rot / 2);
      cpu::rope_shift(k.data(), ns[i], heads, hd, rot, rotate[i], theta);
      refK.insert(refK.end(), k.begin(), k.end());
      refV.insert(refV.end(), v.begin(), v.end());
      for (int64_t j = 0; j < ns[i]; ++j) refpos.push_back(pos0[i] + j);
    }
    const int64_t total = row - first;
    DevArray<bf16> K(pool, row * w), V(pool, row * w);
    DevArray<int64_t> pos(pool, row);
    auto dranges = device_array(pool, ranges);
    auto dtab = device_array(pool, tables);
    kv_append_ranges(dranges.get(), dtab.get(), 3, first, total, K.get(), V.get(), pos.get(), heads, hd, rot, st);
    const auto k_all = from_device_bf16(K), v_all = from_device_bf16(V);
    const std::vector<float> k_got(k_all.begin() + first * w, k_all.end()),
        v_got(v_all.begin() + first * w, v_all.end());
    EXPECT_LT(rel_err(k_got, refK), 1.2e-2f);  // one bf16 rounding of the rotated keys
    EXPECT_EQ(rel_err(v_got, refV), 0.0f);
    const auto p = pos.download();
    EXPECT_EQ(std::vector<int64_t>(p.begin() + first, p.end()), refpos);
  }
}

}  // namespace
}  // namespace hypic::cuda::test
