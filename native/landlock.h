// Landlock self-confinement, syscalls only (no Node-API here: bind_landlock.cc converts). It detects the
// ABI, builds one ruleset that handles every access right that ABI knows, adds the caller's
// path-beneath and TCP port rules, sets no_new_privs and restricts the calling thread. It also
// replaces the process image (execve), which is how the launch carries the domain to every thread:
// a domain binds the calling thread and what it creates afterwards, and after execve the calling
// thread is the only thread there is (see src/launch/confine.ts).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rp {

// Stable outcome codes of the confinement calls; they cross to JS as strings (see
// landlock_code_name) and renaming one is a breaking change.
enum class LandlockCode {
  Ok = 0,
  Unsupported,          // the kernel has no Landlock syscalls (ENOSYS)
  Disabled,             // Landlock is built in but not enabled at boot (EOPNOTSUPP)
  NotMainThread,        // called from a thread other than the process's main thread
  RulePathUnavailable,  // a required rule's path could not be opened (or has the wrong type)
  RulesetFailed,        // landlock_create_ruleset or landlock_add_rule refused the ruleset
  NoNewPrivsFailed,     // prctl(PR_SET_NO_NEW_PRIVS) failed
  RestrictFailed,       // landlock_restrict_self failed
  ExecFailed,           // execve returned. Keep last: the export table iterates up to it.
};

std::string landlock_code_name(LandlockCode code);

// Filesystem access rights by their stable names ("read_file", "make_reg", ...); 0 if unknown.
uint64_t landlock_fs_right(const std::string& name);
// The names of the rights (or scopes) set in `mask`, in bit order.
std::vector<std::string> landlock_fs_right_names(uint64_t mask);
std::vector<std::string> landlock_net_right_names(uint64_t mask);  // "bind_tcp", "connect_tcp"
std::vector<std::string> landlock_scope_names(uint64_t mask);      // "abstract_unix_socket", "signal"

// The ABI version (1, 2, ...), or 0 with *err set (ENOSYS: no Landlock; EOPNOTSUPP: disabled).
int landlock_abi(int* err);

// One path-beneath rule. `path` is absolute and has no symlink anywhere (the caller resolved it):
// it is opened O_PATH|O_CLOEXEC refusing every symlink, so a link planted in its place (a capsule
// can plant one inside its workdir) can never aim the rule elsewhere. `directory` says what the
// path must be. An optional rule whose path cannot be opened is skipped (and reported); a
// required one fails the whole call before anything is restricted.
struct LandlockPathRule {
  std::string path;
  uint64_t access = 0;
  bool directory = true;
  bool optional = false;
};

struct LandlockPlan {
  std::vector<LandlockPathRule> paths;
  // Each list is applied only where the ABI has network rules (4+). `restrict_connect` false
  // leaves outbound TCP unhandled (an allow list with a bare host admits every port).
  std::vector<uint16_t> bind_ports;
  bool restrict_connect = false;
  std::vector<uint16_t> connect_ports;
};

struct LandlockSkipped {
  size_t index;  // into plan.paths
  int err;
};

struct LandlockOutcome {
  LandlockCode code = LandlockCode::Ok;
  int err = 0;
  std::string detail;
  int abi = 0;
  uint64_t handled_fs = 0;
  uint64_t handled_net = 0;
  uint64_t scoped = 0;
  std::vector<LandlockSkipped> skipped;
  bool ok() const { return code == LandlockCode::Ok; }
};

// Builds the ruleset, sets no_new_privs and restricts the calling thread (which must be the main
// thread). Nothing is restricted unless the whole ruleset was built; on success the calling thread
// is in the domain for good. Every descriptor it opens is O_CLOEXEC and closed before it returns.
LandlockOutcome landlock_restrict_self(const LandlockPlan& plan);

// execve(path, argv, env) from the main thread, keeping descriptors 0-2 and exactly those in
// `keep` (the listening sockets and the notify socket the launch hands over) open across it, and
// marking every other close-on-exec first, the launcher's included (close_range, or one by one
// before Linux 5.11). Returns only on failure: NotMainThread, or ExecFailed with the errno of
// execve or of the marking (then nothing was executed).
LandlockOutcome replace_process_image(const std::string& path, const std::vector<std::string>& argv,
                                      const std::vector<std::string>& env, const std::vector<int>& keep);

}  // namespace rp
