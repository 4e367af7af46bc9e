// Cache entries as bytes, for the tiers below the backend's memory (host memory, disk): a self-describing
// record that names the key context it was built under (format version, model and tokenizer
// fingerprints, seam width) and the model shape, and ends with a checksum of everything before it.
// Decoding checks all of that first, so a torn, corrupt or foreign record is refused (FormatError) and
// never becomes an entry.
//
// Compaction (docs/cache_tiers.md): recurrent states and transfer operators may be stored in bf16 instead
// of fp32, and a head whose transfer operator is zero to float precision (a short-memory head: the body
// forgets the state it starts from) is stored as a flag without its values. Conv tails and K/V rows keep
// the backend's element type.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/backend.h"
#include "runtime/host_record.h"
#include "runtime/segment_entry.h"
#include "runtime/segment_key.h"

namespace hypic {

enum class EntryPrecision : uint8_t { F32 = 0, BF16 = 1 };
const char* precision_name(EntryPrecision p);

struct EntryCodecOptions {
  EntryPrecision precision = EntryPrecision::F32;
  bool skip_zero_heads = false;  // transfer-operator heads zero to float precision stored as a flag
  bool keep_full = true;         // false: content records leave out the whole-segment state
};
// The record formats by name: fp32 (exact: decodes to the very entry), bf16 (states and operators in
// bf16, zero heads skipped), compact (bf16, and no whole-segment state: a hit on the first block of a
// prompt recomputes its seam instead of loading it). Throws InvalidArgument for another name.
EntryCodecOptions parse_cache_format(const std::string& name);
const char* cache_format_name(const EntryCodecOptions& o);

// Bytes of a content record of `tokens` tokens for a model of shape `c` whose backend keeps K/V rows and
// conv tails in `kv` (header and tokens included), with `skipped_heads` transfer-operator heads left out.
size_t content_record_bytes(const ModelConfig& c, DType kv, int64_t tokens, const EntryCodecOptions& o,
                            int64_t skipped_heads = 0, size_t fingerprint_bytes = 0);

// 2: the checksum is XXH3 (version 1 had a hand-written hash at about half its speed).
inline constexpr uint32_t kEntryFormatVersion = 2;

// 64-bit checksum of `data`: XXH3_64bits (Debian's libxxhash; detects torn and flipped bytes; not a MAC).
uint64_t entry_checksum(std::string_view data);

// Whether a record's trailing checksum matches everything before it.
bool record_checksum_ok(std::string_view record);

std::string encode_entry(Backend& b, const KeyContext& ctx, const SegmentEntry& e, const EntryCodecOptions& o);
std::string encode_entry(Backend& b, const KeyContext& ctx, const PrefixEntry& e, const EntryCodecOptions& o);

// The same records (byte for byte) laid out on the host and packed by the backend
// (Backend::pack_to_host: on CUDA a kernel converts the arrays on the device and one copy brings the
// packed record into pinned memory), instead of the whole entry being copied out and converted on the
// host. The record is in host memory of `b`.
std::shared_ptr<HostRecord> encode_record(Backend& b, const KeyContext& ctx, const SegmentEntry& e,
                                          const EntryCodecOptions& o);
std::shared_ptr<HostRecord> encode_record(Backend& b, const KeyContext& ctx, const PrefixEntry& e,
                                          const EntryCodecOptions& o);

// What a record holds, read from its header (after the checksum is verified).
struct EntryRecordInfo {
  char kind = 'c';  // 'c' content (SegmentEntry), 'p' chain (PrefixEntry)
  EntryPrecision precision = EntryPrecision::F32;
  int64_t tokens = 0;        // tokens of the block (content) or K/V rows (chain)
  int64_t skipped_heads = 0;  // transfer-operator heads stored as zero
  std::string model_fingerprint, tokenizer_fingerprint;
  int seam_width = 0;
};
// Throws FormatError naming `where` for a bad checksum, a truncated or malformed record.
EntryRecordInfo inspect_entry(std::string_view record, const std::string& where);

// Throw FormatError naming `where` unless the record is intact, of the expected kind, and was built under
// `ctx` for a model of `b`'s shape. `verified`: the checksum was verified when the record entered host
// memory (the host tier, a disk read checked against the index), and is not computed again.
// The reference decode: the record parsed on the host into the entry's layout, then copied to `b`.
std::shared_ptr<SegmentEntry> decode_segment_entry(Backend& b, const KeyContext& ctx, std::string_view record,
                                                   const std::string& where, bool verified = false);
std::shared_ptr<PrefixEntry> decode_prefix_entry(Backend& b, const KeyContext& ctx, std::string_view record,
                                                 const std::string& where, bool verified = false);

// The promotion path: the header is checked on the host and the entry allocated, then the record is
// copied to the backend as it is and expanded there (Backend::expand_from_host: on CUDA one asynchronous
// copy from pinned memory and a kernel, ordered before later work on the model's stream, with no wait).
// The same checks (FormatError naming `where`) and the same entry, bit for bit, as the reference decode.
struct EntryExpansion {
  std::shared_ptr<SegmentEntry> segment;  // a content record's entry (contents not yet written)
  std::shared_ptr<PrefixEntry> prefix;    // a chain record's entry
  std::vector<ExpandPiece> pieces;        // byte offsets into the record, destinations in the entry
};
// `kind`: 'c' content, 'p' chain.
EntryExpansion plan_entry_expansion(Backend& b, const KeyContext& ctx, std::string_view record, char kind,
                                    const std::string& where, bool verified = false);
std::shared_ptr<SegmentEntry> promote_segment_entry(Backend& b, const KeyContext& ctx,
                                                    std::shared_ptr<const HostRecord> record, const std::string& where,
                                                    bool verified);
std::shared_ptr<PrefixEntry> promote_prefix_entry(Backend& b, const KeyContext& ctx,
                                                  std::shared_ptr<const HostRecord> record, const std::string& where,
                                                  bool verified);

}  // namespace hypic
