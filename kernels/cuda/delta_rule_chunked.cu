// Chunked Gated DeltaNet prefill in the WY/UT form (chunks of 64 tokens), three launches:
//   gdn_prep   (parallel over chunks x heads)      A = (I + L)^-1, W, U, G       kernels/cuda/gdn_prep.cu
//   gdn_state  (sequential over chunks, parallel    Vn = U - W S, S update,       kernels/cuda/gdn_state.cu
//               over heads x 32-column blocks)      optional transfer operator    (gdn_state_sm90.cu)
//   gdn_output (parallel over chunks x heads)      O = e^G Q S + P Vn            kernels/cuda/gdn_output.cu
// or two where the Hopper walk writes the outputs itself (plan_output_in_walk: P from gdn_prep, no gdn_output),
// and then, where it applies, most of gdn_prep runs beside the walk (launch_overlapped, gdn_overlap.cu).
// The workspace between them is described in kernels/cuda/gdn_common.cuh.
#include "kernels/cuda/check.h"
#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/gdn_common.cuh"

namespace hypic::cuda {
namespace {

// Whether a call, its workspace planned (fused: the walk writes the outputs), prepares the chunks beside the walk.
bool takes_overlap(const GdnShape& s, const gdn::Workspace& w, bool fused, const bf16* q, const bf16* k,
                   const bf16* out, bool transfer, int64_t max_chunks) {
  return (fused || out == nullptr) && gdn::overlap_applies(s, w, q, k, out, transfer, max_chunks);
}

}  // namespace

size_t gdn_chunked_workspace_bytes(const GdnShape& s) { return gdn::workspace_bytes(s); }

size_t gdn_bodies_workspace_bytes(const GdnShape& s) {
  return detail::align128(gdn::workspace_bytes(s)) + gdn::bodies_workspace_bytes(s) + gdn::lead_state_bytes(s);
}

void gdn_chunked_prefill(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                         const float* beta, const int32_t* cu_seqlens, int64_t max_seqlen, float* state, bf16* out,
                         float* transfer, void* workspace, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(s.H > 0 && s.Hk > 0 && s.H % s.Hk == 0, "gdn_chunked_prefill: H must be a multiple of Hk");
  HYPIC_CUDA_REQUIRE(s.dk > 0 && s.dk <= 128, "gdn_chunked_prefill: key dim must be in [1, 128]");
  HYPIC_CUDA_REQUIRE(s.dv > 0, "gdn_chunked_prefill: value dim must be positive");
  HYPIC_CUDA_REQUIRE(s.N >= 1 && (s.N == 1 || cu_seqlens != nullptr),
                     "gdn_chunked_prefill: several sequences need cu_seqlens");
  HYPIC_CUDA_REQUIRE(max_seqlen >= 0 && (cu_seqlens != nullptr || max_seqlen == s.T),
                     "gdn_chunked_prefill: max_seqlen must equal T for one sequence");
  if (s.T == 0 || max_seqlen == 0) return;
  const int64_t max_chunks = (max_seqlen + gdn::kC - 1) / gdn::kC;
  HYPIC_CUDA_REQUIRE(max_chunks < (int64_t{1} << 31) && s.H <= 65535 && s.N <= 65535,
                     "gdn_chunked_prefill: grid too large");
  gdn::Workspace w = gdn::carve(s, workspace);
  const bool fused = gdn::plan_output_in_walk(s, w, q, k, transfer != nullptr, out);
  if (!gdn::plan_wu_in_walk(s, w, q, k, v, out, fused, transfer != nullptr))
    gdn::plan_u_in_walk(s, w, q, k, v, out, fused);
  if (takes_overlap(s, w, fused, q, k, out, transfer != nullptr, max_chunks)) {
    gdn::launch_overlapped(s, q, k, v, g, beta, cu_seqlens, max_chunks, state, transfer, w, stream, out);
    return;
  }
  gdn::launch_prep(s, q, k, v, g, beta, cu_seqlens, max_chunks, w, stream);
  gdn::launch_state(s, k, cu_seqlens, state, transfer, out != nullptr, w, stream, nullptr, nullptr, nullptr,
                    fused ? q : nullptr, fused ? out : nullptr);
  if (out != nullptr && !fused) gdn::launch_output(s, q, k, cu_seqlens, max_chunks, out, w, stream);
}

bool gdn_chunked_prefill_overlaps(const GdnShape& s, const bf16* q, const bf16* k, const bf16* out, bool transfer,
                                  int64_t max_seqlen, void* workspace) {
  if (s.T == 0 || max_seqlen <= 0) return false;
  gdn::Workspace w = gdn::carve(s, workspace);
  const bool fused = gdn::plan_output_in_walk(s, w, q, k, transfer, out);
  return takes_overlap(s, w, fused, q, k, out, transfer, (max_seqlen + gdn::kC - 1) / gdn::kC);
}

void gdn_chunked_prefill_with_bodies(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                                     const float* beta, const int32_t* cu_seqlens, int64_t max_seqlen,
                                     const int32_t* lead, float* state, bf16* out, float* body_state,
                                     float* transfer, void* workspace, cudaStream_t stream,
                                     const BodyOutputs& out_to) {
  HYPIC_CUDA_REQUIRE(s.H > 0 && s.Hk > 0 && s.H % s.Hk == 0, "gdn_chunked_prefill_with_bodies: H must be a multiple of Hk");
  HYPIC_CUDA_REQUIRE(s.dk > 0 && s.dk <= 128, "gdn_chunked_prefill_with_bodies: key dim must be in [1, 128]");
  HYPIC_CUDA_REQUIRE(s.dv > 0, "gdn_chunked_prefill_with_bodies: value dim must be positive");
  HYPIC_CUDA_REQUIRE(lead != nullptr && (body_state != nullptr || out_to.body != nullptr) && transfer != nullptr,
                     "gdn_chunked_prefill_with_bodies: lead, body_state (or out_to.body) and transfer are required");
  HYPIC_CUDA_REQUIRE(s.N >= 1 && (s.N == 1 || cu_seqlens != nullptr),
                     "gdn_chunked_prefill_with_bodies: several sequences need cu_seqlens");
  HYPIC_CUDA_REQUIRE(max_seqlen >= 0 && (cu_seqlens != nullptr || max_seqlen == s.T),
                     "gdn_chunked_prefill_with_bodies: max_seqlen must equal T for one sequence");
  if (s.T == 0 || max_seqlen == 0) return;
  const int64_t max_chunks = (max_seqlen + gdn::kC - 1) / gdn::kC;
  HYPIC_CUDA_REQUIRE(max_chunks < (int64_t{1} << 31) && s.H <= 65535 && s.N <= 65535,
                     "gdn_chunked_prefill_with_bodies: grid too large");
  auto* base = static_cast<unsigned char*>(workspace);
  gdn::Workspace w = gdn::carve(s, base);
  base += detail::align128(gdn::workspace_bytes(s));
  const gdn::Workspace b = gdn::carve_bodies(s, base);
  float* lead_state = reinterpret_cast<float*>(base + gdn::bodies_workspace_bytes(s));
  const bool fused = gdn::plan_output_in_walk(s, w, q, k, true, out);
  gdn::launch_prep(s, q, k, v, g, beta, cu_seqlens, max_chunks, w, stream);
  gdn::launch_prep(s, nullptr, k, v, g, beta, cu_seqlens, max_chunks, b, stream, lead);
  // One walk: the forward (which also leaves S(lead)) and the bodies' transfer operators side by side;
  // the bodies' zero-start states follow from the linearity of the walk.
  gdn::launch_state(s, k, cu_seqlens, state, transfer, out != nullptr, w, stream, lead, &b, lead_state,
                    fused ? q : nullptr, fused ? out : nullptr);
  gdn::launch_body_state(s, transfer, state, lead_state, body_state, out_to, stream);
  if (out != nullptr && !fused) gdn::launch_output(s, q, k, cu_seqlens, max_chunks, out, w, stream);
}

}  // namespace hypic::cuda
