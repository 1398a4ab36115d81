// Landing fetched bytes inside the workdir: the only place the addon writes. A temporary file is
// created exclusively inside the inbox directory (opened beneath the workdir descriptor with no
// symlink followed), written by the caller, flushed, then renamed into place; a crash leaves a
// temporary file, never a torn final one.
#pragma once

#include <string>

#include "codes.h"
#include "fd.h"

namespace rp {

struct TempFile {
  Failure failure;
  Fd dir;            // the inbox directory
  Fd file;           // the temporary file, open for writing
  std::string name;  // its name inside the inbox
};

// Creates `inbox` (one component) beneath the workdir if missing, refuses it if it is a symlink or
// not a directory (UnsafeInbox), and creates an exclusive temporary file inside it.
TempFile create_inbox_temp(int workdir_fd, const std::string& inbox);

// fsync the file, rename it to `final_name` inside the inbox, fsync the inbox. Closes nothing.
Failure commit_temp(int dir_fd, int file_fd, const std::string& temp_name,
                    const std::string& final_name);

// Removes the temporary file (best effort).
void discard_temp(int dir_fd, const std::string& temp_name);

}  // namespace rp
