// Promotion of cache records on the CUDA backend (runtime/cuda/cuda_backend.h: pinned host records, one
// asynchronous copy per record and the expansion kernel of kernels/cuda/packed_expand.h) against the
// reference decode (the record parsed on the host, then copied), and records packed on the device against
// the reference encoder (byte for byte), on the fixture models: the same entry bit
// for bit for fp32, bf16 and compact records, records with skipped transfer-operator heads, chain records
// and records written by the CPU backend (fp32 K/V rows, converted to bf16 on the device); and a request
// whose blocks all come from the host tier gives the logits of one whose blocks are on the device (the
// stitch on the model's stream waits for the promotions it reads). Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/check.h"
#include "runtime/backends.h"
#include "runtime/cpu_backend.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/engine.h"
#include "runtime/entry_codec.h"
#include "runtime/entry_tiers.h"
#include "tests/runtime/entry_arrays.h"
#include "tests/runtime/token_blocks.h"

namespace hypic {
namespace {

using testing_util::arrays_of;

const std::string kModels = std::string(HYPIC_SOURCE_DIR) + "/tests/fixtures/models/";

using testing_util::block;

class CudaEntryPromotion : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
    gpu_ = CudaBackend::load(kModels + GetParam());
    EngineOptions o;
    o.tokenizer_fingerprint = "tok";
    engine_ = std::make_unique<Engine>(*gpu_, CacheMode::Hypic, o);
  }
  // The reference decode and the promotion of `rec` give the same entry.
  void expect_same_content_entry(const std::string& rec, const std::string& what) {
    const KeyContext& k = engine_->keys();
    auto ref = decode_segment_entry(*gpu_, k, rec, what);
    auto promoted = promote_segment_entry(*gpu_, k, std::make_shared<const HostRecord>(*gpu_, rec), what, false);
    gpu_->sync();
    EXPECT_EQ(promoted->tokens, ref->tokens) << what;
    EXPECT_EQ(promoted->seam, ref->seam) << what;
    EXPECT_EQ(promoted->has_full, ref->has_full) << what;
    EXPECT_TRUE(arrays_of(*gpu_, *promoted) == arrays_of(*gpu_, *ref)) << what;
  }
  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<Engine> engine_;
};

TEST_P(CudaEntryPromotion, DeviceExpansionEqualsTheReferenceDecodeBitForBit) {
  auto e = engine_->prefill_segment(block(45, 1));
  auto zeroed = engine_->prefill_segment(block(33, 2));
  testing_util::zero_transfer_head(*gpu_, *zeroed, 0);
  testing_util::zero_transfer_head(*gpu_, *zeroed, 3);
  for (const char* name : {"fp32", "bf16", "compact"}) {
    const EntryCodecOptions o = parse_cache_format(name);
    expect_same_content_entry(encode_entry(*gpu_, engine_->keys(), *e, o), name);
    const std::string z = encode_entry(*gpu_, engine_->keys(), *zeroed, o);
    if (o.skip_zero_heads) {
      EXPECT_GT(inspect_entry(z, name).skipped_heads, 0) << name;
    }
    expect_same_content_entry(z, std::string(name) + " with zero heads");
  }
  // Several promotions queued before one synchronisation, the host records released meanwhile.
  std::vector<std::shared_ptr<SegmentEntry>> many;
  const std::string rec = encode_entry(*gpu_, engine_->keys(), *e, parse_cache_format("compact"));
  for (int i = 0; i < 6; ++i)
    many.push_back(promote_segment_entry(*gpu_, engine_->keys(), std::make_shared<const HostRecord>(*gpu_, rec), "many",
                                         false));
  gpu_->sync();
  auto ref = decode_segment_entry(*gpu_, engine_->keys(), rec, "many");
  for (auto& m : many) EXPECT_TRUE(arrays_of(*gpu_, *m) == arrays_of(*gpu_, *ref));
}

TEST_P(CudaEntryPromotion, ChainRecordsAndCpuWrittenRecords) {
  const std::vector<std::vector<int>> prompt = {block(30, 3), block(20, 4), block(5, 5)};
  engine_->run(prompt);
  const KeyContext& k = engine_->keys();
  const SegmentKey k1 = chain_key(chain_key(std::nullopt, content_key(k, prompt[0])), content_key(k, prompt[1]));
  auto c = engine_->store().find_chain(k1);
  ASSERT_NE(c, nullptr);
  for (const char* name : {"fp32", "bf16"}) {
    const std::string rec = encode_entry(*gpu_, k, *c, parse_cache_format(name));
    auto ref = decode_prefix_entry(*gpu_, k, rec, name);
    auto promoted = promote_prefix_entry(*gpu_, k, std::make_shared<const HostRecord>(*gpu_, rec), name, false);
    gpu_->sync();
    EXPECT_EQ(promoted->pos, ref->pos);
    EXPECT_TRUE(arrays_of(*gpu_, *promoted) == arrays_of(*gpu_, *ref)) << name;
  }
  // A record the CPU backend wrote (K/V rows and conv tails in fp32) under the same key context.
  auto cpu = open_backend(kModels + GetParam(), Device::Cpu);
  EngineOptions o;
  o.tokenizer_fingerprint = "tok";
  Engine cpu_engine(*cpu, CacheMode::Hypic, o);
  auto ce = cpu_engine.prefill_segment(block(41, 6));
  for (const char* name : {"fp32", "compact"})
    expect_same_content_entry(encode_entry(*cpu, k, *ce, parse_cache_format(name)), std::string("cpu ") + name);
}

