// YCSB property files and -p overrides, read unmodified.
//
//   Properties properties;
//   Status s = properties.LoadFile("workloads/workloada");   // -P
//   s = properties.Set("recordcount=100000");                 // -p
//   std::vector<std::string> notes;
//   s = ApplyProperties(properties, &spec, &notes);
//
// File syntax is Java's .properties as YCSB writes it: one "key=value" (or
// "key: value", or "key value") per line, '#' or '!' comments, blank lines,
// a trailing '\' continues a line; keys and values are trimmed.
//
// The properties are YCSB's core workload's (KnownProperties() lists them),
// plus three that upstream YCSB lacks:
//   insertexistingproportion  dmidx's own: the share of inserts that upsert
//                             an existing key (WorkloadSpec::
//                             insert_existing_proportion), in [0, 1].
//   zipfianconstant           the skew of requestdistribution=zipfian, as
//                             YCSB forks name it (upstream fixes 0.99);
//                             YCSB-cpp's zipfian_const is read as an alias.
//   dmidx.zipfian             dmidx's own: ycsb (YCSB's scrambled zipfian)
//                             or exact (a zipfian over the keys).
// A property a file does not set keeps the spec's value, not YCSB's default
// (e.g. requestdistribution stays zipfian, where YCSB would use uniform).
#ifndef DMIDX_BENCH_PROPERTIES_H_
#define DMIDX_BENCH_PROPERTIES_H_

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bench/workload.h"
#include "dmidx/status.h"

namespace dmidx::bench {

class Properties {
 public:
  // Reads `path`; its keys replace earlier ones. NotFound / IoError naming
  // the path; InvalidArgument "FILE:LINE: ..." for a line with no key.
  Status LoadFile(const std::string& path);
  // "key=value"; InvalidArgument when there is no '=' or no key.
  Status Set(std::string_view assignment);
  void Set(std::string key, std::string value);

  const std::map<std::string, std::string>& values() const { return values_; }

 private:
  std::map<std::string, std::string> values_;
};

// The properties ApplyProperties understands, with one line of help each,
// for --help.
struct PropertyDoc {
  std::string_view name;
  std::string_view help;
};
std::span<const PropertyDoc> KnownProperties();

// Sets the fields of `spec` the properties name, then checks the result
// with WorkloadSpec::Validate(). A bad value is InvalidArgument naming the
// property and the value, and leaves *spec (and *notes) unchanged.
// Properties accepted without effect (fieldcount, fieldlength, workload,
// readallfields, ...) and unknown keys add one line each to *notes; they
// are not errors.
Status ApplyProperties(const Properties& properties, WorkloadSpec* spec,
                       std::vector<std::string>* notes);

}  // namespace dmidx::bench

#endif  // DMIDX_BENCH_PROPERTIES_H_
