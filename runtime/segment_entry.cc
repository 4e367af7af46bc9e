#include "runtime/segment_entry.h"

namespace hypic {

size_t SegmentEntry::bytes() const {
  size_t n = tokens.size() * sizeof(int);
  for (auto& l : linear) n += (l.transfer.size() + l.body.size() + l.full.size() + l.conv_tail.size()) * sizeof(float);
  for (auto& a : attention) n += (a.k.size() + a.v.size()) * sizeof(float);
  return n;
}

size_t PrefixEntry::bytes() const {
  size_t n = 0;
  for (auto* vv : {&conv_tail, &state, &k, &v})
    for (auto& x : *vv) n += x.size() * sizeof(float);
  return n;
}

}  // namespace hypic
