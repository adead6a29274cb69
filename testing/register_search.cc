#include "testing/register_search.h"

#include <algorithm>
#include <cassert>
#include <optional>
#include <unordered_map>

namespace dmidx::testing {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
  x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
  return x ^ (x >> 31);
}

bool IsRead(RegisterEffect effect) {
  return effect == RegisterEffect::kReadValue || effect == RegisterEffect::kReadAbsent;
}
bool IsWrite(RegisterEffect effect) {
  return effect == RegisterEffect::kPut || effect == RegisterEffect::kReplace;
}

// The register. Values are numbered 0, 1, ... per search.
struct Register {
  bool present = false;
  uint32_t value = 0;
  friend bool operator==(const Register&, const Register&) = default;
  uint64_t Hash() const { return present ? Mix(~uint64_t{value}) : 0x5ca1ab1e; }
};

// The register after an operation, or nullopt when it cannot happen in
// `state`.
std::optional<Register> Step(Register state, RegisterEffect effect, uint32_t value) {
  switch (effect) {
    case RegisterEffect::kPut:
      return Register{true, value};
    case RegisterEffect::kReplace:
      if (!state.present) return std::nullopt;
      return Register{true, value};
    case RegisterEffect::kRemove:
      if (!state.present) return std::nullopt;
      return Register{};
    case RegisterEffect::kReadValue:
      if (!state.present || state.value != value) return std::nullopt;
      return state;
    case RegisterEffect::kReadAbsent:
      if (state.present) return std::nullopt;
      return state;
  }
  return std::nullopt;
}

// Lowe's cache: the (linearized set, register) states the search reached,
// each set as a key of some words (Search::TryLift). Open addressing.
class StateCache {
 public:
  StateCache() : table_(1024, kEmpty) {}

  // Adds the state unless it is there already; returns whether it was added.
  bool Insert(uint64_t hash, const std::vector<uint64_t>& key, Register state) {
    if ((entries_.size() + 1) * 2 > table_.size()) Grow();
    size_t slot = hash & (table_.size() - 1);
    for (; table_[slot] != kEmpty; slot = (slot + 1) & (table_.size() - 1)) {
      const Entry& entry = entries_[table_[slot]];
      if (entry.hash == hash && entry.state == state && entry.size == key.size() &&
          std::equal(key.begin(), key.end(), words_.begin() + entry.offset)) {
        return false;
      }
    }
    table_[slot] = static_cast<uint32_t>(entries_.size());
    entries_.push_back({hash, words_.size(), static_cast<uint32_t>(key.size()), state});
    words_.insert(words_.end(), key.begin(), key.end());
    return true;
  }

  size_t size() const { return entries_.size(); }

 private:
  static constexpr uint32_t kEmpty = std::numeric_limits<uint32_t>::max();
  struct Entry {
    uint64_t hash;
    size_t offset;  // in words_
    uint32_t size;
    Register state;
  };

  void Grow() {
    table_.assign(table_.size() * 2, kEmpty);
    for (uint32_t e = 0; e < entries_.size(); ++e) {
      size_t slot = entries_[e].hash & (table_.size() - 1);
      while (table_[slot] != kEmpty)
        slot = (slot + 1) & (table_.size() - 1);
      table_[slot] = e;
    }
  }

  std::vector<uint32_t> table_;  // entry numbers
  std::vector<Entry> entries_;
  std::vector<uint64_t> words_;
};

// Wing & Gong's search with Lowe's memoization, as Porcupine implements it:
// the call and return events in time order form a doubly linked list; a
// state's candidates are the calls before the first remaining return; the
// search linearizes (lifts out of the list) a candidate whose step the
// register allows and whose resulting state is new, and backtracks when no
// candidate is left. Operations of unknown outcome have no return event, so
// they never have to be linearized. Refinements, none of which loses a
// linearization:
//  - A read the register allows now is linearized at once, as the only way
//    on: any linearization from here can move it to the front, since it
//    changes nothing and everything that precedes it is linearized already.
//  - With `prune`: while the register holds a value some read still has to
//    see and no write of that value is left, no mutation is linearized (it
//    would leave that read unsatisfiable); a read of a value nothing writes
//    fails the search at once.
//  - An operation of unknown outcome is linearized only where it makes a
//    difference (Dominated).
//  - Candidates are tried by return, earliest first (in the spirit of
//    Lowe's just-in-time linearization: a mutation goes in when it must,
//    rarely too early).
// The operations are sorted by call, so a linearized set is stored as where
// the operations with a return not all linearized begin, and the bits from
// there on (with the bits of the operations of unknown outcome).
class Search {
 public:
  Search(std::span<const RegisterOp> ops, uint64_t max_states, bool prune);

