// gdn_prep beside the register-state walk. The walk is sequential over chunks and occupies one SM per block (64 of
// an H200's 132 for 32 value heads of 128 columns), while gdn_prep is parallel over chunks and was ~45% of the
// chunked prefill's time as a launch of its own before the walk. Here the walk waits per chunk for a ready flag
// that gdn_prep sets once that chunk's tiles are written, so only the first chunks are prepared before it starts:
//   stream:       memset(ready) -> prep of chunks [0, lead) on the whole GPU (the first chunk by default) -> fork
//   walk stream:  the walk (highest priority: its blocks are placed before the prep blocks queued beside it)
//   prep stream:  prep of chunks [lead, end), chunk-major, on the SMs the walk leaves free
//   stream:       joins both.
// The later prep never waits for the walk, so the walk's spinning blocks cannot starve it as long as they leave SMs
// free (at most half the SMs: overlap_applies' condition); if the prep blocks were placed first, the walk would
// only start later, never deadlock.
#include <map>
#include <mutex>

#include "kernels/cuda/check.h"
#include "kernels/cuda/gdn_common.cuh"
#include "kernels/cuda/pdl_launch.cuh"

namespace hypic::cuda::gdn {
namespace {

// The fork's streams and events. One set per device for the whole process, used under a lock: every overlapped
// launch on a device then walks on the same stream, so at most one walk at a time waits on its flags, and its blocks
// (at most half the SMs) always leave SMs to the prep blocks it waits for. Walks of several host threads on streams
// of their own could together hold every SM while their prep waits for one. A launch captured into a graph takes a
// set of the capturing thread's own (a stream of the shared set would join that capture, and other threads' work
// with it); replays of such a graph are not ordered against other walks.
struct SideStreams {
  cudaStream_t walk = nullptr, prep = nullptr;
  cudaEvent_t fork = nullptr, walk_done = nullptr, prep_done = nullptr;
  SideStreams() = default;
  SideStreams(const SideStreams&) = delete;
  SideStreams& operator=(const SideStreams&) = delete;
  ~SideStreams() {  // at exit; errors ignored (the runtime may already be unloading)
    for (cudaEvent_t e : {fork, walk_done, prep_done})
      if (e) (void)cudaEventDestroy(e);
    for (cudaStream_t st : {walk, prep})
      if (st) (void)cudaStreamDestroy(st);
  }
  void create() {
    if (walk != nullptr) return;
    int least = 0, greatest = 0;
    HYPIC_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    HYPIC_CUDA_CHECK(cudaStreamCreateWithPriority(&walk, cudaStreamNonBlocking, greatest));
    HYPIC_CUDA_CHECK(cudaStreamCreateWithPriority(&prep, cudaStreamNonBlocking, least));
    for (cudaEvent_t* e : {&fork, &walk_done, &prep_done})
      HYPIC_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  }
};

// The current device's set; `lock` holds the shared set's mutex until the launch is enqueued.
SideStreams& side_streams(bool capturing, std::unique_lock<std::mutex>& lock) {
  int dev = 0;
  HYPIC_CUDA_CHECK(cudaGetDevice(&dev));
  if (capturing) {
    thread_local std::map<int, SideStreams> own;
    SideStreams& ss = own[dev];
    ss.create();
    return ss;
  }
  static std::mutex mu;
  static std::map<int, SideStreams> shared;
  lock = std::unique_lock<std::mutex>(mu);
  SideStreams& ss = shared[dev];
  ss.create();
  return ss;
}

// HYPIC_CUDA_GDN_OVERLAP=0: prep, then the walk (A/B runs).
bool overlap_enabled() {
  static const bool on = !env_is("HYPIC_CUDA_GDN_OVERLAP", "0");
  return on;
}

// Percent of the chunks prepared before the walk starts: HYPIC_CUDA_GDN_OVERLAP_LEAD (0..100, A/B runs; at least the
// first chunk); the rest is prepared while the walk runs. Only the first chunk by default: measured on an H100
// (docs/benchmarks.md), every longer lead made the whole slower, the walk being paced by the prep beside it anyway.
constexpr int kDefaultLead = 0;
int lead_percent() {
  static const int pct = [] {
    const char* e = std::getenv("HYPIC_CUDA_GDN_OVERLAP_LEAD");
    if (e == nullptr || *e == '\0') return kDefaultLead;
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    return (*end == '\0' && v >= 0 && v <= 100) ? int(v) : kDefaultLead;
  }();
  return pct;
}

constexpr int64_t kMinChunks = 4;  // shorter walks have little to overlap (a guess, not measured)

}  // namespace

bool overlap_applies(const GdnShape& s, const Workspace& w, const bf16* q, const bf16* k, const bf16* out,
                     bool transfer, int64_t max_chunks) {
  if (!overlap_enabled() || w.dkp != 128 || w.Sh == nullptr || !ready_fits(s)) return false;
  if (max_chunks < kMinChunks || max_chunks > 65535) return false;
  if (!walk_rs_applies(s, w, k, out != nullptr, q, out)) return false;
  // The walk's blocks spin on flags that only the prep blocks set: they must leave SMs for them.
  return 2 * walk_rs_blocks(s, w, transfer, true) <= detail::device_sm_count();
}

void launch_overlapped(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                       const float* beta, const int32_t* cu, int64_t max_chunks, float* state, float* transfer,
                       Workspace& w, cudaStream_t stream, bf16* out) {

  const size_t tiles = size_t(s.H) * size_t(slot_count(s));
  w.ready = reinterpret_cast<int32_t*>(reinterpret_cast<unsigned char*>(w.Sh) + ready_offset(s));
  HYPIC_CUDA_CHECK(cudaMemsetAsync(w.ready, 0, kReadyStride * sizeof(int32_t) * tiles, stream));
  const int64_t lead = std::min(max_chunks, std::max<int64_t>(1, (max_chunks * lead_percent() + 99) / 100));
  launch_prep_range(s, q, k, v, g, beta, cu, 0, lead, w, stream);

  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  HYPIC_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  std::unique_lock<std::mutex> lock;
  SideStreams& ss = side_streams(capture != cudaStreamCaptureStatusNone, lock);
  HYPIC_CUDA_CHECK(cudaEventRecord(ss.fork, stream));
  HYPIC_CUDA_CHECK(cudaStreamWaitEvent(ss.walk, ss.fork, 0));
  HYPIC_CUDA_CHECK(cudaStreamWaitEvent(ss.prep, ss.fork, 0));
  const bool walked = launch_walk_rs(s, k, cu, state, transfer, out != nullptr, w, ss.walk, q, out);
  HYPIC_CUDA_REQUIRE(walked, "launch_overlapped: the register-state walk did not apply");
  launch_prep_range(s, q, k, v, g, beta, cu, lead, max_chunks, w, ss.prep);
  HYPIC_CUDA_CHECK(cudaEventRecord(ss.walk_done, ss.walk));
  HYPIC_CUDA_CHECK(cudaEventRecord(ss.prep_done, ss.prep));
  HYPIC_CUDA_CHECK(cudaStreamWaitEvent(stream, ss.walk_done, 0));
  HYPIC_CUDA_CHECK(cudaStreamWaitEvent(stream, ss.prep_done, 0));
}

}  // namespace hypic::cuda::gdn
