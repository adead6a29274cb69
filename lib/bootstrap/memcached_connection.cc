#include "lib/bootstrap/memcached_connection.h"

#include <libmemcached/memcached.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <utility>

namespace dmidx::bootstrap {

namespace {

using std::chrono::milliseconds;

// Counters are created by add, then incremented; only eviction or a flush
// between the two makes a retry necessary.
constexpr int kCounterAttempts = 8;

bool IsConnectivityFailure(memcached_return_t rc) {
  switch (rc) {
    case MEMCACHED_HOST_LOOKUP_FAILURE:
    case MEMCACHED_CONNECTION_FAILURE:
    case MEMCACHED_CONNECTION_BIND_FAILURE:
    case MEMCACHED_WRITE_FAILURE:
    case MEMCACHED_READ_FAILURE:
    case MEMCACHED_UNKNOWN_READ_FAILURE:
    case MEMCACHED_PARTIAL_READ:
    case MEMCACHED_ERRNO:
    case MEMCACHED_TIMEOUT:
    case MEMCACHED_NO_SERVERS:
    case MEMCACHED_SERVER_MARKED_DEAD:
    case MEMCACHED_SERVER_TEMPORARILY_DISABLED:
    case MEMCACHED_FAIL_UNIX_SOCKET:
    case MEMCACHED_IN_PROGRESS:
      return true;
    default:
      return false;
  }
}

}  // namespace

// `text` for an error message: non-printable bytes as \xNN, at most 80 bytes.
std::string Quoted(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < 80; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x20 && byte < 0x7f) {
      out += static_cast<char>(byte);
    } else {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
  }
  if (text.size() > 80) out += "...";
  return out + "'";
}

// "30 s", "1.5 s", "250 ms".
std::string FormatDuration(milliseconds duration) {
  const int64_t ms = duration.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  if (ms < 1000) return std::to_string(ms) + " ms";
  std::string fraction = std::to_string(1000 + ms % 1000).substr(1);
  while (fraction.back() == '0')
    fraction.pop_back();
  return std::to_string(ms / 1000) + "." + fraction + " s";
}

void MemcachedConnection::Free::operator()(memcached_st* handle) const {
  memcached_free(handle);
}

StatusOr<std::unique_ptr<MemcachedConnection>> MemcachedConnection::Open(
    const ServerAddress& server, const BootstrapOptions& options) {
  memcached_st* raw = memcached_create(nullptr);
  if (raw == nullptr) return Status::ResourceExhausted("memcached_create failed");
  std::unique_ptr<MemcachedConnection> connection(new MemcachedConnection(server, options, raw));
  const auto request_ms = static_cast<uint64_t>(options.operation_timeout.count());
  const std::pair<memcached_behavior_t, uint64_t> behaviors[] = {
      {MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, static_cast<uint64_t>(options.connect_timeout.count())},
      {MEMCACHED_BEHAVIOR_POLL_TIMEOUT, request_ms},
      {MEMCACHED_BEHAVIOR_SND_TIMEOUT, request_ms * 1000},
      {MEMCACHED_BEHAVIOR_RCV_TIMEOUT, request_ms * 1000},
      {MEMCACHED_BEHAVIOR_TCP_NODELAY, 1},
      // After a failure libmemcached reports the server as disabled until
      // this many seconds have passed; 0 retries from the next wall-clock
      // second on (instead of 2 s): a bootstrap has only this one server.
      {MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, 0},
  };
  for (const auto& [behavior, value] : behaviors) {
    const memcached_return_t rc = memcached_behavior_set(raw, behavior, value);
    if (rc != MEMCACHED_SUCCESS) {
      return Status::Internal("memcached_behavior_set(" + std::to_string(behavior) +
                              ") failed: " + memcached_strerror(raw, rc));
    }
  }
  const memcached_return_t rc = memcached_server_add(raw, server.host.c_str(), server.port);
  if (rc != MEMCACHED_SUCCESS) {
    return Status::InvalidArgument("memcached server " + server.ToString() +
                                   " rejected: " + memcached_strerror(raw, rc));
  }
  return connection;
}

Status MemcachedConnection::Failure(int code, std::string_view request,
                                    std::string_view key) const {
  const auto rc = static_cast<memcached_return_t>(code);
  // libmemcached's own last_error_message carries a pointer and a source
  // location; the code's name and errno say the same more plainly.
  std::string context =
      std::string(request) + " " + Quoted(key) + ": " + memcached_strerror(handle_.get(), rc);
  if (const int error = memcached_last_error_errno(handle_.get()); error != 0) {
    context += " (" + std::string(std::strerror(error)) + ")";
  }
  if (rc == MEMCACHED_TIMEOUT) {  // libmemcached does not say which of the two expired
    context += " (connect_timeout " + FormatDuration(connect_timeout_) + ", operation_timeout " +
               FormatDuration(operation_timeout_) + ")";
  }
  if (IsConnectivityFailure(rc)) {
    return Status::Unavailable("memcached at " + server_.ToString() + " unreachable: " + context);
  }
  if (rc == MEMCACHED_E2BIG) {
    return Status::ResourceExhausted(
        "memcached at " + server_.ToString() +
        " refused a value larger than its item size limit: " + context);
  }
  return Status::Internal("memcached at " + server_.ToString() + " failed " + context);
}

