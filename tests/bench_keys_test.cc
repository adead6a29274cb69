// The keys of dmidx-ycsb: key number n as integer or string index keys.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <unordered_set>

#include "bench/generators.h"
#include "bench/keys.h"
#include "dmidx/keys.h"

namespace dmidx::bench {
namespace {

constexpr std::string_view kPrefixes[] = {
    "com.gmail/",   "com.yahoo/", "com.hotmail/",      "com.outlook/",
    "net.comcast/", "de.web/",    "org.debian.lists/", "edu.mit.csail/",
};

TEST(KeyKind, NamesRoundTrip) {
  for (KeyKind kind : {KeyKind::kInteger, KeyKind::kString}) {
    EXPECT_EQ(ParseKeyKind(KeyKindName(kind)), kind);
  }
  EXPECT_STREQ(KeyKindName(KeyKind::kString), "string");
  EXPECT_EQ(ParseKeyKind("int"), std::nullopt);
}

TEST(KeyFormat, IntegerKeysAreEncodeUint64KeyOfTheHashOrTheNumber) {
  for (uint32_t bytes : {8u, 16u, 32u}) {
    for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{12345}, ~uint64_t{0}}) {
      const KeyFormat hashed{KeyKind::kInteger, bytes, false};
      const KeyFormat ordered{KeyKind::kInteger, bytes, true};
      EXPECT_EQ(hashed.Format(n), EncodeUint64Key(Mix64(n), bytes)) << bytes << " " << n;
      EXPECT_EQ(ordered.Format(n), EncodeUint64Key(n, bytes)) << bytes << " " << n;
    }
  }
}

TEST(KeyFormat, OrderedKeysSortLikeTheirNumbers) {
  const KeyFormat integers{KeyKind::kInteger, 16, true};
  std::string previous = integers.Format(0);
  for (uint64_t n = 1; n < 100'000; n += 7) {
    const std::string key = integers.Format(n);
    ASSERT_LT(previous, key) << n;
    previous = key;
  }
  EXPECT_LT(integers.Format(uint64_t{1} << 40), integers.Format(~uint64_t{0}));
  // Ordered string keys sort numerically within a prefix.
  const KeyFormat strings{KeyKind::kString, 48, true};
  std::string last_by_prefix[std::size(kPrefixes)];
  for (uint64_t n = 0; n < 100'000; ++n) {
    const std::string key = strings.Format(n);
    for (size_t i = 0; i < std::size(kPrefixes); ++i) {
      if (key.starts_with(kPrefixes[i])) {
        ASSERT_LT(last_by_prefix[i], key) << n;
        last_by_prefix[i] = key;
      }
    }
  }
}

TEST(KeyFormat, DistinctNumbersGiveDistinctKeys) {
  for (const KeyFormat& format :
       {KeyFormat{KeyKind::kInteger, 8, false}, KeyFormat{KeyKind::kInteger, 8, true},
        KeyFormat{KeyKind::kString, 41, false}, KeyFormat{KeyKind::kString, 41, true}}) {
    SCOPED_TRACE(testing::Message() << KeyKindName(format.kind) << " ordered " << format.ordered);
    std::unordered_set<std::string> keys;
    std::string key;
    for (uint64_t n = 0; n < 100'000; ++n) {
      format.Format(n, &key);
      ASSERT_TRUE(keys.insert(key).second) << n;
    }
    // And numbers far apart, where the high bytes differ.
    for (uint64_t n = 1; n < 1000; ++n) {
      format.Format(n << 40, &key);
      ASSERT_TRUE(keys.insert(key).second) << n;
    }
  }
}

TEST(KeyFormat, StringKeysHaveTheSizeAPrefixAndTheDigits) {
  const KeyFormat format{KeyKind::kString, 64, false};
  ASSERT_TRUE(format.Validate().ok());
  int by_prefix[std::size(kPrefixes)] = {};
  std::string key;
  for (uint64_t n = 0; n < 80'000; ++n) {
    format.Format(n, &key);
    ASSERT_EQ(key.size(), 64u);
    size_t prefix_size = 0;
    for (size_t i = 0; i < std::size(kPrefixes); ++i) {
      if (key.starts_with(kPrefixes[i])) {
        ++by_prefix[i];
        prefix_size = kPrefixes[i].size();
      }
    }
    ASSERT_GT(prefix_size, 0u) << key;
    // "user", the 20 digits of the hash, then zero bytes.
    std::string digits = std::to_string(Mix64(n));
    digits.insert(0, 20 - digits.size(), '0');
    ASSERT_EQ(key.substr(prefix_size, 24), "user" + digits) << n;
    ASSERT_EQ(key.find_first_not_of('\0', prefix_size + 24), std::string::npos) << n;
  }
  // The prefix comes from the hash: each of the 8 gets about 10000 keys.
  for (int count : by_prefix)
    EXPECT_NEAR(count, 10'000, 500);
  // Key number 0 is scattered too.
  EXPECT_EQ(format.Format(0).find("user00000000"), std::string::npos) << format.Format(0);
}

TEST(KeyFormat, FormatReusesTheBuffer) {
  const KeyFormat format{KeyKind::kString, 64, false};
  std::string key;
  format.Format(1, &key);
  const char* buffer = key.data();
  for (uint64_t n = 2; n < 100; ++n) {
    format.Format(n, &key);
    ASSERT_EQ(key.data(), buffer);
  }
  // A shorter format after a longer one: replaced, not appended to.
  KeyFormat{KeyKind::kInteger, 8, true}.Format(5, &key);
  EXPECT_EQ(key, EncodeUint64Key(5));
}

TEST(KeyFormat, ValidateStatesTheMinimum) {
  const KeyFormat integer{KeyKind::kInteger, 7, false};
  EXPECT_EQ(integer.MinBytes(), 8u);
  Status status = integer.Validate();
  EXPECT_TRUE(status.IsInvalidArgument());
  EXPECT_NE(status.message().find("minimum is 8"), std::string_view::npos) << status.ToString();
  EXPECT_TRUE((KeyFormat{KeyKind::kInteger, 8, false}.Validate().ok()));

  // The longest prefix, "org.debian.lists/", has 17 bytes; "user" 4; the
  // digits 20.
  const KeyFormat string{KeyKind::kString, 40, false};
  EXPECT_EQ(string.MinBytes(), 41u);
  status = string.Validate();
  EXPECT_TRUE(status.IsInvalidArgument());
  EXPECT_NE(status.message().find("minimum is 41"), std::string_view::npos) << status.ToString();
  EXPECT_TRUE((KeyFormat{KeyKind::kString, 41, false}.Validate().ok()));
  // The minimum holds the largest number whole.
  const KeyFormat ordered_string{KeyKind::kString, 41, true};
  EXPECT_NE(ordered_string.Format(~uint64_t{0}).find("user18446744073709551615"),
            std::string::npos);
}

}  // namespace
}  // namespace dmidx::bench
