// The public RangeIndex methods, written once for every index: each runs
// through IndexCore::Run (a closed handle refused, the operation's scratch
// scope, its cost charged to its kind), checks its keys, and calls the
// tree's hook for the part that is the tree's own. Lookups, inserts and
// updates go through the compute node's RDWC table (lock/rdwc.h) when the
// handle was opened with read delegation or write combining. Both Scan
// forms empty *out first and again on any error, so no tree can hand back
// a partial result (dmidx/index.h); BulkLoad's input is checked here.
//
//   class MyTreeImpl final : public index::IndexHandle<MyTree, MyTreeImpl> {
//     friend class index::IndexHandle<MyTree, MyTreeImpl>;
//     // The hooks, each called with its keys checked (`value` non-null,
//     // set on OK; a write's `value` the combined one under RDWC):
//     Status LookupKey(runtime::ContextImpl&, std::string_view key, uint64_t* value);
//     Status WriteKey(runtime::ContextImpl&, std::string_view key, uint64_t value, index::Write);
//     Status DeleteKey(runtime::ContextImpl&, std::string_view key);
//     // `out` non-null and empty, `count` > 0, `from` <= `to`.
//     Status ScanKeys(runtime::ContextImpl&, std::string_view from,
//                     std::optional<std::string_view> to, size_t count, std::vector<KeyValue>*
//                     out);
//     // `sorted` strictly ascending, every key key_bytes long, fill factor in (0, 1].
//     Status LoadSorted(runtime::ContextImpl&, std::span<const KeyValue> sorted, double
//     fill_factor);
//   };
//
// The hooks are called statically (no virtual call on the operation path).
// Instantiate the handle explicitly in the .cc that defines the point
// operations' hooks (extern template in the tree's header), so that they
// are inlined into the public methods.
#ifndef DMIDX_INDEX_INDEX_HANDLE_H_
#define DMIDX_INDEX_INDEX_HANDLE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dmidx/index.h"
#include "index/index_core.h"
#include "lock/rdwc.h"

namespace dmidx::index {

// What a write hook is asked for: Insert (an upsert) or Update (present
// keys only).
enum class Write { kUpsert, kUpdate };

// A handle's RDWC table (lock/rdwc.h; OpenRdwc in index/open.h) and which
// operations go through it.
struct RdwcDispatch {
  std::shared_ptr<lock::Rdwc> table;  // null: no RDWC
  bool reads = false;                 // lookups: read delegation
  bool writes = false;                // inserts and updates: write combining
  // The handle's lock_timeout, each write's own deadline in a group.
  std::chrono::nanoseconds lock_timeout{0};
};

template <typename Public, typename Tree>
class IndexHandle : public Public {
 public:
  Status Lookup(Context& context, std::string_view key, uint64_t* value) final {
    return core_.Run(context, IndexOp::kLookup, [&](runtime::ContextImpl& ctx) {
      DMIDX_RETURN_IF_ERROR(core_.CheckKey(key));
      uint64_t found = 0;
      Status status;
      if (delegate_reads_ == nullptr) {
        status = tree().LookupKey(ctx, key, &found);
      } else {
        // The window closes before the leader's first READ: every joiner
        // joined before anything the leader's answer rests on was read (so
        // the answer, NotFound too, is linearizable for them), and they
        // gather while the key's previous READ is in flight.
        status = delegate_reads_->Read(ctx, key, &found,
                                       [&](lock::Rdwc::ReadWindow& window, uint64_t* out) {
                                         window.Close();
                                         return tree().LookupKey(ctx, key, out);
                                       });
      }
      if (status.ok() && value != nullptr) *value = found;
      return status;
    });
  }
  Status Insert(Context& context, std::string_view key, uint64_t value) final {
    return RunWrite(context, IndexOp::kInsert, key, value, Write::kUpsert);
  }
  Status Update(Context& context, std::string_view key, uint64_t value) final {
    return RunWrite(context, IndexOp::kUpdate, key, value, Write::kUpdate);
  }
  Status Delete(Context& context, std::string_view key) final {
    return core_.Run(context, IndexOp::kDelete, [&](runtime::ContextImpl& ctx) {
      DMIDX_RETURN_IF_ERROR(core_.CheckKey(key));
      return tree().DeleteKey(ctx, key);
    });
  }
  Status Scan(Context& context, std::string_view from, std::string_view to,
              std::vector<KeyValue>* out) final {
    return RunScan(context, from, to, SIZE_MAX, out);
  }
  Status Scan(Context& context, std::string_view from, size_t count,
              std::vector<KeyValue>* out) final {
    return RunScan(context, from, std::nullopt, count, out);
  }
  Status BulkLoad(Context& context, std::span<const KeyValue> sorted, double fill_factor) final {
    return core_.Run(context, IndexOp::kBulkLoad, [&](runtime::ContextImpl& ctx) {
      DMIDX_RETURN_IF_ERROR(core_.CheckBulkLoad(sorted, fill_factor));
      return tree().LoadSorted(ctx, sorted, fill_factor);
    });
  }
  void Close() final { core_.Close(); }
  uint32_t key_bytes() const final { return core_.key_bytes(); }
  IndexStats stats() const final { return core_.stats(); }

