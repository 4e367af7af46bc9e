// Cache entries as records, on the CPU backend of the fixture models: an fp32 record decodes to the very
// entry that was encoded (so a stitch over it gives the same logits); a flipped byte, a truncation, another
// model shape or key context is refused with FormatError naming the place; bf16 records keep the composed
// state close and the first-token KL against full recompute within 10% of fp32 entries'.
#include "runtime/entry_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "kernels/sampling.h"
#include "runtime/backends.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/sequence_state.h"
#include "tests/runtime/entry_arrays.h"
#include "tests/runtime/token_blocks.h"

namespace hypic {
namespace {

const std::string kRoot = std::string(HYPIC_SOURCE_DIR) + "/";

using testing_util::block;

std::vector<float> host(Backend& b, const void* p, size_t n, DType t) { return b.to_host(p, n, t); }

class EntryCodec : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    b_ = open_backend(kRoot + GetParam(), Device::Cpu);
    EngineOptions o;
    o.tokenizer_fingerprint = "tok";
    engine_ = std::make_unique<Engine>(*b_, CacheMode::Hypic, o);
  }
  const ModelConfig& cfg() const { return b_->config(); }
  size_t op() const { return size_t(cfg().lin_v_heads * cfg().lin_k_dim * cfg().lin_k_dim); }
  size_t st() const { return size_t(cfg().lin_v_heads * cfg().lin_k_dim * cfg().lin_v_dim); }

  std::unique_ptr<Backend> b_;
  std::unique_ptr<Engine> engine_;
};

TEST_P(EntryCodec, Fp32RecordDecodesToTheSameEntry) {
  auto e = engine_->prefill_segment(block(40, 1));
  const std::string rec = encode_entry(*b_, engine_->keys(), *e, {});
  auto d = decode_segment_entry(*b_, engine_->keys(), rec, "test");
  EXPECT_EQ(d->tokens, e->tokens);
  EXPECT_EQ(d->seam, e->seam);
  const size_t rows = e->tokens.size() * size_t(cfg().num_kv_heads * cfg().head_dim);
  const size_t tail = size_t((cfg().conv_kernel - 1) * cfg().lin_conv_dim());
  const DType kv = b_->kv_dtype();
  for (int l = 0; l < cfg().num_layers; ++l) {
    if (cfg().layer_kinds[l] == LayerKind::LinearAttention) {
      EXPECT_EQ(host(*b_, d->linear[l].transfer, op(), DType::F32), host(*b_, e->linear[l].transfer, op(), DType::F32));
      EXPECT_EQ(host(*b_, d->linear[l].body, st(), DType::F32), host(*b_, e->linear[l].body, st(), DType::F32));
      EXPECT_EQ(host(*b_, d->linear[l].full, st(), DType::F32), host(*b_, e->linear[l].full, st(), DType::F32));
      EXPECT_EQ(host(*b_, d->linear[l].conv_tail, tail, kv), host(*b_, e->linear[l].conv_tail, tail, kv));
    } else {
      EXPECT_EQ(host(*b_, d->attention[l].k, rows, kv), host(*b_, e->attention[l].k, rows, kv));
      EXPECT_EQ(host(*b_, d->attention[l].v, rows, kv), host(*b_, e->attention[l].v, rows, kv));
    }
  }
  // The size formula the 35B-A3B table uses (docs/cache_tiers.md) is the size of real records.
  const size_t fp = engine_->keys().model_fingerprint.size() + engine_->keys().tokenizer_fingerprint.size();
  EXPECT_EQ(rec.size(), content_record_bytes(cfg(), kv, 40, {}, 0, fp));
  for (const char* name : {"bf16", "compact"}) {
    const EntryCodecOptions o = parse_cache_format(name);
    const std::string r = encode_entry(*b_, engine_->keys(), *e, o);
    EXPECT_EQ(r.size(), content_record_bytes(cfg(), kv, 40, o, inspect_entry(r, name).skipped_heads, fp)) << name;
    auto c = decode_segment_entry(*b_, engine_->keys(), r, name);
    EXPECT_EQ(c->has_full, o.keep_full) << name;
  }
  const EntryRecordInfo info = inspect_entry(rec, "test");
  EXPECT_EQ(info.kind, 'c');
  EXPECT_EQ(info.tokens, 40);
  EXPECT_EQ(info.tokenizer_fingerprint, "tok");
  EXPECT_EQ(info.seam_width, 8);
}