  RegisterSearchResult Run();

 private:
  static constexpr uint32_t kForced = std::numeric_limits<uint32_t>::max();
  struct Frame {
    int32_t node;    // the lifted call
    uint32_t index;  // in the candidates of the state before; kForced: an allowed read
    Register before;
    uint32_t low, high;
  };
  enum class Push { kPushed, kNotAllowed, kSeen, kBudgetExceeded };

  void NumberValues(std::span<const RegisterOp> ops);
  void BuildList(std::span<const RegisterOp> ops);
  void Unlink(int32_t node) {
    next_[prev_[node]] = next_[node];
    if (next_[node] >= 0) prev_[next_[node]] = prev_[node];
  }
  void Relink(int32_t node) {
    next_[prev_[node]] = node;
    if (next_[node] >= 0) prev_[next_[node]] = node;
  }
  bool Linearized(uint32_t op) const { return (bits_[op / 64] >> (op % 64)) & 1; }
  // Moves `op` into the linearized set or out of it (bits, hash, counts).
  void Flip(uint32_t op, int direction);
  // An allowed read among the candidates, or -1 and candidates_ by return.
  int32_t Candidates();
  // Whether linearizing `op` next, to reach `after`, can be skipped because
  // another way reaches a state at least as good.
  bool Dominated(uint32_t op, Register after) const;
  // Linearizes `call` if allowed and the state it leads to is new.
  Push TryLift(int32_t call, uint32_t index);
  // Undoes linearizations up to the last one that left candidates to try;
  // `index` becomes the next candidate. False when there is none.
  bool Backtrack(uint32_t* index);
  void NotePush();
  RegisterSearchResult Finish(RegisterSearchResult::Outcome outcome);

  const uint64_t max_states_;
  const bool prune_;
  const uint32_t size_;
  std::vector<RegisterEffect> effect_;
  std::vector<uint32_t> value_;  // numbered
  std::vector<uint64_t> ret_;
  std::vector<int32_t> unknown_index_;  // per operation: its bit in unknown_bits_, or -1
  std::vector<uint32_t> readers_left_, writers_left_;  // per value, not linearized
  // The list: node 0 is the head; node n > 0 is an event of op_[n].
  std::vector<int32_t> next_, prev_;
  std::vector<int32_t> match_;  // a call's return node (-1: none), a return's call node
  std::vector<uint32_t> op_;
  std::vector<bool> is_call_;
  size_t finite_ = 0;  // operations with a return

  // The state: the linearized operations and the register.
  std::vector<uint64_t> bits_;
  std::vector<uint64_t> unknown_bits_;
  uint64_t hash_ = 0;  // of bits_ (Zobrist)
  uint32_t low_ = 0;   // the first operation with a return not linearized (or size_)
  uint32_t high_ = 0;  // 1 + the last operation linearized
  Register state_;
  size_t finite_left_ = 0;  // operations with a return not linearized
  std::vector<Frame> stack_;
  std::vector<int32_t> candidates_;
  int32_t first_return_ = -1;
  StateCache cache_;
  std::vector<uint64_t> key_;  // scratch

  // The longest stack seen; its first best_valid_ entries equal the stack's.
  std::vector<uint32_t> best_;
  size_t best_valid_ = 0;
  int32_t blocked_ = -1;
};

Search::Search(std::span<const RegisterOp> ops, uint64_t max_states, bool prune)
    : max_states_(max_states),
      prune_(prune),
      size_(static_cast<uint32_t>(ops.size())),
      bits_((ops.size() + 63) / 64) {
  assert(std::is_sorted(ops.begin(), ops.end(),
                        [](const RegisterOp& a, const RegisterOp& b) { return a.call < b.call; }));
  NumberValues(ops);
  int32_t unknown = 0;
  unknown_index_.assign(size_, -1);
  for (uint32_t op = 0; op < size_; ++op) {
    ret_.push_back(ops[op].ret);
    if (ops[op].ret == kUnknownReturn) unknown_index_[op] = unknown++;
  }
  unknown_bits_.assign((unknown + 63) / 64, 0);
  BuildList(ops);
  while (low_ < size_ && unknown_index_[low_] >= 0)
    ++low_;
}

