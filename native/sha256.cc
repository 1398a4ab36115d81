// See sha256.h.
#include "sha256.h"

#include <unistd.h>

#include <cerrno>

#include "buffer.h"
#include "fd.h"
#include "limits.h"

namespace rp {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  ok_ = ctx_ && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1;
}

bool Sha256::update(const void* data, size_t n) {
  return ok_ && EVP_DigestUpdate(ctx_.get(), data, n) == 1;
}

bool Sha256::finish(unsigned char out[32]) {
  unsigned int len = 0;
  return ok_ && EVP_DigestFinal_ex(ctx_.get(), out, &len) == 1 && len == 32;
}

int64_t hash_whole_fd(int fd, unsigned char out[32], const StopSignal& stop, Failure* failure,
                      ReadLease* lease, int64_t limit) {
  Sha256 sha;
  // One chunk per thread, kept: a listing hashes thousands of small files, and a fresh 1 MiB
  // allocation each (an mmap and its page faults, at the pinned threshold) cost more than the hash.
  thread_local OwnedBuffer chunk;
  if (!sha.ok() || !chunk.reserve(kHashChunkBytes)) {
    failure->set(Code::IoError, ENOMEM);
    return -1;
  }
  int64_t off = 0;
  for (;;) {
    if (stop.should_stop(failure)) return -1;
    if (limit >= 0 && off >= limit) break;  // before the lease's poll: one F_GETLEASE fewer per file
    if (lease && !lease->intact()) lease = nullptr;  // a writer waits: it was released for them
    const size_t want = limit >= 0 && static_cast<uint64_t>(limit - off) < kHashChunkBytes ? static_cast<size_t>(limit - off) : kHashChunkBytes;
    ssize_t n = retry_eintr([&] { return pread(fd, chunk.spare(), want, static_cast<off_t>(off)); });
    if (n < 0) {
      failure->set(Code::IoError, errno);
      return -1;
    }
    if (n == 0) break;
    if (!sha.update(chunk.spare(), static_cast<size_t>(n))) {
      failure->set(Code::IoError, EIO);
      return -1;
    }
    off += n;
  }
  if (!sha.finish(out)) {
    failure->set(Code::IoError, EIO);
    return -1;
  }
  return off;
}

}  // namespace rp
