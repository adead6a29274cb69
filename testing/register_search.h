// The search behind CheckLinearizable (testing/linearizability.h): whether
// one key's operations, as operations on a register that is "absent" or
// "present with value v" (initially absent), have a linearization.
#ifndef DMIDX_TESTING_REGISTER_SEARCH_H_
#define DMIDX_TESTING_REGISTER_SEARCH_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace dmidx::testing {

enum class RegisterEffect : uint8_t {
  kPut,         // present(value), always allowed
  kReplace,     // requires present; present(value)
  kRemove,      // requires present; absent
  kReadValue,   // requires present(value)
  kReadAbsent,  // requires absent
};

// The return of an operation whose outcome is unknown: it may take effect
// at any point after its call, or never.
inline constexpr uint64_t kUnknownReturn = std::numeric_limits<uint64_t>::max();

struct RegisterOp {
  RegisterEffect effect = RegisterEffect::kReadAbsent;
  uint64_t value = 0;
  uint64_t call = 0, ret = 0;  // ticks of one clock; A precedes B iff A.ret < B.call
};

struct RegisterSearchResult {
  enum class Outcome { kLinearizable, kNotLinearizable, kBudgetExceeded };
  Outcome outcome = Outcome::kLinearizable;
  size_t states = 0;  // distinct (linearized set, register) states reached
  // kNotLinearizable: the operations of a longest linearizable prefix the
  // search found, in order, and the operation whose return ended it (-1:
  // none).
  std::vector<uint32_t> longest_prefix;
  int32_t blocked = -1;
  bool unwritten_value = false;  // kNotLinearizable: `blocked` reads a value nothing writes
};

// Searches for a linearization of `ops`, which must be sorted by call,
// reaching at most `max_states` states. `prune` skips what cannot lead to
// a linearization: reads of values nothing writes fail at once, and no
// mutation overwrites a value that a read not yet linearized must see when
// no write of that value is left. Pruning never changes the outcome, but a
// failed search without it gets further (a longer prefix to show).
RegisterSearchResult SearchRegister(std::span<const RegisterOp> ops, uint64_t max_states,
                                    bool prune = true);

}  // namespace dmidx::testing

#endif  // DMIDX_TESTING_REGISTER_SEARCH_H_
