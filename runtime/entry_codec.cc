#include "runtime/entry_codec.h"

#include <cmath>
#include <cstring>
#include <vector>

#include <xxhash.h>

#include "runtime/error.h"

namespace hypic {
namespace {

constexpr char kMagic[8] = {'H', 'Y', 'P', 'I', 'C', 'E', 'N', 'T'};

class Writer {
 public:
  void raw(const void* p, size_t n) {
    if (n) out_.append(static_cast<const char*>(p), n);  // an empty array may have no storage
  }
  template <class T>
  void pod(T v) { raw(&v, sizeof v); }
  void field(const std::string& s) {
    pod<uint32_t>(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(std::string_view data, const std::string& where) : d_(data), where_(where) {}
  const char* take(size_t n) {
    if (n > d_.size() - at_) throw FormatError(where_ + ": cache entry is truncated");
    const char* p = d_.data() + at_;
    at_ += n;
    return p;
  }
  template <class T>
  T pod() {
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  std::string field() {
    const uint32_t n = pod<uint32_t>();
    const char* p = take(n);
    return std::string(p, n);
  }
  bool done() const { return at_ == d_.size(); }
  [[noreturn]] void bad(const std::string& why) const { throw FormatError(where_ + ": cache entry " + why); }

 private:
  std::string_view d_;
  size_t at_ = 0;
  const std::string& where_;
};

// The model shape a record depends on; a record is only decoded onto a backend of the same shape.
struct Shape {
  uint32_t layers, hv, dk, dv, kernel, conv_dim, hkv, hd;
  std::string kinds;  // 'L' linear, 'A' attention, per layer

  static Shape of(const ModelConfig& c) {
    Shape s{uint32_t(c.num_layers), uint32_t(c.lin_v_heads), uint32_t(c.lin_k_dim), uint32_t(c.lin_v_dim),
            uint32_t(c.conv_kernel), uint32_t(c.lin_conv_dim()), uint32_t(c.num_kv_heads), uint32_t(c.head_dim), {}};
    for (int l = 0; l < c.num_layers; ++l) s.kinds.push_back(c.layer_kinds[l] == LayerKind::LinearAttention ? 'L' : 'A');
    return s;
  }
  void write(Writer& w) const {
    for (uint32_t v : {layers, hv, dk, dv, kernel, conv_dim, hkv, hd}) w.pod(v);
    w.field(kinds);
  }
  static Shape read(Reader& r) {
    Shape s{};
    for (uint32_t* v : {&s.layers, &s.hv, &s.dk, &s.dv, &s.kernel, &s.conv_dim, &s.hkv, &s.hd}) *v = r.pod<uint32_t>();
    s.kinds = r.field();
    return s;
  }
  bool operator==(const Shape&) const = default;
  size_t tail_elems() const { return size_t(kernel - 1) * conv_dim; }
  size_t row_elems() const { return size_t(hkv) * hd; }
};

// The entry's memory block, copied to the host once, with its arrays addressed by their device pointers.
class HostImage {
 public:
  HostImage(Backend& b, const Memory& m) : base_(static_cast<const char*>(m.data())), bytes_(m.bytes()) {
    data_.resize(bytes_);
    b.copy_to_host(m.data(), data_.data(), bytes_);
  }
  explicit HostImage(const Memory& m) : base_(static_cast<const char*>(m.data())), bytes_(m.bytes()), data_(m.bytes()) {}
  char* at(const void* device_ptr, size_t n) {
    const size_t off = static_cast<size_t>(static_cast<const char*>(device_ptr) - base_);
    HYPIC_ASSERT(off + n <= bytes_, "entry array outside its memory block");
    return data_.data() + off;
  }
  const char* data() const { return data_.data(); }

 private:
  const char* base_;
  size_t bytes_;
  std::vector<char> data_;
};

// fp32 [heads, per_head] written as fp32 or bf16; with a mask, heads that are all zero to float precision
// are flagged and left out (transfer operators only).
int64_t write_f32(Writer& w, const float* x, size_t heads, size_t per_head, EntryPrecision p, bool mask, float zero) {
  int64_t skipped = 0;
  std::vector<uint8_t> keep(heads, 1);
  if (mask) {
    for (size_t h = 0; h < heads; ++h) {
      float m = 0;
      for (size_t i = 0; i < per_head; ++i) m = std::max(m, std::fabs(x[h * per_head + i]));
      if (m <= zero) {
        keep[h] = 0;
        ++skipped;
      }
    }
    w.raw(keep.data(), heads);
  }
  std::vector<uint16_t> half;
  for (size_t h = 0; h < heads; ++h) {
    if (!keep[h]) continue;
    const float* row = x + h * per_head;
    if (p == EntryPrecision::F32) {
      w.raw(row, per_head * sizeof(float));
    } else {
      half.resize(per_head);
      for (size_t i = 0; i < per_head; ++i) half[i] = f32_to_bf16(row[i]);
      w.raw(half.data(), per_head * sizeof(uint16_t));
    }
  }
  return skipped;
}

void read_f32(Reader& r, float* x, size_t heads, size_t per_head, EntryPrecision p, bool mask) {
  std::vector<uint8_t> keep(heads, 1);
  if (mask) {
    const char* m = r.take(heads);
    for (size_t h = 0; h < heads; ++h) {
      if (static_cast<uint8_t>(m[h]) > 1) r.bad("has a bad head mask");
      keep[h] = static_cast<uint8_t>(m[h]);
    }
  }
  for (size_t h = 0; h < heads; ++h) {
    float* row = x + h * per_head;
    if (!keep[h]) {
      std::fill_n(row, per_head, 0.0f);
    } else if (p == EntryPrecision::F32) {
      std::memcpy(row, r.take(per_head * sizeof(float)), per_head * sizeof(float));
    } else {
      const char* src = r.take(per_head * sizeof(uint16_t));
      for (size_t i = 0; i < per_head; ++i) {
        uint16_t v;
        std::memcpy(&v, src + 2 * i, 2);
        row[i] = bf16_to_f32(v);
      }
    }
  }
}

// Conv tails and K/V rows: stored in the writer's element type, converted when read by a backend of
// another type (the CPU keeps fp32, CUDA bf16).
void write_elems(Writer& w, const void* x, size_t n, DType t) { w.raw(x, n * dtype_size(t)); }

void read_elems(Reader& r, void* dst, size_t n, DType stored, DType want) {
  const char* src = r.take(n * dtype_size(stored));
  if (n == 0) return;
  if (stored == want) {
    std::memcpy(dst, src, n * dtype_size(want));
    return;
  }
  std::vector<float> f(n);
  convert_to_f32(src, stored, static_cast<int64_t>(n), f.data());
  if (want == DType::F32) {
    std::memcpy(dst, f.data(), n * sizeof(float));
  } else if (want == DType::BF16) {
    auto* o = static_cast<uint16_t*>(dst);
    for (size_t i = 0; i < n; ++i) o[i] = f32_to_bf16(f[i]);
  } else {
    r.bad("holds elements this backend cannot take");
  }
}

struct Header {
  char kind;
  EntryPrecision precision;
  DType kv;
  KeyContext ctx;
  Shape shape;
};

void write_header(Writer& w, char kind, const EntryCodecOptions& o, Backend& b, const KeyContext& ctx) {
  w.raw(kMagic, sizeof kMagic);
  w.pod<uint32_t>(kEntryFormatVersion);
  w.pod<char>(kind);
  w.pod<uint8_t>(static_cast<uint8_t>(o.precision));
  w.pod<uint8_t>(static_cast<uint8_t>(b.kv_dtype()));
  w.field(ctx.model_fingerprint);
  w.field(ctx.tokenizer_fingerprint);
  w.pod<int32_t>(ctx.seam_width);
  Shape::of(b.config()).write(w);
}

// Verifies the checksum trailer, then reads the header. Returns a reader over the payload only.
Header read_header(std::string_view& record, const std::string& where, Reader*& out, std::unique_ptr<Reader>& hold,
                   bool verified = false) {
  if (record.size() < sizeof kMagic + 8 || std::memcmp(record.data(), kMagic, sizeof kMagic) != 0)
    throw FormatError(where + ": not a hypic cache entry (or truncated)");
  uint64_t stored;
  std::memcpy(&stored, record.data() + record.size() - 8, 8);
  record = record.substr(0, record.size() - 8);
  if (!verified && entry_checksum(record) != stored)
    throw FormatError(where + ": cache entry checksum mismatch (torn or corrupt)");
  hold = std::make_unique<Reader>(record, where);
  Reader& r = *hold;
  r.take(sizeof kMagic);
  const uint32_t version = r.pod<uint32_t>();
  if (version != kEntryFormatVersion)
    r.bad("format version " + std::to_string(version) + ", this build reads version " +
          std::to_string(kEntryFormatVersion));
  Header h;
  h.kind = r.pod<char>();
  if (h.kind != 'c' && h.kind != 'p') r.bad("has an unknown kind");
  const uint8_t p = r.pod<uint8_t>();
  if (p > 1) r.bad("has an unknown precision");
  h.precision = static_cast<EntryPrecision>(p);
  const uint8_t kv = r.pod<uint8_t>();
  h.kv = static_cast<DType>(kv);
  if (h.kv != DType::F32 && h.kv != DType::BF16) r.bad("has an unknown element type");
  h.ctx.model_fingerprint = r.field();
  h.ctx.tokenizer_fingerprint = r.field();
  h.ctx.seam_width = r.pod<int32_t>();
  h.shape = Shape::read(r);
  out = hold.get();
  return h;
}

void check_context(const Header& h, Reader& r, Backend& b, const KeyContext& ctx, char kind) {
  if (h.kind != kind) r.bad(std::string("is a ") + (h.kind == 'c' ? "content" : "chain") + " entry");
  if (h.ctx.model_fingerprint != ctx.model_fingerprint) r.bad("was built by another model");
  if (h.ctx.tokenizer_fingerprint != ctx.tokenizer_fingerprint) r.bad("was built with another tokenizer");
  if (h.ctx.seam_width != ctx.seam_width) r.bad("was built with another seam width");
  if (!(h.shape == Shape::of(b.config()))) r.bad("has another model shape");
}

// A transfer operator head is zero to float precision when its largest element is below fp32's unit
// roundoff divided by dk: T_h S then changes no element of a state by more than rounding would.
float zero_threshold(const Shape& s) { return std::ldexp(1.0f, -24) / static_cast<float>(s.dk); }

// More rows than the model's context, or than the record has bytes for, is a malformed count (refused
// before anything is allocated for it).
uint64_t max_rows(const ModelConfig& c, std::string_view record) {
  const uint64_t by_size = record.size() / sizeof(int);
  return c.max_positions > 0 ? std::min<uint64_t>(uint64_t(c.max_positions), by_size) : by_size;
}

// The pieces that expand a record into an entry (kernels/packed_expand.h), built while the record is
// walked with the same checks as the reference decode. Adjacent pieces that continue each other (same
// conversion, consecutive source bytes and destinations) are merged: a layer's heads become one piece.
class PieceList {
 public:
  explicit PieceList(const char* record) : base_(record) {}
  void add(const char* src, void* dst, uint64_t n, ExpandOp op) {
    if (n == 0) return;
    ExpandPiece p;
    p.src = op == ExpandOp::Zero32 ? 0 : static_cast<uint64_t>(src - base_);
    p.n = n;
    p.dst = dst;
    p.op = op;
    if (!v_.empty()) {
      ExpandPiece& last = v_.back();
      const bool dst_next = static_cast<char*>(last.dst) + last.n * dst_size(op) == dst;
      const bool src_next = op == ExpandOp::Zero32 || last.src + expand_src_bytes(last) == p.src;
      if (last.op == op && dst_next && src_next) {
        last.n += n;
        return;
      }
    }
    v_.push_back(p);
  }
  std::vector<ExpandPiece>& pieces() { return v_; }

 private:
  static uint64_t dst_size(ExpandOp op) { return op == ExpandOp::Copy16 || op == ExpandOp::F32ToBf16 ? 2 : 4; }
  const char* base_;
  std::vector<ExpandPiece> v_;
};

// read_f32's layout as pieces.
void plan_f32(Reader& r, PieceList& out, float* x, size_t heads, size_t per_head, EntryPrecision p, bool mask) {
  std::vector<uint8_t> keep(heads, 1);
  if (mask) {
    const char* m = r.take(heads);
    for (size_t h = 0; h < heads; ++h) {
      if (static_cast<uint8_t>(m[h]) > 1) r.bad("has a bad head mask");
      keep[h] = static_cast<uint8_t>(m[h]);
    }
  }
  for (size_t h = 0; h < heads; ++h) {
    float* row = x + h * per_head;
    if (!keep[h]) out.add(nullptr, row, per_head, ExpandOp::Zero32);
    else if (p == EntryPrecision::F32) out.add(r.take(per_head * sizeof(float)), row, per_head, ExpandOp::Copy32);
    else out.add(r.take(per_head * sizeof(uint16_t)), row, per_head, ExpandOp::Bf16ToF32);
  }
}

// read_elems's conversions as pieces.
void plan_elems(Reader& r, PieceList& out, void* dst, size_t n, DType stored, DType want) {
  const char* src = r.take(n * dtype_size(stored));
  if (stored == want && dtype_size(want) == 2) out.add(src, dst, n, ExpandOp::Copy16);
  else if (stored == want && dtype_size(want) == 4) out.add(src, dst, n, ExpandOp::Copy32);
  else if (stored == DType::F32 && want == DType::BF16) out.add(src, dst, n, ExpandOp::F32ToBf16);
  else if (stored == DType::BF16 && want == DType::F32) out.add(src, dst, n, ExpandOp::Bf16ToF32);
  else r.bad("holds elements this backend cannot take");
}

// A record laid out for packing on the backend (encode_record): the bytes the host knows (header, tokens,
// masks, counts) at their offsets, and pieces for the arrays, which the backend packs straight from its
// memory. The same byte sequence as Writer gives for the same calls.
class RecordLayout {
 public:
  void raw(const void* p, size_t n) {
    if (n == 0) return;
    if (host_.empty() || host_.back().first + host_.back().second.size() != at_) host_.push_back({at_, {}});
    host_.back().second.append(static_cast<const char*>(p), n);
    at_ += n;
  }
  template <class T>
  void pod(T v) { raw(&v, sizeof v); }
  void field(const std::string& s) {
    pod<uint32_t>(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void header(char kind, const EntryCodecOptions& o, Backend& b, const KeyContext& ctx) {
    Writer h;
    write_header(h, kind, o, b, ctx);
    raw(h.out().data(), h.out().size());
  }
  // n elements of `src` (the backend's memory) converted by `op`; contiguous continuations merge.
  void array(const void* src, uint64_t n, ExpandOp op) {
    if (n == 0) return;
    PackPiece p{src, n, at_, op};
    at_ += pack_dst_bytes(p);
    if (!pieces_.empty()) {
      PackPiece& last = pieces_.back();
      const uint64_t elem = op == ExpandOp::Copy32 ? 4 : op == ExpandOp::F32ToBf16 ? 4 : 2;  // source element
      if (last.op == op && last.dst + pack_dst_bytes(last) == p.dst &&
          static_cast<const char*>(last.src) + last.n * elem == src) {
        last.n += n;
        return;
      }
    }
    pieces_.push_back(p);
  }
  // The record: the arrays packed by `b`, the host bytes, then the checksum of all of it.
  std::shared_ptr<HostRecord> finish(Backend& b) {
    auto r = std::make_shared<HostRecord>(b, at_ + 8);
    b.pack_to_host(pieces_, r->data(), at_);
    for (const auto& [at, bytes] : host_) std::memcpy(r->data() + at, bytes.data(), bytes.size());
    const uint64_t sum = entry_checksum(std::string_view(r->data(), at_));
    std::memcpy(r->data() + at_, &sum, 8);
    return r;
  }

 private:
  size_t at_ = 0;
  std::vector<std::pair<size_t, std::string>> host_;
  std::vector<PackPiece> pieces_;
};

ExpandOp pack_op_f32(EntryPrecision p) { return p == EntryPrecision::F32 ? ExpandOp::Copy32 : ExpandOp::F32ToBf16; }
ExpandOp pack_op_elems(DType t) { return dtype_size(t) == 4 ? ExpandOp::Copy32 : ExpandOp::Copy16; }

}  // namespace

const char* precision_name(EntryPrecision p) { return p == EntryPrecision::BF16 ? "bf16" : "fp32"; }

EntryCodecOptions parse_cache_format(const std::string& name) {
  EntryCodecOptions o;
  if (name == "fp32") return o;
  o.precision = EntryPrecision::BF16;
  o.skip_zero_heads = true;
  if (name == "bf16") return o;
  o.keep_full = false;
  if (name == "compact") return o;
  throw InvalidArgument("unknown cache format '" + name + "' (expected fp32, bf16 or compact)");
}

const char* cache_format_name(const EntryCodecOptions& o) {
  if (o.precision == EntryPrecision::F32) return "fp32";
  return o.keep_full ? "bf16" : "compact";
}

size_t content_record_bytes(const ModelConfig& c, DType kv, int64_t tokens, const EntryCodecOptions& o,
                            int64_t skipped_heads, size_t fingerprint_bytes) {
  const Shape s = Shape::of(c);
  const size_t f = o.precision == EntryPrecision::F32 ? 4 : 2, e = dtype_size(kv);
  const size_t op = size_t(s.dk) * s.dk, st = size_t(s.dk) * s.dv;
  size_t n = sizeof kMagic + 4 + 3 + 4 + 4 + 4 + fingerprint_bytes;  // magic, version, kind/precision/kv, fields, seam
  n += 8 * 4 + 4 + s.kinds.size();                                    // shape
  n += 8 + size_t(tokens) * sizeof(int) + 8 + 1;                      // tokens, seam, has_full
  int64_t linear = 0;
  for (char k : s.kinds) {
    if (k == 'L') {
      ++linear;
      n += s.hv + s.hv * op * f + s.hv * st * f * (o.keep_full ? 2 : 1) + s.tail_elems() * e;
    } else {
      n += 2 * size_t(tokens) * s.row_elems() * e;
    }
  }
  n -= size_t(std::min<int64_t>(skipped_heads, linear * s.hv)) * op * f;
  return n + 8 + 8;  // skipped-head count, checksum
}

uint64_t entry_checksum(std::string_view data) { return XXH3_64bits(data.data(), data.size()); }

bool record_checksum_ok(std::string_view record) {
  if (record.size() < 8) return false;
  uint64_t stored;
  std::memcpy(&stored, record.data() + record.size() - 8, 8);
  return entry_checksum(record.substr(0, record.size() - 8)) == stored;
}

std::string encode_entry(Backend& b, const KeyContext& ctx, const SegmentEntry& e, const EntryCodecOptions& o) {
  HYPIC_ASSERT(e.mem, "encode_entry: an entry without memory");
  const ModelConfig& cfg = b.config();
  const Shape s = Shape::of(cfg);
  Writer w;
  write_header(w, 'c', o, b, ctx);
  w.pod<uint64_t>(e.tokens.size());
  w.raw(e.tokens.data(), e.tokens.size() * sizeof(int));
  w.pod<int64_t>(e.seam);
  const bool full = o.keep_full && e.has_full;
  w.pod<uint8_t>(full ? 1 : 0);
  HostImage img(b, *e.mem);
  const size_t op = size_t(s.dk) * s.dk, st = size_t(s.dk) * s.dv, rows = e.tokens.size();
  int64_t skipped = 0;
  const DType kv = b.kv_dtype();
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      const LinearSegmentState& x = e.linear[l];
      skipped += write_f32(w, reinterpret_cast<const float*>(img.at(x.transfer, s.hv * op * 4)), s.hv, op, o.precision,
                           true, o.skip_zero_heads ? zero_threshold(s) : -1.0f);
      write_f32(w, reinterpret_cast<const float*>(img.at(x.body, s.hv * st * 4)), s.hv, st, o.precision, false, 0);
      if (full)
        write_f32(w, reinterpret_cast<const float*>(img.at(x.full, s.hv * st * 4)), s.hv, st, o.precision, false, 0);
      write_elems(w, img.at(x.conv_tail, s.tail_elems() * dtype_size(kv)), s.tail_elems(), kv);
    } else {
      const size_t n = rows * s.row_elems();
      write_elems(w, img.at(e.attention[l].k, n * dtype_size(kv)), n, kv);
      write_elems(w, img.at(e.attention[l].v, n * dtype_size(kv)), n, kv);
    }
  }
  w.pod<int64_t>(skipped);
  w.pod<uint64_t>(entry_checksum(w.out()));
  return std::move(w.out());
}

std::string encode_entry(Backend& b, const KeyContext& ctx, const PrefixEntry& e, const EntryCodecOptions& o) {
  HYPIC_ASSERT(e.mem, "encode_entry: an entry without memory");
  const ModelConfig& cfg = b.config();
  const Shape s = Shape::of(cfg);
  Writer w;
  write_header(w, 'p', o, b, ctx);
  w.pod<uint64_t>(e.pos.size());
  w.pod<int64_t>(e.first_block);
  w.raw(e.pos.data(), e.pos.size() * sizeof(int64_t));
  HostImage img(b, *e.mem);
  const size_t st = size_t(s.dk) * s.dv;
  const DType kv = b.kv_dtype();
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      write_f32(w, reinterpret_cast<const float*>(img.at(e.state[l], s.hv * st * 4)), s.hv, st, o.precision, false, 0);
      write_elems(w, img.at(e.conv_tail[l], s.tail_elems() * dtype_size(kv)), s.tail_elems(), kv);
    } else {
      const size_t n = e.pos.size() * s.row_elems();
      write_elems(w, img.at(e.k[l], n * dtype_size(kv)), n, kv);
      write_elems(w, img.at(e.v[l], n * dtype_size(kv)), n, kv);
    }
  }
  w.pod<int64_t>(0);
  w.pod<uint64_t>(entry_checksum(w.out()));
  return std::move(w.out());
}

EntryRecordInfo inspect_entry(std::string_view record, const std::string& where) {
  Reader* r = nullptr;
  std::unique_ptr<Reader> hold;
  std::string_view payload = record;
  const Header h = read_header(payload, where, r, hold);
  EntryRecordInfo info;
  info.kind = h.kind;
  info.precision = h.precision;
  info.model_fingerprint = h.ctx.model_fingerprint;
  info.tokenizer_fingerprint = h.ctx.tokenizer_fingerprint;
  info.seam_width = h.ctx.seam_width;
  info.tokens = static_cast<int64_t>(r->pod<uint64_t>());
  if (payload.size() >= 8) std::memcpy(&info.skipped_heads, payload.data() + payload.size() - 8, 8);
  return info;
}

std::shared_ptr<SegmentEntry> decode_segment_entry(Backend& b, const KeyContext& ctx, std::string_view record,
                                                   const std::string& where, bool verified) {
  Reader* rp = nullptr;
  std::unique_ptr<Reader> hold;
  const Header h = read_header(record, where, rp, hold, verified);
  Reader& r = *rp;
  check_context(h, r, b, ctx, 'c');
  const uint64_t n = r.pod<uint64_t>();
  if (n == 0 || n > max_rows(b.config(), record)) r.bad("has a bad token count");
  std::vector<int> tokens(n);
  std::memcpy(tokens.data(), r.take(n * sizeof(int)), n * sizeof(int));  // n > 0
  for (int t : tokens)
    if (t < 0 || t >= b.config().vocab_size) r.bad("holds a token id outside the vocabulary");
  const int64_t seam = r.pod<int64_t>();
  if (seam < 0 || seam > int64_t(n)) r.bad("has a bad seam");
  const uint8_t full = r.pod<uint8_t>();
  if (full > 1) r.bad("has a bad layout flag");
  const ModelConfig& cfg = b.config();
  const Shape& s = h.shape;
  auto e = std::make_shared<SegmentEntry>(SegmentEntry::allocate(b, std::move(tokens), seam));
  e->has_full = full == 1;
  HostImage img(*e->mem);
  const size_t op = size_t(s.dk) * s.dk, st = size_t(s.dk) * s.dv;
  const DType kv = b.kv_dtype();
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      const LinearSegmentState& x = e->linear[l];
      read_f32(r, reinterpret_cast<float*>(img.at(x.transfer, s.hv * op * 4)), s.hv, op, h.precision, true);
      read_f32(r, reinterpret_cast<float*>(img.at(x.body, s.hv * st * 4)), s.hv, st, h.precision, false);
      if (full) read_f32(r, reinterpret_cast<float*>(img.at(x.full, s.hv * st * 4)), s.hv, st, h.precision, false);
      read_elems(r, img.at(x.conv_tail, s.tail_elems() * dtype_size(kv)), s.tail_elems(), h.kv, kv);
    } else {
      const size_t m = n * s.row_elems();
      read_elems(r, img.at(e->attention[l].k, m * dtype_size(kv)), m, h.kv, kv);
      read_elems(r, img.at(e->attention[l].v, m * dtype_size(kv)), m, h.kv, kv);
    }
  }
  r.pod<int64_t>();
  if (!r.done()) r.bad("has trailing bytes");
  b.copy_from_host(img.data(), e->mem->data(), e->mem->bytes());
  return e;
}

