#include "lib/runtime/lease_keeper.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "lib/runtime/client.h"

namespace dmidx::runtime {

StatusOr<std::unique_ptr<LeaseKeeper>> LeaseKeeper::Start(ClientImpl* client,
                                                          const LeaseOptions& options,
                                                          Membership* membership, bool own_thread) {
  DMIDX_ASSIGN_OR_RETURN(auto worker, Worker::Create(client, -1, 1, 1));
  // A renewal (or the join) that failed leaves nothing but the lease word,
  // which the next renewal or a next client's join goes on from: the client
  // stays settled. The recovery worker's failures count (a recovery's steps
  // may take words or claims under this node's id).
  worker->set_unsettles_on_failure(false);
  DMIDX_ASSIGN_OR_RETURN(auto recovery_worker, Worker::Create(client, -1, 1, 1));
  // The keeper is what moves the epoch on and frees: an allocation of its
  // own that finds the pool out has nothing to wait for.
  worker->allocator().SetExhaustedWaiter(nullptr);
  recovery_worker->allocator().SetExhaustedWaiter(nullptr);
  // The recovery worker frees what the node retired (Reclaim), and drains
  // (RemoteAllocator::Tend) off the renewals' thread: a drainer whose claim
  // stood still through a lease timeout's worth of Tends, and one more, is
  // taken over.
  const int64_t period = std::max<int64_t>(options.period.count(), 1);
  const int64_t periods =
      options.timeout.count() / period + (options.timeout.count() % period != 0);
  recovery_worker->allocator().EnableScans(
      client->id(), static_cast<uint32_t>(std::min<int64_t>(periods + 1, int64_t{1} << 20)));
  std::unique_ptr<LeaseKeeper> keeper(
      new LeaseKeeper(client, options, membership, std::move(worker), std::move(recovery_worker)));
  ContextImpl& ctx = keeper->worker_->context(0);
  // Below every scope: kept for the keeper's life.
  DMIDX_ASSIGN_OR_RETURN(keeper->renewal_word_, ctx.arena().Words(4));
  LeasePages pages;
  DMIDX_ASSIGN_OR_RETURN(keeper->record_, LeaseRecord(ctx, pages, client->id(), /*create=*/true));
  // Its own record's page, so that the node's layers find it without a
  // round trip (Membership::LeaseRecordOf).
  if (membership != nullptr) membership->KnowRecord(client->id(), keeper->record_);
  // L from G before the join, so that the reservation the join writes
  // (L: no operation runs yet) keeps G <= L + 1.
  DMIDX_ASSIGN_OR_RETURN(keeper->global_epoch_, GlobalEpochWord(ctx));
  DMIDX_ASSIGN_OR_RETURN(const uint64_t global, ctx.ReadWord(keeper->global_epoch_));
  keeper->epochs_->Observe(global);
  EpochExchange exchange{keeper->global_epoch_, keeper->epochs_->local(), keeper->epochs_->local()};
  DMIDX_ASSIGN_OR_RETURN(keeper->last_, JoinLease(ctx, keeper->record_, client->id(), &exchange));
  keeper->epochs_->Observe(exchange.global_seen);
  keeper->advancer_ = std::make_unique<EpochAdvancer>(client->id(), keeper->global_epoch_,
                                                      keeper->epochs_, membership, options.timeout);
  keeper->next_ = ctx.Now() + options.period;
  if (own_thread) {
    keeper->thread_ = std::thread([k = keeper.get()] { k->ThreadMain(); });
    keeper->recovery_thread_ = std::thread([k = keeper.get()] { k->RecoveryThreadMain(); });
  }
  return keeper;
}

LeaseKeeper::LeaseKeeper(ClientImpl* client, const LeaseOptions& options, Membership* membership,
                         std::unique_ptr<Worker> worker, std::unique_ptr<Worker> recovery_worker)
    : client_(client),
      options_(options),
      membership_(membership),
      worker_(std::move(worker)),
      recovery_worker_(std::move(recovery_worker)),
      epochs_(&client->epochs()),
      cache_window_(client->cluster().options().reclamation.cache_window_epochs) {}

void LeaseKeeper::Stop() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (recovery_thread_.joinable()) recovery_thread_.join();
}

LeaseKeeper::~LeaseKeeper() {
  Stop();
  // No operation of the client runs any more: its reservation and cache
  // floor hold nothing back (a next client of the id writes its own when
  // it joins). Best effort. Under sim too, where no executor runs now: the
  // context polls the world itself, as a worker that goes does to push its
  // free objects (else the advancer would find a closed client's stale
  // reservation below G and judge it dead).
  if (holds_.load(std::memory_order_relaxed)) {
    ContextImpl& ctx = worker_->context(0);
    ScratchArena::Scope scope(ctx.arena());
    StatusOr<uint64_t*> words = ctx.arena().Words(2);
    if (words.ok()) {
      (*words)[0] = kUnpinned;
      (*words)[1] = kUnpinned;
      const fabric::Op write = fabric::Op::Write(record_ + kLeaseEpochOffset, *words, 16);
      (void)ctx.Execute(record_.node(), {&write, 1});
    }
  }
  // A posted renewal's completion and word outlive its op.
  worker_->endpoint().Quiesce();
  recovery_worker_->endpoint().Quiesce();
}

Status LeaseKeeper::status() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return lost_;
}

