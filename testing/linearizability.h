// An exact linearizability checker for histories of LoggedOp records
// (testing/history.h): Wing & Gong's search with Lowe's memoization, the
// algorithm Porcupine implements (testing/register_search.h).
//
// Each key is an independent register, "absent" or "present with value v",
// initially absent; keys are checked one at a time (a history is
// linearizable iff each key's sub-history is, so scans, which are not atomic
// across keys, become one read per key they vouch for). Operation A precedes
// B iff A.end < B.start; equal ticks overlap.
//
// What each logged operation means for its key:
//   Insert Ok                 present(value), always allowed (an upsert)
//   Update Ok                 requires present; present(value)
//   Update NotFound           requires absent
//   Delete Ok                 requires present; absent
//   Delete NotFound           requires absent
//   Lookup Ok / NotFound      requires present(value) / absent
//   a mutation that returned Unavailable, DeadlineExceeded, IoError or
//   Internal                  outcome unknown: it took effect as its Ok form
//                             (if that form's requirement held) at some point
//                             after its call, or never; it never has to
//                             be linearized for the search to end
//   a pending mutation        (LoggedOp::pending: its caller died during
//                             it) the same, whatever it returned
//   a pending read or scan    dropped, whatever it returned
//   ScanRange / ScanCount Ok  after a shape check (CheckScanShape, and at
//                             most `count` pairs), a read of every key the
//                             scan vouches for over the scan's interval: a
//                             returned key reads present(value), a vouched
//                             key not returned reads absent. A range scan
//                             vouches for [from, to]; a count scan for keys
//                             from `from` up to its last key when it returned
//                             `count` pairs (none for count 0), else up to
//                             max_key.
//   anything else             dropped (it changed nothing): other codes of
//                             mutations (InvalidArgument, FailedPrecondition,
//                             ResourceExhausted, Aborted, DataLoss, ...) and
//                             reads or scans with codes other than the above
//
// Unlike CheckReads (history.h), which judges each read alone against the
// writes, this finds one order of all operations of a key that explains
// every result at once, and needs no unique values. The search is
// exponential in the worst case (in how many operations of one key overlap);
// max_states_per_key bounds it. Histories of the index suites' shape (18
// contexts, a few hundred operations each, tens of keys) take milliseconds.
#ifndef DMIDX_TESTING_LINEARIZABILITY_H_
#define DMIDX_TESTING_LINEARIZABILITY_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "testing/history.h"

namespace dmidx::testing {

struct LinearizabilityOptions {
  // The largest key. A ScanCount that returned fewer than `count` pairs
  // vouches for every key from its start up to here (one that returned
  // `count` pairs: up to its last key).
  uint64_t max_key = UINT64_MAX;
  // Search states (distinct pairs of linearized set and register state) one
  // key may reach. A key that needs more is reported as an error, not as a
  // pass. A state costs about a microsecond and 80 bytes: the default bounds
  // one key to about a second and 80 MB.
  uint64_t max_states_per_key = 1'000'000;
};

struct LinearizabilityReport {
  bool ok = true;   // every key's history is linearizable, no scan is malformed, no budget ran out
  size_t keys = 0;  // keys checked
  size_t ops = 0;   // per-key operations checked (a scan: one per key returned, and one per
                    // vouched key that some mutation touched; other keys are trivially absent)
  size_t states = 0;                // search states explored, summed over the keys
  size_t error_count = 0;           // errors found
  std::vector<std::string> errors;  // the first 10: "key 7: not linearizable: ..." with the key's
                                    // operations; a scan's shape; "key 9: search budget ..."
  std::string ToString() const;     // the counts on one line
};

// Checks the operations of every log in `logs` (one log per client context,
// ticks of one global clock).
LinearizabilityReport CheckLinearizable(std::span<const std::vector<LoggedOp>> logs,
                                        const LinearizabilityOptions& options = {});

}  // namespace dmidx::testing

#endif  // DMIDX_TESTING_LINEARIZABILITY_H_
