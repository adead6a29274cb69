// Test helpers: a private memcached server on 127.0.0.1, and local ports
// where nothing (or nothing useful) answers.
#ifndef DMIDX_TESTING_MEMCACHED_SERVER_H_
#define DMIDX_TESTING_MEMCACHED_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

namespace dmidx::testing {

// A memcached child process listening on 127.0.0.1 on a port the kernel
// picks (memcached reports it through MEMCACHED_PORT_FILENAME), so parallel
// tests never race for a port. Killed on destruction, and by the kernel if
// the test process dies first.
class MemcachedServer {
 public:
  // The memcached binary from PATH, or "" if there is none.
  static std::string FindBinary();

  // Starts a server and waits until it accepts connections. On failure
  // returns null and sets *error. `port` 0 lets the kernel pick one; a fixed
  // port is for restarting a killed server where it was.
  static std::unique_ptr<MemcachedServer> Start(std::string* error, uint16_t port = 0);

  MemcachedServer(const MemcachedServer&) = delete;
  MemcachedServer& operator=(const MemcachedServer&) = delete;
  ~MemcachedServer();

  uint16_t port() const { return port_; }
  // "127.0.0.1:<port>".
  std::string address() const;
  // Kills the server now (SIGKILL), as a crash would.
  void Kill();

 private:
  MemcachedServer(pid_t pid, std::string directory) : pid_(pid), directory_(std::move(directory)) {}

  pid_t pid_ = -1;
  uint16_t port_ = 0;
  std::string directory_;  // holds the port file
};

// A socket bound to 127.0.0.1 on a kernel-chosen port, in one of three
// states:
//   kClosed   never listens: connections are refused (and no other process
//             can take the port while this object exists);
//   kSilent   listens but never accepts or answers: the kernel completes the
//             handshake, requests then time out;
//   kFull     listens with a full accept queue: the kernel drops new SYNs,
//             so connect itself hangs until the client gives up.
class LocalPort {
 public:
  enum class Kind { kClosed, kSilent, kFull };
  explicit LocalPort(Kind kind);
  LocalPort(const LocalPort&) = delete;
  LocalPort& operator=(const LocalPort&) = delete;
  ~LocalPort();

  bool ok() const { return fd_ >= 0; }
  uint16_t port() const { return port_; }
  // "127.0.0.1:<port>".
  std::string address() const;

 private:
  int fd_ = -1;
  int filler_fd_ = -1;  // kFull: the connection that fills the accept queue
  uint16_t port_ = 0;
};

}  // namespace dmidx::testing

#endif  // DMIDX_TESTING_MEMCACHED_SERVER_H_
