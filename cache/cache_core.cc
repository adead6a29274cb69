#include "cache/cache_core.h"

#include <cstring>

namespace dmidx::cache {

CacheEntry::CacheEntry(fabric::RemoteAddress address, std::span<const uint8_t> image)
    : address_(address),
      image_bytes_(image.size()),
      words_(std::make_unique<uint64_t[]>((image.size() + 7) / 8)) {
  if (!image.empty()) std::memcpy(words_.get(), image.data(), image.size());
}

void LruBudget::Add(CacheEntry& entry) {
  assert(entry.newer_ == nullptr && entry.older_ == nullptr && newest_ != &entry);
  entry.older_ = newest_;
  if (newest_ != nullptr) newest_->newer_ = &entry;
  newest_ = &entry;
  if (oldest_ == nullptr) oldest_ = &entry;
  stats_.bytes += entry.charge();
  ++stats_.entries;
}

void LruBudget::Remove(CacheEntry& entry) {
  (entry.newer_ != nullptr ? entry.newer_->older_ : newest_) = entry.older_;
  (entry.older_ != nullptr ? entry.older_->newer_ : oldest_) = entry.newer_;
  entry.newer_ = nullptr;
  entry.older_ = nullptr;
  stats_.bytes -= entry.charge();
  --stats_.entries;
}

void LruBudget::Touch(CacheEntry& entry) {
  if (newest_ == &entry) return;
  Remove(entry);
  Add(entry);
}

CacheEntry* LruBudget::VictimFor(size_t charge) const {
  if (oldest_ == nullptr || stats_.bytes + charge <= capacity_bytes_) return nullptr;
  return oldest_;
}

}  // namespace dmidx::cache