std::shared_ptr<PrefixEntry> decode_prefix_entry(Backend& b, const KeyContext& ctx, std::string_view record,
                                                 const std::string& where, bool verified) {
  Reader* rp = nullptr;
  std::unique_ptr<Reader> hold;
  const Header h = read_header(record, where, rp, hold, verified);
  Reader& r = *rp;
  check_context(h, r, b, ctx, 'p');
  const uint64_t rows = r.pod<uint64_t>();
  if (rows > max_rows(b.config(), record)) r.bad("has a bad row count");
  const int64_t first_block = r.pod<int64_t>();
  if (first_block < 0) r.bad("has a bad first block");
  std::vector<int64_t> pos(rows);
  const char* pos_bytes = r.take(rows * sizeof(int64_t));
  if (rows) std::memcpy(pos.data(), pos_bytes, rows * sizeof(int64_t));
  for (int64_t p : pos)
    if (p < 0 || (b.config().max_positions > 0 && p >= b.config().max_positions)) r.bad("holds a position outside the model's context");
  const ModelConfig& cfg = b.config();
  const Shape& s = h.shape;
  auto e = std::make_shared<PrefixEntry>(PrefixEntry::allocate(b, static_cast<int64_t>(rows)));
  e->pos = std::move(pos);
  e->first_block = first_block;
  HostImage img(*e->mem);
  const size_t st = size_t(s.dk) * s.dv;
  const DType kv = b.kv_dtype();
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      read_f32(r, reinterpret_cast<float*>(img.at(e->state[l], s.hv * st * 4)), s.hv, st, h.precision, false);
      read_elems(r, img.at(e->conv_tail[l], s.tail_elems() * dtype_size(kv)), s.tail_elems(), h.kv, kv);
    } else {
      const size_t m = rows * s.row_elems();
      read_elems(r, img.at(e->k[l], m * dtype_size(kv)), m, h.kv, kv);
      read_elems(r, img.at(e->v[l], m * dtype_size(kv)), m, h.kv, kv);
    }
  }
  r.pod<int64_t>();
  if (!r.done()) r.bad("has trailing bytes");
  b.copy_from_host(img.data(), e->mem->data(), e->mem->bytes());
  return e;
}

