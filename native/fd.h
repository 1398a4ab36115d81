// A descriptor owned by exactly one scope. Every descriptor the addon opens lives in one of these
// (or is handed to JS explicitly with release()), which is how "no descriptor leaks" is kept on
// every early return.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace rp {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) {
    // close() is not retried on EINTR: on Linux the descriptor is gone either way.
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Retries a syscall wrapper while it fails with EINTR.
template <typename F>
auto retry_eintr(F&& f) -> decltype(f()) {
  decltype(f()) r;
  do {
    r = f();
  } while (r < 0 && errno == EINTR);
  return r;
}

}  // namespace rp
