// See stream.h: the streamed body, its digest before the headers and its verification before the
// final chunk, or its snapshot.
#include "stream.h"

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "digest_cache.h"
#include "stat_call.h"
#include "time_ms.h"

namespace rp {

BodyStream::BodyStream(Fd fd, uint64_t size, const unsigned char* promised, std::unique_ptr<ReadLease> lease)
    : fd_(std::move(fd)), size_(size), snapshot_(promised == nullptr), lease_(std::move(lease)), leased_(lease_ != nullptr) {
  if (promised) std::memcpy(promised_, promised, 32);
}

bool BodyStream::vouched() { return lease_ && lease_->intact(); }

bool BodyStream::lease_intact() {
  std::lock_guard<std::mutex> lock(lease_mu_);
  // Once the final chunk was released the lease has nothing left to vouch for (it was let go then).
  return !leased_ || verified_ || vouched();
}

bool BodyStream::snapshot_digest(unsigned char out[32]) const {
  if (!snapshot_ || !complete_) return false;
  std::memcpy(out, read_digest_, 32);
  return true;
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
  auto hash_failed = [&] {
    done_ = true;
    failure->set(Code::IoError, EIO);
    failure->detail = "sha-256 failed";
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
  bool ended = false;
  while (got < want) {
    ssize_t n = retry_eintr([&] { return pread(fd_.get(), into + got, want - got, static_cast<off_t>(offset_ + got)); });
    if (n < 0) {
      done_ = true;
      failure->set(Code::IoError, errno);
      return 0;
    }
    if (n == 0) {
      if (!snapshot_) return changed("the file shrank while it was sent");
      ended = true;  // a snapshot of a file cut short is that short file
      break;
    }
    got += static_cast<size_t>(n);
  }
  if (!leased_ && !sha_.update(into, got)) return hash_failed();
  offset_ += got;
  if (offset_ < size_ && !ended) return got;
  // The final chunk.
  done_ = true;
  if (snapshot_) {
    if (!sha_.finish(read_digest_)) return hash_failed();
    complete_ = true;
    *final = true;
    return got;
  }
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
  // Released only if the body sent is exactly the one the etag names (bytes past the size are
  // the next version's: they are not this body's, and do not change it).
  unsigned char sent[32];
  if (!sha_.finish(sent)) return hash_failed();
  if (std::memcmp(sent, promised_, 32) != 0) return changed("the file changed while it was sent");
  *final = true;
  return got;
}

namespace {

// The same version of the file: size, mtime and ctime to the nanosecond (the inode is the same
// descriptor's).
bool same_version(const struct stat& a, const struct stat& b) {
  return a.st_size == b.st_size && a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec &&
         a.st_ctim.tv_sec == b.st_ctim.tv_sec && a.st_ctim.tv_nsec == b.st_ctim.tv_nsec;
}

}  // namespace

BodyOpening open_body(Fd fd, const struct stat& st, uint64_t max_bytes, bool snapshot_ok, const StopSignal& stop) {
  BodyOpening out;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  out.size = size;
  out.mtime_ms = epoch_ms(st.st_mtim);
  // A file whose last change is inside the racy margin is moving (a write inside one timestamp
  // tick need not move ctime: digest_cache.h), and has no cached digest (none is stored that
  // young): a caller that can hold it takes a snapshot, and nothing else is asked.
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  if (snapshot_ok && !settled_before(st.st_ctim, now)) {
    out.fd = std::move(fd);
    return out;
  }
  // One pass through the digest cache (digest_cache.h): a digest cached for exactly this version,
  // found under a read lease that the stream then keeps, or a hashing pass under that lease.
  DigestSession digests;
  if (!digests.begin(fd.get(), &out.failure)) return out;
  if (digests.hit() && static_cast<uint64_t>(digests.under().st_size) <= max_bytes) {
    std::memcpy(out.sha256, digests.cached(), 32);
    out.size = static_cast<uint64_t>(digests.under().st_size);
    out.mtime_ms = epoch_ms(digests.under().st_mtim);
    out.digest_cached = true;
    out.settled = true;
    out.lease = digests.keep_lease();
    out.fd = std::move(fd);
    return out;
  }
  // Changed since the read's fstat (seen under the lease): moving too.
  if (snapshot_ok && digests.held() && !same_version(digests.under(), st)) {
    out.fd = std::move(fd);
    return out;
  }
  const int64_t hashed = digests.whole_file(fd.get(), out.sha256, stop, &out.failure, static_cast<int64_t>(size));
  if (hashed < 0) return out;
  struct stat after;
  if (stat_fd(fd.get(), &after) != 0) {
    out.failure.set(Code::IoError, errno);
    return out;
  }
  // Settled when the pass read the whole body and the descriptor shows the version it began with.
  // A writer that came for a lease held meanwhile may have written inside one timestamp tick: that
  // file is moving too, if a snapshot can be had. If not, the verified stream is the last word (a
  // body that changes under it is cut, never completed).
  const bool unmoved = static_cast<uint64_t>(hashed) == size && same_version(after, st);
  out.settled = unmoved && !(snapshot_ok && digests.broken());
  out.fd = std::move(fd);
  return out;
}

}  // namespace rp
