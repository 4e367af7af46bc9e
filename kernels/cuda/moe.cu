#include <climits>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/moe_route.cuh"
#include "kernels/cuda/pdl_launch.cuh"
#include "kernels/cuda/row_norm8.cuh"

namespace hypic::cuda {
namespace {

constexpr int kMaxE = detail::kRouteMaxE;

// One warp per token (detail::route_warp); PerLane experts per lane.
template <int PerLane>
__global__ void route_kernel(const float* __restrict__ logits, int64_t T, int E, int K, bool normalize,
                             int32_t* __restrict__ ids, float* __restrict__ weights) {
  detail::pdl_wait();
  const int64_t t = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= T) return;
  int32_t id;
  float w;
  detail::route_warp<PerLane>(logits + t * E, E, K, normalize, lane, id, w);
  // K <= 32: slot j was kept by lane j.
  if (lane < K) {
    ids[t * K + lane] = id;
    weights[t * K + lane] = w;
  }
}

// Each block counts kCountIds ids in shared memory, then takes one range per expert from the global
// counters: one global atomic an (expert, block) instead of one an id (a long prefill's 65536 routed rows on
// 256 counters contended for ~19 us). A row's rank within its expert depends on the atomics' order, as before.
constexpr int kCountThreads = 256, kCountPer = 16, kCountIds = kCountThreads * kCountPer;
__global__ void __launch_bounds__(kCountThreads) count_kernel(const int32_t* __restrict__ ids, int64_t n, int E,
                                                              int32_t* counts, int32_t* rank) {
  __shared__ int32_t local[kMaxE], base[kMaxE];
  for (int e = threadIdx.x; e < E; e += kCountThreads) local[e] = 0;
  __syncthreads();
  const int64_t i0 = int64_t(blockIdx.x) * kCountIds + threadIdx.x;
  int32_t id[kCountPer], r[kCountPer];
#pragma unroll
  for (int j = 0; j < kCountPer; ++j) {
    const int64_t i = i0 + int64_t(j) * kCountThreads;
    id[j] = i < n ? ids[i] : -1;
    if (id[j] >= 0) r[j] = atomicAdd(&local[id[j]], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += kCountThreads) base[e] = local[e] ? atomicAdd(&counts[e], local[e]) : 0;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kCountPer; ++j)
    if (id[j] >= 0) rank[i0 + int64_t(j) * kCountThreads] = base[id[j]] + r[j];
}

// One block of kMaxE threads, one an expert: warp scans, then a scan of the warps' totals (a serial loop over
// 256 experts took ~6 us a layer).
__global__ void __launch_bounds__(kMaxE) scan_kernel(const int32_t* __restrict__ counts, int E, int32_t* offsets) {
  __shared__ int32_t warp_total[kMaxE / 32];
  const int e = threadIdx.x;
  const int32_t n = e < E ? counts[e] : 0;
  int total;
  const int32_t before = detail::block_exclusive_scan<kMaxE>(n, warp_total, &total);
  if (e < E) offsets[e] = before;
  if (e == E - 1) offsets[E] = before + n;
}

__global__ void place_kernel(const int32_t* __restrict__ ids, int64_t n, int K, const int32_t* __restrict__ offsets,
                             const int32_t* __restrict__ rank, int32_t* src_token, int32_t* slot_row) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t row = offsets[ids[i]] + rank[i];
  src_token[row] = int32_t(i / K);
  slot_row[i] = row;
}

__global__ void gather_kernel(const bf16* __restrict__ x, int64_t R, int64_t D, const int32_t* __restrict__ src,
                              bf16* __restrict__ xs) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= R * D) return;
  const int64_t r = i / D, c = i % D;
  xs[i] = x[int64_t(src[r]) * D + c];
}

// The same copy, 16 bytes a thread: D % 8 == 0, both arrays 16-byte aligned.
__global__ void gather8_kernel(const bf16* __restrict__ x, int64_t R, int64_t D, const int32_t* __restrict__ src,
                               bf16* __restrict__ xs) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, D8 = D / 8;
  if (i >= R * D8) return;
  const int64_t r = i / D8, c = 8 * (i % D8);
  *reinterpret_cast<uint4*>(xs + r * D + c) = __ldg(reinterpret_cast<const uint4*>(x + int64_t(src[r]) * D + c));
}

__global__ void combine_kernel(const bf16* __restrict__ ys, int64_t T, int K, int64_t D,
                               const int32_t* __restrict__ slot_row, const float* __restrict__ w, bf16* out,
                               bool accumulate) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * D) return;
  const int64_t t = i / D, c = i % D;
  float acc = accumulate ? __bfloat162float(out[i]) : 0.0f;
  for (int j = 0; j < K; ++j) acc += w[t * K + j] * __bfloat162float(ys[int64_t(slot_row[t * K + j]) * D + c]);
  out[i] = __float2bfloat16_rn(acc);
}

