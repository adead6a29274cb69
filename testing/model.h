// The std::map model an index is checked against, and comparisons of scan
// results with it. Keys are integers encoded order-preservingly
// (dmidx/keys.h) into keys of any size.
#ifndef DMIDX_TESTING_MODEL_H_
#define DMIDX_TESTING_MODEL_H_

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/cluster.h"
#include "dmidx/index.h"

namespace dmidx::testing {

inline constexpr uint64_t kMaxKey = std::numeric_limits<uint64_t>::max();

// `key` encoded into `key_bytes` bytes (EncodeUint64Key).
std::string Key(uint64_t key, uint32_t key_bytes = 8);

// Integer key -> value: what the index should hold.
using Model = std::map<uint64_t, uint64_t>;

// What Scan(from, to) should return: the pairs of [from, to], empty when
// from > to.
std::vector<KeyValue> ModelRange(const Model& model, uint64_t from, uint64_t to,
                                 uint32_t key_bytes = 8);
// What Scan(from, count) should return: the first `count` pairs >= from.
std::vector<KeyValue> ModelCount(const Model& model, uint64_t from, size_t count,
                                 uint32_t key_bytes = 8);
// Every pair of the model, in order.
std::vector<KeyValue> Pairs(const Model& model, uint32_t key_bytes = 8);

// "0a1b": the bytes in hex.
std::string Hex(std::string_view bytes);

// "42(8B)=7": the decoded key, its size and the value.
std::string Describe(const KeyValue& pair);

// Equal scan results, or where they first differ.
::testing::AssertionResult SameScan(const std::vector<KeyValue>& got,
                                    const std::vector<KeyValue>& want);

// The shape of a scan result: keys of `key_bytes`, strictly ascending, in
// [from, to]. Returns what is wrong, or "".
std::string CheckScanShape(const std::vector<KeyValue>& out, uint64_t from, uint64_t to,
                           uint32_t key_bytes = 8);

// Everything in `model` is found by Lookup and by a full Scan of each form;
// nothing else is. Fatal failures (ASSERT_NO_FATAL_FAILURE around the call
// stops the test).
void ExpectIndexMatches(RangeIndex& index, Context& ctx, const Model& model,
                        uint32_t key_bytes = 8);

}  // namespace dmidx::testing

#endif  // DMIDX_TESTING_MODEL_H_
