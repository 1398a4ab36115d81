// What every export operation (read, stat, list) is asked to do, as one value: which workdir (a
// counted reference, held for the whole operation: workdir.h), which declared root beneath it,
// which file beneath that, under which symlink policy and resolver, and within which byte ceiling.
// bind_exports.cc fills it from a named-options object; the syscall files take it whole, so adding
// a field never reorders a parameter list.
#pragma once

#include <cstdint>
#include <string>

#include "resolve.h"
#include "stop.h"
#include "workdir.h"

namespace rp {

struct ExportRequest {
  // Taken on the JS thread when the operation is queued; null (the operation fails) when there was
  // none to take. Its descriptor stays open, and its number taken, until the request is gone.
  WorkdirRef workdir;
  int workdir_fd() const { return rp::workdir_fd(workdir); }
  std::string root;      // the declared root, verbatim; opened beneath the workdir on every call
  std::string rel;       // lowered relpath beneath the root (read, stat); unused by list
  SymlinkPolicy policy = SymlinkPolicy::Follow;
  Resolver resolver = Resolver::Openat2;
  uint64_t max_bytes = 0;  // read's ceiling, by fstat; stat and list ignore it (a listing hashes whole files)
  StopSignal stop;         // cancel token and deadline, asked between chunks (read, list)
};

}  // namespace rp