 protected:
  // `kind` and `name` name the handle in errors ("B+tree 'orders'").
  IndexHandle(runtime::ComputeNode& node, std::string kind, std::string name, uint32_t key_bytes,
              RdwcDispatch rdwc)
      : core_(node, std::move(kind), std::move(name), key_bytes),
        rdwc_(std::move(rdwc.table)),
        delegate_reads_(rdwc.reads ? rdwc_.get() : nullptr),
        combine_writes_(rdwc.writes ? rdwc_.get() : nullptr),
        lock_timeout_(rdwc.lock_timeout) {}

  IndexCore core_;

 private:
  Tree& tree() { return static_cast<Tree&>(*this); }

  Status RunWrite(Context& context, IndexOp op, std::string_view key, uint64_t value, Write write) {
    return core_.Run(context, op, [&](runtime::ContextImpl& ctx) {
      DMIDX_RETURN_IF_ERROR(core_.CheckKey(key));
      if (combine_writes_ == nullptr) return tree().WriteKey(ctx, key, value, write);
      // The window closes before the leader's first remote op, so every
      // attempt of its write (a restart, a split, an insert instead of an
      // update) writes the combined value: the last arrival's.
      return combine_writes_->Write(ctx, key, value, lock_timeout_,
                                    [&](lock::Rdwc::WriteWindow& window) {
                                      return tree().WriteKey(ctx, key, window.Close(), write);
                                    });
    });
  }
  // Both Scan forms (`to` unset: unbounded): *out empty before anything
  // can fail (a closed handle, a wrong key size) and after any error.
  Status RunScan(Context& context, std::string_view from, std::optional<std::string_view> to,
                 size_t count, std::vector<KeyValue>* out) {
    if (out != nullptr) out->clear();
    return core_.Run(context, IndexOp::kScan, [&](runtime::ContextImpl& ctx) -> Status {
      DMIDX_RETURN_IF_ERROR(core_.CheckKey(from));
      if (to) DMIDX_RETURN_IF_ERROR(core_.CheckKey(*to));
      if (out == nullptr) return Status::InvalidArgument("Scan: null output vector");
      if (count == 0 || (to && *to < from)) return Status::Ok();
      const Status status = tree().ScanKeys(ctx, from, to, count, out);
      if (!status.ok()) out->clear();
      return status;
    });
  }

  std::shared_ptr<lock::Rdwc> rdwc_;  // null: no RDWC
  lock::Rdwc* const delegate_reads_;  // rdwc_ with read delegation on, else null
  lock::Rdwc* const combine_writes_;  // rdwc_ with write combining on, else null
  const std::chrono::nanoseconds lock_timeout_;
};

}  // namespace dmidx::index

#endif  // DMIDX_INDEX_INDEX_HANDLE_H_
