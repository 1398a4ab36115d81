// libFuzzer target: resolution beneath the export root (native/resolve.cc, through
// open_regular_beneath in native/read.cc), against the fixed world of fixture.cc.
//
// Input: byte 0 picks the symlink policy (bit 0: refuse, as under `scoped`); the rest is a raw
// request path. It is resolved twice: lowered first (what the server does), and as it is (the
// resolver must contain even paths lowering would refuse, since link targets carry `..`). For each:
//   - whatever either resolver opens is an inode beneath the root, never a secret;
//   - openat2 and the walk agree: both fail with the same code, or both open the same inode;
//   - the probe (O_PATH, regular files only) agrees between resolvers too.
#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "codes.h"
#include "fixture.h"
#include "read.h"
#include "resolve.h"

using fuzzfix::fail;

namespace {

std::string describe(const std::string& rel, rp::SymlinkPolicy policy) {
  std::string shown;
  for (unsigned char c : rel.substr(0, 300)) {
    if (c >= 0x21 && c <= 0x7e) shown.push_back(static_cast<char>(c));
    else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      shown += buf;
    }
  }
  return "'" + shown + "' (" + std::to_string(rel.size()) + " bytes) policy " +
         (policy == rp::SymlinkPolicy::Refuse ? "refuse" : "follow");
}

struct Outcome {
  rp::Code code;
  dev_t dev = 0;
  ino_t ino = 0;
};

Outcome open_with(const std::string& rel, rp::SymlinkPolicy policy, rp::Resolver resolver, bool probe) {
  const auto& w = fuzzfix::world();
  rp::Failure failure;
  rp::Fd fd;
  if (probe) {
    rp::FileStat st;
    fd = rp::open_regular_beneath(w.root_fd, rel, policy, resolver, rp::OpenFor::Probe, &st, &failure);
  } else {
    fd = rp::open_beneath(w.root_fd, rel, O_PATH, policy, resolver, &failure);
  }
  Outcome out{fd.valid() ? rp::Code::Ok : failure.code};
  if (fd.valid()) {
    if (failure.failed()) fail("a descriptor returned together with a failure", describe(rel, policy));
    if (!fuzzfix::is_inside(fd.get())) fail("containment: opened an inode that is not beneath the root", describe(rel, policy));
    struct stat st;
    fstat(fd.get(), &st);
    out.dev = st.st_dev;
    out.ino = st.st_ino;
  } else if (!failure.failed()) {
    fail("no descriptor and no failure", describe(rel, policy));
  } else if (failure.code == rp::Code::IoError) {
    fail("io_error on a fixed tree", describe(rel, policy) + " errno " + std::to_string(failure.err));
  }
  return out;
}

void check(const std::string& rel, rp::SymlinkPolicy policy) {
  if (rel.find('\0') != std::string::npos) return;  // never reaches the resolver (lowering refuses it)
  for (bool probe : {false, true}) {
    Outcome walk = open_with(rel, policy, rp::Resolver::Walk, probe);
    if (!fuzzfix::world().openat2) continue;
    Outcome kernel = open_with(rel, policy, rp::Resolver::Openat2, probe);
    if (walk.code != kernel.code || walk.dev != kernel.dev || walk.ino != kernel.ino) {
      fail("the resolvers disagree",
           describe(rel, policy) + (probe ? " (probe)" : "") + ": walk " + rp::code_name(walk.code) +
               ", openat2 " + rp::code_name(kernel.code));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzzfix::world();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 9000) return 0;
  const auto policy = (data[0] & 1) ? rp::SymlinkPolicy::Refuse : rp::SymlinkPolicy::Follow;
  const std::string raw(reinterpret_cast<const char*>(data + 1), size - 1);
  if (auto lowered = fuzzfix::lower(raw)) check(*lowered, policy);
  if (!raw.empty()) check(raw, policy);
  return 0;
}
