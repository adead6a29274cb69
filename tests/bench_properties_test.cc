// YCSB property files and -p overrides: parsing and what they do to a
// WorkloadSpec.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench/properties.h"

namespace dmidx::bench {
namespace {

// YCSB's workloads/workloada as the YCSB repository ships it: the license
// header (its lines padded with trailing blanks), comments, blank lines.
constexpr const char kYcsbWorkloadA[] =
    "# Copyright (c) 2010 Yahoo! Inc. All rights reserved.                                    \n"
    "#                                                                                        \n"
    "# Licensed under the Apache License, Version 2.0 (the \"License\"); you                    \n"
    "# may not use this file except in compliance with the License. You                       \n"
    "# may obtain a copy of the License at                                                    \n"
    "#                                                                                        \n"
    "# http://www.apache.org/licenses/LICENSE-2.0                                             \n"
    "#                                                                                        \n"
    "# Unless required by applicable law or agreed to in writing, software                    \n"
    "# distributed under the License is distributed on an \"AS IS\" BASIS,                      \n"
    "# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or                        \n"
    "# implied. See the License for the specific language governing                           \n"
    "# permissions and limitations under the License. See accompanying                        \n"
    "# LICENSE file.                                                                          \n"
    "\n"
    "\n"
    "# Yahoo! Cloud System Benchmark\n"
    "# Workload A: Update heavy workload\n"
    "#   Application example: Session store recording recent actions\n"
    "#                        \n"
    "#   Read/update ratio: 50/50\n"
    "#   Default data size: 1 KB records (10 fields, 100 bytes each, plus key)\n"
    "#   Request distribution: zipfian\n"
    "\n"
    "recordcount=1000\n"
    "operationcount=1000\n"
    "workload=site.ycsb.workloads.CoreWorkload\n"
    "\n"
    "readallfields=true\n"
    "\n"
    "readproportion=0.5\n"
    "updateproportion=0.5\n"
    "scanproportion=0\n"
    "insertproportion=0\n"
    "\n"
    "requestdistribution=zipfian\n"
    "\n";

// YCSB's workloads/workloade (header shortened), with CRLF line ends as a
// file edited on Windows has them.
constexpr const char kYcsbWorkloadE[] =
    "# Yahoo! Cloud System Benchmark\r\n"
    "# Workload E: Short ranges\r\n"
    "#   Scan/insert ratio: 95/5\r\n"
    "\r\n"
    "# The insert order is hashed, not ordered. Although the scans are ordered, it does not \\\r\n"
    "recordcount=1000\r\n"
    "operationcount=1000\r\n"
    "workload=site.ycsb.workloads.CoreWorkload\r\n"
    "\r\n"
    "readallfields=true\r\n"
    "\r\n"
    "readproportion=0\r\n"
    "updateproportion=0\r\n"
    "scanproportion=0.95\r\n"
    "insertproportion=0.05\r\n"
    "\r\n"
    "requestdistribution=zipfian\r\n"
    "\r\n"
    "maxscanlength=100\r\n"
    "\r\n"
    "scanlengthdistribution=uniform\r\n";

class PropertiesTest : public testing::Test {
 protected:
  // Writes `contents` to a file in the test's temporary directory.
  std::string WriteFile(const std::string& name, const std::string& contents) {
    const std::string path = testing::TempDir() + "/bench_properties_test_" + name;
    std::ofstream(path, std::ios::binary) << contents;
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const std::string& path : paths_)
      std::remove(path.c_str());
  }

