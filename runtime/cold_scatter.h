// The cold path over several workers (docs/engine.md, "Cold path over several workers"): the isolated
// prefills of a request's missing blocks are placed on several backends, longest first (LPT), run at the
// same time from one host thread per worker, and their entries are stored in the engine's store, so that
// the engine's run() then finds every block and only stitches. Workers are backends over the same weights
// (Backend::worker(): on one GPU, CUDA streams of one device; on the CPU, threads over the same mapped
// checkpoint), or replicas of the model on other GPUs (open_backend_on / random_backend_on). Entries are
// moved into the engine's backend memory by one device copy (the same device), a peer copy (another
// GPU) or through host memory.
//
// One request's missing blocks are independent (each is a prefill from a zero state at local positions),
// so the scatter changes where they run, not what they are: the stored entries are those run() would
// have built, and the stitch that follows is run()'s.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/engine.h"

namespace hypic {

enum class Placement {
  Lpt,         // longest processing time first: by decreasing cost, each to the least-loaded worker
  RoundRobin,  // block i (in prompt order) to worker i mod workers
};
const char* placement_name(Placement p);                // "lpt" | "round-robin"
Placement parse_placement(const std::string& s);        // those names (or "rr"); InvalidArgument otherwise

// Which worker runs each job, and each worker's summed cost.
struct BlockPlacement {
  std::vector<int> worker;    // [jobs]
  std::vector<int64_t> load;  // [workers]
  int64_t makespan() const;   // the largest load
};
// Ties go to the lower job index and the lower worker. InvalidArgument for workers < 1 or a negative cost.
BlockPlacement place_blocks(std::span<const int64_t> cost, int workers, Placement how);

// The placement's cost of an isolated prefill of n tokens of `cfg`: its multiply-adds per token in the
// projections and feed-forward (routed experts counted at top-k) times n, plus the causal attention's
// n (n + 1) / 2 query-key pairs. In units of multiply-adds / 1024, so 32k-token blocks stay far from
// overflow.
int64_t prefill_cost(const ModelConfig& cfg, int64_t n);

struct ScatterReport {
  int64_t missing_blocks = 0;           // distinct cacheable blocks the store did not hold
  int64_t missing_tokens = 0;
  std::vector<int64_t> worker_blocks;   // [workers]
  std::vector<int64_t> worker_tokens;   // [workers]
  std::vector<double> worker_ms;        // [workers] wall time of each worker's pass (0: no work)
  double gather_ms = 0;                 // copying the entries to the engine's backend and storing them
  double scatter_ms = 0;                // the whole call
  int64_t makespan_cost = 0;            // the placement's largest load (prefill_cost units)
};

class ColdScatter {
 public:
  // `engine` runs the stitch (a position-independent mode: hypic, naive or noseam) and receives the
  // entries; `workers` (at least one, not owned, outliving this) run the prefills. A worker may be the
  // engine's own backend. Every worker must hold the engine's weights (the same fingerprint) and use its
  // K/V element type. InvalidArgument otherwise.
  ColdScatter(Engine& engine, std::vector<Backend*> workers, Placement how = Placement::Lpt);
  ~ColdScatter();
  ColdScatter(const ColdScatter&) = delete;
  ColdScatter& operator=(const ColdScatter&) = delete;

  // Prefills every cacheable block of `blocks` (all but the query tail; BlockCache::None blocks are left
  // to run()) that the engine's store and its tiers do not hold, on the workers, and stores the entries
  // (Pin blocks pinned). A block that appears twice is prefilled once. After it, engine.run(blocks,
  // nullptr, key_namespace) serves all those blocks as hits. If a worker fails, the entries of the others
  // are still stored and the first error is rethrown. InvalidArgument for a prompt check_prompt refuses or
  // a token outside the vocabulary (nothing is run then).
  ScatterReport prefill_missing(const std::vector<PromptBlock>& blocks, const std::string& key_namespace = {});

  int workers() const { return static_cast<int>(workers_.size()); }
  Placement placement() const { return how_; }
  void set_placement(Placement how) { how_ = how; }

 private:
  Engine& engine_;
  std::vector<Backend*> workers_;
  std::vector<std::unique_ptr<Engine>> worker_engines_;  // prefill_segments on each worker (same key context)
  Placement how_;
};

}  // namespace hypic
