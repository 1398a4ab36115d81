// The resolver. This file decides what may be opened; everything else in native/ only reads or
// writes descriptors this file produced. Comments here explain every refusal.
#include "resolve.h"

#include <fcntl.h>
#include <linux/limits.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <climits>
#include <deque>
#include <vector>

#include "stat_call.h"
#include "workdir.h"

namespace rp {

namespace {

// Kernel-side resolution fails with EAGAIN when any rename or mount anywhere on the host races a
// `..` step under RESOLVE_BENEATH. After a bounded retry the walk resolves the path instead (it
// keeps its own descriptors for `..` and never asks the kernel's rename sequence): a rename storm
// elsewhere on the host, a hostile neighbour's or a test suite's, slows a request but never fails
// it (resolve_fuzzer found 129 EAGAINs in a row while the vitest suite ran beside it).
constexpr int kOpenat2EagainRetries = 32;
// Symlinks followed in one resolution before giving up (the kernel's own limit is 40).
constexpr int kMaxLinks = 40;
// Components processed in one walk, link expansions included: bounds work on crafted targets.
// Set above anything the kernel resolves (the request's components plus kMaxLinks targets of at
// most PATH_MAX components each), so the walk never refuses what openat2 would open: at 4096, three
// in-root links of 2000 `./` components each named nothing under the walk (found by fuzz/native).
constexpr int kMaxSteps = static_cast<int>(kMaxComponents) + kMaxLinks * PATH_MAX;
// Directories the walk may stand in at once: each holds a descriptor. Link expansions can deepen
// a walk beyond the request's own components; past this it names nothing.
constexpr size_t kMaxWalkDepth = 512;

bool is_symlink_fd(int fd) {
  struct stat st;
  return stat_fd(fd, &st) == 0 && S_ISLNK(st.st_mode);
}

long raw_openat2(int dirfd, const char* path, struct open_how* how) {
  return syscall(SYS_openat2, dirfd, path, how, sizeof *how);
}

// Maps an openat2 errno to a code. ELOOP means "a symlink" under RESOLVE_NO_SYMLINKS (or with
// O_NOFOLLOW on the last component), and "too many links" (a loop) otherwise.
void map_open_errno(int err, SymlinkPolicy policy, Failure* failure) {
  switch (err) {
    case EXDEV:
      failure->set(Code::OutsideRoot);
      return;
    case ELOOP:
      // A loop never reaches a file: it names nothing, like a dangling link.
      failure->set(policy == SymlinkPolicy::Refuse ? Code::SymlinkRefused : Code::NotFound);
      return;
    case ENOENT:
    case ENOTDIR:
    case ENAMETOOLONG:
      failure->set(Code::NotFound);
      return;
    case ENXIO:     // open(2) on a UNIX socket
    case EISDIR:
    case ENODEV:
      failure->set(Code::NotARegularFile);
      return;
    default:
      failure->set(Code::IoError, err);
      return;
  }
}

Fd open_with_walk(int dirfd, const std::string& rel, int flags, SymlinkPolicy policy,
                  Failure* failure);

Fd open_with_openat2(int dirfd, const std::string& rel, int flags, SymlinkPolicy policy,
                     Failure* failure) {
  struct open_how how = {};
  how.flags = static_cast<unsigned long long>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  if (policy == SymlinkPolicy::Refuse) how.resolve |= RESOLVE_NO_SYMLINKS;
  for (int attempt = 0; attempt <= kOpenat2EagainRetries; attempt++) {
    long fd = raw_openat2(dirfd, rel.c_str(), &how);
    if (fd >= 0) return Fd(static_cast<int>(fd));
    if (errno == EINTR || errno == EAGAIN) continue;
    // Following links, ELOOP is not always a loop: the kernel keeps its link count across the
    // restart from RCU walk to ref walk, and a `..` at the root under RESOLVE_BENEATH always
    // restarts, so a path that follows more than 20 links and then escapes answers ELOOP or EXDEV
    // depending on what the dcache held (found by test/fuzz). The walk counts each link once;
    // it decides what the ELOOP was (a real loop is NotFound there too).
    if (errno == ELOOP && policy == SymlinkPolicy::Follow) {
      return open_with_walk(dirfd, rel, flags, policy, failure);
    }
    map_open_errno(errno, policy, failure);
    return Fd();
  }
  return open_with_walk(dirfd, rel, flags, policy, failure);
}

std::deque<std::string> split_components(const std::string& path) {
  std::deque<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

// Reads a symlink's target relative to `dirfd`. Returns false if `name` is not a symlink.
bool read_link(int dirfd, const std::string& name, std::string* target, int* err) {
  std::vector<char> buf(256);
  for (;;) {
    ssize_t n = readlinkat(dirfd, name.c_str(), buf.data(), buf.size());
    if (n < 0) {
      *err = errno;
      return false;
    }
    if (static_cast<size_t>(n) < buf.size()) {
      target->assign(buf.data(), static_cast<size_t>(n));
      return true;
    }
    if (buf.size() >= 65536) {
      *err = ENAMETOOLONG;
      return false;
    }
    buf.resize(buf.size() * 2);
  }
}

// The component walk. `stack` holds a descriptor for the root and one per directory entered, so
// `..` from a link target pops to a descriptor we already hold instead of asking the kernel.
// Called only through open_beneath, which has already refused an empty or absolute `rel`.
Fd open_with_walk(int dirfd, const std::string& rel, int flags, SymlinkPolicy policy,
                  Failure* failure) {
  std::vector<Fd> stack;
  auto current = [&]() { return stack.empty() ? dirfd : stack.back().get(); };
  std::deque<std::string> pending = split_components(rel);
  int links = 0;
  int steps = 0;
  while (!pending.empty()) {
    if (++steps > kMaxSteps) {
      failure->set(Code::NotFound);
      return Fd();
    }
    std::string name = std::move(pending.front());
    pending.pop_front();
    bool last = pending.empty();
    if (name.empty() || name == ".") {
      if (last) break;  // the target is the directory we stand in
      continue;
    }
    if (name == "..") {
      // Popping past the root is the one way a relative walk can escape; it is an escape.
      if (stack.empty()) {
        failure->set(Code::OutsideRoot);
        return Fd();
      }
      stack.pop_back();
      if (last) break;
      continue;
    }
    int fd;
    if (last) {
      fd = retry_eintr([&] { return openat(current(), name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC); });
    } else {
      // O_PATH: traversal needs search permission only, and opening has no side effects.
      fd = retry_eintr([&] {
        return openat(current(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      });
    }
    if (fd >= 0) {
      if (!last) {
        if (stack.size() >= kMaxWalkDepth) {
          close(fd);
          failure->set(Code::NotFound);
          return Fd();
        }
        stack.emplace_back(fd);
        continue;
      }
      // O_PATH|O_NOFOLLOW opens a final symlink itself instead of failing with ELOOP.
      if (!(flags & O_PATH) || !is_symlink_fd(fd)) return Fd(fd);
      close(fd);
      errno = ELOOP;
    }
    int open_err = errno;
    if (open_err != ELOOP && open_err != ENOTDIR) {
      map_open_errno(open_err, policy, failure);
      return Fd();
    }
    // ELOOP/ENOTDIR: either a symlink (O_NOFOLLOW refused it) or a non-directory in the middle.
    std::string target;
    int link_err = 0;
    if (!read_link(current(), name, &target, &link_err)) {
      if (link_err == EINVAL) {
        map_open_errno(open_err == ELOOP ? ENOTDIR : open_err, policy, failure);
      } else {
        map_open_errno(link_err, policy, failure);
      }
      return Fd();
    }
    if (policy == SymlinkPolicy::Refuse) {
      failure->set(Code::SymlinkRefused);
      return Fd();
    }
    if (++links > kMaxLinks) {
      failure->set(Code::NotFound);  // a loop, as openat2 reports it
      return Fd();
    }
    // Inside a sealed sandbox an absolute target names the agent's view, not a host path.
    if (target.empty()) {
      failure->set(Code::NotFound);
      return Fd();
    }
    if (target[0] == '/') {
      failure->set(Code::OutsideRoot);
      return Fd();
    }
    std::deque<std::string> expansion = split_components(target);
    pending.insert(pending.begin(), expansion.begin(), expansion.end());
  }
  // The walk ended on a directory (a link target ending in `.` or `..`): open it as the target.
  int fd = retry_eintr([&] { return openat(current(), ".", flags | O_CLOEXEC); });
  if (fd < 0) {
    map_open_errno(errno, policy, failure);
    return Fd();
  }
  return Fd(fd);
}

}  // namespace

bool openat2_available() {
  static const bool available = [] {
    struct open_how how = {};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH;
    long fd = raw_openat2(AT_FDCWD, ".", &how);
    if (fd >= 0) {
      close(static_cast<int>(fd));
      return true;
    }
    return false;  // ENOSYS (old kernel) or EPERM (a seccomp filter)
  }();
  return available;
}

Fd open_beneath(int dirfd, const std::string& rel, int flags, SymlinkPolicy policy,
                Resolver resolver, Failure* failure) {
  // Both resolvers refuse the same oversized requests: openat2 would say ENAMETOOLONG past
  // PATH_MAX, and the walk would otherwise hold one descriptor per component.
  if (rel.empty() || rel.size() >= PATH_MAX ||
      static_cast<size_t>(std::count(rel.begin(), rel.end(), '/')) >= kMaxComponents) {
    failure->set(Code::NotFound);
    return Fd();
  }
  if (rel[0] == '/') {
    failure->set(Code::OutsideRoot);
    return Fd();
  }
  if (resolver == Resolver::Openat2) return open_with_openat2(dirfd, rel, flags, policy, failure);
  return open_with_walk(dirfd, rel, flags, policy, failure);
}

Fd open_directory_following_links(const std::string& path, Failure* failure) {
  int fd = retry_eintr([&] { return open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); });
  if (fd < 0) {
    int err = errno;
    failure->set(err == ENOENT || err == ENOTDIR ? Code::NotFound : Code::IoError, err);
    return Fd();
  }
  return Fd(fd);
}

Fd open_root(int workdir_fd, const std::string& root, int flags, Resolver resolver,
             Failure* failure) {
  if (workdir_missing(workdir_fd, failure)) return Fd();
  std::string rel = root;
  while (rel.size() > 1 && rel.back() == '/') rel.pop_back();
  Fd fd = open_beneath(workdir_fd, rel, flags | O_DIRECTORY, SymlinkPolicy::Follow, resolver,
                       failure);
  if (!fd.valid() && failure->code == Code::NotARegularFile) failure->set(Code::NotFound);
  return fd;
}

}  // namespace rp