  std::vector<std::string> paths_;
};

bool HasNote(const std::vector<std::string>& notes, const std::string& text) {
  for (const std::string& note : notes) {
    if (note.find(text) != std::string::npos) return true;
  }
  return false;
}

// Expects applying `assignment` to a default spec to fail, naming `name`,
// and to leave the spec and the notes as they were.
void ExpectBadValue(const std::string& assignment, const std::string& name) {
  SCOPED_TRACE(assignment);
  Properties properties;
  ASSERT_TRUE(properties.Set("readproportion=1").ok());
  ASSERT_TRUE(properties.Set("fieldcount=3").ok());  // adds a note when applied
  ASSERT_TRUE(properties.Set(assignment).ok());
  WorkloadSpec spec;
  spec.record_count = 77;
  std::vector<std::string> notes = {"earlier"};
  const Status status = ApplyProperties(properties, &spec, &notes);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.message().find(name), std::string_view::npos) << status.ToString();
  EXPECT_EQ(spec.record_count, 77u);
  EXPECT_EQ(spec.read_proportion, 0);
  EXPECT_EQ(spec.field_count, 10u);
  EXPECT_EQ(notes, std::vector<std::string>{"earlier"});
}

TEST_F(PropertiesTest, YcsbWorkloadAParsesUnmodified) {
  Properties properties;
  ASSERT_TRUE(properties.LoadFile(WriteFile("workloada", kYcsbWorkloadA)).ok());
  EXPECT_EQ(properties.values().size(), 9u);
  EXPECT_EQ(properties.values().at("workload"), "site.ycsb.workloads.CoreWorkload");

  WorkloadSpec spec;
  spec.read_proportion = 0.1;
  spec.insert_proportion = 0.3;  // the file's insertproportion=0 clears it
  spec.request_distribution = Distribution::kUniform;
  std::vector<std::string> notes;
  ASSERT_TRUE(ApplyProperties(properties, &spec, &notes).ok());
  EXPECT_EQ(spec.record_count, 1000u);
  EXPECT_EQ(spec.operation_count, 1000u);
  EXPECT_DOUBLE_EQ(spec.read_proportion, 0.5);
  EXPECT_DOUBLE_EQ(spec.update_proportion, 0.5);
  EXPECT_DOUBLE_EQ(spec.insert_proportion, 0);
  EXPECT_DOUBLE_EQ(spec.scan_proportion, 0);
  EXPECT_EQ(spec.request_distribution, Distribution::kZipfian);
  EXPECT_TRUE(HasNote(notes, "workload")) << testing::PrintToString(notes);
  EXPECT_TRUE(HasNote(notes, "the mix comes from the proportions"));
  EXPECT_TRUE(HasNote(notes, "readallfields"));
  EXPECT_EQ(notes.size(), 2u) << testing::PrintToString(notes);
}

TEST_F(PropertiesTest, YcsbWorkloadEWithCrlfParses) {
  Properties properties;
  ASSERT_TRUE(properties.LoadFile(WriteFile("workloade", kYcsbWorkloadE)).ok());
  // The comment ending in '\' does not swallow recordcount.
  EXPECT_EQ(properties.values().at("recordcount"), "1000");
  WorkloadSpec spec;
  std::vector<std::string> notes;
  ASSERT_TRUE(ApplyProperties(properties, &spec, &notes).ok());
  EXPECT_DOUBLE_EQ(spec.scan_proportion, 0.95);
  EXPECT_DOUBLE_EQ(spec.insert_proportion, 0.05);
  EXPECT_EQ(spec.max_scan_length, 100u);
  EXPECT_EQ(spec.scan_length_distribution, Distribution::kUniform);
}

