// See lease.h.
#include "lease.h"

#include <fcntl.h>
#include <signal.h>

#include <cerrno>

namespace rp {

ReadLease::ReadLease(int fd) : fd_(fd) {
  if (fcntl(fd_, F_SETSIG, SIGURG) != 0 || fcntl(fd_, F_SETLEASE, F_RDLCK) != 0) {
    refusal_ = errno;
    return;
  }
  held_ = true;
  fcntl(fd_, F_SETOWN, 0);  // no owner: a break is never signalled (see lease.h)
}

bool ReadLease::intact() {
  if (!held_) return false;
  if (fcntl(fd_, F_GETLEASE) == F_RDLCK) return true;
  broken_ = true;
  release();
  return false;
}

void ReadLease::release() {
  if (!held_) return;
  held_ = false;
  fcntl(fd_, F_SETLEASE, F_UNLCK);  // fails only if the kernel already revoked it: same outcome
}

}  // namespace rp
