// See write.h.
#include "write.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace rp {

namespace {

bool one_component(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

std::string random_suffix() {
  unsigned char raw[12];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return "";
    }
    got += static_cast<size_t>(n);
  }
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : raw) {
    out.push_back(hex[b >> 4]);
    out.push_back(hex[b & 15]);
  }
  return out;
}

}  // namespace

TempFile create_inbox_temp(int workdir_fd, const std::string& inbox) {
  TempFile out;
  if (!one_component(inbox)) {
    out.failure.set(Code::UnsafeInbox);
    out.failure.detail = "the inbox must be one path component";
    return out;
  }
  if (mkdirat(workdir_fd, inbox.c_str(), 0755) != 0 && errno != EEXIST) {
    out.failure.set(Code::IoError, errno);
    return out;
  }
  // O_NOFOLLOW: an inbox that is a symlink (planted by the agent) would redirect the write.
  int dir = retry_eintr([&] {
    return openat(workdir_fd, inbox.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  });
  if (dir < 0) {
    int err = errno;
    if (err == ELOOP || err == ENOTDIR) {
      out.failure.set(Code::UnsafeInbox);
      out.failure.detail = "'" + inbox + "' is a symlink or not a directory";
    } else {
      out.failure.set(Code::IoError, err);
    }
    return out;
  }
  out.dir.reset(dir);
  for (int attempt = 0; attempt < 16; attempt++) {
    std::string suffix = random_suffix();
    if (suffix.empty()) {
      out.failure.set(Code::IoError, errno);
      return out;
    }
    std::string name = ".tmp-" + suffix;
    int fd = retry_eintr([&] {
      return openat(out.dir.get(), name.c_str(),
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    });
    if (fd >= 0) {
      out.file.reset(fd);
      out.name = name;
      return out;
    }
    if (errno != EEXIST) {
      out.failure.set(Code::IoError, errno);
      return out;
    }
  }
  out.failure.set(Code::IoError, EEXIST);
  return out;
}

Failure commit_temp(int dir_fd, int file_fd, const std::string& temp_name,
                    const std::string& final_name) {
  Failure failure;
  if (!one_component(final_name) || !one_component(temp_name)) {
    failure.set(Code::UnsafeInbox);
    failure.detail = "a landed name must be one path component";
    return failure;
  }
  if (retry_eintr([&] { return fsync(file_fd); }) != 0) {
    failure.set(Code::IoError, errno);
    return failure;
  }
  // renameat replaces a symlink at final_name rather than writing through it.
  if (renameat(dir_fd, temp_name.c_str(), dir_fd, final_name.c_str()) != 0) {
    failure.set(Code::IoError, errno);
    return failure;
  }
  if (retry_eintr([&] { return fsync(dir_fd); }) != 0) failure.set(Code::IoError, errno);
  return failure;
}

void discard_temp(int dir_fd, const std::string& temp_name) {
  if (one_component(temp_name)) unlinkat(dir_fd, temp_name.c_str(), 0);
}

}  // namespace rp
