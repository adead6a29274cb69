#include "bench/properties.h"

#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <utility>

namespace dmidx::bench {

// ---------------------------------------------------------------------------
// Reading: Java's .properties syntax (java.util.Properties.load), as far as
// YCSB's files use it.

namespace {

// Java's whitespace in .properties: space, tab, form feed.
bool IsBlank(char c) {
  return c == ' ' || c == '\t' || c == '\f';
}

std::string_view TrimLeft(std::string_view text) {
  while (!text.empty() && IsBlank(text.front()))
    text.remove_prefix(1);
  return text;
}

std::string_view Trim(std::string_view text) {
  text = TrimLeft(text);
  while (!text.empty() && (IsBlank(text.back()) || text.back() == '\r'))
    text.remove_suffix(1);
  return text;
}

// A line continues on the next one when it ends in an odd number of
// backslashes (an even number is escaped backslashes).
bool EndsInContinuation(std::string_view line) {
  size_t backslashes = 0;
  while (backslashes < line.size() && line[line.size() - 1 - backslashes] == '\\')
    ++backslashes;
  return backslashes % 2 == 1;
}

void AppendUtf8(uint32_t code_point, std::string* out) {
  if (code_point < 0x80) {
    out->push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (code_point >> 6)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xe0 | (code_point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  }
}

// Java's escapes: \t \n \r \f, \uXXXX, and '\' before any other character
// stands for that character (so "\=" and "\:" put separators into keys).
std::string Unescape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out.push_back(text[i]);
      continue;
    }
    const char c = text[++i];
    uint32_t code_point = 0;
    if (c == 'u' && i + 4 < text.size() &&
        std::from_chars(text.data() + i + 1, text.data() + i + 5, code_point, 16).ptr ==
            text.data() + i + 5) {
      AppendUtf8(code_point, &out);
      i += 4;
      continue;
    }
    switch (c) {
      case 't':
        out.push_back('\t');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 'f':
        out.push_back('\f');
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// Splits a logical line into key and value: the key ends at the first
// unescaped '=', ':' or blank; then blanks, at most one '=' or ':', and
// blanks again separate it from the value.
std::pair<std::string, std::string> SplitLogicalLine(std::string_view line) {
  size_t key_end = 0;
  while (key_end < line.size()) {
    const char c = line[key_end];
    if (c == '\\') {
      key_end += 2;
      continue;
    }
    if (c == '=' || c == ':' || IsBlank(c)) break;
    ++key_end;
  }
  key_end = std::min(key_end, line.size());
  std::string_view rest = TrimLeft(line.substr(key_end));
  if (!rest.empty() && (rest.front() == '=' || rest.front() == ':')) rest.remove_prefix(1);
  return {Unescape(line.substr(0, key_end)), Unescape(Trim(rest))};
}

// Reads all of `path` into *contents.
Status ReadWholeFile(const std::string& path, std::string* contents) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int error = errno;
    const std::string message = "cannot open " + path + ": " + std::strerror(error);
    return error == ENOENT ? Status::NotFound(message) : Status::IoError(message);
  }
  char buffer[8192];
  size_t read;
  while ((read = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
    contents->append(buffer, read);
  }
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) return Status::IoError("cannot read " + path);
  return Status::Ok();
}

// Takes the next natural line (without its "\n" or "\r\n") off *rest.
std::string_view TakeLine(std::string_view* rest) {
  const size_t end = rest->find('\n');
  std::string_view line = rest->substr(0, end);
  rest->remove_prefix(end == std::string_view::npos ? rest->size() : end + 1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

// Takes the next logical line off *rest: natural lines joined while they
// end in '\', each continuation losing its leading blanks; "" for a blank
// or comment line. Counts the natural lines in *line_number.
std::string TakeLogicalLine(std::string_view* rest, size_t* line_number) {
  std::string logical;
  for (bool first = true; first || !rest->empty(); first = false) {
    std::string_view line = TrimLeft(TakeLine(rest));
    ++*line_number;
    // A comment ends with its natural line, whatever it ends in.
    if (first && (line.empty() || line.front() == '#' || line.front() == '!')) return "";
    const bool continued = EndsInContinuation(line);
    if (continued) line.remove_suffix(1);
    logical.append(line);
    if (!continued) break;
  }
  return logical;
}

}  // namespace

Status Properties::LoadFile(const std::string& path) {
  std::string contents;
  DMIDX_RETURN_IF_ERROR(ReadWholeFile(path, &contents));
  // Parsed into a copy so that a bad line leaves the earlier values alone.
  std::map<std::string, std::string> values = values_;
  std::string_view rest = contents;
  size_t line_number = 0;
  while (!rest.empty()) {
    const size_t first_line = line_number + 1;
    const std::string logical = TakeLogicalLine(&rest, &line_number);
    if (Trim(logical).empty()) continue;
    auto [key, value] = SplitLogicalLine(Trim(logical));
    if (key.empty()) {
      return Status::InvalidArgument(path + ":" + std::to_string(first_line) +
                                     ": no property name before the value");
    }
    values[std::move(key)] = std::move(value);
  }
  values_ = std::move(values);
  return Status::Ok();
}

Status Properties::Set(std::string_view assignment) {
  const size_t equals = assignment.find('=');
  if (equals == std::string_view::npos) {
    return Status::InvalidArgument("property assignment '" + std::string(assignment) +
                                   "' has no '=' (expected name=value)");
  }
  const std::string_view key = Trim(assignment.substr(0, equals));
  if (key.empty()) {
    return Status::InvalidArgument("property assignment '" + std::string(assignment) +
                                   "' has no name before '='");
  }
  Set(std::string(key), std::string(Trim(assignment.substr(equals + 1))));
  return Status::Ok();
}

void Properties::Set(std::string key, std::string value) {
  values_[std::move(key)] = std::move(value);
}

// ---------------------------------------------------------------------------
// Applying: what each property does to a WorkloadSpec.

namespace {

using Notes = std::vector<std::string>;

std::string Quoted(std::string_view name, std::string_view value) {
  return "property " + std::string(name) + ": '" + std::string(value) + "'";
}

// The whole value must be the number: "10x", " 10" or "" are errors, where
// Java's Long.parseLong agrees and atoll would not.
Status ParseCount(std::string_view name, std::string_view value, uint64_t max, uint64_t* out) {
  uint64_t parsed = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (value.empty() || end != value.data() + value.size() ||
      (error != std::errc() && error != std::errc::result_out_of_range)) {
    return Status::InvalidArgument(Quoted(name, value) + " is not a non-negative integer");
  }
  if (error == std::errc::result_out_of_range || parsed > max) {
    return Status::InvalidArgument(Quoted(name, value) + " is out of range (at most " +
                                   std::to_string(max) + ")");
  }
  *out = parsed;
  return Status::Ok();
}

Status ParseUint64(std::string_view name, std::string_view value, uint64_t* out) {
  return ParseCount(name, value, std::numeric_limits<uint64_t>::max(), out);
}

Status ParseUint32(std::string_view name, std::string_view value, uint32_t* out) {
  uint64_t parsed = 0;
  DMIDX_RETURN_IF_ERROR(ParseCount(name, value, std::numeric_limits<uint32_t>::max(), &parsed));
  *out = static_cast<uint32_t>(parsed);
  return Status::Ok();
}

// A finite number >= 0 (proportions, fractions, the zipfian constant);
// WorkloadSpec::Validate checks the upper bounds.
Status ParseNonNegative(std::string_view name, std::string_view value, double* out) {
  double parsed = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (value.empty() || end != value.data() + value.size() || error != std::errc() ||
      !std::isfinite(parsed) || parsed < 0) {
    return Status::InvalidArgument(Quoted(name, value) + " is not a non-negative number");
  }
  *out = parsed;
  return Status::Ok();
}

Status ParseRequestDistribution(std::string_view name, std::string_view value, Distribution* out) {
  const std::optional<Distribution> parsed = ParseDistribution(value);
  if (!parsed) {
    return Status::InvalidArgument(Quoted(name, value) +
                                   " is not a supported distribution (uniform, zipfian, latest, "
                                   "hotspot)");
  }
  *out = *parsed;
  return Status::Ok();
}

Status ParseScanLengthDistribution(std::string_view name, std::string_view value,
                                   Distribution* out) {
  const std::optional<Distribution> parsed = ParseDistribution(value);
  if (parsed != Distribution::kUniform && parsed != Distribution::kZipfian) {
    return Status::InvalidArgument(Quoted(name, value) +
                                   " is not a scan length distribution (uniform, zipfian)");
  }
  *out = *parsed;
  return Status::Ok();
}

Status ParseZipfian(std::string_view name, std::string_view value, ZipfianKind* out) {
  const std::optional<ZipfianKind> parsed = ParseZipfianKind(value);
  if (!parsed) {
    return Status::InvalidArgument(Quoted(name, value) + " is not a zipfian (ycsb, exact)");
  }
  *out = *parsed;
  return Status::Ok();
}

Status ParseInsertOrder(std::string_view name, std::string_view value, bool* ordered) {
  if (value != "hashed" && value != "ordered") {
    return Status::InvalidArgument(Quoted(name, value) +
                                   " is not an insert order (hashed, ordered)");
  }
  *ordered = value == "ordered";
  return Status::Ok();
}

// What a property does: sets a field of the spec and/or adds a note.
using ApplyFunction = Status (*)(std::string_view name, std::string_view value, WorkloadSpec* spec,
                                 Notes* notes);

struct PropertyRule {
  PropertyDoc doc;
  ApplyFunction apply;  // null: accepted without effect, noted with doc.help
};

// Every property ApplyProperties knows, in --help order. The help of a rule
// without `apply` says why it has no effect; that text is also its note.
constexpr PropertyRule kRules[] = {
    {{"recordcount", "keys loaded before the run (default 1000000)"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseUint64(name, value, &spec->record_count);
     }},
    {{"insertstart",
      "key number of the first record (default 0): the run loads recordcount - insertstart "
      "records, numbered from insertstart"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseUint64(name, value, &spec->insert_start);
     }},
    {{"insertcount",
      "records loaded from insertstart; only recordcount - insertstart (the default) can run"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       uint64_t count = 0;
       DMIDX_RETURN_IF_ERROR(ParseUint64(name, value, &count));
       spec->insert_count = count;
       return Status::Ok();
     }},
    {{"operationcount", "operations of the run phase, over all contexts (default 1000000)"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseUint64(name, value, &spec->operation_count);
     }},
    {{"readproportion", "share of reads (proportions need not sum to 1)"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseNonNegative(name, value, &spec->read_proportion);
     }},
    {{"updateproportion", "share of updates of an existing key"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseNonNegative(name, value, &spec->update_proportion);
     }},
    {{"insertproportion", "share of inserts"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseNonNegative(name, value, &spec->insert_proportion);
     }},
    {{"scanproportion", "share of scans (range queries)"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseNonNegative(name, value, &spec->scan_proportion);
     }},
    {{"readmodifywriteproportion", "share of read-modify-writes (read, then update the key)"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseNonNegative(name, value, &spec->read_modify_write_proportion);
     }},
    {{"deleteproportion",
      "dmidx: share of deletes of an existing key, chosen like a read (YCSB's core workload "
      "has no deletes)"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseNonNegative(name, value, &spec->delete_proportion);
     }},
    {{"insertexistingproportion",
      "dmidx: share of inserts that upsert an existing key, chosen like a read, instead of "
      "adding a new one, in [0, 1] (default 0; Sherman's mixes 2/3)"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseNonNegative(name, value, &spec->insert_existing_proportion);
     }},
    {{"requestdistribution", "how keys are chosen: uniform, zipfian, latest or hotspot"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseRequestDistribution(name, value, &spec->request_distribution);
     }},
    {{"zipfianconstant",
      "skew theta of requestdistribution=zipfian, > 0 and != 1 (default 0.99; not in upstream "
      "YCSB, which fixes 0.99; latest and scan lengths keep 0.99)"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseNonNegative(name, value, &spec->zipfian_constant);
     }},
    {{"zipfian_const", "the same as zipfianconstant (YCSB-cpp's name); zipfianconstant wins"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseNonNegative(name, value, &spec->zipfian_constant);
     }},
    {{"dmidx.zipfian",
      "dmidx: which zipfian requestdistribution=zipfian draws: ycsb (YCSB's scrambled zipfian "
      "over 10^10 ranks, the default) or exact (over the keys themselves, as Sherman's "
      "benchmark; not YCSB's, and Sherman's mixes' default)"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseZipfian(name, value, &spec->zipfian);
     }},
    {{"hotspotdatafraction", "hotspot: share of the keys that are hot, in [0, 1] (default 0.2)"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseNonNegative(name, value, &spec->hotspot_data_fraction);
     }},
    {{"hotspotopnfraction",
      "hotspot: share of the operations on hot keys, in [0, 1] (default 0.8)"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseNonNegative(name, value, &spec->hotspot_operation_fraction);
     }},
    {{"minscanlength", "shortest scan, in keys (default 1)"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseUint32(name, value, &spec->min_scan_length);
     }},
    {{"maxscanlength", "longest scan, in keys (default 100; YCSB's is 1000)"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseUint32(name, value, &spec->max_scan_length);
     }},
    {{"scanlengthdistribution", "scan lengths: uniform, or zipfian (shorter more likely)"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseScanLengthDistribution(name, value, &spec->scan_length_distribution);
     }},
    {{"insertorder", "hashed (key numbers hashed over the key space) or ordered"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes*) {
       return ParseInsertOrder(name, value, &spec->ordered_inserts);
     }},
    {{"fieldcount", "recorded only: every value is 8 bytes"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes* notes) {
       DMIDX_RETURN_IF_ERROR(ParseUint32(name, value, &spec->field_count));
       notes->push_back("property fieldcount=" + std::string(value) +
                        " recorded, but every value is one 8-byte field");
       return Status::Ok();
     }},
    {{"fieldlength", "recorded only: every value is 8 bytes"},
     [](std::string_view name, std::string_view value, WorkloadSpec* spec, Notes* notes) {
       DMIDX_RETURN_IF_ERROR(ParseUint32(name, value, &spec->field_length));
       notes->push_back("property fieldlength=" + std::string(value) +
                        " recorded, but values stay 8 bytes");
       return Status::Ok();
     }},
    {{"workload", "ignored: the mix comes from the proportions"}, nullptr},
    {{"readallfields", "ignored: a read returns the key's one 8-byte value"}, nullptr},
    {{"readallfieldsbyname", "ignored: values have no fields"}, nullptr},
    {{"writeallfields", "ignored: an update writes the key's one 8-byte value"}, nullptr},
    {{"fieldlengthdistribution", "ignored: values are 8 bytes"}, nullptr},
    {{"minfieldlength", "ignored: values are 8 bytes"}, nullptr},
    {{"fieldlengthhistogram", "ignored: values are 8 bytes"}, nullptr},
    {{"fieldnameprefix", "ignored: values have no fields"}, nullptr},
    {{"zeropadding", "ignored: --key-type and --key-bytes decide key text"}, nullptr},
    {{"threadcount", "ignored: use --threads and --coroutines"}, nullptr},
    {{"target", "ignored: use --target-rate"}, nullptr},
    {{"maxexecutiontime", "ignored: use --duration"}, nullptr},
    {{"measurementtype", "ignored: latencies always go to dmidx-ycsb's histograms"}, nullptr},
    {{"histogram.buckets", "ignored: latencies always go to dmidx-ycsb's histograms"}, nullptr},
    {{"hdrhistogram.percentiles", "ignored: the report has fixed percentiles"}, nullptr},
    {{"status.interval", "ignored: progress is printed to stderr (--quiet: none)"}, nullptr},
    {{"exporter", "ignored: dmidx-ycsb writes its own report"}, nullptr},
    {{"exportfile", "ignored: dmidx-ycsb writes its own report"}, nullptr},
    {{"table", "ignored: the index is chosen on the command line"}, nullptr},
    {{"dataintegrity", "ignored: values are not verified"}, nullptr},
    {{"core_workload_insertion_retry_limit", "ignored: a failed insert ends the run"}, nullptr},
    {{"core_workload_insertion_retry_interval", "ignored: a failed insert ends the run"}, nullptr},
    {{"db", "ignored: the index is chosen on the command line"}, nullptr},
};

constexpr auto kDocs = [] {
  std::array<PropertyDoc, std::size(kRules)> docs{};
  for (size_t i = 0; i < std::size(kRules); ++i)
    docs[i] = kRules[i].doc;
  return docs;
}();

const PropertyRule* FindRule(std::string_view name) {
  for (const PropertyRule& rule : kRules) {
    if (rule.doc.name == name) return &rule;
  }
  return nullptr;
}

Status ApplyOne(const std::string& name, const std::string& value, WorkloadSpec* spec,
                Notes* notes) {
  const PropertyRule* rule = FindRule(name);
  if (rule == nullptr) {
    notes->push_back("unknown property '" + name + "' ignored");
    return Status::Ok();
  }
  if (rule->apply == nullptr) {
    notes->push_back("property " + name + " " + std::string(rule->doc.help));
    return Status::Ok();
  }
  return rule->apply(name, value, spec, notes);
}

}  // namespace

std::span<const PropertyDoc> KnownProperties() {
  return kDocs;
}

Status ApplyProperties(const Properties& properties, WorkloadSpec* spec,
                       std::vector<std::string>* notes) {
  // Applied to copies, so that an error leaves *spec and *notes as they were.
  WorkloadSpec updated = *spec;
  Notes new_notes;
  for (const auto& [name, value] : properties.values()) {
    // The alias first, so that the canonical name, applied after it, wins.
    if (name == "zipfianconstant") continue;
    DMIDX_RETURN_IF_ERROR(ApplyOne(name, value, &updated, &new_notes));
  }
  if (auto it = properties.values().find("zipfianconstant"); it != properties.values().end()) {
    DMIDX_RETURN_IF_ERROR(ApplyOne(it->first, it->second, &updated, &new_notes));
  }
  DMIDX_RETURN_IF_ERROR(updated.Validate());
  *spec = std::move(updated);
  notes->insert(notes->end(), std::make_move_iterator(new_notes.begin()),
                std::make_move_iterator(new_notes.end()));
  return Status::Ok();
}

}  // namespace dmidx::bench
