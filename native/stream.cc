// See stream.h: the streamed body, its digest before the headers and its verification before the
// final chunk.
#include "stream.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "digest_cache.h"
#include "read.h"
#include "stat_call.h"
#include "time_ms.h"

namespace rp {

BodyStream::BodyStream(Fd fd, uint64_t size, const unsigned char promised[32], std::unique_ptr<ReadLease> lease)
    : fd_(std::move(fd)), size_(size), lease_(std::move(lease)), leased_(lease_ != nullptr) {
  std::memcpy(promised_, promised, 32);
}

bool BodyStream::vouched() { return lease_ && lease_->intact(); }

bool BodyStream::lease_intact() {
  std::lock_guard<std::mutex> lock(lease_mu_);
  // Once the final chunk was released the lease has nothing left to vouch for (it was let go then).
  return !leased_ || verified_ || vouched();
}

size_t BodyStream::next(unsigned char* into, size_t capacity, bool* final, Failure* failure) {
  *final = false;
  if (done_ || offset_ >= size_ || capacity == 0) {
    failure->set(Code::IoError, EINVAL);
    failure->detail = "no chunk is left to read";
    return 0;
  }
  auto changed = [&](const char* how) {
    done_ = true;
    failure->set(Code::FileChanged);
    failure->detail = how;
    return size_t{0};
  };
  // Under the lease: asked before the bytes are read, so a writer let through meanwhile fails this
  // chunk; and again once they are read (below), before the final one is released.
  if (leased_) {
    std::lock_guard<std::mutex> lock(lease_mu_);
    if (!vouched()) return changed("a writer opened the file while it was sent");
  }
  const uint64_t left = size_ - offset_;
  const size_t want = left < capacity ? static_cast<size_t>(left) : capacity;
  size_t got = 0;
  while (got < want) {
    ssize_t n = retry_eintr([&] { return pread(fd_.get(), into + got, want - got, static_cast<off_t>(offset_ + got)); });
    if (n < 0) {
      done_ = true;
      failure->set(Code::IoError, errno);
      return 0;
    }
    if (n == 0) return changed("the file shrank while it was sent");
    got += static_cast<size_t>(n);
  }
  if (!leased_ && !sha_.update(into, got)) {
    done_ = true;
    failure->set(Code::IoError, EIO);
    failure->detail = "sha-256 failed";
    return 0;
  }
  offset_ += got;
  if (offset_ < size_) return got;
  // The final chunk: released only if the body sent is exactly the one the etag names.
  done_ = true;
  unsigned char past;
  ssize_t more = retry_eintr([&] { return pread(fd_.get(), &past, 1, static_cast<off_t>(size_)); });
  if (more < 0) {
    failure->set(Code::IoError, errno);
    return 0;
  }
  if (more > 0) return changed("the file grew while it was sent");
  if (leased_) {
    std::lock_guard<std::mutex> lock(lease_mu_);
    // Held from the lookup to the last byte read: nobody could write, so the bytes are the ones the
    // cached digest names. Let go now: the rest is the socket's.
    if (!vouched()) return changed("a writer opened the file while it was sent");
    lease_->release();
    verified_ = true;
    *final = true;
    return got;
  }
  unsigned char sent[32];
  if (!sha_.finish(sent)) {
    failure->set(Code::IoError, EIO);
    failure->detail = "sha-256 failed";
    return 0;
  }
  if (std::memcmp(sent, promised_, 32) != 0) return changed("the file changed while it was sent");
  *final = true;
  return got;
}

StreamOpening open_export_stream(const ExportRequest& req) {
  StreamOpening out;
  FileStat first;
  Fd fd = open_export_file(req, OpenFor::Reading, &first, &out.failure);
  if (!fd.valid()) return out;
  // Refused before a single byte is read: an 8 GiB sparse file costs one fstat.
  if (first.size > req.max_bytes) {
    out.failure.set(Code::TooLarge);
    return out;
  }
  struct stat st;
  if (stat_fd(fd.get(), &st) != 0) {
    out.failure.set(Code::IoError, errno);
    return out;
  }
  // One pass through the digest cache (digest_cache.h): a digest cached for exactly this version,
  // found under a read lease that the stream then keeps, or a hashing pass under that lease.
  DigestSession digests;
  if (!digests.begin(fd.get(), &out.failure)) return out;
  if (digests.held()) st = digests.under();
  if (digests.hit() && static_cast<uint64_t>(st.st_size) <= req.max_bytes) {
    std::memcpy(out.sha256, digests.cached(), 32);
    out.size = static_cast<uint64_t>(st.st_size);
    out.mtime_ms = epoch_ms(st.st_mtim);
    out.digest_cached = true;
    out.lease = digests.keep_lease();
    out.fd = std::move(fd);
    return out;
  }
  int64_t covered = digests.whole_file(fd.get(), out.sha256, req.stop, &out.failure);
  out.digest_cached = digests.hit();
  if (covered < 0) return out;
  // The promise is what was hashed: a file that grew past max_bytes meanwhile is refused now, one
  // that changed after the digest fails its verification while it is sent.
  if (static_cast<uint64_t>(covered) > req.max_bytes) {
    out.failure.set(Code::TooLarge);
    return out;
  }
  out.size = static_cast<uint64_t>(covered);
  out.mtime_ms = epoch_ms(st.st_mtim);
  out.fd = std::move(fd);
  return out;
}

}  // namespace rp
