// A compute node's own lease (lease.h): joined when its client opens,
// renewed every LeaseOptions::period while it lives. A client that closes
// stops renewing without giving the lease up: a word it still holds (a
// release that never landed, a hold kept on purpose) is then recovered as
// a dead node's is, after the timeout, and a verbs process's next client,
// which keeps the id, takes the lease back (JoinLease), but only after a
// settled close (ClusterBackend::DetachClient): a client a batch of which
// failed closes its id, and its lease is left to time out.
//
// In real time (local, verbs) a thread of the keeper's renews it, whether
// or not the client runs anything: a node that holds a lock in a blocking
// context between two Runs must stay alive too. Under virtual time (sim)
// a thread would renew in the wrong time, so the executor runs RenewUntil
// of every open client as background work beside each Run instead; between
// Runs virtual time moves only when a blocking context waits, and such a
// context never judges a lease (Membership::MayJudge).
//
// The renewal's batch also carries the node's epoch reservation and reads
// the global epoch (epochs.h), and the recovery worker, each period that
// this node has retired objects waiting, tries to move the global epoch on
// (EpochAdvancer) and frees what workers that went had retired, and what
// idle workers retired (RetiredObjects: each worker's list has a spin lock
// for this), a period after its grace period ended.
//
// The keeper has a worker of its own (its own connection and scratch), so
// renewals never wait behind the client's operations, and its traffic is
// kept out of the client's stats (Client::stats counts what operations
// cost). A fenced or killed node's renewals fail like its other ops.
#ifndef DMIDX_RUNTIME_LEASE_KEEPER_H_
#define DMIDX_RUNTIME_LEASE_KEEPER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "dmidx/options.h"
#include "dmidx/status.h"
#include "lib/runtime/context.h"
#include "lib/runtime/epochs.h"
#include "lib/runtime/lease.h"
#include "lib/runtime/membership.h"

namespace dmidx::runtime {

class LeaseKeeper {
 public:
  // Joins `client`'s lease (its compute-node id's record; JoinLease) and,
  // with `own_thread`, starts renewing it. FailedPrecondition when the id
  // was declared dead. Every period the keeper also finishes the
  // recoveries `membership` began and did not finish
  // (Membership::ResumeUnfinished), on a worker and a thread (or, under
  // sim, a background coroutine) of their own, so that a slow recovery
  // never holds a renewal up. A lost lease is reported to `membership`
  // (Membership::Lost), and the node fences itself, so that nothing it
  // still posts lands.
  static StatusOr<std::unique_ptr<LeaseKeeper>> Start(ClientImpl* client,
                                                      const LeaseOptions& options,
                                                      Membership* membership, bool own_thread);
  // Stops renewing and reclaiming: no thread of the keeper runs after it
  // returns (its workers stay, for a client's last act of closing).
  void Stop();
  // Stops, and writes the node's reservation and cache floor as
  // kUnpinned: a closed client holds nothing back.
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Virtual time: renews every period, on `ctx` (the keeper's worker's
  // context), until `stop` reads true. A renewal is posted and collected a
  // period later, never waited for, so the body never parks on an op (a
  // renewal a cut-off link holds cannot keep the run from ending).
  void RenewUntil(ContextImpl& ctx, const std::atomic<bool>& stop);
  // Virtual time: finishes unfinished recoveries every period, on the
  // recovery worker's context, until `stop` reads true.
  void ResumeUntil(ContextImpl& ctx, const std::atomic<bool>& stop);
  // Whether a run has this keeper's RenewUntil running (a keeper runs in
  // one run at a time): TryEnterRun claims it, LeaveRun gives it back.
  bool TryEnterRun() { return !in_run_.exchange(true, std::memory_order_acquire); }
  void LeaveRun() { in_run_.store(false, std::memory_order_release); }
  Worker& worker() const { return *worker_; }
  Worker& recovery_worker() const { return *recovery_worker_; }

  // OK while the lease holds. Once it is lost, why: Unavailable marked
  // StatusDetail::kFenced naming who declared the node dead, or the status
  // of the renewal that found the node fenced or killed. A lost lease is
  // lost for good: the node's id is dead, and only a new client (a new id)
  // works again.
  Status status() const;
  // Renewals that landed so far.
  uint64_t renewals() const { return renewals_.load(std::memory_order_relaxed); }
  fabric::RemoteAddress record() const { return record_; }

 private:
  LeaseKeeper(ClientImpl* client, const LeaseOptions& options, Membership* membership,
              std::unique_ptr<Worker> worker, std::unique_ptr<Worker> recovery_worker);
  // One renewal on `ctx`, waited for; false once the lease is lost.
  bool RenewOnce(ContextImpl& ctx);
  // What a renewal found (its CAS's old word, or its failure); false once
  // the lease is lost.
  bool Renewed(const StatusOr<Lease>& found);
  void Lose(Status why);
  void ThreadMain();
  void RecoveryThreadMain();

  ClientImpl* const client_;
  const LeaseOptions options_;
  Membership* const membership_;
  const std::unique_ptr<Worker> worker_;
  const std::unique_ptr<Worker> recovery_worker_;
  fabric::RemoteAddress record_;
  // Scratch kept for the posted renewal: the CAS's old word, the
  // reservation written and G read.
  uint64_t* renewal_word_ = nullptr;
  EpochTable* const epochs_;
  const uint64_t cache_window_;  // ReclamationOptions::cache_window_epochs
  fabric::RemoteAddress global_epoch_;
  std::unique_ptr<EpochAdvancer> advancer_;  // the recovery worker's
  // Reclamation's step of the recovery worker's period.
  void Reclaim(ContextImpl& ctx);
  // The free bound the last Reclaim began with: workers' objects due by it
  // were left to them for a period (Reclaim). The recovery worker's.
  uint64_t workers_bound_ = 0;
  std::unique_ptr<fabric::Completion> posted_;  // a renewal posted, not yet collected
  std::atomic<bool> in_run_{false};
  Lease last_;                        // the word the last join or renewal wrote; the renewer's only
  std::chrono::nanoseconds next_{0};  // when the next renewal is due

  std::atomic<uint64_t> renewals_{0};
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mutex_
  Status lost_;            // guarded by mutex_
  std::atomic<bool> holds_{true};
  std::thread thread_, recovery_thread_;
};

}  // namespace dmidx::runtime

#endif  // DMIDX_RUNTIME_LEASE_KEEPER_H_