EntryExpansion plan_entry_expansion(Backend& b, const KeyContext& ctx, std::string_view record, char kind,
                                    const std::string& where, bool verified) {
  const char* base = record.data();
  Reader* rp = nullptr;
  std::unique_ptr<Reader> hold;
  const Header h = read_header(record, where, rp, hold, verified);
  Reader& r = *rp;
  check_context(h, r, b, ctx, kind);
  const ModelConfig& cfg = b.config();
  const Shape& s = h.shape;
  const size_t op = size_t(s.dk) * s.dk, st = size_t(s.dk) * s.dv;
  const DType kv = b.kv_dtype();
  EntryExpansion x;
  PieceList out(base);
  if (kind == 'c') {
    const uint64_t n = r.pod<uint64_t>();
    if (n == 0 || n > max_rows(cfg, record)) r.bad("has a bad token count");
    std::vector<int> tokens(n);
    std::memcpy(tokens.data(), r.take(n * sizeof(int)), n * sizeof(int));
    for (int t : tokens)
      if (t < 0 || t >= cfg.vocab_size) r.bad("holds a token id outside the vocabulary");
    const int64_t seam = r.pod<int64_t>();
    if (seam < 0 || seam > int64_t(n)) r.bad("has a bad seam");
    const uint8_t full = r.pod<uint8_t>();
    if (full > 1) r.bad("has a bad layout flag");
    x.segment = std::make_shared<SegmentEntry>(SegmentEntry::allocate(b, std::move(tokens), seam));
    SegmentEntry& e = *x.segment;
    e.has_full = full == 1;
    for (int l = 0; l < cfg.num_layers; ++l) {
      if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
        const LinearSegmentState& y = e.linear[l];
        plan_f32(r, out, y.transfer, s.hv, op, h.precision, true);
        plan_f32(r, out, y.body, s.hv, st, h.precision, false);
        if (full) plan_f32(r, out, y.full, s.hv, st, h.precision, false);
        else out.add(nullptr, y.full, s.hv * st, ExpandOp::Zero32);  // as the reference decode leaves it
        plan_elems(r, out, y.conv_tail, s.tail_elems(), h.kv, kv);
      } else {
        const size_t m = n * s.row_elems();
        plan_elems(r, out, e.attention[l].k, m, h.kv, kv);
        plan_elems(r, out, e.attention[l].v, m, h.kv, kv);
      }
    }
  } else {
    const uint64_t rows = r.pod<uint64_t>();
    if (rows > max_rows(cfg, record)) r.bad("has a bad row count");
    const int64_t first_block = r.pod<int64_t>();
    if (first_block < 0) r.bad("has a bad first block");
    std::vector<int64_t> pos(rows);
    const char* pos_bytes = r.take(rows * sizeof(int64_t));
    if (rows) std::memcpy(pos.data(), pos_bytes, rows * sizeof(int64_t));
    for (int64_t p : pos)
      if (p < 0 || (cfg.max_positions > 0 && p >= cfg.max_positions)) r.bad("holds a position outside the model's context");
    x.prefix = std::make_shared<PrefixEntry>(PrefixEntry::allocate(b, static_cast<int64_t>(rows)));
    PrefixEntry& e = *x.prefix;
    e.pos = std::move(pos);
    e.first_block = first_block;
    for (int l = 0; l < cfg.num_layers; ++l) {
      if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
        plan_f32(r, out, e.state[l], s.hv, st, h.precision, false);
        plan_elems(r, out, e.conv_tail[l], s.tail_elems(), h.kv, kv);
      } else {
        const size_t m = rows * s.row_elems();
        plan_elems(r, out, e.k[l], m, h.kv, kv);
        plan_elems(r, out, e.v[l], m, h.kv, kv);
      }
    }
  }
  r.pod<int64_t>();
  if (!r.done()) r.bad("has trailing bytes");
  x.pieces = std::move(out.pieces());
  return x;
}

