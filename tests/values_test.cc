// The value rules of every tool's flags (lib/common/values.h): what they accept,
// and what they tell the user about what they do not, word for word.
#include "lib/common/values.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace dmidx {
namespace {

// "'TEXT' WHAT", built by appending: GCC 12 at -O3 reports a false
// -Wrestrict inside operator+ on a string made from a literal.
std::string Quoted(const char* text, const char* what) {
  std::string out = "'";
  out.append(text).append("' ").append(what);
  return out;
}

TEST(ToolValuesTest, IntegersSayWhichBoundANumberBreaks) {
  EXPECT_EQ(IntegerProblem("0", 0, 10), "");
  EXPECT_EQ(IntegerProblem("10", 0, 10), "");
  EXPECT_EQ(IntegerProblem("0", 1, 10), "must be >= 1, not 0");
  EXPECT_EQ(IntegerProblem("11", 1, 10), "must be <= 10, not 11");
  // A negative number is below any bound, not "not an integer", and not
  // 2^64 - 5 either.
  EXPECT_EQ(IntegerProblem("-5", 0, UINT64_MAX), "must be >= 0, not -5");
  // Beyond 64 bits is above the bound, however large the bound.
  EXPECT_EQ(IntegerProblem("99999999999999999999999", 0, UINT64_MAX),
            "must be <= 18446744073709551615, not 99999999999999999999999");
  EXPECT_EQ(IntegerProblem("18446744073709551615", 0, UINT64_MAX), "");
  for (const char* text : {"abc", "1.5", "1e3", "0x10", "+5", " 5", "5 ", "", "-"}) {
    EXPECT_EQ(IntegerProblem(text, 0, 10), Quoted(text, "is not an integer"));
  }
}

TEST(ToolValuesTest, SizesSayTheirBoundsInUnits) {
  const SizeRule chunks{.min = 4096, .max = uint64_t{1} << 47, .multiple = 4096};
  EXPECT_EQ(SizeProblem("8M", chunks), "");
  EXPECT_EQ(SizeProblem("0", chunks), "must be >= 4K, not 0");
  EXPECT_EQ(SizeProblem("5000", chunks), "must be a multiple of 4K, not 5000");
  EXPECT_EQ(SizeProblem("200T", chunks), "must be <= 128T, not 200T");
  EXPECT_EQ(SizeProblem("99999999999999999999999", chunks),
            "must be <= 128T, not 99999999999999999999999");
  EXPECT_EQ(SizeProblem("99999999T", chunks), "must be <= 128T, not 99999999T");  // overflows
  EXPECT_EQ(SizeProblem("-1", chunks), "must be >= 4K, not -1");
  EXPECT_EQ(SizeProblem("-1M", chunks), "must be >= 4K, not -1M");
  for (const char* text : {"12Q", "1P", "M", "", "1.5G", "4 K"}) {
    EXPECT_EQ(SizeProblem(text, {}), Quoted(text, "is not a size, e.g. 4096, 64K or 1G"));
  }
  EXPECT_EQ(SizeProblem("0", {}), "");
}

TEST(ToolValuesTest, NumbersSayWhichBoundTheyBreakAndRefuseNaN) {
  const NumberRule fraction{.min = 0, .max = 1, .min_excluded = true};
  EXPECT_EQ(NumberProblem("0.8", fraction), "");
  EXPECT_EQ(NumberProblem("1", fraction), "");
  EXPECT_EQ(NumberProblem("0", fraction), "must be > 0, not 0");
  EXPECT_EQ(NumberProblem("1.5", fraction), "must be <= 1, not 1.5");
  const NumberRule seconds{.min = 0.001, .max = 1e9};
  EXPECT_EQ(NumberProblem("0", seconds), "must be >= 0.001, not 0");
  EXPECT_EQ(NumberProblem("1e30", seconds), "must be <= 1000000000, not 1e30");
  EXPECT_EQ(NumberProblem("inf", seconds), "must be <= 1000000000, not inf");
  EXPECT_EQ(NumberProblem("1e999", seconds), "must be <= 1000000000, not 1e999");
  EXPECT_EQ(NumberProblem("-inf", seconds), "must be >= 0.001, not -inf");
  // Without an upper bound a number must still be finite.
  EXPECT_EQ(NumberProblem("inf", {}), "'inf' is not a finite number");
  EXPECT_EQ(NumberProblem("1e999", {}), "'1e999' is not a finite number");
  EXPECT_EQ(NumberProblem("1e-999", {}), "");  // too small for a double: zero
  for (const char* text : {"nan", "abc", "", "0x10", "+1", " 1", "1s"}) {
    EXPECT_EQ(NumberProblem(text, {}), Quoted(text, "is not a number"));
  }
  EXPECT_EQ(ParseNumber("2.5"), 2.5);
  EXPECT_EQ(ParseNumber("-3"), -3.0);
  EXPECT_EQ(ParseNumber("1e999"), std::numeric_limits<double>::infinity());
  EXPECT_FALSE(ParseNumber("nan").has_value());
}

TEST(ToolValuesTest, OnOff) {
  for (const char* on : {"on", "true", "1", "yes"})
    EXPECT_EQ(ParseOnOff(on), true) << on;
  for (const char* off : {"off", "false", "0", "no"})
    EXPECT_EQ(ParseOnOff(off), false) << off;
  EXPECT_EQ(OnOffProblem("on"), "");
  EXPECT_EQ(OnOffProblem("maybe"), "'maybe' is not on or off (nor true/false, yes/no, 1/0)");
}

TEST(ToolValuesTest, BoundsAreWrittenAsAUserWouldWriteThem) {
  EXPECT_EQ(FormatSize(0), "0");
  EXPECT_EQ(FormatSize(1000), "1000");
  EXPECT_EQ(FormatSize(4096), "4K");
  EXPECT_EQ(FormatSize(8458240), "8260K");
  EXPECT_EQ(FormatSize(uint64_t{8} << 20), "8M");
  EXPECT_EQ(FormatSize(uint64_t{1} << 47), "128T");
  EXPECT_EQ(ParseSize(FormatSize(8458240)), 8458240u);
  EXPECT_EQ(FormatNumber(1e9), "1000000000");
  EXPECT_EQ(FormatNumber(0.001), "0.001");
  EXPECT_EQ(FormatNumber(1e300), "1e+300");
}

}  // namespace
}  // namespace dmidx
