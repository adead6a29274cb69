#include "testing/memcached_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

extern char** environ;

namespace dmidx::testing {
namespace {

constexpr auto kStartTimeout = std::chrono::seconds(10);

// The port memcached wrote to its port file ("TCP INET: 40123"), or 0.
uint16_t ReadPortFile(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    unsigned port = 0;
    if (std::sscanf(line.c_str(), "TCP INET: %u", &port) == 1 && port > 0 && port < 65536) {
      return static_cast<uint16_t>(port);
    }
  }
  return 0;
}

bool Accepts(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return connected;
}

}  // namespace

std::string MemcachedServer::FindBinary() {
  const char* path = std::getenv("PATH");
  std::stringstream directories(path != nullptr ? path : "/usr/bin:/bin");
  std::string directory;
  while (std::getline(directories, directory, ':')) {
    std::string candidate = (directory.empty() ? "." : directory) + "/memcached";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::unique_ptr<MemcachedServer> MemcachedServer::Start(std::string* error, uint16_t port) {
  const std::string binary = FindBinary();
  if (binary.empty()) {
    *error = "no memcached binary in PATH";
    return nullptr;
  }
  char directory_template[] = "/tmp/dmidx-memcached-XXXXXX";
  if (mkdtemp(directory_template) == nullptr) {
    *error = std::string("mkdtemp: ") + std::strerror(errno);
    return nullptr;
  }
  const std::string directory = directory_template;
  const std::string port_file = directory + "/ports";

  // Everything the child needs is built before fork: after fork in a
  // threaded process only async-signal-safe calls are allowed.
  std::vector<std::string> args = {
      binary, "-l", "127.0.0.1", "-p", port == 0 ? "-1" : std::to_string(port),
      "-U",   "0",  "-t",        "2",  "-m",
      "16",   "-c", "256"};
  if (geteuid() == 0) {  // memcached refuses to run as root without -u
    const passwd* user = getpwuid(0);
    args.insert(args.end(), {"-u", user != nullptr ? user->pw_name : "root"});
  }
  std::vector<std::string> env_strings = {"MEMCACHED_PORT_FILENAME=" + port_file};
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (std::strncmp(*entry, "MEMCACHED_PORT_FILENAME=", 24) != 0) env_strings.push_back(*entry);
  }
  std::vector<char*> argv;
  for (std::string& arg : args)
    argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& entry : env_strings)
    envp.push_back(entry.data());
  envp.push_back(nullptr);

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    std::error_code ignored;
    std::filesystem::remove_all(directory, ignored);
    return nullptr;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);     // die with the test
    if (getppid() != parent) _exit(127);  // the test already died
    const int null_fd = open("/dev/null", O_WRONLY);
    if (null_fd >= 0) dup2(null_fd, STDOUT_FILENO);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  std::unique_ptr<MemcachedServer> server(new MemcachedServer(pid, directory));
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      server->pid_ = -1;
      *error = "memcached exited during start-up with status " + std::to_string(status);
      return nullptr;
    }
    // memcached writes the file under a temporary name and renames it, so a
    // file that exists is complete.
    server->port_ = ReadPortFile(port_file);
    if (server->port_ != 0 && Accepts(server->port_)) return server;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  *error = "memcached did not accept connections within 10 s";
  return nullptr;
}

MemcachedServer::~MemcachedServer() {
  Kill();
  std::error_code ignored;
  std::filesystem::remove_all(directory_, ignored);
}

std::string MemcachedServer::address() const {
  return "127.0.0.1:" + std::to_string(port_);
}

void MemcachedServer::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

LocalPort::LocalPort(Kind kind) {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = 0;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0 ||
      (kind == Kind::kSilent && listen(fd_, 16) != 0) ||
      (kind == Kind::kFull && listen(fd_, 0) != 0)) {
    close(fd_);
    fd_ = -1;
    return;
  }
  port_ = ntohs(address.sin_port);
  if (kind == Kind::kFull) {
    // A backlog of 0 holds one unaccepted connection; this is it.
    filler_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (filler_fd_ < 0 ||
        connect(filler_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
}

LocalPort::~LocalPort() {
  if (filler_fd_ >= 0) close(filler_fd_);
  if (fd_ >= 0) close(fd_);
}

std::string LocalPort::address() const {
  return "127.0.0.1:" + std::to_string(port_);
}

}  // namespace dmidx::testing
