#include "lib/fabric/verbs/handshake.h"

#include <memory>
#include <optional>
#include <string>

namespace dmidx::fabric::verbs {

class InProcessHandshake::Inbox final : public HandshakeInbox {
 public:
  StatusOr<std::vector<HandshakeRequest>> Take() override {
    std::lock_guard<std::mutex> guard(mutex_);
    std::vector<HandshakeRequest> taken(pending_.begin(), pending_.end());
    pending_.clear();
    return taken;
  }

  Status Answer(const HandshakeRequest& request, const StatusOr<QpInfo>& reply) override {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      answers_.insert_or_assign(request.id, reply);
    }
    answered_.notify_all();
    return Status::Ok();
  }

  StatusOr<QpInfo> Call(HandshakeRequest request, uint16_t node,
                        std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    request.id = ++next_id_;
    pending_.push_back(request);
    const bool answered =
        answered_.wait_for(lock, timeout, [&] { return answers_.count(request.id) != 0; });
    if (!answered) {
      std::erase_if(pending_, [&](const HandshakeRequest& r) { return r.id == request.id; });
      return Status::Unavailable("memory node " + std::to_string(node) +
                                 " did not answer a connection request within " +
                                 std::to_string(timeout.count()) + " ms");
    }
    auto it = answers_.find(request.id);
    StatusOr<QpInfo> reply = it->second;
    answers_.erase(it);
    return reply;
  }

 private:
  std::mutex mutex_;
  std::condition_variable answered_;
  std::deque<HandshakeRequest> pending_;          // guarded by mutex_
  std::map<uint64_t, StatusOr<QpInfo>> answers_;  // guarded by mutex_
  uint64_t next_id_ = 0;                          // guarded by mutex_
};

InProcessHandshake::InProcessHandshake() = default;
InProcessHandshake::~InProcessHandshake() = default;

HandshakeInbox* InProcessHandshake::inbox(uint16_t node) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto& inbox = inboxes_[node];
  if (!inbox) inbox = std::make_unique<Inbox>();
  return inbox.get();
}

StatusOr<QpInfo> InProcessHandshake::Connect(uint16_t node, ConnectionKind kind,
                                             uint32_t compute_node, const QpInfo& local,
                                             std::chrono::milliseconds timeout) {
  auto* box = static_cast<Inbox*>(inbox(node));
  HandshakeRequest request;
  request.kind = kind;
  request.compute_node = compute_node;
  request.qp = local;
  return box->Call(request, node, timeout);
}

}  // namespace dmidx::fabric::verbs