// The device-only plan in one block (E <= 1024 experts: one per thread): counts and ranks by shared-memory
// atomics, the offsets and, by one block scan, the list of experts with rows (tile_rows == 0) or the list
// of their row tiles (tile_rows > 0, moe_tile_list's form), then every row placed.
constexpr int kPlanThreads = 1024;
static_assert(kPlanThreads >= kMaxE, "one thread per expert");

__global__ void __launch_bounds__(kPlanThreads) plan_device_kernel(const int32_t* __restrict__ ids, int n, int K, int E,
                                                                   MoePlan plan, int slots, int32_t* experts,
                                                                   int2* tiles, int tile_rows) {
  detail::pdl_wait();
  __shared__ int cnt[kMaxE], off[kMaxE];
  __shared__ int wsum[kPlanThreads / 32], wused[kPlanThreads / 32], used_total;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  if (tid < E) cnt[tid] = 0;
  __syncthreads();
  for (int i = tid; i < n; i += kPlanThreads) plan.rank[i] = atomicAdd(&cnt[ids[i]], 1);
  __syncthreads();
  // Inclusive warp scans of the counts and of the slots an expert takes (1 if it has rows, or its row
  // tiles), then the warps' totals.
  const int c = tid < E ? cnt[tid] : 0, has = tile_rows > 0 ? (c + tile_rows - 1) / tile_rows : c > 0;
  int sc = c, su = has;
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const int a = __shfl_up_sync(0xffffffffu, sc, o), b = __shfl_up_sync(0xffffffffu, su, o);
    if (lane >= o) sc += a, su += b;
  }
  if (lane == 31) wsum[warp] = sc, wused[warp] = su;
  __syncthreads();
  if (warp == 0) {
    int a = wsum[lane], b = wused[lane];
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const int x = __shfl_up_sync(0xffffffffu, a, o), y = __shfl_up_sync(0xffffffffu, b, o);
      if (lane >= o) a += x, b += y;
    }
    if (lane == 31) used_total = b;
    wsum[lane] = a - wsum[lane];  // exclusive prefix of each warp
    wused[lane] = b - wused[lane];
  }
  __syncthreads();
  const int excl = wsum[warp] + sc - c, at = wused[warp] + su - has;
  if (tid < E) {
    off[tid] = excl;
    plan.counts[tid] = c;
    plan.offsets[tid] = excl;
    if (tile_rows > 0) {
      for (int j = 0; j < has; ++j) tiles[at + j] = make_int2(tid, excl + j * tile_rows);
    } else if (has && at < slots) {
      experts[at] = tid;
    }
  }
  if (tid == E - 1) plan.offsets[E] = excl + c;
  for (int j = min(used_total, slots) + tid; j < slots; j += kPlanThreads) {
    if (tile_rows > 0)
      tiles[j] = make_int2(-1, 0);
    else
      experts[j] = -1;
  }
  __syncthreads();
  for (int i = tid; i < n; i += kPlanThreads) {  // rank[i] was written by this thread above
    const int32_t row = off[ids[i]] + plan.rank[i];
    plan.src_token[row] = int32_t(i / K);
    plan.slot_row[i] = row;
  }
}

__global__ void combine_residual_kernel(const bf16* __restrict__ ys, int64_t T, int K, int64_t D,
                                        const int32_t* __restrict__ slot_row, const float* __restrict__ w,
                                        float* __restrict__ h, const bf16* __restrict__ shared,
                                        const float* __restrict__ shared_gate) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * D) return;
  const int64_t t = i / D, c = i % D;
  float acc = 0.0f;
  for (int j = 0; j < K; ++j) acc += w[t * K + j] * __bfloat162float(ys[int64_t(slot_row[t * K + j]) * D + c]);
  float v = detail::round_bf16(acc);  // moe_combine's bf16 output, then residual_add's sum
  if (shared) v += (shared_gate ? detail::sigmoid_f(shared_gate[t]) : 1.0f) * __bfloat162float(shared[i]);
  h[i] += v;
}