TEST_F(PropertiesTest, SeparatorsBlanksAndContinuations) {
  Properties properties;
  const std::string path = WriteFile("syntax",
                                     "! a bang comment\n"
                                     "  recordcount = 5000   \n"
                                     "operationcount:7\n"
                                     "\tmaxscanlength\t\t 300\n"
                                     "requestdistribution    \\\n"
                                     "      hotspot\n"
                                     "workload=one \\\n"
                                     "   two \\\n"
                                     "   three\n"
                                     "key\\=with\\:escapes = a\\tb\n"
                                     "emptyvalue=\n"
                                     "lonekey\n"
                                     "last=no newline at the end");
  ASSERT_TRUE(properties.LoadFile(path).ok());
  const auto& values = properties.values();
  EXPECT_EQ(values.at("recordcount"), "5000");
  EXPECT_EQ(values.at("operationcount"), "7");
  EXPECT_EQ(values.at("maxscanlength"), "300");
  EXPECT_EQ(values.at("requestdistribution"), "hotspot");
  EXPECT_EQ(values.at("workload"), "one two three");
  EXPECT_EQ(values.at("key=with:escapes"), "a\tb");
  EXPECT_EQ(values.at("emptyvalue"), "");
  EXPECT_EQ(values.at("lonekey"), "");
  EXPECT_EQ(values.at("last"), "no newline at the end");
  EXPECT_EQ(values.size(), 9u);
}

TEST_F(PropertiesTest, LineWithoutKeyIsAnErrorNamingFileAndLine) {
  Properties properties;
  ASSERT_TRUE(properties.Set("recordcount=5").ok());
  const std::string path = WriteFile("nokey", "# comment\nreadproportion=1\n= 0.5\n");
  const Status status = properties.LoadFile(path);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.message().find(path + ":3:"), std::string_view::npos) << status.ToString();
  // Nothing of the bad file was kept.
  EXPECT_EQ(properties.values().size(), 1u);
}

TEST_F(PropertiesTest, MissingFileFailsNamingThePath) {
  Properties properties;
  const std::string path = testing::TempDir() + "/bench_properties_test_no_such_file";
  const Status status = properties.LoadFile(path);
  EXPECT_TRUE(status.IsNotFound()) << status.ToString();
  EXPECT_NE(status.message().find(path), std::string_view::npos) << status.ToString();
}

TEST_F(PropertiesTest, LaterFilesAndSetsWin) {
  Properties properties;
  ASSERT_TRUE(properties.LoadFile(WriteFile("a", kYcsbWorkloadA)).ok());
  ASSERT_TRUE(
      properties.LoadFile(WriteFile("override", "recordcount=2000\nscanproportion=1\n")).ok());
  ASSERT_TRUE(properties.Set("recordcount=3000").ok());
  ASSERT_TRUE(properties.Set(" requestdistribution = uniform ").ok());
  properties.Set("readproportion", "0");
  WorkloadSpec spec;
  std::vector<std::string> notes;
  ASSERT_TRUE(ApplyProperties(properties, &spec, &notes).ok());
  EXPECT_EQ(spec.record_count, 3000u);
  EXPECT_EQ(spec.operation_count, 1000u);
  EXPECT_DOUBLE_EQ(spec.read_proportion, 0);
  EXPECT_DOUBLE_EQ(spec.update_proportion, 0.5);
  EXPECT_DOUBLE_EQ(spec.scan_proportion, 1);
  EXPECT_EQ(spec.request_distribution, Distribution::kUniform);
}

TEST(Properties, SetNeedsAnEqualsSignAndAKey) {
  Properties properties;
  EXPECT_TRUE(properties.Set("recordcount").IsInvalidArgument());
  EXPECT_TRUE(properties.Set("=5").IsInvalidArgument());
  EXPECT_TRUE(properties.Set("  =5").IsInvalidArgument());
  EXPECT_TRUE(properties.values().empty());
  ASSERT_TRUE(properties.Set("table=a=b").ok());  // the first '=' separates
  EXPECT_EQ(properties.values().at("table"), "a=b");
}

