// Shared pieces of the chunked KDA kernels (kda_prep.cu, kda_chunked.cu): the workspace layout between the
// two launches. Chunk geometry and slots are the Gated DeltaNet ones (kernels/cuda/gdn_common.cuh).
//
// Per chunk of L <= 64 rows with start state S0, Gam_i = g_0 + ... + g_i (per key channel, rows past L
// repeat Gam_{L-1}), the UT transform gives the whole chunk:
//   Akk_ij = beta_i sum_d k_id k_jd e^(Gam_id - Gam_jd)  (j < i),   M = (I + Akk)^-1 diag(beta)
//   Aqk_ij = sum_d q_id k_jd e^(Gam_id - Gam_jd)           (j <= i)
//   Delta  = M (V - Kt S0)                Kt = e^Gam o K   (the pseudo-values of the chunk's rows)
//   O      = Qt S0 + Aqk Delta            Qt = e^Gam o Q
//   S_L    = diag(e^Gam_L) S0 + Kb^T Delta,   Kb = e^(Gam_L - Gam) o K
// and the chunk's transfer operator is the same walk with V = 0: diag(e^Gam_L) - Kb^T M Kt.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/gdn_common.cuh"

namespace hypic::cuda::kda {

using gdn::kC;

// Workspace, per value head and slot (tiles contiguous, zero in padded rows and columns):
//   Qt, Kt, Kb [H, slots, 64, DK] bf16     as above
//   M, Aqk     [H, slots, 64, 64] bf16     Aqk zero above the diagonal
//   GL         [H, slots, DK]     fp32     e^Gam_L (1 in padded channels)
struct Workspace {
  bf16 *Qt, *Kt, *Kb, *M, *Aqk;
  float* GL;
  int64_t slots;
  int dkp;
};

inline size_t workspace_bytes(const GdnShape& s) {
  using detail::align128;
  const size_t tiles = size_t(s.H) * size_t(gdn::slot_count(s));
  const size_t dkp = size_t(gdn::padded_dk(s.dk));
  return 3 * align128(sizeof(bf16) * tiles * kC * dkp) + 2 * align128(sizeof(bf16) * tiles * kC * kC) +
         align128(sizeof(float) * tiles * dkp);
}

inline Workspace carve(const GdnShape& s, void* ws) {
  using detail::align128;
  const size_t tiles = size_t(s.H) * size_t(gdn::slot_count(s));
  const size_t dkp = size_t(gdn::padded_dk(s.dk));
  auto* p = static_cast<unsigned char*>(ws);
  Workspace w{};
  bf16** big[3] = {&w.Qt, &w.Kt, &w.Kb};
  for (bf16** b : big) {
    *b = reinterpret_cast<bf16*>(p);
    p += align128(sizeof(bf16) * tiles * kC * dkp);
  }
  w.M = reinterpret_cast<bf16*>(p);
  p += align128(sizeof(bf16) * tiles * kC * kC);
  w.Aqk = reinterpret_cast<bf16*>(p);
  p += align128(sizeof(bf16) * tiles * kC * kC);
  w.GL = reinterpret_cast<float*>(p);
  w.slots = gdn::slot_count(s);
  w.dkp = int(dkp);
  return w;
}

// Launchers, on `stream`, in this order. want_q: also build Qt and Aqk (needed only for outputs).
void launch_prep(const GdnShape& s, const bf16* q, const bf16* k, const float* g, const float* beta,
                 const int32_t* cu, int64_t max_chunks, bool want_q, const Workspace& w, cudaStream_t stream);
void launch_walk(const GdnShape& s, const bf16* v, const int32_t* cu, float* state, bf16* out, float* transfer,
                 const Workspace& w, cudaStream_t stream);

}  // namespace hypic::cuda::kda
