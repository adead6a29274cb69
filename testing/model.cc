#include "testing/model.h"

#include <algorithm>
#include <cstdio>

#include "dmidx/keys.h"

namespace dmidx::testing {

std::string Key(uint64_t key, uint32_t key_bytes) {
  return EncodeUint64Key(key, key_bytes);
}

std::vector<KeyValue> ModelRange(const Model& model, uint64_t from, uint64_t to,
                                 uint32_t key_bytes) {
  std::vector<KeyValue> out;
  if (from > to) return out;
  for (auto it = model.lower_bound(from); it != model.end() && it->first <= to; ++it) {
    out.push_back({Key(it->first, key_bytes), it->second});
  }
  return out;
}

std::vector<KeyValue> ModelCount(const Model& model, uint64_t from, size_t count,
                                 uint32_t key_bytes) {
  std::vector<KeyValue> out;
  for (auto it = model.lower_bound(from); it != model.end() && out.size() < count; ++it) {
    out.push_back({Key(it->first, key_bytes), it->second});
  }
  return out;
}

std::vector<KeyValue> Pairs(const Model& model, uint32_t key_bytes) {
  return ModelRange(model, 0, kMaxKey, key_bytes);
}

std::string Hex(std::string_view bytes) {
  std::string text;
  char byte[4];
  for (unsigned char c : bytes) {
    std::snprintf(byte, sizeof(byte), "%02x", c);
    text += byte;
  }
  return text;
}

std::string Describe(const KeyValue& pair) {
  return std::to_string(DecodeUint64Key(pair.key)) + "(" + std::to_string(pair.key.size()) +
         "B)=" + std::to_string(pair.value);
}

::testing::AssertionResult SameScan(const std::vector<KeyValue>& got,
                                    const std::vector<KeyValue>& want) {
  const size_t common = std::min(got.size(), want.size());
  for (size_t i = 0; i < common; ++i) {
    if (!(got[i] == want[i])) {
      return ::testing::AssertionFailure()
             << "entry " << i << " is " << Describe(got[i]) << ", want " << Describe(want[i])
             << " (got " << got.size() << " entries, want " << want.size() << ")";
    }
  }
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "got " << got.size() << " entries, want " << want.size()
           << "; first extra: " << Describe(got.size() > want.size() ? got[common] : want[common]);
  }
  return ::testing::AssertionSuccess();
}

std::string CheckScanShape(const std::vector<KeyValue>& out, uint64_t from, uint64_t to,
                           uint32_t key_bytes) {
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].key.size() != key_bytes) {
      return "a key of " + std::to_string(out[i].key.size()) + " bytes";
    }
    const uint64_t key = DecodeUint64Key(out[i].key);
    if (key < from || key > to) {
      return "key " + std::to_string(key) + " outside [" + std::to_string(from) + ", " +
             std::to_string(to) + "]";
    }
    if (i > 0 && out[i - 1].key >= out[i].key) {
      return "key " + std::to_string(key) + " after " +
             std::to_string(DecodeUint64Key(out[i - 1].key)) + ": not strictly ascending";
    }
  }
  return "";
}

void ExpectIndexMatches(RangeIndex& index, Context& ctx, const Model& model, uint32_t key_bytes) {
  std::vector<KeyValue> out{{"junk", 1}};
  ASSERT_TRUE(index.Scan(ctx, Key(0, key_bytes), Key(kMaxKey, key_bytes), &out).ok());
  ASSERT_TRUE(SameScan(out, Pairs(model, key_bytes)));
  ASSERT_TRUE(index.Scan(ctx, Key(0, key_bytes), model.size() + 5, &out).ok());
  ASSERT_TRUE(SameScan(out, Pairs(model, key_bytes)));
  for (const auto& [key, value] : model) {
    uint64_t found = value + 1;
    const Status status = index.Lookup(ctx, Key(key, key_bytes), &found);
    ASSERT_TRUE(status.ok()) << key << ": " << status.ToString();
    ASSERT_EQ(found, value) << key;
  }
}

}  // namespace dmidx::testing
