// Stable outcome codes shared by every native operation. These names cross the Node-API boundary
// as strings and are mapped to wire codes by src/codes.ts (NATIVE_TO_CODE); renaming one is a breaking change.
#pragma once

#include <string>

namespace rp {

enum class Code {
  Ok = 0,
  NotFound,          // nothing by that name beneath the root (or the root itself is missing)
  OutsideRoot,       // resolution would leave the root: `..` escape, absolute link, magic link
  SymlinkRefused,    // a symlink was met and the policy refuses symlinks (scoped)
  NotARegularFile,   // directory, FIFO, socket, device
  TooLarge,          // above the caller's byte ceiling, by fstat or by what the read returned
  UnsafeInbox,       // the landing directory is a symlink or not a directory
  Cancelled,         // the caller's cancel token was set (client gone, shutdown) before it finished
  TimeBudget,        // the operation ran past the monotonic deadline its caller gave it
  FileChanged,       // a streamed body no longer matches the etag promised for it (stream.h)
  IoError,           // anything else; `detail` says what. Keep last: addon.cc iterates up to it.
};

// The stable string for a code; `E_UNKNOWN_<n>` for a value outside the table so a future code
// can never cross the boundary as an empty or misleading name.
std::string code_name(Code code);

// What an operation reports when it fails: the code and, for IoError, the errno behind it.
struct Failure {
  Code code = Code::Ok;
  int err = 0;
  std::string detail;

  bool failed() const { return code != Code::Ok; }
  void set(Code c, int e = 0);
};

// Human text for an errno, lower-cased and without a trailing period ("permission denied").
std::string errno_text(int err);

}  // namespace rp