void LeaseKeeper::Lose(Status why) {
  holds_.store(false, std::memory_order_relaxed);
  membership_->Lost(why);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    lost_ = std::move(why);
  }
  // Judged dead: whoever judged it fences it too, but the node stops its
  // own traffic at once (best effort: its declarer's fence is the one that
  // counts).
  (void)client_->cluster().fabric().FenceComputeNode(client_->id());
}

bool LeaseKeeper::Renewed(const StatusOr<Lease>& found) {
  if (!found.ok()) {
    const Status& status = found.status();
    // Fenced: every later renewal fails the same way. Any other failure
    // (a lost link, a killed node's own) is tried again next period.
    if (IsFenced(status)) {
      Lose(status.WithContext("compute node " + std::to_string(client_->id()) + " lost its lease"));
      return false;
    }
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

bool LeaseKeeper::RenewOnce(ContextImpl& ctx) {
  const EpochTable::Published published = epochs_->Publish(cache_window_);
  EpochExchange exchange{global_epoch_, published.reservation, published.cache_floor};
  const StatusOr<Lease> found = RenewLease(ctx, record_, last_, &exchange);
  if (found.ok()) epochs_->Observe(exchange.global_seen);
  return Renewed(found);
}

void LeaseKeeper::Reclaim(ContextImpl& ctx) {
  // A worker's own objects are left to it for a period after they became
  // due: one that retires frees them at its next Retire, to its own
  // allocator (reused with no round trip); the keeper frees only an idle
  // worker's.
  const uint64_t bound = epochs_->free_bound();
  client_->CollectRetired(ctx, workers_bound_);
  workers_bound_ = bound;
  ctx.allocator().Tend(ctx);
  // Only a node with objects whose grace period has not ended moves G on
  // (not "retired != reclaimed": an object collected late would move G,
  // and expire every cache entry, period after period).
  if (bound >= epochs_->highest_retired()) return;
  ContextImpl::PinScope pinned(ctx);  // a recovery the advance runs reads index objects
  (void)advancer_->TryAdvance(ctx);
  client_->CollectRetired(ctx, workers_bound_);
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

void LeaseKeeper::RecoveryThreadMain() {
  ContextImpl& ctx = recovery_worker_->context(0);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_ && holds_.load(std::memory_order_relaxed)) {
    wake_.wait_for(lock, options_.period);
    if (stopping_) return;
    lock.unlock();
    {
      // A recovery reads and writes index objects (redo records redone
      // into them): pinned, as one that runs inside an operation is.
      ContextImpl::PinScope pinned(ctx);
      (void)membership_->ResumeUnfinished(ctx);
    }
    Reclaim(ctx);
    lock.lock();
  }
}

void LeaseKeeper::ResumeUntil(ContextImpl& ctx, const std::atomic<bool>& stop) {
  while (holds_.load(std::memory_order_relaxed) && !stop.load(std::memory_order_relaxed)) {
    ctx.SleepUntil(ctx.Now() + options_.period);
    if (stop.load(std::memory_order_relaxed)) return;
    {
      ContextImpl::PinScope pinned(ctx);  // as in RecoveryThreadMain
      (void)membership_->ResumeUnfinished(ctx);
    }
    Reclaim(ctx);
  }
}

void LeaseKeeper::RenewUntil(ContextImpl& ctx, const std::atomic<bool>& stop) {
  while (holds_.load(std::memory_order_relaxed) && !stop.load(std::memory_order_relaxed)) {
    if (ctx.Now() < next_) {
      ctx.SleepUntil(next_);
      continue;
    }
    next_ = ctx.Now() + options_.period;
    if (posted_) {
      if (!posted_->done()) continue;  // held (a cut-off link): look again next period
      const Status status = posted_->status();
      posted_.reset();
      if (status.ok()) epochs_->Observe(renewal_word_[3]);
      // As RenewLease answers: the next word when the CAS found the last.
      Lease next = last_;
      ++next.heartbeat;
      const uint64_t old = *renewal_word_;
      StatusOr<Lease> found = status;
      if (status.ok()) {
        found = old == last_.word() ? next : Lease::Of(old);
        if (!Lease::Valid(old)) {
          found = Status::DataLoss("the lease word of compute node " +
                                   std::to_string(client_->id()) + " reads an invalid value");
        }
      }
      if (!Renewed(found)) return;
      // Renewed just now or not, the next renewal is posted at once.
    }
    Lease next = last_;
    ++next.heartbeat;
    posted_ = std::make_unique<fabric::Completion>(ctx.notifier());
    // As RenewLease's batch with an EpochExchange: the reservation, the
    // CAS, then G.
    const EpochTable::Published published = epochs_->Publish(cache_window_);
    renewal_word_[1] = published.reservation;
    renewal_word_[2] = published.cache_floor;
    const std::array<fabric::Op, 3> ops = {
        fabric::Op::Write(record_ + kLeaseEpochOffset, &renewal_word_[1], 16),
        fabric::Op::CompareSwap(record_ + kLeaseWordOffset, renewal_word_, last_.word(),
                                next.word()),
        fabric::Op::Read(global_epoch_, &renewal_word_[3], 8)};
    const Status status = ctx.Post(record_.node(), ops, posted_.get());
    if (!status.ok()) {
      posted_.reset();
      if (!Renewed(status)) return;
    }
  }
}

}  // namespace dmidx::runtime
