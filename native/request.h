// What every export operation (read, stat, list) is asked to do, as one value: which workdir, which
// declared root beneath it, which file beneath that, under which symlink policy and resolver, and
// within which byte ceiling. bind_exports.cc fills it from a named-options object; the syscall files
// take it whole, so adding a field never reorders a parameter list.
#pragma once

#include <cstdint>
#include <string>

#include "fd.h"
#include "resolve.h"
#include "stop.h"

namespace rp {

struct ExportRequest {
  int workdir_fd = -1;
  // Set by hold_workdir for an operation that runs on the pool: workdir_fd is then this duplicate.
  Fd workdir_held;
  std::string root;      // the declared root, verbatim; opened beneath workdir_fd on every call
  std::string rel;       // lowered relpath beneath the root (read, stat); unused by list
  SymlinkPolicy policy = SymlinkPolicy::Follow;
  Resolver resolver = Resolver::Openat2;
  uint64_t max_bytes = 0;  // read's ceiling; stat and list ignore it (a listing hashes whole files)
  // read only: memory the caller can hold for this file now; 0 means no limit. A larger file is
  // refused (OverBudget) after the fstat and before any buffer is allocated.
  uint64_t budget_bytes = 0;
  // read only: caller-owned memory to read into instead of a fresh allocation (a reused buffer),
  // alive for the whole call. Never smaller than the most the read may take (the binding checks).
  unsigned char* into = nullptr;
  size_t into_capacity = 0;
  StopSignal stop;         // cancel token and deadline, asked between chunks (read, list)
};

// Makes `req` use a duplicate of its workdir descriptor, owned by the request, for as long as the
// operation runs (see duplicate() in fd.h). A failed dup leaves -1: the operation fails EBADF.
inline void hold_workdir(ExportRequest* req) {
  req->workdir_held = duplicate(req->workdir_fd);
  req->workdir_fd = req->workdir_held.valid() ? req->workdir_held.get() : -1;
}

}  // namespace rp
