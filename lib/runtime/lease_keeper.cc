#include "lib/runtime/lease_keeper.h"

#include <string>
#include <utility>

#include "lib/runtime/client.h"

namespace dmidx::runtime {

StatusOr<std::unique_ptr<LeaseKeeper>> LeaseKeeper::Start(ClientImpl* client,
                                                          const LeaseOptions& options,
                                                          bool own_thread) {
  DMIDX_ASSIGN_OR_RETURN(auto worker, Worker::Create(client, -1, 1, 1));
  std::unique_ptr<LeaseKeeper> keeper(new LeaseKeeper(client, options, std::move(worker)));
  ContextImpl& ctx = keeper->worker_->context(0);
  LeasePages pages;
  DMIDX_ASSIGN_OR_RETURN(keeper->record_, LeaseRecord(ctx, pages, client->id(), /*create=*/true));
  DMIDX_ASSIGN_OR_RETURN(keeper->last_, JoinLease(ctx, keeper->record_, client->id()));
  keeper->next_ = ctx.Now() + options.period;
  if (own_thread) keeper->thread_ = std::thread([k = keeper.get()] { k->ThreadMain(); });
  return keeper;
}

LeaseKeeper::LeaseKeeper(ClientImpl* client, const LeaseOptions& options,
                         std::unique_ptr<Worker> worker)
    : client_(client), options_(options), worker_(std::move(worker)) {}

LeaseKeeper::~LeaseKeeper() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!holds_.load(std::memory_order_relaxed)) return;
  // Best effort: a node that cannot reach the catalog to leave is judged
  // dead after the timeout instead, and recovered (it holds nothing).
  (void)LeaveLease(worker_->context(0), record_, last_, client_->id());
}

Status LeaseKeeper::status() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return lost_;
}

void LeaseKeeper::Lose(Status why) {
  holds_.store(false, std::memory_order_relaxed);
  std::lock_guard<std::mutex> guard(mutex_);
  lost_ = std::move(why);
}

bool LeaseKeeper::RenewOnce(ContextImpl& ctx) {
  const StatusOr<Lease> found = RenewLease(ctx, record_, last_);
  if (!found.ok()) {
    const Status& status = found.status();
    // Fenced: every later renewal fails the same way. Any other failure
    // (a lost link, a killed node's own) is tried again next period.
    if (IsFenced(status)) {
      Lose(status.WithContext("compute node " + std::to_string(client_->id()) + " lost its lease"));
      return false;
    }
    missed_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  Lease next = last_;
  ++next.heartbeat;
  if (found->word() == next.word()) {
    last_ = next;
    renewals_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  Lose(Status(StatusCode::kUnavailable,
              "compute node " + std::to_string(client_->id()) +
                  " lost its lease: its record reads " + found->ToString() +
                  " (it was judged dead; a new client, with a new id, works again)",
              StatusDetail::kFenced));
  return false;
}

void LeaseKeeper::ThreadMain() {
  ContextImpl& ctx = worker_->context(0);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    // The cluster's clock is real time on the backends that use a thread.
    const std::chrono::nanoseconds now = ctx.Now();
    if (now < next_) {
      wake_.wait_for(lock, next_ - now);
      continue;
    }
    lock.unlock();
    const bool holds = RenewOnce(ctx);
    lock.lock();
    if (!holds) return;
    next_ = ctx.Now() + options_.period;
  }
}

void LeaseKeeper::RenewUntil(ContextImpl& ctx, const std::atomic<bool>& stop) {
  if (!holds_.load(std::memory_order_relaxed)) return;
  while (!stop.load(std::memory_order_relaxed)) {
    if (ctx.Now() < next_) {
      ctx.SleepUntil(next_);
      continue;
    }
    if (!RenewOnce(ctx)) return;
    next_ = ctx.Now() + options_.period;
  }
}

}  // namespace dmidx::runtime