TEST_P(EntryCodec, PrefixRecordRoundTrips) {
  // A chain entry as the engine records it: the second run of a prompt walks back over it.
  const std::vector<std::vector<int>> prompt = {block(30, 2), block(20, 3), block(5, 4)};
  engine_->run(prompt);
  SegmentKey c0 = content_key(engine_->keys(), prompt[0]);
  SegmentKey k1 = chain_key(chain_key(std::nullopt, c0), content_key(engine_->keys(), prompt[1]));
  auto e = engine_->store().find_chain(k1);
  ASSERT_NE(e, nullptr);
  const std::string rec = encode_entry(*b_, engine_->keys(), *e, {});
  auto d = decode_prefix_entry(*b_, engine_->keys(), rec, "test");
  EXPECT_EQ(d->pos, e->pos);
  EXPECT_EQ(d->first_block, e->first_block);
  for (int l = 0; l < cfg().num_layers; ++l) {
    if (cfg().layer_kinds[l] == LayerKind::LinearAttention) {
      EXPECT_EQ(host(*b_, d->state[l], st(), DType::F32), host(*b_, e->state[l], st(), DType::F32));
    }
  }
  EXPECT_THROW(decode_segment_entry(*b_, engine_->keys(), rec, "test"), FormatError);  // a chain record
}

TEST_P(EntryCodec, DamagedOrForeignRecordsAreRefused) {
  auto e = engine_->prefill_segment(block(24, 5));
  const std::string rec = encode_entry(*b_, engine_->keys(), *e, {});
  auto refused = [&](const std::string& r, const KeyContext& k, const std::string& what) {
    try {
      decode_segment_entry(*b_, k, r, "entries/x.ent");
      ADD_FAILURE() << "accepted a record that should be refused (" << what << ")";
    } catch (const FormatError& err) {
      EXPECT_NE(std::string(err.what()).find("entries/x.ent"), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find(what), std::string::npos) << err.what();
    }
  };
  for (size_t at : {size_t(3), size_t(20), rec.size() / 2, rec.size() - 3}) {
    std::string bad = rec;
    bad[at] ^= 0x10;
    refused(bad, engine_->keys(), at < 8 ? "not a hypic cache entry" : "checksum");
  }
  for (size_t keep : {size_t(0), size_t(12), rec.size() / 3, rec.size() - 1})
    refused(rec.substr(0, keep), engine_->keys(), keep < 16 ? "not a hypic cache entry" : "checksum");
  KeyContext other = engine_->keys();
  other.seam_width = 4;
  refused(rec, other, "another seam width");
  other = engine_->keys();
  other.model_fingerprint += "x";
  refused(rec, other, "another model");
  other = engine_->keys();
  other.tokenizer_fingerprint = "other";
  refused(rec, other, "another tokenizer");
}

