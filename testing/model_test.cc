#include "testing/model.h"

#include <gtest/gtest.h>

#include <vector>

#include "dmidx/keys.h"

namespace dmidx::testing {
namespace {

const Model kModel = {{0, 5}, {10, 0}, {20, 7}, {kMaxKey, 9}};

TEST(ModelTest, RangeAndCountAreWhatScansReturn) {
  EXPECT_EQ(ModelRange(kModel, 5, 20), (std::vector<KeyValue>{{Key(10), 0}, {Key(20), 7}}));
  EXPECT_TRUE(ModelRange(kModel, 20, 10).empty());  // from > to
  EXPECT_EQ(ModelRange(kModel, 20, kMaxKey).size(), 2u);
  EXPECT_EQ(ModelCount(kModel, 1, 2), (std::vector<KeyValue>{{Key(10), 0}, {Key(20), 7}}));
  EXPECT_EQ(ModelCount(kModel, 0, 100).size(), 4u);
  EXPECT_TRUE(ModelCount(kModel, 0, 0).empty());
  EXPECT_EQ(Pairs(kModel, 16).size(), 4u);
  EXPECT_EQ(Pairs(kModel, 16)[1].key, EncodeUint64Key(10, 16));
}

TEST(ModelTest, SameScanNamesTheFirstDifference) {
  const std::vector<KeyValue> want = Pairs(kModel);
  EXPECT_TRUE(SameScan(want, want));
  std::vector<KeyValue> got = want;
  got[2].value = 8;
  const ::testing::AssertionResult differs = SameScan(got, want);
  EXPECT_FALSE(differs);
  EXPECT_NE(std::string(differs.message()).find("entry 2 is 20(8B)=8, want 20(8B)=7"),
            std::string::npos)
      << differs.message();
  got = want;
  got.pop_back();
  EXPECT_FALSE(SameScan(got, want));
  EXPECT_FALSE(SameScan(want, got));
}

TEST(ModelTest, ScanShapeChecksSizeOrderAndRange) {
  const std::vector<KeyValue> good = ModelRange(kModel, 0, 20);
  EXPECT_EQ(CheckScanShape(good, 0, 20), "");
  EXPECT_NE(CheckScanShape(good, 1, 20), "");  // 0 is below from
  EXPECT_NE(CheckScanShape(good, 0, 19), "");  // 20 is above to
  EXPECT_NE(CheckScanShape({good[1], good[0]}, 0, 20), "");
  EXPECT_NE(CheckScanShape({good[0], good[0]}, 0, 20), "");  // not strictly ascending
  EXPECT_NE(CheckScanShape(good, 0, 20, 16), "");            // wrong key size
  EXPECT_EQ(CheckScanShape(ModelRange(kModel, 0, 20, 16), 0, 20, 16), "");
}

}  // namespace
}  // namespace dmidx::testing