// The same sums for columns c .. c + 7 of row t (16-byte loads of the rows: D % 8 == 0, rows 16-byte
// aligned); h's new values also land in nh.
__device__ __forceinline__ void combine_add8(const bf16* __restrict__ ys, int K, int64_t D,
                                             const int32_t* __restrict__ slot_row, const float* __restrict__ w,
                                             float* __restrict__ h, const bf16* __restrict__ shared,
                                             const float* __restrict__ shared_gate, int64_t t, int64_t c,
                                             float (&nh)[8]) {
  float acc[8] = {};
  for (int j = 0; j < K; ++j) {
    const float wj = w[t * K + j];
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(ys + int64_t(slot_row[t * K + j]) * D + c));
    const __nv_bfloat16* y = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
    for (int q = 0; q < 8; ++q) acc[q] += wj * __bfloat162float(y[q]);
  }
  float v[8];
#pragma unroll
  for (int q = 0; q < 8; ++q) v[q] = detail::round_bf16(acc[q]);
  if (shared) {
    const float g = shared_gate ? detail::sigmoid_f(shared_gate[t]) : 1.0f;
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(shared + t * D + c));
    const __nv_bfloat16* sh = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
    for (int q = 0; q < 8; ++q) v[q] += g * __bfloat162float(sh[q]);
  }
  float4* hp = reinterpret_cast<float4*>(h + t * D + c);
  float4 a = hp[0], b = hp[1];
  a.x += v[0], a.y += v[1], a.z += v[2], a.w += v[3];
  b.x += v[4], b.y += v[5], b.z += v[6], b.w += v[7];
  hp[0] = a;
  hp[1] = b;
  nh[0] = a.x, nh[1] = a.y, nh[2] = a.z, nh[3] = a.w, nh[4] = b.x, nh[5] = b.y, nh[6] = b.z, nh[7] = b.w;
}

// 8 columns a thread over all rows.
__global__ void combine_residual8_kernel(const bf16* __restrict__ ys, int64_t T, int K, int64_t D,
                                         const int32_t* __restrict__ slot_row, const float* __restrict__ w,
                                         float* __restrict__ h, const bf16* __restrict__ shared,
                                         const float* __restrict__ shared_gate) {
  detail::pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, D8 = D / 8;
  if (i >= T * D8) return;
  float nh[8];
  combine_add8(ys, K, D, slot_row, w, h, shared, shared_gate, i / D8, 8 * (i % D8), nh);
}

// One block a row (D / 8 threads), then the new row normed into x (detail::norm_row8: the bits cuda::rmsnorm
// gives for the row).
__global__ void combine_residual_norm_kernel(const bf16* __restrict__ ys, int K, int64_t D,
                                             const int32_t* __restrict__ slot_row, const float* __restrict__ w,
                                             float* __restrict__ h, const bf16* __restrict__ shared,
                                             const float* __restrict__ shared_gate, const float* __restrict__ norm_w,
                                             float eps, bool zc, bf16* __restrict__ x) {
  detail::pdl_wait();
  __shared__ float part[32];
  const int64_t t = blockIdx.x;
  float nh[8];
  combine_add8(ys, K, D, slot_row, w, h, shared, shared_gate, t, int64_t(8 * threadIdx.x), nh);
  detail::norm_row8(nh, int(D), norm_w, eps, zc, x + t * D, part);
}

}  // namespace

void moe_route(const float* logits, int64_t T, int64_t E, int64_t K, bool normalize, int32_t* ids, float* weights,
               cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(E > 0 && E <= kMaxE, "moe_route: at most 1024 experts");
  HYPIC_CUDA_REQUIRE(K > 0 && K <= E && K <= 32, "moe_route: top-k must be in [1, min(E, 32)]");
  if (T == 0) return;
  if (E <= 256)
    detail::launch_pdl(detail::pdl_chain_enabled(), route_kernel<8>, dim3(detail::blocks_for(T, 4)), dim3(128), 0,
                       stream, logits, T, int(E), int(K), normalize, ids, weights);
  else
    detail::launch_pdl(detail::pdl_chain_enabled(), route_kernel<32>, dim3(detail::blocks_for(T, 4)), dim3(128), 0,
                       stream, logits, T, int(E), int(K), normalize, ids, weights);
  HYPIC_CUDA_LAUNCH_CHECK();
}

size_t moe_plan_workspace_bytes(int64_t T, int64_t K, int64_t E) {
  return detail::align128(sizeof(int32_t) * E) + detail::align128(sizeof(int32_t) * (E + 1)) +
         3 * detail::align128(sizeof(int32_t) * T * K);
}