std::shared_ptr<SegmentEntry> promote_segment_entry(Backend& b, const KeyContext& ctx,
                                                    std::shared_ptr<const HostRecord> record, const std::string& where,
                                                    bool verified) {
  EntryExpansion x = plan_entry_expansion(b, ctx, record->view(), 'c', where, verified);
  const char* data = record->data();
  const size_t bytes = record->size();
  b.expand_from_host(std::move(record), data, bytes, x.pieces);
  return std::move(x.segment);
}

std::shared_ptr<PrefixEntry> promote_prefix_entry(Backend& b, const KeyContext& ctx,
                                                  std::shared_ptr<const HostRecord> record, const std::string& where,
                                                  bool verified) {
  EntryExpansion x = plan_entry_expansion(b, ctx, record->view(), 'p', where, verified);
  const char* data = record->data();
  const size_t bytes = record->size();
  b.expand_from_host(std::move(record), data, bytes, x.pieces);
  return std::move(x.prefix);
}

std::shared_ptr<HostRecord> encode_record(Backend& b, const KeyContext& ctx, const SegmentEntry& e,
                                          const EntryCodecOptions& o) {
  HYPIC_ASSERT(e.mem, "encode_record: an entry without memory");
  const ModelConfig& cfg = b.config();
  const Shape s = Shape::of(cfg);
  RecordLayout w;
  w.header('c', o, b, ctx);
  w.pod<uint64_t>(e.tokens.size());
  w.raw(e.tokens.data(), e.tokens.size() * sizeof(int));
  w.pod<int64_t>(e.seam);
  const bool full = o.keep_full && e.has_full;
  w.pod<uint8_t>(full ? 1 : 0);
  const size_t op = size_t(s.dk) * s.dk, st = size_t(s.dk) * s.dv, rows = e.tokens.size();
  const DType kv = b.kv_dtype();
  int64_t skipped = 0;
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      const LinearSegmentState& x = e.linear[l];
      // write_f32's head mask: a head is left out when its largest |element| is at most the threshold.
      std::vector<uint8_t> keep(s.hv, 1);
      if (o.skip_zero_heads) {
        const std::vector<float> m = b.head_max_abs(x.transfer, s.hv, op);
        for (size_t h = 0; h < s.hv; ++h)
          if (m[h] <= zero_threshold(s)) {
            keep[h] = 0;
            ++skipped;
          }
      }
      w.raw(keep.data(), s.hv);
      for (size_t h = 0; h < s.hv; ++h)
        if (keep[h]) w.array(x.transfer + h * op, op, pack_op_f32(o.precision));
      w.array(x.body, s.hv * st, pack_op_f32(o.precision));
      if (full) w.array(x.full, s.hv * st, pack_op_f32(o.precision));
      w.array(x.conv_tail, s.tail_elems(), pack_op_elems(kv));
    } else {
      w.array(e.attention[l].k, rows * s.row_elems(), pack_op_elems(kv));
      w.array(e.attention[l].v, rows * s.row_elems(), pack_op_elems(kv));
    }
  }
  w.pod<int64_t>(skipped);
  return w.finish(b);
}

std::shared_ptr<HostRecord> encode_record(Backend& b, const KeyContext& ctx, const PrefixEntry& e,
                                          const EntryCodecOptions& o) {
  HYPIC_ASSERT(e.mem, "encode_record: an entry without memory");
  const ModelConfig& cfg = b.config();
  const Shape s = Shape::of(cfg);
  RecordLayout w;
  w.header('p', o, b, ctx);
  w.pod<uint64_t>(e.pos.size());
  w.pod<int64_t>(e.first_block);
  w.raw(e.pos.data(), e.pos.size() * sizeof(int64_t));
  const size_t st = size_t(s.dk) * s.dv;
  const DType kv = b.kv_dtype();
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      w.array(e.state[l], s.hv * st, pack_op_f32(o.precision));
      w.array(e.conv_tail[l], s.tail_elems(), pack_op_elems(kv));
    } else {
      w.array(e.k[l], e.pos.size() * s.row_elems(), pack_op_elems(kv));
      w.array(e.v[l], e.pos.size() * s.row_elems(), pack_op_elems(kv));
    }
  }
  w.pod<int64_t>(0);
  return w.finish(b);
}

}  // namespace hypic
