// SHA-256, the one digest the server names bytes by: an incremental hasher over bytes already in
// memory (a read hashes its buffer as it fills), and the whole-descriptor hash a listing and the
// digest cache use. Syscalls only (no Node-API). The hash comes from the OpenSSL inside the node
// binary (no -lcrypto needed). Below read.cc and digest_cache.cc, which both use it: it depends on
// neither.
#pragma once

#include <openssl/evp.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "codes.h"
#include "lease.h"
#include "stop.h"

namespace rp {

class Sha256 {
 public:
  Sha256();
  // False if OpenSSL could not set up the context; every other call then fails too.
  bool ok() const { return ok_; }
  bool update(const void* data, size_t n);
  // The digest of everything given to update(); false if OpenSSL failed.
  bool finish(unsigned char out[32]);

 private:
  struct Free {
    void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> ctx_;
  bool ok_ = false;
};

// Hashes a descriptor from offset 0 to its end, or only its first `limit` bytes when limit >= 0
// (a body is the first size bytes its fstat gave: bytes appended since are the next version's),
// asking `stop` before every chunk and, given a held `lease`, whether it is still intact (a waiting
// writer makes it let go at once; the caller sees lease->broken()). Returns the bytes hashed (fewer
// than `limit` if the file ends first), or -1 with `failure` set (Cancelled, TimeBudget or IoError).
int64_t hash_whole_fd(int fd, unsigned char out[32], const StopSignal& stop, Failure* failure,
                      ReadLease* lease = nullptr, int64_t limit = -1);

}  // namespace rp