MoePlan moe_plan_from_workspace(void* workspace, int64_t T, int64_t K, int64_t E) {
  auto* p = static_cast<unsigned char*>(workspace);
  MoePlan plan{};
  plan.counts = reinterpret_cast<int32_t*>(p);
  p += detail::align128(sizeof(int32_t) * E);
  plan.offsets = reinterpret_cast<int32_t*>(p);
  p += detail::align128(sizeof(int32_t) * (E + 1));
  const size_t tk = detail::align128(sizeof(int32_t) * T * K);
  plan.rank = reinterpret_cast<int32_t*>(p);
  plan.src_token = reinterpret_cast<int32_t*>(p + tk);
  plan.slot_row = reinterpret_cast<int32_t*>(p + 2 * tk);
  return plan;
}

void moe_plan(const int32_t* ids, int64_t T, int64_t K, int64_t E, const MoePlan& plan, int32_t* counts_host,
              cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(E > 0 && E <= kMaxE && K > 0, "moe_plan: bad expert shape");
  const int64_t n = T * K;
  HYPIC_CUDA_CHECK(cudaMemsetAsync(plan.counts, 0, sizeof(int32_t) * E, stream));
  if (n > 0) {
    count_kernel<<<detail::blocks_for(n, kCountIds), kCountThreads, 0, stream>>>(ids, n, int(E), plan.counts,
                                                                                 plan.rank);
    HYPIC_CUDA_LAUNCH_CHECK();
  }
  scan_kernel<<<1, kMaxE, 0, stream>>>(plan.counts, int(E), plan.offsets);
  HYPIC_CUDA_LAUNCH_CHECK();
  if (n > 0) {
    place_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(ids, n, int(K), plan.offsets, plan.rank,
                                                                 plan.src_token, plan.slot_row);
    HYPIC_CUDA_LAUNCH_CHECK();
  }
  if (!counts_host) return;  // a device-only plan (moe_small.h's expert-major kernels)
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(counts_host, plan.counts, sizeof(int32_t) * E, cudaMemcpyDeviceToHost, stream));
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void moe_gather(const bf16* x, int64_t T, int64_t K, int64_t D, const MoePlan& plan, bf16* xs, cudaStream_t stream) {
  const int64_t n = T * K * D;
  if (n == 0) return;
  if (D % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(xs) % 16 == 0)
    gather8_kernel<<<detail::blocks_for(n / 8, 256), 256, 0, stream>>>(x, T * K, D, plan.src_token, xs);
  else
    gather_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(x, T * K, D, plan.src_token, xs);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void moe_grouped_gemm(Blas& blas, const bf16* xs, int64_t Kd, const bf16* const* expert_weights, int64_t N,
                      const int32_t* counts_host, int64_t E, bf16* ys, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(Kd > 0 && N > 0 && Kd < (int64_t{1} << 31) && N < (int64_t{1} << 31),
                     "moe_grouped_gemm: bad matrix shape");
  // Column-major view per expert e (rows r0..r0+n): ys_e^T [N, n] = W_e [N, Kd] xs_e^T [Kd, n].
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> m, n, k, lda, ldb, ldc, group_size;
  std::vector<float> alpha, beta;
  std::vector<const void*> A, B;
  std::vector<void*> C;
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t cnt = counts_host[e];
    if (cnt > 0) {
      ta.push_back(CUBLAS_OP_T);
      tb.push_back(CUBLAS_OP_N);
      m.push_back(int(N));
      n.push_back(int(cnt));
      k.push_back(int(Kd));
      lda.push_back(int(Kd));
      ldb.push_back(int(Kd));
      ldc.push_back(int(N));
      group_size.push_back(1);
      alpha.push_back(1.0f);
      beta.push_back(0.0f);
      A.push_back(expert_weights[e]);
      B.push_back(xs + row * Kd);
      C.push_back(ys + row * N);
    }
    row += cnt;
  }
  const int groups = int(ta.size());
  if (groups == 0) return;
  // The pointer arrays live on the device for the call; the workspace of the Blas handle is in use by
  // cuBLAS itself, so they get their own short-lived allocation (freed after the stream has used it).
  const size_t bytes = sizeof(void*) * 3 * groups;
  void* dptr = nullptr;
  HYPIC_CUDA_CHECK(cudaMallocAsync(&dptr, bytes, stream));
  std::vector<const void*> all;
  all.reserve(3 * groups);
  all.insert(all.end(), A.begin(), A.end());
  all.insert(all.end(), B.begin(), B.end());
  for (void* c : C) all.push_back(c);
  // A copy from pageable memory returns once the source is staged, so `all` may die with this scope
  // without waiting for the device.
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(dptr, all.data(), bytes, cudaMemcpyHostToDevice, stream));
  auto** dA = static_cast<const void**>(dptr);
  HYPIC_CUBLAS_CHECK(cublasSetStream(blas.handle(), stream));
  HYPIC_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(blas.handle(), ta.data(), tb.data(), m.data(), n.data(), k.data(),
                                                alpha.data(), dA, CUDA_R_16BF, lda.data(), dA + groups, CUDA_R_16BF,
                                                ldb.data(), beta.data(), const_cast<void**>(dA + 2 * groups),
                                                CUDA_R_16BF, ldc.data(), groups, group_size.data(),
                                                CUBLAS_COMPUTE_32F));
  HYPIC_CUDA_CHECK(cudaFreeAsync(dptr, stream));
}

