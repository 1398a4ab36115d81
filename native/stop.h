// When a long operation must stop early. A listing hashes whole files and a capsule can make a
// 1 TiB sparse file for free, so the hash loops (and the read loop) ask this between chunks:
// a cancel flag the caller can set from JS at any time (client gone, session shutting down), and
// a deadline on the monotonic clock (a listing's time budget). Checking costs an atomic load and
// a vDSO clock read per chunk of at most a few MiB, so a worker notices within milliseconds.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "codes.h"

namespace rp {

// The flag behind a JS CancelToken; shared so a worker keeps it alive after JS drops the token.
using CancelFlag = std::shared_ptr<std::atomic<bool>>;

inline int64_t monotonic_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct StopSignal {
  CancelFlag cancel;          // null: nobody can cancel
  int64_t deadline_ns = 0;    // CLOCK_MONOTONIC; 0: no deadline
  uint64_t budget_ms = 0;     // the budget the deadline came from, for the message
  const char* operation = "operation";  // "listing", "read": names it in the detail

  // A deadline `budget_ms` from now (the moment the caller asked, not when a pool thread is free:
  // time spent queued behind other work counts against the budget).
  void set_budget(uint64_t ms) {
    budget_ms = ms;
    deadline_ns = monotonic_ns() + static_cast<int64_t>(ms) * 1000000;
  }

  // True (with Cancelled or TimeBudget set on `failure`) when the operation must stop now.
  bool should_stop(Failure* failure) const {
    if (cancel && cancel->load(std::memory_order_relaxed)) {
      failure->set(Code::Cancelled);
      failure->detail = std::string("the ") + operation + " was cancelled";
      return true;
    }
    if (deadline_ns != 0 && monotonic_ns() >= deadline_ns) {
      failure->set(Code::TimeBudget);
      failure->detail = std::string("the ") + operation + " exceeded its time budget of " +
                        std::to_string(budget_ms) + " ms";
      return true;
    }
    return false;
  }
};

// True for the two codes that end a whole operation rather than skip one entry.
inline bool is_stop(Code code) { return code == Code::Cancelled || code == Code::TimeBudget; }

}  // namespace rp
