#include "runtime/segment_entry.h"

#include <cstring>
#include <numeric>

#include "runtime/error.h"

namespace hypic {
namespace {

// Lays arrays out in one block: offsets first, pointers once the block exists.
class Carver {
 public:
  size_t take(size_t bytes) {
    const size_t at = used_;
    used_ += (bytes + 255) / 256 * 256;
    return at;
  }
  size_t used() const { return used_; }

 private:
  size_t used_ = 0;
};

struct Sizes {
  size_t op, state, tail, kv_row;
};

Sizes sizes_of(const Backend& b) {
  const ModelConfig& c = b.config();
  return {sizeof(float) * c.lin_transfer_numel(),
          sizeof(float) * c.lin_v_heads * c.lin_k_dim * c.lin_v_dim,
          dtype_size(b.kv_dtype()) * (c.conv_kernel - 1) * c.lin_conv_dim(), kv_row_bytes(b)};
}

template <class T>
T* at(const Memory& m, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(m.data()) + offset);
}

}  // namespace

void Backend::linear_isolated(int layer, Rows& r, std::span<const IsolatedBlock> items) {
  for (const IsolatedBlock& b : items) {
    if (b.seam > 0) linear_recur(layer, r, b.row0, b.seam, *b.st, nullptr);
    if (b.n > 0) linear_body(layer, r, b.row0 + b.seam, b.n, *b.st, b.T, b.body);
    else empty_body(b.T, b.body);
    save_linear(layer, *b.st, b.full, b.conv_tail);
  }
}

void Backend::linear_chain(int layer, Rows& r, State& st, std::span<const ChainStep> steps, Composition how) {
  for (const ChainStep& s : steps) {
    switch (s.kind) {
      case ChainStep::Kind::Rows:
        if (s.n > 0) linear_recur(layer, r, s.row0, s.n, st, nullptr);
        break;
      case ChainStep::Kind::Compose:
        compose_linear(layer, st, s.T, s.body, how, s.rotate);
        load_linear(layer, st, nullptr, s.conv_tail);
        break;
      case ChainStep::Kind::Save:
        save_linear(layer, st, s.S_out, s.tail_out);
        break;
      case ChainStep::Kind::Load:
        load_linear(layer, st, s.body, s.conv_tail);
        break;
    }
  }
}

void Backend::shift_linear_state(float* S, int64_t delta) {
  HYPIC_ASSERT(!config().linear_rope || delta == 0, "shift_linear_state: this backend cannot re-rotate states");
}

void Backend::append_kv_ranges(int layer, State& st, std::span<const KvAppend> items) {
  std::vector<int64_t> pos;
  for (const KvAppend& a : items) {
    pos.resize(static_cast<size_t>(a.n));
    std::iota(pos.begin(), pos.end(), a.pos0);
    append_kv(layer, st, a.k, a.v, a.n, pos, a.rotate);
  }
}

void Backend::save_kv_ranges(int layer, const State& st, std::span<const KvSave> items) {
  for (const KvSave& a : items) save_kv(layer, st, a.row, a.n, a.k, a.v, a.at, a.rotate);
}

void Backend::load_linear_layers(State& st, std::span<const LinearLoad> items) {
  for (const LinearLoad& a : items) load_linear(a.layer, st, a.S, a.conv_tail);
}

void Backend::attention_isolated(int layer, Rows& r, std::span<const IsolatedAttention> items) {
  for (const IsolatedAttention& a : items) {
    const int64_t at = kv_rows(layer, *a.st);
    attention_core(layer, r, a.row0, a.n, *a.st);
    save_kv(layer, *a.st, at, a.n, a.k, a.v, 0, 0);
  }
}

void Backend::set_communicator(std::shared_ptr<Communicator>) {
  throw InvalidArgument(std::string("the ") + device_name(device()) + " backend has no tensor-parallel path");
}

void Backend::copy_shared(const void* src, void* dst, size_t bytes) { std::memcpy(dst, src, bytes); }

std::unique_ptr<State> Backend::scratch_state() {
  std::unique_ptr<State> s;
  {
    std::lock_guard<std::mutex> g(spare_mu_);
    if (!spare_.empty()) {
      s = std::move(spare_.back());
      spare_.pop_back();
    }
  }
  if (!s) return new_state();
  reset(*s);
  return s;
}

void Backend::return_scratch_state(std::unique_ptr<State> s) {
  std::lock_guard<std::mutex> g(spare_mu_);
  if (s && spare_.size() < 64) spare_.push_back(std::move(s));  // bounded: a large request's worth
}

size_t kv_row_bytes(const Backend& b) {
  return dtype_size(b.kv_dtype()) * b.config().num_kv_heads * b.config().head_dim;
}

SegmentEntry SegmentEntry::allocate(Backend& b, std::vector<int> tokens, int64_t seam) {
  const ModelConfig& cfg = b.config();
  const Sizes z = sizes_of(b);
  const size_t n = tokens.size(), L = static_cast<size_t>(cfg.num_layers);
  Carver c;
  std::vector<size_t> off(4 * L);
  for (size_t l = 0; l < L; ++l) {
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      off[4 * l] = c.take(z.op);
      off[4 * l + 1] = c.take(z.state);
      off[4 * l + 2] = c.take(z.state);
      off[4 * l + 3] = c.take(z.tail);
    } else {
      off[4 * l] = c.take(z.kv_row * n);
      off[4 * l + 1] = c.take(z.kv_row * n);
    }
  }
  SegmentEntry e;
  e.tokens = std::move(tokens);
  e.seam = seam;
  e.mem = b.allocate(c.used());
  e.linear.resize(L);
  e.attention.resize(L);
  for (size_t l = 0; l < L; ++l) {
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention)
      e.linear[l] = {at<float>(*e.mem, off[4 * l]), at<float>(*e.mem, off[4 * l + 1]),
                     at<float>(*e.mem, off[4 * l + 2]), at<void>(*e.mem, off[4 * l + 3])};
    else
      e.attention[l] = {at<void>(*e.mem, off[4 * l]), at<void>(*e.mem, off[4 * l + 1])};
  }
  return e;
}

PrefixEntry PrefixEntry::allocate(Backend& b, int64_t rows) {
  const ModelConfig& cfg = b.config();
  const Sizes z = sizes_of(b);
  const size_t L = static_cast<size_t>(cfg.num_layers);
  Carver c;
  std::vector<size_t> off(2 * L);
  for (size_t l = 0; l < L; ++l) {
    const bool lin = cfg.layer_kinds[l] == LayerKind::LinearAttention;
    off[2 * l] = c.take(lin ? z.state : z.kv_row * rows);
    off[2 * l + 1] = c.take(lin ? z.tail : z.kv_row * rows);
  }
  PrefixEntry e;
  e.mem = b.allocate(c.used());
  e.state.assign(L, nullptr);
  e.conv_tail.assign(L, nullptr);
  e.k.assign(L, nullptr);
  e.v.assign(L, nullptr);
  for (size_t l = 0; l < L; ++l) {
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      e.state[l] = at<float>(*e.mem, off[2 * l]);
      e.conv_tail[l] = at<void>(*e.mem, off[2 * l + 1]);
    } else {
      e.k[l] = at<void>(*e.mem, off[2 * l]);
      e.v[l] = at<void>(*e.mem, off[2 * l + 1]);
    }
  }
  return e;
}

}  // namespace hypic