void moe_combine(const bf16* ys, int64_t T, int64_t K, int64_t D, const MoePlan& plan, const float* weights,
                 bf16* out, bool accumulate, cudaStream_t stream) {
  if (T * D == 0) return;
  combine_kernel<<<detail::blocks_for(T * D, 256), 256, 0, stream>>>(ys, T, int(K), D, plan.slot_row, weights, out,
                                                                     accumulate);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void moe_plan_device(const int32_t* ids, int64_t T, int64_t K, int64_t E, const MoePlan& plan, int32_t* experts,
                     int64_t slots, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(E > 0 && E <= kMaxE && K > 0 && T >= 0 && T * K < (int64_t{1} << 31),
                     "moe_plan_device: bad expert shape");
  HYPIC_CUDA_REQUIRE(slots > 0 && slots <= E, "moe_plan_device: bad slot count");
  detail::launch_pdl(detail::pdl_chain_enabled(), plan_device_kernel, dim3(1), dim3(kPlanThreads), 0, stream, ids,
                     int(T * K), int(K), int(E), plan, int(slots), experts, nullptr, 0);
  HYPIC_CUDA_LAUNCH_CHECK();
}

void moe_plan_tiles_device(const int32_t* ids, int64_t T, int64_t K, int64_t E, const MoePlan& plan, int2* tiles,
                           int64_t slots, int64_t tile_rows, cudaStream_t stream) {
  HYPIC_CUDA_REQUIRE(E > 0 && E <= kMaxE && K > 0 && T >= 0 && T * K < (int64_t{1} << 31),
                     "moe_plan_tiles_device: bad expert shape");
  HYPIC_CUDA_REQUIRE(tile_rows > 0 && tile_rows <= INT_MAX && slots >= T * K / tile_rows + E && slots <= INT_MAX,
                     "moe_plan_tiles_device: too few tile slots");
  detail::launch_pdl(detail::pdl_chain_enabled(), plan_device_kernel, dim3(1), dim3(kPlanThreads), 0, stream, ids,
                     int(T * K), int(K), int(E), plan, int(slots), nullptr, tiles, int(tile_rows));
  HYPIC_CUDA_LAUNCH_CHECK();
}

void moe_combine_residual(const bf16* ys, int64_t T, int64_t K, int64_t D, const MoePlan& plan, const float* weights,
                          float* h, const bf16* shared, const float* shared_gate, cudaStream_t stream) {
  if (T * D == 0) return;
  const bool aligned = D % 8 == 0 && reinterpret_cast<uintptr_t>(ys) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(h) % 16 == 0 && reinterpret_cast<uintptr_t>(shared) % 16 == 0;
  if (aligned)
    detail::launch_pdl(detail::pdl_chain_enabled(), combine_residual8_kernel, dim3(detail::blocks_for(T * D / 8, 256)),
                       dim3(256), 0, stream, ys, T, int(K), D, plan.slot_row, weights, h, shared, shared_gate);
  else
    combine_residual_kernel<<<detail::blocks_for(T * D, 256), 256, 0, stream>>>(ys, T, int(K), D, plan.slot_row,
                                                                                weights, h, shared, shared_gate);
  HYPIC_CUDA_LAUNCH_CHECK();
}

bool moe_combine_residual_norm(const bf16* ys, int64_t T, int64_t K, int64_t D, const MoePlan& plan,
                               const float* weights, float* h, const bf16* shared, const float* shared_gate,
                               const float* norm_w, float eps, bool zero_centred, bf16* x, cudaStream_t stream) {
  const bool fits = detail::row_norm8_fits(D, h, norm_w, x) && reinterpret_cast<uintptr_t>(ys) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(shared) % 16 == 0 && T <= 2147483647;
  if (!fits) return false;
  if (T == 0) return true;
  detail::launch_pdl(detail::pdl_chain_enabled(), combine_residual_norm_kernel, dim3(unsigned(T)),
                     dim3(unsigned(D / 8)), 0, stream, ys, int(K), D, plan.slot_row, weights, h, shared, shared_gate,
                     norm_w, eps, zero_centred, x);
  HYPIC_CUDA_LAUNCH_CHECK();
  return true;
}

}  // namespace hypic::cuda