TEST(ApplyProperties, SetsEveryField) {
  Properties properties;
  for (const char* assignment : {"recordcount=10",
                                 "operationcount=20",
                                 "readproportion=0.1",
                                 "updateproportion=0.2",
                                 "insertproportion=0.3",
                                 "scanproportion=0.4",
                                 "readmodifywriteproportion=0.5",
                                 "requestdistribution=hotspot",
                                 "minscanlength=5",
                                 "maxscanlength=50",
                                 "scanlengthdistribution=zipfian",
                                 "zipfianconstant=0.8",
                                 "hotspotdatafraction=0.1",
                                 "hotspotopnfraction=0.9",
                                 "insertorder=ordered",
                                 "fieldcount=1",
                                 "fieldlength=16",
                                 "insertexistingproportion=0.25",
                                 "insertstart=4",
                                 "insertcount=6",
                                 "dmidx.zipfian=exact",
                                 "deleteproportion=0.6"}) {
    ASSERT_TRUE(properties.Set(assignment).ok()) << assignment;
  }
  WorkloadSpec spec;
  std::vector<std::string> notes;
  ASSERT_TRUE(ApplyProperties(properties, &spec, &notes).ok());
  EXPECT_EQ(spec.record_count, 10u);
  EXPECT_EQ(spec.operation_count, 20u);
  EXPECT_DOUBLE_EQ(spec.read_proportion, 0.1);
  EXPECT_DOUBLE_EQ(spec.update_proportion, 0.2);
  EXPECT_DOUBLE_EQ(spec.insert_proportion, 0.3);
  EXPECT_DOUBLE_EQ(spec.scan_proportion, 0.4);
  EXPECT_DOUBLE_EQ(spec.read_modify_write_proportion, 0.5);
  EXPECT_EQ(spec.request_distribution, Distribution::kHotspot);
  EXPECT_EQ(spec.min_scan_length, 5u);
  EXPECT_EQ(spec.max_scan_length, 50u);
  EXPECT_EQ(spec.scan_length_distribution, Distribution::kZipfian);
  EXPECT_DOUBLE_EQ(spec.zipfian_constant, 0.8);
  EXPECT_DOUBLE_EQ(spec.hotspot_data_fraction, 0.1);
  EXPECT_DOUBLE_EQ(spec.hotspot_operation_fraction, 0.9);
  EXPECT_TRUE(spec.ordered_inserts);
  EXPECT_EQ(spec.field_count, 1u);
  EXPECT_EQ(spec.field_length, 16u);
  EXPECT_DOUBLE_EQ(spec.insert_existing_proportion, 0.25);
  EXPECT_DOUBLE_EQ(spec.delete_proportion, 0.6);
  EXPECT_DOUBLE_EQ(spec.Proportion(OpType::kDelete), 0.6);
  EXPECT_EQ(spec.insert_start, 4u);
  EXPECT_EQ(spec.insert_count, 6u);
  EXPECT_EQ(spec.zipfian, ZipfianKind::kExact);
  EXPECT_TRUE(HasNote(notes, "8 bytes")) << testing::PrintToString(notes);
  EXPECT_EQ(notes.size(), 2u) << testing::PrintToString(notes);  // fieldcount, fieldlength
}

TEST(ApplyProperties, ZipfianConstantAliasLosesToTheCanonicalName) {
  Properties properties;
  properties.Set("readproportion", "1");
  properties.Set("zipfian_const", "0.5");
  WorkloadSpec spec;
  std::vector<std::string> notes;
  ASSERT_TRUE(ApplyProperties(properties, &spec, &notes).ok());
  EXPECT_DOUBLE_EQ(spec.zipfian_constant, 0.5);
  properties.Set("zipfianconstant", "0.7");
  ASSERT_TRUE(ApplyProperties(properties, &spec, &notes).ok());
  EXPECT_DOUBLE_EQ(spec.zipfian_constant, 0.7);
}

