// One libmemcached connection for the bootstrap, and the message helpers the
// bootstrap shares with it. Only this file's .cc includes libmemcached.
#ifndef DMIDX_BOOTSTRAP_MEMCACHED_CONNECTION_H_
#define DMIDX_BOOTSTRAP_MEMCACHED_CONNECTION_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dmidx/status.h"
#include "lib/bootstrap/memcached_bootstrap.h"

struct memcached_st;

namespace dmidx::bootstrap {

// `text` for an error message: non-printable bytes as \xNN, at most 80 bytes.
std::string Quoted(std::string_view text);

// "30 s", "1.5 s", "250 ms".
std::string FormatDuration(std::chrono::milliseconds duration);

// One libmemcached handle. libmemcached handles are not thread-safe, so
// every request takes mutex_ for its whole exchange.
class MemcachedConnection {
 public:
  static StatusOr<std::unique_ptr<MemcachedConnection>> Open(const ServerAddress& server,
                                                             const BootstrapOptions& options);

  // The value of `key`, or nullopt if absent.
  StatusOr<std::optional<std::string>> Get(const std::string& key);
  // The values of distinct `keys`, in order, in one round trip.
  StatusOr<std::vector<std::optional<std::string>>> MultiGet(const std::vector<std::string>& keys);
  // Stores `value`; `expiry` zero means never.
  Status Set(const std::string& key, std::string_view value, std::chrono::seconds expiry);
  // Adds 1 to the decimal counter `key`, creating it if missing; returns the
  // new value, so the first caller gets 1.
  StatusOr<uint64_t> Increment(const std::string& key);
  // Deletes `key`; OK if it is absent.
  Status Delete(const std::string& key);

 private:
  struct Free {
    void operator()(memcached_st* handle) const;
  };

  MemcachedConnection(ServerAddress server, const BootstrapOptions& options, memcached_st* handle)
      : server_(std::move(server)),
        connect_timeout_(options.connect_timeout),
        operation_timeout_(options.operation_timeout),
        handle_(handle) {}

  // The Status for a failed request. Requires mutex_.
  Status Failure(int rc, std::string_view request, std::string_view key) const;

  const ServerAddress server_;
  const std::chrono::milliseconds connect_timeout_;
  const std::chrono::milliseconds operation_timeout_;
  std::mutex mutex_;
  std::unique_ptr<memcached_st, Free> handle_;  // guarded by mutex_
};

}  // namespace dmidx::bootstrap

#endif  // DMIDX_BOOTSTRAP_MEMCACHED_CONNECTION_H_
