#include "bench/ack_log.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace dmidx::bench {

namespace {

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    out += kDigits[static_cast<uint8_t>(c) >> 4];
    out += kDigits[static_cast<uint8_t>(c) & 15];
  }
  return out;
}

std::optional<std::string> FromHex(std::string_view text) {
  if (text.size() % 2 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < text.size(); i += 2) {
    int byte = 0;
    for (size_t j = i; j < i + 2; ++j) {
      const char c = text[j];
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0) return std::nullopt;
      byte = byte * 16 + digit;
    }
    out += static_cast<char>(byte);
  }
  return out;
}

std::string Describe(const AckRecord& record) {
  const char* what = record.kind == 'D' ? "delete" : record.kind == 'F' ? "failed write" : "write";
  std::string text = std::string(what);
  if (record.kind != 'D') text += " of " + std::to_string(record.value);
  const std::optional<WriteOrigin> origin = OriginOf(record.value);
  if (origin) {
    text += " (phase " + std::to_string(origin->phase) + ", context " +
            std::to_string(origin->context) + ", op " + std::to_string(origin->ordinal) + ")";
  }
  return text + " [" + std::to_string(record.start_ns) + ", " + std::to_string(record.end_ns) +
         "] ns";
}

}  // namespace

uint64_t UniqueWriteValue(uint32_t phase, uint64_t context, uint64_t ordinal) {
  return (uint64_t{phase + 1} << 60) | ((context % kMaxWriteContexts) << 40) |
         (ordinal & kMaxWriteOrdinal);
}

std::optional<WriteOrigin> OriginOf(uint64_t value) {
  const uint64_t mark = value >> 60;
  if (mark == 0) return std::nullopt;
  return WriteOrigin{static_cast<uint32_t>(mark - 1), (value >> 40) % kMaxWriteContexts,
                     value & kMaxWriteOrdinal};
}

int64_t RealtimeNanoseconds() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

StatusOr<std::unique_ptr<AckLogWriter>> AckLogWriter::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError("--ack-log: cannot write " + path + ": " + strerror(errno));
  return std::unique_ptr<AckLogWriter>(new AckLogWriter(path, fd));
}

AckLogWriter::~AckLogWriter() {
  close(fd_);
}

Status AckLogWriter::Append(const AckRecord& record) {
  char numbers[96];
  std::snprintf(numbers, sizeof(numbers), " %" PRIu64 " %" PRId64 " %" PRId64 "\n", record.value,
                record.start_ns, record.end_ns);
  const std::string line = std::string(1, record.kind) + " " + Hex(record.key) + numbers;
  // One write(2) a record: what the kernel took survives a SIGKILL.
  const ssize_t wrote = write(fd_, line.data(), line.size());
  if (wrote != static_cast<ssize_t>(line.size())) {
    return Status::IoError("--ack-log: writing " + path_ +
                           " failed: " + (wrote < 0 ? strerror(errno) : "short write"));
  }
  return Status::Ok();
}

StatusOr<std::vector<AckRecord>> ReadAckLog(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("--ack-log: cannot read " + path);
  std::vector<AckRecord> records;
  std::string line;
  for (uint64_t number = 1; std::getline(in, line); ++number) {
    char kind = 0;
    char key[1024];
    AckRecord record;
    int used = 0;
    const bool parsed =
        line.size() < sizeof(key) &&
        std::sscanf(line.c_str(), "%c %1023s %" SCNu64 " %" SCNd64 " %" SCNd64 "%n", &kind, key,
                    &record.value, &record.start_ns, &record.end_ns, &used) == 5 &&
        static_cast<size_t>(used) == line.size() && (kind == 'W' || kind == 'D' || kind == 'F');
    std::optional<std::string> bytes = parsed ? FromHex(key) : std::nullopt;
    if (!bytes) {
      return Status::InvalidArgument("--ack-log: " + path + ":" + std::to_string(number) +
                                     ": not a record (KIND HEXKEY VALUE START END): " + line);
    }
    record.kind = kind;
    record.key = std::move(*bytes);
    records.push_back(std::move(record));
  }
  return records;
}

void AckCheck::Add(const AckRecord& record) {
  by_key_[record.key].push_back(record);
  if (record.kind == 'D') deletes_ = true;
  if (const std::optional<WriteOrigin> origin = OriginOf(record.value)) {
    uint64_t& last = last_logged_[{origin->phase, origin->context}];
    last = std::max(last, origin->ordinal);
  }
}

std::vector<std::string> AckCheck::Keys() const {
  std::vector<std::string> keys;
  for (const auto& [key, records] : by_key_) {
    if (std::any_of(records.begin(), records.end(),
                    [](const AckRecord& r) { return r.kind != 'F'; }))
      keys.push_back(key);
  }
  return keys;
}

bool AckCheck::PendingOfDead(uint64_t value, const std::set<uint32_t>& dead) const {
  const std::optional<WriteOrigin> origin = OriginOf(value);
  if (!origin || contexts_per_node_ == 0) return false;
  if (!dead.contains(static_cast<uint32_t>(origin->context / contexts_per_node_))) return false;
  // Its context's operations run one at a time: one past every line the
  // context logged in that phase, or in a later phase, was still pending.
  for (const auto& [phase_context, last] : last_logged_) {
    if (phase_context.second != origin->context) continue;
    if (phase_context.first > origin->phase) return false;
    if (phase_context.first == origin->phase && origin->ordinal <= last) return false;
  }
  return true;
}

std::string AckCheck::Verify(const std::string& key, std::optional<uint64_t> read,
                             const std::set<uint32_t>& dead) const {
  const auto found = by_key_.find(key);
  if (found == by_key_.end()) return "";
  const std::vector<AckRecord>& records = found->second;
  // The latest start of an acknowledged change: a write that ended before
  // it was overwritten by it.
  int64_t latest_start = INT64_MIN;
  const AckRecord* last = nullptr;
  for (const AckRecord& r : records) {
    if (r.kind == 'F') continue;
    latest_start = std::max(latest_start, r.start_ns);
    if (last == nullptr || r.end_ns > last->end_ns) last = &r;
  }
  if (last == nullptr) return "";
  for (const AckRecord& r : records) {
    const bool matches = read ? r.kind != 'D' && r.value == *read : r.kind == 'D';
    if (matches && (r.kind == 'F' || r.end_ns >= latest_start)) return "";
  }
  if (read && PendingOfDead(*read, dead)) return "";
  if (!read && deletes_ && !dead.empty()) return "";  // a dead node's pending delete
  std::string problem = "key " + Hex(key) + ": ";
  if (!read) {
    problem += "not found";
  } else {
    problem += "reads " + std::to_string(*read);
    const auto older = std::find_if(records.begin(), records.end(), [&](const AckRecord& r) {
      return r.kind != 'D' && r.value == *read;
    });
    if (older != records.end()) {
      problem += ", the " + Describe(*older) + ", overwritten by a later acknowledged change";
    } else if (OriginOf(*read)) {
      problem += ", a write no log acknowledged and no dead node had pending";
    } else {
      problem += ", a value no logged write wrote (the load's?)";
    }
  }
  return problem + "; the last acknowledged change is the " + Describe(*last) + " (" +
         std::to_string(records.size()) + " logged changes of the key)";
}

}  // namespace dmidx::bench