TEST(ApplyProperties, BadValuesNameThePropertyAndChangeNothing) {
  ExpectBadValue("recordcount=abc", "property recordcount: 'abc' is not a non-negative integer");
  ExpectBadValue("recordcount=-5", "recordcount");
  ExpectBadValue("recordcount=10x", "recordcount");
  ExpectBadValue("recordcount=", "recordcount");
  ExpectBadValue("recordcount=99999999999999999999", "recordcount");
  ExpectBadValue("operationcount=1.5", "operationcount");
  ExpectBadValue("maxscanlength=4294967296", "maxscanlength");
  ExpectBadValue("readproportion=half", "readproportion");
  ExpectBadValue("updateproportion=-0.1", "updateproportion");
  ExpectBadValue("scanproportion=nan", "scanproportion");
  ExpectBadValue("insertproportion=inf", "insertproportion");
  ExpectBadValue("requestdistribution=exponential", "requestdistribution");
  ExpectBadValue("requestdistribution=Zipfian", "requestdistribution");
  ExpectBadValue("scanlengthdistribution=latest", "scanlengthdistribution");
  ExpectBadValue("insertorder=random", "insertorder");
  ExpectBadValue("zipfianconstant=1", "zipfianconstant");
  ExpectBadValue("hotspotdatafraction=2", "hotspotdatafraction");
  ExpectBadValue("insertexistingproportion=1.5", "insertexistingproportion");
  ExpectBadValue("minscanlength=0", "minscanlength");
  ExpectBadValue("fieldcount=many", "fieldcount");
  ExpectBadValue("dmidx.zipfian=true", "property dmidx.zipfian: 'true' is not a zipfian");
  ExpectBadValue("insertstart=-1", "insertstart");
  // recordcount is 77 here: a start past it, or a count that leaves
  // records to other clients, cannot run.
  ExpectBadValue("insertstart=78", "insertstart");
  ExpectBadValue("insertcount=10", "insertcount");
}

TEST(ApplyProperties, AllProportionsZeroIsAnError) {
  Properties properties;
  for (const char* name : {"readproportion", "updateproportion", "insertproportion",
                           "scanproportion", "readmodifywriteproportion"}) {
    properties.Set(name, "0");
  }
  WorkloadSpec spec = *FindWorkload("a");
  std::vector<std::string> notes;
  const Status status = ApplyProperties(properties, &spec, &notes);
  EXPECT_TRUE(status.IsInvalidArgument());
  EXPECT_NE(status.message().find("readproportion"), std::string_view::npos) << status.ToString();
  EXPECT_DOUBLE_EQ(spec.read_proportion, 0.5);
}

TEST(ApplyProperties, UnknownAndIgnoredKeysAreNotesNotErrors) {
  Properties properties;
  properties.Set("readproportion", "1");
  properties.Set("frobnicate", "yes");
  properties.Set("threadcount", "64");
  properties.Set("measurementtype", "hdrhistogram");
  WorkloadSpec spec;
  std::vector<std::string> notes;
  ASSERT_TRUE(ApplyProperties(properties, &spec, &notes).ok());
  EXPECT_TRUE(HasNote(notes, "unknown property 'frobnicate' ignored"))
      << testing::PrintToString(notes);
  EXPECT_TRUE(HasNote(notes, "threadcount"));
  EXPECT_TRUE(HasNote(notes, "measurementtype"));
  EXPECT_EQ(notes.size(), 3u);
}

TEST(KnownProperties, EveryPropertyHasOneLineOfHelpAndIsAccepted) {
  const auto known = KnownProperties();
  ASSERT_GE(known.size(), 18u);
  for (const PropertyDoc& doc : known) {
    SCOPED_TRACE(std::string(doc.name));
    EXPECT_FALSE(doc.help.empty());
    EXPECT_EQ(doc.help.find('\n'), std::string_view::npos);
    // No known property is reported as unknown.
    Properties properties;
    properties.Set("readproportion", "1");
    properties.Set(std::string(doc.name), "1");
    WorkloadSpec spec;
    std::vector<std::string> notes;
    (void)ApplyProperties(properties, &spec, &notes);
    EXPECT_FALSE(HasNote(notes, "unknown"));
  }
}

}  // namespace
}  // namespace dmidx::bench
