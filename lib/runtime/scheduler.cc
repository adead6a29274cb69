#include "lib/runtime/scheduler.h"

#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>
#include <cassert>
#include <utility>

#if defined(DMIDX_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace dmidx::runtime {

namespace context = boost::context;

namespace {

// Boost.Context's guarded stacks, unpoisoned for AddressSanitizer before
// they are unmapped: a coroutine's bottom frames never return (it switches
// away from them when it ends), so their redzones would stay poisoned in the
// shadow, and memory mapped at those addresses later (another stack, or a
// large heap block such as a context's scratch) would report false
// stack-buffer overflows.
class CoroutineStack {
 public:
  explicit CoroutineStack(size_t bytes) : stack_(bytes) {}
  context::stack_context allocate() { return stack_.allocate(); }
  void deallocate(context::stack_context& stack) noexcept {
#if defined(DMIDX_ASAN)
    __asan_unpoison_memory_region(static_cast<char*>(stack.sp) - stack.size, stack.size);
#endif
    stack_.deallocate(stack);
  }

 private:
  context::protected_fixedsize_stack stack_;
};

}  // namespace

namespace {

// Resumes `fiber` and keeps in it the fiber that switches back. Swapping
// into the emptied one (resume() leaves it empty) is a few instructions
// cheaper per switch than a move-assignment (self check, temporary, and its
// destructor's unwind check).
inline void ResumeInPlace(context::fiber& fiber) {
  context::fiber back = std::move(fiber).resume();
  fiber.swap(back);
}

}  // namespace

struct Scheduler::Coroutine {
  size_t index = 0;
  Parker* parker = nullptr;
  std::function<void()> body;
  context::fiber fiber;      // the coroutine while it is suspended
  context::fiber scheduler;  // the scheduler while the coroutine runs
  // What the coroutine waits for, if anything: one byte, so that Run()
  // passes over a runnable coroutine's state with one test.
  static constexpr uint8_t kParked = 1;    // a permit
  static constexpr uint8_t kSleeping = 2;  // wake_at
  static constexpr uint8_t kFinished = 4;  // nothing more: its body returned
  uint8_t waits = 0;
  std::chrono::nanoseconds wake_at{0};
};

Scheduler::Scheduler(size_t stack_bytes, std::function<void()> poll,
                     std::function<void(uint32_t)> idle, const Clock* clock)
    : stack_bytes_(stack_bytes), poll_(std::move(poll)), idle_(std::move(idle)), clock_(clock) {}

Scheduler::~Scheduler() = default;

size_t Scheduler::Spawn(Parker* parker, std::function<void()> body) {
  auto coroutine = std::make_unique<Coroutine>();
  coroutine->index = coroutines_.size();
  coroutine->parker = parker;
  coroutine->body = std::move(body);
  Coroutine* self = coroutine.get();
  coroutine->fiber = context::fiber(std::allocator_arg, CoroutineStack(stack_bytes_),
                                    [self](context::fiber&& scheduler) {
                                      self->scheduler = std::move(scheduler);
                                      self->body();
                                      self->waits = Coroutine::kFinished;
                                      return std::move(self->scheduler);
                                    });
  coroutines_.push_back(std::move(coroutine));
  return coroutines_.size() - 1;
}

void Scheduler::Resume(size_t index) {
  SwitchInto(coroutines_[index].get());
  current_ = nullptr;
}

// Leaves current_ set when the coroutine switches back: the caller clears
// it before running anything but another SwitchInto (Run() once a round).
inline void Scheduler::SwitchInto(Coroutine* coroutine) {
  current_ = coroutine;
  ++switches_;
  ResumeInPlace(coroutine->fiber);
}

void Scheduler::Clear() {
  coroutines_.clear();
}

void Scheduler::SuspendCurrent() {
  Coroutine* self = current_;
  assert(self != nullptr && "Scheduler::SuspendCurrent called outside a coroutine");
  ResumeInPlace(self->scheduler);
}

bool Scheduler::finished(size_t index) const {
  return coroutines_[index]->waits & Coroutine::kFinished;
}

size_t Scheduler::current_index() const {
  assert(current_ != nullptr);
  return current_->index;
}

Parker* Scheduler::parker(size_t index) const {
  return coroutines_[index]->parker;
}

void Scheduler::Run() {
  size_t live = coroutines_.size();
  uint32_t idle_rounds = 0;
  while (live > 0) {
    const uint64_t switches_before = switches_;
    for (const auto& owned : coroutines_) {
      Coroutine* coroutine = owned.get();
      if (coroutine->waits != 0) {
        if (coroutine->waits & Coroutine::kFinished) continue;
        if (coroutine->waits & Coroutine::kParked) {
          if (!coroutine->parker->TryConsume()) continue;
        } else if (clock_->Now() < coroutine->wake_at) {  // kSleeping
          continue;
        }
        coroutine->waits = 0;
      }
      SwitchInto(coroutine);
      if (coroutine->waits & Coroutine::kFinished) --live;
    }
    current_ = nullptr;  // outside every coroutine from here on
    if (live == 0) break;
    poll_();
    idle_rounds = switches_ != switches_before ? 0 : idle_rounds + 1;
    if (idle_rounds > 0 && idle_) idle_(idle_rounds);
  }
  coroutines_.clear();
}

void Scheduler::Yield() {
  Coroutine* self = current_;
  assert(self != nullptr && "Scheduler::Yield called outside a coroutine");
  ResumeInPlace(self->scheduler);
}

void Scheduler::SleepUntil(std::chrono::nanoseconds deadline) {
  Coroutine* self = current_;
  assert(self != nullptr && "Scheduler::SleepUntil called outside a coroutine");
  if (clock_ == nullptr) {
    Yield();
    return;
  }
  if (clock_->Now() >= deadline) return;
  self->waits = Coroutine::kSleeping;
  self->wake_at = deadline;
  ResumeInPlace(self->scheduler);
}

void Scheduler::Park() {
  Coroutine* self = current_;
  assert(self != nullptr && "Scheduler::Park called outside a coroutine");
  if (self->parker->TryConsume()) return;
  self->waits = Coroutine::kParked;
  ResumeInPlace(self->scheduler);
}

}  // namespace dmidx::runtime
