// A read lease on one open file: the kernel's promise that no process has the file open for
// writing or holds a writable shared mapping of it (F_SETLEASE F_RDLCK is refused with EAGAIN
// otherwise), and that none can appear while the lease is held: a writer's open(2) or truncate(2)
// waits for the holder to let go (up to /proc/sys/fs/lease-break-time). This is what makes a
// cached digest trustworthy where stat data alone is not: a second write through an already
// dirty MAP_SHARED page changes the bytes without touching ctime or mtime (see STACK.md).
//
// It needs the file's owner or CAP_LEASE, fs.leases-enable, and a filesystem that supports
// leases; refused for any reason (EAGAIN, EACCES, EPERM, EINVAL, ENOLCK...), the caller hashes.
//
// Signals: the kernel notifies a lease holder of a pending break with a signal (SIGIO unless
// F_SETSIG says otherwise) sent to the owner that F_SETLEASE itself records (this process).
// SIGIO's default action would kill the server whenever the agent opened a listed file for
// writing. So F_SETSIG picks SIGURG first (ignored by default, and unused by Node and libuv), and
// right after the grant F_SETOWN 0 removes the owner, so no signal is sent at all; the holder
// polls for a break with F_GETLEASE instead (intact()).
#pragma once

namespace rp {

class ReadLease {
 public:
  // Tries to take a read lease on `fd`, which must be open O_RDONLY on a regular file.
  explicit ReadLease(int fd);
  ReadLease(const ReadLease&) = delete;
  ReadLease& operator=(const ReadLease&) = delete;
  ~ReadLease() { release(); }

  bool held() const { return held_; }
  // The errno that refused the lease (0 if it was granted).
  int refusal() const { return refusal_; }
  // True while the lease is held and no writer is waiting for it: once a writer's open starts a
  // break, F_GETLEASE reports F_UNLCK and this releases the lease at once (so the writer waits
  // no longer than the caller's next look) and returns false from then on.
  bool intact();
  // Whether a writer arrived while the lease was held.
  bool broken() const { return broken_; }
  void release();

 private:
  int fd_;
  bool held_ = false;
  bool broken_ = false;
  int refusal_ = 0;
};

}  // namespace rp