StatusOr<std::optional<std::string>> MemcachedConnection::Get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t length = 0;
  uint32_t flags = 0;
  memcached_return_t rc = MEMCACHED_SUCCESS;
  // libmemcached returns a malloc'ed copy.
  std::unique_ptr<char, decltype(&std::free)> value(
      memcached_get(handle_.get(), key.data(), key.size(), &length, &flags, &rc), &std::free);
  if (rc == MEMCACHED_NOTFOUND) return std::optional<std::string>();
  if (rc != MEMCACHED_SUCCESS) return Failure(rc, "get", key);
  return std::optional<std::string>(value ? std::string(value.get(), length) : std::string());
}

StatusOr<std::vector<std::optional<std::string>>> MemcachedConnection::MultiGet(
    const std::vector<std::string>& keys) {
  if (keys.empty()) return std::vector<std::optional<std::string>>();
  std::vector<const char*> key_data;
  std::vector<size_t> key_sizes;
  for (const std::string& key : keys) {
    key_data.push_back(key.data());
    key_sizes.push_back(key.size());
  }
  std::lock_guard<std::mutex> lock(mutex_);
  memcached_return_t rc =
      memcached_mget(handle_.get(), key_data.data(), key_sizes.data(), keys.size());
  if (rc != MEMCACHED_SUCCESS) return Failure(rc, "mget", keys.empty() ? "" : keys.front());
  // Caller-owned storage: memcached_fetch_result frees a result that
  // libmemcached allocated itself once the replies are exhausted, but only
  // resets one it was given, which the guard then frees once.
  memcached_result_st storage;
  memcached_result_st* result = memcached_result_create(handle_.get(), &storage);
  if (result == nullptr) return Status::ResourceExhausted("memcached_result_create failed");
  const std::unique_ptr<memcached_result_st, decltype(&memcached_result_free)> guard(
      result, &memcached_result_free);
  std::vector<std::optional<std::string>> values(keys.size());
  while (memcached_fetch_result(handle_.get(), result, &rc) != nullptr) {
    const std::string_view key(memcached_result_key_value(result),
                               memcached_result_key_length(result));
    const auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) continue;
    values[it - keys.begin()].emplace(memcached_result_value(result),
                                      memcached_result_length(result));
  }
  if (rc != MEMCACHED_END && rc != MEMCACHED_NOTFOUND && rc != MEMCACHED_SUCCESS) {
    return Failure(rc, "mget", keys.front());
  }
  return values;
}

Status MemcachedConnection::Set(const std::string& key, std::string_view value,
                                std::chrono::seconds expiry) {
  std::lock_guard<std::mutex> lock(mutex_);
  const memcached_return_t rc =
      memcached_set(handle_.get(), key.data(), key.size(), value.data(), value.size(),
                    static_cast<time_t>(expiry.count()), /*flags=*/0);
  if (rc == MEMCACHED_SUCCESS) return Status::Ok();
  return Failure(rc, "set (" + std::to_string(value.size()) + " bytes)", key);
}

StatusOr<uint64_t> MemcachedConnection::Increment(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int attempt = 0; attempt < kCounterAttempts; ++attempt) {
    uint64_t value = 0;
    memcached_return_t rc = memcached_increment(handle_.get(), key.data(), key.size(), 1, &value);
    if (rc == MEMCACHED_SUCCESS) return value;
    if (rc == MEMCACHED_CLIENT_ERROR) {  // "cannot increment or decrement non-numeric value"
      return Status::FailedPrecondition("key " + Quoted(key) +
                                        " holds a value that is not a decimal counter");
    }
    if (rc != MEMCACHED_NOTFOUND) return Failure(rc, "increment", key);
    // The counter does not exist: create it holding 1, which is this
    // increment. add is atomic, so when several nodes race here exactly one
    // succeeds; the others get NOTSTORED (DATA_EXISTS on the binary protocol)
    // and increment the counter the winner created.
    rc = memcached_add(handle_.get(), key.data(), key.size(), "1", 1, /*expiration=*/0,
                       /*flags=*/0);
    if (rc == MEMCACHED_SUCCESS) return uint64_t{1};
    if (rc != MEMCACHED_NOTSTORED && rc != MEMCACHED_DATA_EXISTS) return Failure(rc, "add", key);
  }
  return Status::Internal("counter " + Quoted(key) + " vanished " +
                          std::to_string(kCounterAttempts) +
                          " times between add and increment (is memcached evicting or flushing?)");
}

Status MemcachedConnection::Delete(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  const memcached_return_t rc = memcached_delete(handle_.get(), key.data(), key.size(), 0);
  if (rc == MEMCACHED_SUCCESS || rc == MEMCACHED_NOTFOUND) return Status::Ok();
  return Failure(rc, "delete", key);
}

}  // namespace dmidx::bootstrap