// The promotion path (header checked on the host, the record expanded by Backend::expand_from_host: on
// the CPU its reference, kernels/packed_expand.h) gives the reference decode's entry bit for bit, for every
// format, a record with skipped (zero) transfer-operator heads, and a chain record; and refuses what the
// reference decode refuses.
TEST_P(EntryCodec, PromotionGivesTheReferenceDecodeBitForBit) {
  using testing_util::arrays_of;
  auto e = engine_->prefill_segment(block(37, 7));
  auto zeroed = engine_->prefill_segment(block(29, 8));
  testing_util::zero_transfer_head(*b_, *zeroed, 1);
  const KeyContext& k = engine_->keys();
  for (const char* name : {"fp32", "bf16", "compact"}) {
    for (const SegmentEntry* x : {e.get(), zeroed.get()}) {
      const EntryCodecOptions o = parse_cache_format(name);
      const std::string rec = encode_entry(*b_, k, *x, o);
      if (x == zeroed.get() && o.skip_zero_heads) {
        ASSERT_GT(inspect_entry(rec, name).skipped_heads, 0) << name;
      }
      auto ref = decode_segment_entry(*b_, k, rec, name);
      auto promoted = promote_segment_entry(*b_, k, std::make_shared<const HostRecord>(*b_, rec), name, false);
      b_->sync();
      EXPECT_EQ(promoted->tokens, ref->tokens);
      EXPECT_EQ(promoted->seam, ref->seam);
      EXPECT_EQ(promoted->has_full, ref->has_full);
      EXPECT_TRUE(arrays_of(*b_, *promoted) == arrays_of(*b_, *ref)) << name;
    }
  }
  // A chain entry.
  const std::vector<std::vector<int>> prompt = {block(30, 2), block(20, 3), block(5, 4)};
  engine_->run(prompt);
  const SegmentKey k1 = chain_key(chain_key(std::nullopt, content_key(k, prompt[0])), content_key(k, prompt[1]));
  auto c = engine_->store().find_chain(k1);
  ASSERT_NE(c, nullptr);
  for (const char* name : {"fp32", "bf16"}) {
    const std::string rec = encode_entry(*b_, k, *c, parse_cache_format(name));
    auto ref = decode_prefix_entry(*b_, k, rec, name);
    auto promoted = promote_prefix_entry(*b_, k, std::make_shared<const HostRecord>(*b_, rec), name, false);
    b_->sync();
    EXPECT_EQ(promoted->pos, ref->pos);
    EXPECT_EQ(promoted->first_block, ref->first_block);
    EXPECT_TRUE(arrays_of(*b_, *promoted) == arrays_of(*b_, *ref)) << name;
  }
  // Refused like the reference: a flipped byte (checksum), and with the checksum trusted, a bad head mask.
  std::string rec = encode_entry(*b_, k, *e, parse_cache_format("bf16"));
  std::string bad = rec;
  bad[bad.size() / 2] ^= 0x10;
  EXPECT_THROW(promote_segment_entry(*b_, k, std::make_shared<const HostRecord>(*b_, bad), "x", false), FormatError);
  EXPECT_THROW(promote_prefix_entry(*b_, k, std::make_shared<const HostRecord>(*b_, rec), "x", false), FormatError);
  // The head mask of the first linear layer sits just before its first head's values.
  int first_linear = 0;
  while (cfg().layer_kinds[first_linear] != LayerKind::LinearAttention) ++first_linear;
  auto plan = plan_entry_expansion(*b_, k, rec, 'c', "x");
  const auto piece = std::find_if(plan.pieces.begin(), plan.pieces.end(), [&](const ExpandPiece& p) {
    return p.dst == plan.segment->linear[first_linear].transfer;
  });
  ASSERT_NE(piece, plan.pieces.end());
  bad = rec;
  bad[piece->src - cfg().lin_v_heads] = 2;
  for (bool promote : {false, true}) {
    try {
      if (promote) promote_segment_entry(*b_, k, std::make_shared<const HostRecord>(*b_, bad), "x", true);
      else decode_segment_entry(*b_, k, bad, "x", true);
      ADD_FAILURE() << "a bad head mask was accepted";
    } catch (const FormatError& err) {
      EXPECT_NE(std::string(err.what()).find("bad head mask"), std::string::npos) << err.what();
    }
  }
}

// Records laid out on the host and packed by the backend (encode_record: on the CPU the pack pieces' CPU
// reference) are the reference encoder's records byte for byte: every format, skipped heads, chain records.
TEST_P(EntryCodec, PackedRecordsAreTheReferenceRecordsByteForByte) {
  auto e = engine_->prefill_segment(block(35, 9));
  auto zeroed = engine_->prefill_segment(block(26, 10));
  testing_util::zero_transfer_head(*b_, *zeroed, 2);
  const KeyContext& k = engine_->keys();
  for (const char* name : {"fp32", "bf16", "compact"})
    for (const SegmentEntry* x : {e.get(), zeroed.get()}) {
      const EntryCodecOptions o = parse_cache_format(name);
      const std::string want = encode_entry(*b_, k, *x, o);
      EXPECT_TRUE(encode_record(*b_, k, *x, o)->view() == want) << name;
      if (x == zeroed.get() && o.skip_zero_heads) {
        EXPECT_GT(inspect_entry(want, name).skipped_heads, 0) << name;
      }
    }
  const std::vector<std::vector<int>> prompt = {block(22, 11), block(18, 12), block(5, 13)};
  engine_->run(prompt);
  const SegmentKey k1 = chain_key(chain_key(std::nullopt, content_key(k, prompt[0])), content_key(k, prompt[1]));
  auto c = engine_->store().find_chain(k1);
  ASSERT_NE(c, nullptr);
  for (const char* name : {"fp32", "bf16"}) {
    const EntryCodecOptions o = parse_cache_format(name);
    EXPECT_TRUE(encode_record(*b_, k, *c, o)->view() == encode_entry(*b_, k, *c, o)) << name;
  }
}

// bf16 records: the composed state T S0 + S_body stays within bf16 rounding of fp32's, and stitching
// bf16-rounded entries changes the first-token KL against full recompute by at most 10%.
// On the fixtures and the shipped trained model (the well-conditioned case).
class EntryCodecAccuracy : public EntryCodec {};

