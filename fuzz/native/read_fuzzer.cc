// libFuzzer target: the read path (native/read.cc read_export_file: the root opened beneath the
// workdir, resolution, the probe, the real open, fstat, the bounded pread loop, SHA-256), against
// the fixed world of fixture.cc.
//
// Input: byte 0 — bit 0 refuse symlinks, bit 1 the walk (else openat2), bits 2-3 the byte ceiling
// (0, 6, 4999, 1 MiB), bits 4-5 the root spelling (`out`, `out/`, `./out`, `out//`); the rest is a
// raw request path, lowered as the server lowers it. Invariants:
//   - a read that succeeds returns at most max_bytes bytes, never a secret's, with the SHA-256 of
//     exactly those bytes, and both resolvers return the same bytes;
//   - a refusal is one of the plane's codes (never io_error on this tree) and both resolvers give it.
#include <openssl/evp.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "codes.h"
#include "fixture.h"
#include "read.h"
#include "request.h"

using fuzzfix::fail;

namespace {

constexpr uint64_t kCeilings[] = {0, 6, 4999, 1 << 20};
const char* const kRoots[] = {"out", "out/", "./out", "out//"};

rp::ReadResult read_with(const std::string& rel, uint8_t flags, rp::Resolver resolver) {
  // The workdir as a session holds it: one counted owner, the world's descriptor duplicated once.
  static const rp::WorkdirRef workdir = rp::duplicate_workdir(fuzzfix::world().workdir_fd);
  rp::ExportRequest req;
  req.workdir = workdir;
  req.root = kRoots[(flags >> 4) & 3];
  req.rel = rel;
  req.policy = (flags & 1) ? rp::SymlinkPolicy::Refuse : rp::SymlinkPolicy::Follow;
  req.resolver = resolver;
  req.max_bytes = kCeilings[(flags >> 2) & 3];
  req.stop.operation = "read";
  return rp::read_export_file(req);
}

void verify(const rp::ReadResult& r, const std::string& rel, uint8_t flags) {
  const uint64_t max = kCeilings[(flags >> 2) & 3];
  if (r.failure.failed()) {
    switch (r.failure.code) {
      case rp::Code::NotFound:
      case rp::Code::OutsideRoot:
      case rp::Code::SymlinkRefused:
      case rp::Code::NotARegularFile:
      case rp::Code::TooLarge:
        return;
      default:
        fail("an unexpected refusal", rel + ": " + rp::code_name(r.failure.code) + " errno " + std::to_string(r.failure.err));
    }
  }
  if (r.bytes.size() > max) fail("read more than max_bytes", rel);
  const std::string body = r.bytes.size() == 0 ? std::string() : std::string(reinterpret_cast<const char*>(r.bytes.data()), r.bytes.size());
  if (body.find("SECRET-") != std::string::npos) fail("served a secret", rel);
  unsigned char digest[32];
  unsigned int len = 0;
  EVP_Digest(r.bytes.data(), r.bytes.size(), digest, &len, EVP_sha256(), nullptr);
  if (len != 32 || std::memcmp(digest, r.sha256, 32) != 0) fail("sha256 is not of the bytes served", rel);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzzfix::world();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 9000) return 0;
  const uint8_t flags = data[0];
  auto rel = fuzzfix::lower(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  if (!rel) return 0;
  rp::ReadResult walk = read_with(*rel, flags, rp::Resolver::Walk);
  verify(walk, *rel, flags);
  if (!fuzzfix::world().openat2) return 0;
  rp::ReadResult kernel = read_with(*rel, flags, rp::Resolver::Openat2);
  verify(kernel, *rel, flags);
  const bool same = walk.failure.code == kernel.failure.code && walk.bytes.size() == kernel.bytes.size() &&
                    (walk.bytes.size() == 0 || std::memcmp(walk.bytes.data(), kernel.bytes.data(), walk.bytes.size()) == 0);
  if (!same) {
    fail("the resolvers read differently", *rel + ": walk " + rp::code_name(walk.failure.code) + ", openat2 " +
                                               rp::code_name(kernel.failure.code));
  }
  return 0;
}
