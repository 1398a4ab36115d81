// Landlock self-confinement, the syscall side: the ruleset, restricting the main thread, and the
// re-exec that carries the domain to every thread (with no descriptor but stdio crossing it). The
// UAPI structures and constants are restated here (under our own names) because the build host's
// linux/landlock.h may predate the ABI the running kernel offers; the kernel accepts them by size,
// so a ruleset never asks for more than the ABI it detected. bind_landlock.cc is the JS side.
#include "landlock.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fd.h"
#include "stat_call.h"

namespace rp {

namespace {

// ── UAPI (include/uapi/linux/landlock.h) ────────────────────────────────────────────────────────

struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;  // ABI 4
  uint64_t scoped;              // ABI 6
};

struct __attribute__((packed)) PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
};

struct NetPortAttr {
  uint64_t allowed_access;
  uint64_t port;
};

constexpr uint32_t kCreateRulesetVersion = 1U << 0;
constexpr int kRulePathBeneath = 1;
constexpr int kRuleNetPort = 2;

constexpr uint64_t kFsExecute = 1ULL << 0;
constexpr uint64_t kFsWriteFile = 1ULL << 1;
constexpr uint64_t kFsReadFile = 1ULL << 2;
constexpr uint64_t kFsRefer = 1ULL << 13;     // ABI 2
constexpr uint64_t kFsTruncate = 1ULL << 14;  // ABI 3
constexpr uint64_t kFsIoctlDev = 1ULL << 15;  // ABI 5
constexpr uint64_t kFsAbi1 = (1ULL << 13) - 1;
// Only these apply to a rule whose path is not a directory; anything more is EINVAL.
constexpr uint64_t kFsFileRights = kFsExecute | kFsWriteFile | kFsReadFile | kFsTruncate | kFsIoctlDev;

constexpr uint64_t kNetBindTcp = 1ULL << 0;     // ABI 4
constexpr uint64_t kNetConnectTcp = 1ULL << 1;  // ABI 4

constexpr uint64_t kScopeAbstractUnixSocket = 1ULL << 0;  // ABI 6
constexpr uint64_t kScopeSignal = 1ULL << 1;              // ABI 6

// Bit order: index i names 1 << i.
const char* const kFsRightNames[] = {
    "execute",   "write_file", "read_file", "read_dir",   "remove_dir", "remove_file",
    "make_char", "make_dir",   "make_reg",  "make_sock",  "make_fifo",  "make_block",
    "make_sym",  "refer",      "truncate",  "ioctl_dev",
};
constexpr size_t kFsRightCount = sizeof kFsRightNames / sizeof kFsRightNames[0];

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

long create_ruleset(const RulesetAttr* attr, size_t size, uint32_t flags) {
  return syscall(SYS_landlock_create_ruleset, attr, size, flags);
}

long add_rule(int ruleset_fd, int type, const void* attr) {
  return syscall(SYS_landlock_add_rule, ruleset_fd, type, attr, 0U);
}

uint64_t handled_fs_for(int abi) {
  uint64_t mask = kFsAbi1;
  if (abi >= 2) mask |= kFsRefer;
  if (abi >= 3) mask |= kFsTruncate;
  if (abi >= 5) mask |= kFsIoctlDev;
  return mask;
}

// Opens a rule's path as a path-only descriptor, refusing a symlink in any component (openat2's
// RESOLVE_NO_SYMLINKS); where openat2 is unavailable, only the last component can be checked
// (O_NOFOLLOW), which is why callers pass paths they resolved themselves.
Fd open_rule_path(const LandlockPathRule& rule, int* err) {
  const int flags = O_PATH | O_CLOEXEC | (rule.directory ? O_DIRECTORY : 0);
  struct open_how how;
  std::memset(&how, 0, sizeof how);
  how.flags = static_cast<uint64_t>(flags);
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = retry_eintr([&] { return syscall(SYS_openat2, AT_FDCWD, rule.path.c_str(), &how, sizeof how); });
  if (fd < 0 && (errno == ENOSYS || errno == EPERM)) {
    fd = retry_eintr([&] { return static_cast<long>(open(rule.path.c_str(), flags | O_NOFOLLOW)); });
  }
  if (fd < 0) {
    *err = errno;
    return Fd();
  }
  Fd owned(static_cast<int>(fd));
  struct stat st;
  if (stat_fd(owned.get(), &st) != 0) {
    *err = errno;
    return Fd();
  }
  // A directory rule must be a directory (O_DIRECTORY saw to it); a file rule must be neither a
  // directory nor the link itself (the fallback's O_PATH|O_NOFOLLOW opens a link as a link).
  if (!rule.directory && (S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode))) {
    *err = S_ISDIR(st.st_mode) ? EISDIR : ELOOP;
    return Fd();
  }
  return owned;
}

#ifndef SYS_close_range
#define SYS_close_range 436  // the same number on x86_64 and arm64
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

