// A CUDA injection library that writes the device timeline of a run: every kernel (graph nodes included),
// copy, set and synchronisation with its start and end on the GPU's clock, and every CUDA runtime call with
// its start and end on the host. For where a request's or a step's wall time goes between kernels, on a
// machine without Nsight Systems (tools/bench/kernel_gaps.py reads the file).
//
//   export CUDA_INJECTION64_PATH=$PWD/build/tools/bench/libhypic_kernel_trace.so HYPIC_TRACE_OUT=run.trace
//   hypic_bench_ttft ... --profile-request 8
//
// The CUDA driver loads the library and calls InitializeInjection before the first CUDA call; the records
// are written when the process exits. Lines (fields separated by ';', the name last: names hold commas):
//   K;start;end;stream;graph node;correlation;grid x*y*z;block x;name     a kernel
//   M;start;end;stream;bytes;copy kind                                    a copy
//   S;start;end;stream;bytes                                              a set
//   Y;start;end;stream;type                                               a synchronisation (cupti's type)
//   A;start;end;correlation;thread;name                                   a runtime call (host)
// Times are nanoseconds of CUPTI's timestamp (the GPU and host records share it).
#include <cupti.h>

#include <cxxabi.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;

std::mutex g_mu;
std::vector<std::string> g_lines;
std::atomic<bool> g_done{false};

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

std::string demangled(const char* name) {
  if (!name) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !d) return name;
  std::string out(d);
  std::free(d);
  return out;
}

std::string runtime_name(uint32_t cbid) {
  const char* name = nullptr;
  if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name) == CUPTI_SUCCESS && name) return name;
  return "cbid" + std::to_string(cbid);
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<std::string> lines;
  CUpti_Activity* rec = nullptr;
  char buf[512];
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        std::snprintf(buf, sizeof buf, "K;%llu;%llu;%u;%llu;%u;%lld;%d;", (unsigned long long)k->start,
                      (unsigned long long)k->end, k->streamId, (unsigned long long)k->graphNodeId, k->correlationId,
                      (long long)k->gridX * k->gridY * k->gridZ, k->blockX);
        lines.emplace_back(std::string(buf) + demangled(k->name));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        std::snprintf(buf, sizeof buf, "M;%llu;%llu;%u;%llu;%u", (unsigned long long)m->start,
                      (unsigned long long)m->end, m->streamId, (unsigned long long)m->bytes, unsigned(m->copyKind));
        lines.emplace_back(buf);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        std::snprintf(buf, sizeof buf, "S;%llu;%llu;%u;%llu", (unsigned long long)m->start, (unsigned long long)m->end,
                      m->streamId, (unsigned long long)m->bytes);
        lines.emplace_back(buf);
        break;
      }
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        const auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(rec);
        std::snprintf(buf, sizeof buf, "Y;%llu;%llu;%u;%u", (unsigned long long)s->start, (unsigned long long)s->end,
                      s->streamId, unsigned(s->type));
        lines.emplace_back(buf);
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME: {
        const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
        std::snprintf(buf, sizeof buf, "A;%llu;%llu;%u;%u;", (unsigned long long)a->start, (unsigned long long)a->end,
                      a->correlationId, a->threadId);
        lines.emplace_back(std::string(buf) + runtime_name(a->cbid));
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto& l : lines) g_lines.push_back(std::move(l));
}

void write_out() {
  if (g_done.exchange(true)) return;
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("HYPIC_TRACE_OUT");
  FILE* f = std::fopen(path && *path ? path : "hypic.trace", "w");
  if (!f) {
    std::fprintf(stderr, "hypic_kernel_trace: cannot write %s\n", path ? path : "hypic.trace");
    return;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  for (const auto& l : g_lines) std::fprintf(f, "%s\n", l.c_str());
  std::fclose(f);
  std::fprintf(stderr, "hypic_kernel_trace: %zu records to %s\n", g_lines.size(), path ? path : "hypic.trace");
}

bool check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "hypic_kernel_trace: %s: %s\n", what, msg ? msg : "?");
  return false;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  if (!check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register callbacks")) return 0;
  const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                      CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
                                      CUPTI_ACTIVITY_KIND_RUNTIME};
  for (const CUpti_ActivityKind k : kinds) check(cuptiActivityEnable(k), "enable an activity kind");
  std::atexit(write_out);
  return 1;
}
