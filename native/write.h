// Landing fetched bytes inside the workdir: the only place the addon writes. A Landing owns both
// of its descriptors, the inbox directory (opened beneath the workdir descriptor with no symlink
// followed) and an exclusive temporary file inside it, so nothing outside this file ever holds
// either. Its life is open -> append* -> commit (fsync, rename into place, fsync the inbox) or
// abort; a crash leaves a temporary file, never a torn final one, and a Landing destroyed before
// commit removes its temporary file.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "codes.h"
#include "fd.h"

namespace rp {

class Landing {
 public:
  Landing() = default;
  Landing(const Landing&) = delete;
  Landing& operator=(const Landing&) = delete;
  Landing(Landing&& other) noexcept;
  Landing& operator=(Landing&& other) noexcept;
  // close(): an uncommitted temporary file is removed, both descriptors are closed.
  ~Landing();

  // Creates `inbox` (one component) beneath the workdir if missing, refuses it if it is a symlink
  // or not a directory (UnsafeInbox), and creates an exclusive temporary file inside it. A
  // `workdir_fd` of -1 (the caller holds no workdir: workdir.h) is IoError, EBADF.
  static Landing open(int workdir_fd, const std::string& inbox, Failure* failure);

  // Appends all `length` bytes to the temporary file (short writes and EINTR are retried).
  Failure append(const unsigned char* data, size_t length);

  // fsync the file, rename it to `final_name` (one component) inside the inbox, fsync the inbox.
  // The file descriptor is closed; the inbox descriptor is kept so that abort() can undo.
  Failure commit(const std::string& final_name);

  // Undoes the landing and closes both descriptors: before commit the temporary file is removed;
  // after it, the landed name is removed if it still names the file this landing wrote (an inode
  // check, so a file the agent put there since is left alone). Best effort; idempotent.
  void abort();

  // Closes both descriptors; an uncommitted temporary file is removed. Idempotent.
  void close();

 private:
  enum class State { Closed, Writing, Committed };

  State state_ = State::Closed;
  Fd dir_;                  // the inbox directory
  Fd file_;                 // the temporary file, open for writing until commit
  std::string temp_name_;   // its name inside the inbox
  std::string final_name_;  // set by commit
  dev_t dev_ = 0;           // the temporary file's identity, for abort() after commit
  ino_t ino_ = 0;
};

}  // namespace rp
