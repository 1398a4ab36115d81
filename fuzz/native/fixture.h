// The fixed world the native fuzz targets resolve and read in, built once by each target's
// LLVMFuzzerInitialize: a workdir whose export root `out/` holds files, directories, in-root and
// escaping relative links, absolute links, loops, a 45-link chain, a 25-link chain that ends in an
// escape, links whose targets are thousands of `./` components, a FIFO, a name that is not UTF-8,
// a 300-deep directory chain; and secrets beside the root. Every inode beneath the root is recorded,
// so a target can check that whatever a resolver opened is one of them and never a secret.
//
// Also the harness's own copy of lowering (SPEC section 4), so inputs are raw request paths.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace fuzzfix {

struct World {
  std::string base;        // the temp directory everything lives in
  int workdir_fd = -1;     // the workdir, as the session holds it
  int root_fd = -1;        // `out/` beneath it (O_PATH | O_DIRECTORY)
  std::set<std::pair<dev_t, ino_t>> inside;   // every inode beneath the root, the root included
  std::set<std::pair<dev_t, ino_t>> secrets;  // the files outside the root
  bool openat2 = false;
};

// Builds the world (once); aborts if it cannot.
const World& world();

// Lowering as SPEC section 4 states it: percent-decode once; refuse empty, NUL, invalid UTF-8,
// absolute; drop one trailing '/'; refuse an empty, '.' or '..' component. nullopt = outside_root.
std::optional<std::string> lower(const std::string& raw);

bool valid_utf8(const std::string& s);

// Aborts with a message (libFuzzer reports the input as a crash).
[[noreturn]] void fail(const char* what, const std::string& detail);

// Whether `fd` is one of the inodes beneath the root; aborts if it is a secret.
bool is_inside(int fd);

}  // namespace fuzzfix