TEST_P(EntryCodecAccuracy, Bf16RecordsKeepTheComposedStateAndTheFirstTokenKl) {
  EntryCodecOptions bf16;
  bf16.precision = EntryPrecision::BF16;
  Engine full(*b_, CacheMode::Full, {});
  double kl32 = 0, kl16 = 0, first_layer = 0, worst_state = 0;
  int first_linear = -1;
  size_t bytes32 = 0, bytes16 = 0;
  int64_t skipped = 0, linear = 0;
  for (int l = 0; l < cfg().num_layers; ++l) linear += cfg().layer_kinds[l] == LayerKind::LinearAttention;
  for (int p = 0; p < 6; ++p) {
    const std::vector<int> a = block(48, 10 * p), c = block(40, 10 * p + 1), q = block(6, 10 * p + 2);
    std::vector<int> all = a;
    all.insert(all.end(), c.begin(), c.end());
    all.insert(all.end(), q.begin(), q.end());
    const std::vector<float> ref = full.run({all}).logits;
    auto ea = engine_->prefill_segment(a), ec = engine_->prefill_segment(c);
    const std::string ra = encode_entry(*b_, engine_->keys(), *ea, {}), rc = encode_entry(*b_, engine_->keys(), *ec, {});
    const std::string ha = encode_entry(*b_, engine_->keys(), *ea, bf16), hc = encode_entry(*b_, engine_->keys(), *ec, bf16);
    bytes32 += ra.size() + rc.size();
    skipped += inspect_entry(ha, "a").skipped_heads + inspect_entry(hc, "c").skipped_heads;
    bytes16 += ha.size() + hc.size();
    auto da = decode_segment_entry(*b_, engine_->keys(), ra, "a"), dc = decode_segment_entry(*b_, engine_->keys(), rc, "c");
    auto ba = decode_segment_entry(*b_, engine_->keys(), ha, "a"), bc = decode_segment_entry(*b_, engine_->keys(), hc, "c");
    auto stitched = [&](const SegmentEntry& x, const SegmentEntry& y) {
      return engine_->stitch(b_->new_state(), {&x, &y}, q);
    };
    PromptResult r32 = stitched(*da, *dc), r16 = stitched(*ba, *bc);
    kl32 += cpu::kl_divergence(ref.data(), r32.logits.data(), int64_t(ref.size()));
    kl16 += cpu::kl_divergence(ref.data(), r16.logits.data(), int64_t(ref.size()));
    // The composed recurrent state after both blocks, per linear layer, relative to its largest element.
    auto s32 = b_->to_host(*r32.state), s16 = b_->to_host(*r16.state);
    for (int l = 0; l < cfg().num_layers; ++l) {
      if (cfg().layer_kinds[l] != LayerKind::LinearAttention) continue;
      const std::vector<float>& x = s32->layers[l].lin.S;
      const std::vector<float>& y = s16->layers[l].lin.S;
      double num = 0, den = 1e-30;
      for (size_t i = 0; i < x.size(); ++i) {
        num = std::max(num, double(std::fabs(x[i] - y[i])));
        den = std::max(den, double(std::fabs(x[i])));
      }
      worst_state = std::max(worst_state, num / den);
      if (first_linear < 0 || first_linear == l) {
        first_linear = l;
        first_layer = std::max(first_layer, num / den);
      }
    }
  }
  std::printf("[ metrics  ] %s: record bytes fp32 %zu, bf16 %zu (%.2fx); first-token KL vs full: fp32 %.3g, bf16 %.3g;"
              " composed state max rel. error: first linear layer %.3g, any layer %.3g; transfer-operator heads"
              " skipped as zero: %lld of %lld\n",
              GetParam().c_str(), bytes32, bytes16, double(bytes32) / double(bytes16), kl32 / 6, kl16 / 6, first_layer,
              worst_state, static_cast<long long>(skipped), static_cast<long long>(12 * linear * cfg().lin_v_heads));
  EXPECT_LT(bytes16, bytes32 * 3 / 4);
  // The first linear layer composes bf16-rounded T and S directly (2^-8 per element, summed over the
  // composition); later layers also see the rounding propagated through the seam rows' hidden states.
  EXPECT_LT(first_layer, 0.02);
  EXPECT_LE(kl16, 1.10 * kl32 + 1e-6);
}

std::string model_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param.substr(info.param.rfind('/') + 1);
  for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EntryCodec,
                         ::testing::Values("tests/fixtures/models/qwen3_5_dense", "tests/fixtures/models/qwen3_next_moe"),
                         model_name);
INSTANTIATE_TEST_SUITE_P(Models, EntryCodecAccuracy,
                         ::testing::Values("tests/fixtures/models/qwen3_5_dense", "tests/fixtures/models/qwen3_next_moe",
                                           "examples/models/hypic-qa-tiny"),
                         model_name);

}  // namespace
}  // namespace hypic