void Search::NumberValues(std::span<const RegisterOp> ops) {
  std::unordered_map<uint64_t, uint32_t> numbers;
  for (const RegisterOp& op : ops) {
    const bool valued = op.effect == RegisterEffect::kReadValue || IsWrite(op.effect);
    const uint32_t number =
        valued ? numbers.emplace(op.value, static_cast<uint32_t>(numbers.size())).first->second : 0;
    effect_.push_back(op.effect);
    value_.push_back(number);
  }
  readers_left_.assign(numbers.size(), 0);
  writers_left_.assign(numbers.size(), 0);
  for (uint32_t op = 0; op < size_; ++op) {
    if (effect_[op] == RegisterEffect::kReadValue) ++readers_left_[value_[op]];
    if (IsWrite(effect_[op])) ++writers_left_[value_[op]];
  }
}

void Search::BuildList(std::span<const RegisterOp> ops) {
  struct Event {
    uint64_t time;
    bool is_return;  // calls first at equal times: equal ticks overlap
    uint32_t op;
    bool operator<(const Event& o) const {
      if (time != o.time) return time < o.time;
      if (is_return != o.is_return) return !is_return;
      return op < o.op;
    }
  };
  std::vector<Event> events;
  for (uint32_t op = 0; op < size_; ++op) {
    events.push_back({ops[op].call, false, op});
    if (ops[op].ret != kUnknownReturn) {
      events.push_back({ops[op].ret, true, op});
      ++finite_;
    }
  }
  std::sort(events.begin(), events.end());
  const int32_t nodes = static_cast<int32_t>(events.size()) + 1;
  next_.resize(nodes);
  prev_.resize(nodes);
  match_.assign(nodes, -1);
  op_.assign(nodes, 0);
  is_call_.assign(nodes, false);
  std::vector<int32_t> call_node(size_, -1);
  for (int32_t node = 0; node < nodes; ++node) {
    prev_[node] = node - 1;
    next_[node] = node + 1 < nodes ? node + 1 : -1;
    if (node == 0) continue;
    const Event& event = events[node - 1];
    op_[node] = event.op;
    is_call_[node] = !event.is_return;
    if (event.is_return) {
      match_[call_node[event.op]] = node;
      match_[node] = call_node[event.op];
    } else {
      call_node[event.op] = node;
    }
  }
}

void Search::Flip(uint32_t op, int direction) {
  bits_[op / 64] ^= uint64_t{1} << (op % 64);
  hash_ ^= Mix(op);
  if (const int32_t u = unknown_index_[op]; u >= 0) {
    unknown_bits_[u / 64] ^= uint64_t{1} << (u % 64);
  }
  if (effect_[op] == RegisterEffect::kReadValue) readers_left_[value_[op]] -= direction;
  if (IsWrite(effect_[op])) writers_left_[value_[op]] -= direction;
}

int32_t Search::Candidates() {
  candidates_.clear();
  int32_t node = next_[0];
  for (; node > 0 && is_call_[node]; node = next_[node]) {
    const uint32_t op = op_[node];
    if (IsRead(effect_[op]) && Step(state_, effect_[op], value_[op])) return node;
    candidates_.push_back(node);
  }
  // While an operation with a return is not linearized, its return is in
  // the list.
  assert(node > 0);
  first_return_ = node;
  std::stable_sort(candidates_.begin(), candidates_.end(),
                   [&](int32_t a, int32_t b) { return ret_[op_[a]] < ret_[op_[b]]; });
  return -1;
}

// An operation of unknown outcome may as well never be linearized, so a
// state reached by linearizing one is no better than the state before it
// (with the same operations of known outcome and the same register, a
// subset of the same ways on). So one that changes nothing is not
// linearized, and neither is an operation right after one (U) that would
// reach the same register without U: linearizing it in U's place instead
// (tried from the state before U) reaches a state at least as good.
bool Search::Dominated(uint32_t op, Register after) const {
  if (unknown_index_[op] >= 0 && after == state_) return true;
  if (stack_.empty() || unknown_index_[op_[stack_.back().node]] < 0) return false;
  const std::optional<Register> without = Step(stack_.back().before, effect_[op], value_[op]);
  return without && *without == after;
}

void Search::NotePush() {
  if (stack_.size() <= best_.size()) return;
  best_.resize(stack_.size());
  for (size_t i = best_valid_; i < stack_.size(); ++i)
    best_[i] = op_[stack_[i].node];
  best_valid_ = stack_.size();
  blocked_ = -1;
}

