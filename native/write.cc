// See write.h.
#include "write.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "stat_call.h"
#include "workdir.h"

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

Landing::Landing(Landing&& other) noexcept { *this = std::move(other); }

Landing& Landing::operator=(Landing&& other) noexcept {
  if (this != &other) {
    close();
    state_ = other.state_;
    dir_ = std::move(other.dir_);
    file_ = std::move(other.file_);
    temp_name_ = std::move(other.temp_name_);
    final_name_ = std::move(other.final_name_);
    dev_ = other.dev_;
    ino_ = other.ino_;
    other.state_ = State::Closed;
  }
  return *this;
}

Landing::~Landing() { close(); }

Landing Landing::open(int workdir_fd, const std::string& inbox, Failure* failure) {
  Landing out;
  if (!one_component(inbox)) {
    failure->set(Code::UnsafeInbox);
    failure->detail = "the inbox must be one path component";
    return out;
  }
  if (workdir_missing(workdir_fd, failure)) return out;
  if (mkdirat(workdir_fd, inbox.c_str(), 0755) != 0 && errno != EEXIST) {
    failure->set(Code::IoError, errno);
    return out;
  }
  // O_NOFOLLOW: an inbox that is a symlink (planted by the agent) would redirect the write.
  Fd dir(retry_eintr([&] {
    return openat(workdir_fd, inbox.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }));
  if (!dir.valid()) {
    int err = errno;
    if (err == ELOOP || err == ENOTDIR) {
      failure->set(Code::UnsafeInbox);
      failure->detail = "'" + inbox + "' is a symlink or not a directory";
    } else {
      failure->set(Code::IoError, err);
    }
    return out;
  }
  for (int attempt = 0; attempt < 16; attempt++) {
    std::string suffix = random_suffix();
    if (suffix.empty()) {
      failure->set(Code::IoError, errno);
      return out;
    }
    std::string name = ".tmp-" + suffix;
    Fd file(retry_eintr([&] {
      return openat(dir.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    }));
    if (!file.valid()) {
      if (errno == EEXIST) continue;
      failure->set(Code::IoError, errno);
      return out;
    }
    struct stat st;
    if (stat_fd(file.get(), &st) != 0) {
      int err = errno;
      unlinkat(dir.get(), name.c_str(), 0);
      failure->set(Code::IoError, err);
      return out;
    }
    out.state_ = State::Writing;
    out.dir_ = std::move(dir);
    out.file_ = std::move(file);
    out.temp_name_ = std::move(name);
    out.dev_ = st.st_dev;
    out.ino_ = st.st_ino;
    return out;
  }
  failure->set(Code::IoError, EEXIST);
  return out;
}

Failure Landing::append(const unsigned char* data, size_t length) {
  Failure failure;
  if (state_ != State::Writing) {
    failure.set(Code::IoError, EBADF);
    failure.detail = "the landing is no longer open for writing";
    return failure;
  }
  size_t done = 0;
  while (done < length) {
    ssize_t n = retry_eintr([&] { return ::write(file_.get(), data + done, length - done); });
    if (n < 0) {
      failure.set(Code::IoError, errno);
      return failure;
    }
    if (n == 0) {
      failure.set(Code::IoError, EIO);
      failure.detail = "short write";
      return failure;
    }
    done += static_cast<size_t>(n);
  }
  return failure;
}

Failure Landing::commit(const std::string& final_name) {
  Failure failure;
  if (state_ != State::Writing) {
    failure.set(Code::IoError, EBADF);
    failure.detail = "the landing is no longer open for writing";
    return failure;
  }
  if (!one_component(final_name)) {
    failure.set(Code::UnsafeInbox);
    failure.detail = "a landed name must be one path component";
    return failure;
  }
  if (retry_eintr([&] { return fsync(file_.get()); }) != 0) {
    failure.set(Code::IoError, errno);
    return failure;
  }
  // renameat replaces a symlink at final_name rather than writing through it.
  if (renameat(dir_.get(), temp_name_.c_str(), dir_.get(), final_name.c_str()) != 0) {
    failure.set(Code::IoError, errno);
    return failure;
  }
  state_ = State::Committed;
  final_name_ = final_name;
  file_.reset();
  if (retry_eintr([&] { return fsync(dir_.get()); }) != 0) failure.set(Code::IoError, errno);
  return failure;
}

void Landing::abort() {
  if (state_ == State::Committed) {
    struct stat st;
    if (stat_at(dir_.get(), final_name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == dev_ &&
        st.st_ino == ino_)
      unlinkat(dir_.get(), final_name_.c_str(), 0);
    state_ = State::Closed;
  }
  close();
}

void Landing::close() {
  if (state_ == State::Writing) unlinkat(dir_.get(), temp_name_.c_str(), 0);
  state_ = State::Closed;
  file_.reset();
  dir_.reset();
}

}  // namespace rp