// Marks every descriptor above stderr close-on-exec; 0 or an errno. One close_range call on Linux
// 5.11+. Before that (ENOSYS, or EINVAL for the unknown flag) each possible descriptor number is
// marked in turn, up to the hard RLIMIT_NOFILE (a descriptor can sit above a lowered soft limit).
// /proc/self/fd is no help here: the domain is already in force and does not grant /proc.
int cloexec_above_stdio() {
  if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return 0;
  if (errno != ENOSYS && errno != EINVAL) return errno;
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return errno;
  rlim_t end = limit.rlim_max;
  if (end == RLIM_INFINITY || end > (1U << 20)) end = 1U << 20;  // the kernel's default fs.nr_open
  if (end < limit.rlim_cur && limit.rlim_cur != RLIM_INFINITY) end = limit.rlim_cur;
  for (rlim_t fd = 3; fd < end; fd++) {
    int flags = fcntl(static_cast<int>(fd), F_GETFD);
    if (flags < 0 || (flags & FD_CLOEXEC)) continue;  // not open, or marked already
    if (fcntl(static_cast<int>(fd), F_SETFD, flags | FD_CLOEXEC) != 0) return errno;
  }
  return 0;
}

LandlockOutcome fail(LandlockOutcome out, LandlockCode code, int err, std::string detail) {
  out.code = code;
  out.err = err;
  out.detail = std::move(detail);
  return out;
}

std::string with_errno(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

}  // namespace

std::string landlock_code_name(LandlockCode code) {
  switch (code) {
    case LandlockCode::Ok: return "OK";
    case LandlockCode::Unsupported: return "LANDLOCK_UNSUPPORTED";
    case LandlockCode::Disabled: return "LANDLOCK_DISABLED";
    case LandlockCode::NotMainThread: return "NOT_MAIN_THREAD";
    case LandlockCode::RulePathUnavailable: return "RULE_PATH_UNAVAILABLE";
    case LandlockCode::RulesetFailed: return "RULESET_FAILED";
    case LandlockCode::NoNewPrivsFailed: return "NO_NEW_PRIVS_FAILED";
    case LandlockCode::RestrictFailed: return "RESTRICT_FAILED";
    case LandlockCode::ExecFailed: return "EXEC_FAILED";
  }
  return "E_UNKNOWN_" + std::to_string(static_cast<int>(code));
}

uint64_t landlock_fs_right(const std::string& name) {
  for (size_t i = 0; i < kFsRightCount; i++)
    if (name == kFsRightNames[i]) return 1ULL << i;
  return 0;
}

std::vector<std::string> landlock_fs_right_names(uint64_t mask) {
  std::vector<std::string> names;
  for (size_t i = 0; i < kFsRightCount; i++)
    if (mask & (1ULL << i)) names.emplace_back(kFsRightNames[i]);
  return names;
}

std::vector<std::string> landlock_net_right_names(uint64_t mask) {
  std::vector<std::string> names;
  if (mask & kNetBindTcp) names.emplace_back("bind_tcp");
  if (mask & kNetConnectTcp) names.emplace_back("connect_tcp");
  return names;
}

std::vector<std::string> landlock_scope_names(uint64_t mask) {
  std::vector<std::string> names;
  if (mask & kScopeAbstractUnixSocket) names.emplace_back("abstract_unix_socket");
  if (mask & kScopeSignal) names.emplace_back("signal");
  return names;
}

int landlock_abi(int* err) {
  long abi = create_ruleset(nullptr, 0, kCreateRulesetVersion);
  if (abi < 0) {
    *err = errno;
    return 0;
  }
  *err = 0;
  return static_cast<int>(abi);
}

