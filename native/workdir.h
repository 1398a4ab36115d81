// The workdir every export operation and the landing resolve beneath, as one counted owner of its
// directory descriptor (Go's os.Root and its incref/decref). JS holds a Workdir (bind_exports.cc);
// each operation takes a reference on the JS thread when it is queued and drops it when it is done,
// and the descriptor is closed with the last reference. So a session that closes its workdir while
// a listing still runs cannot let the kernel hand that number to another directory under the
// listing: the number stays taken until nothing uses it. Syscalls only.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <memory>
#include <utility>

#include "codes.h"
#include "fd.h"
#include "stat_call.h"

namespace rp {

class Workdir {
 public:
  explicit Workdir(Fd fd) : fd_(std::move(fd)) {}
  Workdir(const Workdir&) = delete;
  Workdir& operator=(const Workdir&) = delete;
  int fd() const { return fd_.get(); }

 private:
  Fd fd_;
};

// One reference. Not std::make_shared: see CancelTokenHandle in bind_exports.cc (the libstdc++ floor).
using WorkdirRef = std::shared_ptr<const Workdir>;

// Takes over `fd` if it is an open directory; otherwise null with `*err` set, and `fd` untouched.
inline WorkdirRef adopt_workdir(int fd, int* err) {
  struct stat st;
  if (stat_fd(fd, &st) != 0) {
    *err = errno;
    return nullptr;
  }
  if (!S_ISDIR(st.st_mode)) {
    *err = ENOTDIR;
    return nullptr;
  }
  return WorkdirRef(new Workdir(Fd(fd)));
}

// For a descriptor number a caller passes and keeps: a duplicate of its own (F_DUPFD_CLOEXEC), so
// the caller closing its number while the operation is queued changes nothing. Null if dup fails.
inline WorkdirRef duplicate_workdir(int fd) {
  Fd dup(fcntl(fd, F_DUPFD_CLOEXEC, 0));
  return dup.valid() ? WorkdirRef(new Workdir(std::move(dup))) : nullptr;
}

// The descriptor an operation holding `workdir` resolves beneath; -1 when it holds none.
inline int workdir_fd(const WorkdirRef& workdir) { return workdir ? workdir->fd() : -1; }

// True, with IoError (EBADF) set, when an operation holds no workdir: the Workdir it was given was
// closed, or the number it was given could not be duplicated (not open).
inline bool workdir_missing(int workdir_fd, Failure* failure) {
  if (workdir_fd >= 0) return false;
  failure->set(Code::IoError, EBADF);
  failure->detail = "the workdir is closed";
  return true;
}

}  // namespace rp