Search::Push Search::TryLift(int32_t call, uint32_t index) {
  const uint32_t op = op_[call];
  const std::optional<Register> after = Step(state_, effect_[op], value_[op]);
  if (!after) return Push::kNotAllowed;
  if (prune_ && !IsRead(effect_[op]) && state_.present && readers_left_[state_.value] > 0 &&
      writers_left_[state_.value] == 0) {
    return Push::kNotAllowed;  // a read of the value held would be left unsatisfiable
  }
  if (Dominated(op, *after)) return Push::kNotAllowed;
  const Frame frame{call, index, state_, low_, high_};
  Flip(op, +1);
  high_ = std::max(high_, op + 1);
  while (low_ < size_ && (Linearized(low_) || unknown_index_[low_] >= 0))
    ++low_;
  key_.assign(unknown_bits_.begin(), unknown_bits_.end());
  key_.push_back(low_ / 64);
  for (size_t word = low_ / 64; word * 64 < high_; ++word)
    key_.push_back(bits_[word]);
  if (!cache_.Insert(hash_ ^ after->Hash(), key_, *after)) {
    Flip(op, -1);
    low_ = frame.low;
    high_ = frame.high;
    return Push::kSeen;  // explored from there already
  }
  if (cache_.size() > max_states_) return Push::kBudgetExceeded;
  stack_.push_back(frame);
  state_ = *after;
  Unlink(call);
  if (match_[call] >= 0) {
    Unlink(match_[call]);
    --finite_left_;
  }
  NotePush();
  return Push::kPushed;
}

bool Search::Backtrack(uint32_t* index) {
  while (!stack_.empty()) {
    const Frame top = stack_.back();
    stack_.pop_back();
    best_valid_ = std::min(best_valid_, stack_.size());
    Flip(op_[top.node], -1);
    state_ = top.before;
    low_ = top.low;
    high_ = top.high;
    if (match_[top.node] >= 0) {
      Relink(match_[top.node]);
      ++finite_left_;
    }
    Relink(top.node);
    // After a forced read fails, so has the state before it.
    if (top.index != kForced) {
      *index = top.index + 1;
      return true;
    }
  }
  return false;
}

RegisterSearchResult Search::Run() {
  for (uint32_t op = 0; prune_ && op < size_; ++op) {
    if (effect_[op] == RegisterEffect::kReadValue && writers_left_[value_[op]] == 0) {
      blocked_ = static_cast<int32_t>(op);
      RegisterSearchResult result = Finish(RegisterSearchResult::Outcome::kNotLinearizable);
      result.unwritten_value = true;
      return result;
    }
  }
  finite_left_ = finite_;
  uint32_t index = 0;  // the next candidate of the state to try
  while (finite_left_ > 0) {
    if (const int32_t read = Candidates(); read > 0) {
      const Push push = TryLift(read, kForced);
      if (push == Push::kBudgetExceeded)
        return Finish(RegisterSearchResult::Outcome::kBudgetExceeded);
      if (push == Push::kPushed) {
        index = 0;
        continue;
      }
      // Seen: the state it leads to failed, so this one fails.
    } else {
      Push push = Push::kNotAllowed;
      for (; index < candidates_.size(); ++index) {
        push = TryLift(candidates_[index], index);
        if (push == Push::kPushed || push == Push::kBudgetExceeded) break;
      }
      if (push == Push::kBudgetExceeded)
        return Finish(RegisterSearchResult::Outcome::kBudgetExceeded);
      if (push == Push::kPushed) {
        index = 0;
        continue;
      }
      if (blocked_ < 0 && stack_.size() == best_.size() && best_valid_ == best_.size()) {
        blocked_ = static_cast<int32_t>(op_[first_return_]);
      }
    }
    if (!Backtrack(&index)) return Finish(RegisterSearchResult::Outcome::kNotLinearizable);
  }
  return Finish(RegisterSearchResult::Outcome::kLinearizable);
}

RegisterSearchResult Search::Finish(RegisterSearchResult::Outcome outcome) {
  RegisterSearchResult result;
  result.outcome = outcome;
  result.states = cache_.size();
  if (outcome == RegisterSearchResult::Outcome::kNotLinearizable) {
    result.longest_prefix = std::move(best_);
    result.blocked = blocked_;
  }
  return result;
}

}  // namespace

RegisterSearchResult SearchRegister(std::span<const RegisterOp> ops, uint64_t max_states,
                                    bool prune) {
  return Search(ops, max_states, prune).Run();
}

}  // namespace dmidx::testing
