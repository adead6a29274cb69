// The public RangeIndex methods, written once for every index: each runs
// through IndexCore::Run (a closed handle refused, the operation's scratch
// scope, its cost charged to its kind), checks its keys, and calls the
// tree's hook for the part that is the tree's own. Both Scan forms empty
// *out first and again on any error, so no tree can hand back a partial
// result (dmidx/index.h); BulkLoad's input is checked here.
//
//   class MyTreeImpl final : public index::IndexHandle<MyTree, MyTreeImpl> {
//     friend class index::IndexHandle<MyTree, MyTreeImpl>;
//     // The hooks, each called with its keys checked:
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

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dmidx/index.h"
#include "index/index_core.h"

namespace dmidx::index {

// What a write hook is asked for: Insert (an upsert) or Update (present
// keys only).
enum class Write { kUpsert, kUpdate };

template <typename Public, typename Tree>
class IndexHandle : public Public {
 public:
  Status Lookup(Context& context, std::string_view key, uint64_t* value) final {
    return core_.Run(context, IndexOp::kLookup, [&](runtime::ContextImpl& ctx) {
      DMIDX_RETURN_IF_ERROR(core_.CheckKey(key));
      return tree().LookupKey(ctx, key, value);
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
  IndexHandle(runtime::ComputeNode& node, std::string kind, std::string name, uint32_t key_bytes)
      : core_(node, std::move(kind), std::move(name), key_bytes) {}

  IndexCore core_;

 private:
  Tree& tree() { return static_cast<Tree&>(*this); }

  Status RunWrite(Context& context, IndexOp op, std::string_view key, uint64_t value, Write write) {
    return core_.Run(context, op, [&](runtime::ContextImpl& ctx) {
      DMIDX_RETURN_IF_ERROR(core_.CheckKey(key));
      return tree().WriteKey(ctx, key, value, write);
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
};

}  // namespace dmidx::index

#endif  // DMIDX_INDEX_INDEX_HANDLE_H_