// Records packed on the device (encode_record: head maxima and the pack kernel on the device, one copy
// out) are the reference encoder's records byte for byte.
TEST_P(CudaEntryPromotion, DevicePackedRecordsAreTheReferenceRecordsByteForByte) {
  auto e = engine_->prefill_segment(block(39, 7));
  auto zeroed = engine_->prefill_segment(block(31, 8));
  testing_util::zero_transfer_head(*gpu_, *zeroed, 1);
  const KeyContext& k = engine_->keys();
  for (const char* name : {"fp32", "bf16", "compact"})
    for (const SegmentEntry* x : {e.get(), zeroed.get()}) {
      const EntryCodecOptions o = parse_cache_format(name);
      const std::string want = encode_entry(*gpu_, k, *x, o);
      EXPECT_TRUE(encode_record(*gpu_, k, *x, o)->view() == want) << name;
      if (x == zeroed.get() && o.skip_zero_heads) {
        EXPECT_GT(inspect_entry(want, name).skipped_heads, 0) << name;
      }
    }
  const std::vector<std::vector<int>> prompt = {block(26, 9), block(21, 10), block(5, 11)};
  engine_->run(prompt);
  const SegmentKey k1 = chain_key(chain_key(std::nullopt, content_key(k, prompt[0])), content_key(k, prompt[1]));
  auto c = engine_->store().find_chain(k1);
  ASSERT_NE(c, nullptr);
  for (const char* name : {"fp32", "bf16"}) {
    const EntryCodecOptions o = parse_cache_format(name);
    EXPECT_TRUE(encode_record(*gpu_, k, *c, o)->view() == encode_entry(*gpu_, k, *c, o)) << name;
  }
}

// 8 documents; prompt i is documents i and i+3 and a question.
std::vector<std::vector<std::vector<int>>> prompts() {
  std::vector<std::vector<std::vector<int>>> p;
  for (int i = 0; i < 8; ++i) p.push_back({block(40, 10 + i), block(40, 10 + (i + 3) % 8), block(5, 200 + i)});
  return p;
}

TEST_P(CudaEntryPromotion, HostTierHitsGiveTheDeviceHitsLogits) {
  EngineOptions device;
  EngineOptions host;
  host.cache_budget_bytes = 1;  // nothing stays on the device: every hit is promoted from host memory
  host.tiers.host_budget_bytes = size_t{1} << 30;
  Engine on_device(*gpu_, CacheMode::Hypic, device), below(*gpu_, CacheMode::Hypic, host);
  auto ps = prompts();
  for (const auto& p : ps) {
    on_device.run(p);
    below.run(p);
  }
  for (auto& p : ps) std::swap(p[0], p[1]);  // reordered: content hits only, no chain entry applies
  for (const auto& p : ps) {
    const PromptResult want = on_device.run(p), got = below.run(p);
    EXPECT_EQ(got.computed_tokens, want.computed_tokens);
    ASSERT_EQ(got.blocks.size(), want.blocks.size());
    for (size_t i = 0; i < got.blocks.size(); ++i) EXPECT_EQ(got.blocks[i].hit, want.blocks[i].hit);
    // fp32 records give the very entries and the same kernels run over them: equal up to the order of
    // floating-point sums where a kernel does not fix it.
    float range = 0, worst = 0;
    for (size_t i = 0; i < want.logits.size(); ++i) {
      range = std::max(range, std::fabs(want.logits[i]));
      worst = std::max(worst, std::fabs(got.logits[i] - want.logits[i]));
    }
    EXPECT_LE(worst, 1e-3f * range);
    EXPECT_EQ(std::max_element(got.logits.begin(), got.logits.end()) - got.logits.begin(),
              std::max_element(want.logits.begin(), want.logits.end()) - want.logits.begin());
  }
  EXPECT_GT(below.tiers()->stats().host_hits, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaEntryPromotion, ::testing::Values("qwen3_5_dense", "qwen3_next_moe"));

}  // namespace
}  // namespace hypic