LandlockOutcome landlock_restrict_self(const LandlockPlan& plan) {
  LandlockOutcome out;
  // Only the calling thread enters the domain; the caller's design (restrict, then execve from
  // this same thread) relies on that thread being the main one.
  if (syscall(SYS_gettid) != getpid())
    return fail(out, LandlockCode::NotMainThread, 0, "the confinement must be applied from the main thread");

  int err = 0;
  out.abi = landlock_abi(&err);
  if (out.abi <= 0) {
    if (err == ENOSYS) return fail(out, LandlockCode::Unsupported, err, "the kernel has no Landlock");
    if (err == EOPNOTSUPP) return fail(out, LandlockCode::Disabled, err, "Landlock is not enabled in this kernel");
    return fail(out, LandlockCode::RulesetFailed, err, with_errno("the Landlock ABI could not be read", err));
  }

  RulesetAttr attr;
  std::memset(&attr, 0, sizeof attr);
  size_t attr_size = sizeof attr.handled_access_fs;
  attr.handled_access_fs = handled_fs_for(out.abi);
  if (out.abi >= 4) {
    attr_size += sizeof attr.handled_access_net;
    attr.handled_access_net = kNetBindTcp | (plan.restrict_connect ? kNetConnectTcp : 0);
  }
  if (out.abi >= 6) {
    attr_size += sizeof attr.scoped;
    attr.scoped = kScopeAbstractUnixSocket | kScopeSignal;
  }
  out.handled_fs = attr.handled_access_fs;
  out.handled_net = attr.handled_access_net;
  out.scoped = attr.scoped;

  Fd ruleset(static_cast<int>(create_ruleset(&attr, attr_size, 0)));
  if (!ruleset.valid()) {
    int e = errno;
    return fail(out, LandlockCode::RulesetFailed, e, with_errno("landlock_create_ruleset", e));
  }

  for (size_t i = 0; i < plan.paths.size(); i++) {
    const LandlockPathRule& rule = plan.paths[i];
    int open_err = 0;
    Fd parent = open_rule_path(rule, &open_err);
    if (!parent.valid()) {
      if (rule.optional) {
        out.skipped.push_back({i, open_err});
        continue;
      }
      return fail(out, LandlockCode::RulePathUnavailable, open_err, with_errno(rule.path, open_err));
    }
    // A right the ABI does not handle cannot be granted (EINVAL), and is not restricted either.
    uint64_t access = rule.access & attr.handled_access_fs;
    if (!rule.directory) access &= kFsFileRights;
    if (access == 0) continue;
    PathBeneathAttr beneath;
    beneath.allowed_access = access;
    beneath.parent_fd = parent.get();
    if (add_rule(ruleset.get(), kRulePathBeneath, &beneath) != 0) {
      int e = errno;
      return fail(out, LandlockCode::RulesetFailed, e, with_errno("landlock_add_rule " + rule.path, e));
    }
  }  // each parent descriptor is closed as its iteration ends

  if (out.abi >= 4) {
    auto add_port = [&](uint16_t port, uint64_t access) -> bool {
      NetPortAttr net;
      net.allowed_access = access;
      net.port = port;  // 0 with bind: the kernel's ephemeral range
      return add_rule(ruleset.get(), kRuleNetPort, &net) == 0;
    };
    for (uint16_t port : plan.bind_ports) {
      if (!add_port(port, kNetBindTcp)) {
        int e = errno;
        return fail(out, LandlockCode::RulesetFailed, e, with_errno("landlock_add_rule bind port " + std::to_string(port), e));
      }
    }
    if (plan.restrict_connect) {
      for (uint16_t port : plan.connect_ports) {
        if (!add_port(port, kNetConnectTcp)) {
          int e = errno;
          return fail(out, LandlockCode::RulesetFailed, e, with_errno("landlock_add_rule connect port " + std::to_string(port), e));
        }
      }
    }
  }

  // Required without CAP_SYS_ADMIN, and what keeps a set-uid program from running inside the
  // domain with privileges it could abuse.
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    int e = errno;
    return fail(out, LandlockCode::NoNewPrivsFailed, e, with_errno("prctl(PR_SET_NO_NEW_PRIVS)", e));
  }
  if (syscall(SYS_landlock_restrict_self, ruleset.get(), 0U) != 0) {
    int e = errno;
    return fail(out, LandlockCode::RestrictFailed, e, with_errno("landlock_restrict_self", e));
  }
  return out;  // the ruleset descriptor closes here; the domain lives on in the thread's credentials
}

LandlockOutcome replace_process_image(const std::string& path, const std::vector<std::string>& argv,
                                      const std::vector<std::string>& env, const std::vector<int>& keep) {
  LandlockOutcome out;
  // execve keeps only the calling thread: the one in the domain must be the one that calls it.
  if (syscall(SYS_gettid) != getpid())
    return fail(out, LandlockCode::NotMainThread, 0, "execve must be called from the main thread");
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // Node leaves the descriptors it inherited as the launcher passed them (only its own are
  // close-on-exec), so one the launcher held open on a file outside the workdir would reach the
  // confined image, where Landlock checks opens, not descriptors already held. Nothing but stdio
  // crosses: the handoff travels in the environment.
  int err = cloexec_above_stdio();
  if (err != 0) return fail(out, LandlockCode::ExecFailed, err, with_errno("marking descriptors close-on-exec", err));
  // Node marks 0-2 close-on-exec itself; the new image must keep its stdin, stdout and stderr (the
  // launcher's pipes or terminal).
  for (int fd = 0; fd <= 2; fd++) {
    int flags = fcntl(fd, F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC)) fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
  }
  // The handed-over sockets cross under their own numbers (the handoff names them); one that is
  // not open fails the exec here rather than leaving the new image a number that means nothing.
  for (int fd : keep) {
    int flags = fcntl(fd, F_GETFD);
    if (flags < 0 || fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) != 0) {
      err = errno;
      return fail(out, LandlockCode::ExecFailed, err, with_errno("keeping descriptor " + std::to_string(fd), err));
    }
  }
  execve(path.c_str(), args.data(), envp.data());
  err = errno;
  // Still this image: put the standard descriptors' flags back as Node had them, and the kept
  // ones close-on-exec again. (This process never execs again.)
  for (int fd : keep) {
    int flags = fcntl(fd, F_GETFD);
    if (flags >= 0) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
  for (int fd = 0; fd <= 2; fd++) {
    int flags = fcntl(fd, F_GETFD);
    if (flags >= 0) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
  return fail(out, LandlockCode::ExecFailed, err, with_errno("execve " + path, err));
}

}  // namespace rp
