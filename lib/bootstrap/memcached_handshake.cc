#include "lib/bootstrap/memcached_handshake.h"

#include <cstring>
#include <string>

namespace dmidx::bootstrap {

namespace {

using fabric::verbs::ConnectionKind;
using fabric::verbs::HandshakeRequest;
using fabric::verbs::QpInfo;

// Request record: kind, compute node, QpInfo.
struct RequestRecord {
  uint32_t kind;
  uint32_t compute_node;
  QpInfo qp;
};
static_assert(sizeof(RequestRecord) == 40);

// Reply record: status code and detail (StatusDetail: kFenced when the
// memory node refuses a fenced compute node), QpInfo, then the error
// message (if any).
struct ReplyHeader {
  uint32_t code;
  uint32_t detail;
  QpInfo qp;
};
static_assert(sizeof(ReplyHeader) == 40);

std::string Mailbox(uint16_t node, std::string_view what) {
  return "hs/" + std::to_string(node) + "/" + std::string(what);
}

template <typename T>
std::string_view Bytes(const T& value) {
  return {reinterpret_cast<const char*>(&value), sizeof(T)};
}

}  // namespace

std::string RegionsRecord(uint16_t node) {
  return "mn/" + std::to_string(node) + "/regions";
}

Status PublishRegions(MemcachedBootstrap* bootstrap, const fabric::verbs::RegionInfo& regions) {
  return bootstrap->Put(RegionsRecord(static_cast<uint16_t>(regions.node_id)),
                        std::string_view(reinterpret_cast<const char*>(&regions), sizeof(regions)));
}

StatusOr<fabric::verbs::RegionInfo> ReadRegions(MemcachedBootstrap* bootstrap, uint16_t node) {
  StatusOr<std::string> record = bootstrap->Get(RegionsRecord(node));
  if (!record.ok()) return record.status();
  fabric::verbs::RegionInfo info;
  if (record->size() != sizeof(info)) {
    return Status::Internal("memory node " + std::to_string(node) +
                            " published a malformed region record");
  }
  std::memcpy(&info, record->data(), sizeof(info));
  if (info.node_id != node) {
    return Status::Internal("the region record of memory node " + std::to_string(node) +
                            " names node " + std::to_string(info.node_id));
  }
  return info;
}

StatusOr<QpInfo> MemcachedHandshake::Connect(uint16_t node, ConnectionKind kind,
                                             uint32_t compute_node, const QpInfo& local,
                                             std::chrono::milliseconds timeout) {
  DMIDX_ASSIGN_OR_RETURN(uint64_t index, bootstrap_->Increment(Mailbox(node, "requests")));
  const RequestRecord request{static_cast<uint32_t>(kind), compute_node, local};
  const std::string id = std::to_string(index);
  DMIDX_RETURN_IF_ERROR(bootstrap_->Put(Mailbox(node, "request/" + id), Bytes(request)));
  StatusOr<std::string> reply = bootstrap_->Get(Mailbox(node, "reply/" + id), timeout);
  if (!reply.ok()) {
    if (reply.status().code() == StatusCode::kDeadlineExceeded) {
      return Status::Unavailable("memory node " + std::to_string(node) +
                                 " did not answer connection request " + id + ": " +
                                 std::string(reply.status().message()));
    }
    return reply.status();
  }
  if (reply->size() < sizeof(ReplyHeader)) {
    return Status::Internal("malformed connection reply from memory node " + std::to_string(node));
  }
  ReplyHeader header;
  std::memcpy(&header, reply->data(), sizeof(header));
  if (header.code != 0) {
    return Status(static_cast<StatusCode>(header.code),
                  "memory node " + std::to_string(node) +
                      " refused the connection: " + reply->substr(sizeof(header)),
                  static_cast<StatusDetail>(header.detail));
  }
  return header.qp;
}

StatusOr<std::vector<HandshakeRequest>> MemcachedHandshakeInbox::Take() {
  std::vector<HandshakeRequest> requests;
  StatusOr<std::string> counter = bootstrap_->TryGet(Mailbox(node_, "requests"));
  if (!counter.ok()) {
    if (counter.status().IsNotFound()) return requests;
    return counter.status();
  }
  const uint64_t issued = ParseCounter(*counter).value_or(0);
  while (answered_ < issued) {
    const uint64_t index = answered_ + 1;
    // The client increments the counter before it writes the request, so
    // the record may lag a little behind.
    StatusOr<std::string> record = bootstrap_->Get(
        Mailbox(node_, "request/" + std::to_string(index)), std::chrono::milliseconds(2000));
    answered_ = index;
    if (!record.ok() || record->size() != sizeof(RequestRecord)) continue;  // client gave up
    RequestRecord raw;
    std::memcpy(&raw, record->data(), sizeof(raw));
    HandshakeRequest request;
    request.id = index;
    request.kind = static_cast<ConnectionKind>(raw.kind);
    request.compute_node = raw.compute_node;
    request.qp = raw.qp;
    requests.push_back(request);
  }
  return requests;
}

Status MemcachedHandshakeInbox::Answer(const HandshakeRequest& request,
                                       const StatusOr<QpInfo>& reply) {
  ReplyHeader header{};
  std::string message;
  if (reply.ok()) {
    header.qp = *reply;
  } else {
    header.code = static_cast<uint32_t>(reply.status().code());
    header.detail = static_cast<uint32_t>(reply.status().detail());
    message = std::string(reply.status().message());
  }
  std::string record(Bytes(header));
  record += message;
  return bootstrap_->Put(Mailbox(node_, "reply/" + std::to_string(request.id)), record);
}

}  // namespace dmidx::bootstrap
