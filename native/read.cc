// See read.h: opening a served file and the bounded, hashed read of it.
#include "read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "digest_cache.h"
#include "sha256.h"
#include "stat_call.h"
#include "time_ms.h"

namespace rp {

int served_file_flags() { return O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC; }

namespace {

// fstat's `fd` into `stat`; false (with NotARegularFile or IoError set) unless a regular file.
bool regular_file_stat(int fd, FileStat* stat, Failure* failure) {
  struct stat st;
  if (stat_fd(fd, &st) != 0) {
    failure->set(Code::IoError, errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    failure->set(Code::NotARegularFile);
    return false;
  }
  stat->size = static_cast<uint64_t>(st.st_size);
  stat->mtime_ms = epoch_ms(st.st_mtim);
  return true;
}

}  // namespace

Fd open_regular_beneath(int dirfd, const std::string& rel, SymlinkPolicy policy, Resolver resolver,
                        OpenFor purpose, FileStat* stat, Failure* failure) {
  // The walk decides every symlink itself, so it never lets open(2) follow one. openat2 follows an
  // in-root final link under Follow (RESOLVE_BENEATH keeps it inside) and refuses it under Refuse
  // (RESOLVE_NO_SYMLINKS covers the final component unless O_PATH|O_NOFOLLOW asks for the link).
  const bool nofollow = resolver == Resolver::Walk;
  Fd probe = open_beneath(dirfd, rel, O_PATH | (nofollow ? O_NOFOLLOW : 0), policy, resolver, failure);
  if (!probe.valid() || !regular_file_stat(probe.get(), stat, failure)) return Fd();
  if (purpose == OpenFor::Probe) return probe;
  int flags = served_file_flags();
  if (nofollow || policy == SymlinkPolicy::Refuse) flags |= O_NOFOLLOW;
  Fd fd = open_beneath(dirfd, rel, flags, policy, resolver, failure);
  if (!fd.valid() || !regular_file_stat(fd.get(), stat, failure)) return Fd();
  return fd;
}

Fd open_export_file(const ExportRequest& req, OpenFor purpose, FileStat* stat, Failure* failure) {
  Fd root_fd = open_root(req.workdir_fd(), req.root, O_PATH, req.resolver, failure);
  if (!root_fd.valid()) return Fd();
  return open_regular_beneath(root_fd.get(), req.rel, req.policy, req.resolver, purpose, stat, failure);
}

ReadResult read_export_file(const ExportRequest& req) {
  ReadResult result;
  FileStat st;
  Fd fd = open_export_file(req, OpenFor::Reading, &st, &result.failure);
  if (!fd.valid()) return result;
  result.size_seen = st.size;
  // Refused before a single byte is read: an 8 GiB sparse file costs one fstat.
  if (st.size > req.max_bytes) {
    result.failure.set(Code::TooLarge);
    return result;
  }
  // The memory budget is checked against the fstat size before a byte is allocated, so a crowd
  // of large reads waits (in JS) instead of filling memory with buffers that would be refused.
  if (req.budget_bytes != 0 && st.size > req.budget_bytes) {
    result.failure.set(Code::OverBudget);
    return result;
  }
  // A large file goes through the digest cache (digest_cache.h): under a read lease, a digest
  // cached for exactly this version may stand in for hashing (see read.h). A small one does not.
  DigestSession digests;
  if (st.size >= kCachedReadMinBytes && !digests.begin(fd.get(), &result.failure)) return result;
  // Start at the fstat size plus one byte to notice growth; grow up to the ceiling + 1, which is
  // the most that is ever read: one byte past the ceiling proves the file grew past it. With a
  // memory budget the ceiling is what the caller can hold: a file that grows after the fstat is
  // never read past it (OverBudget, and the caller looks again), so a small synchronous read stays
  // small and a reservation is never exceeded.
  const uint64_t ceiling = read_ceiling(req);
  const bool budgeted = ceiling < req.max_bytes;
  const uint64_t limit = read_limit(ceiling);
  OwnedBuffer& buf = result.bytes;
  if (req.into != nullptr) {
    if (req.into_capacity < limit) {  // the binding refuses this; never read past the memory
      result.failure.set(Code::IoError, EINVAL);
      result.failure.detail = "the buffer given is smaller than the read may take";
      return result;
    }
    buf.borrow(req.into, req.into_capacity);
  }
  Sha256 sha;
  if (!sha.ok() || !buf.reserve(static_cast<size_t>(st.size + 1 < limit ? st.size + 1 : limit))) {
    result.failure.set(Code::IoError, ENOMEM);
    return result;
  }
  bool hashing = !digests.hit();  // hashed as read, unless a cached digest may stand in
  auto hash = [&](const unsigned char* p, size_t n) {
    if (sha.update(p, n)) return true;
    result.failure.set(Code::IoError, EIO);
    result.failure.detail = "sha-256 failed";
    return false;
  };
  // While a cached digest stands in, the lease is polled between chunks, so a writer is let
  // through within one chunk; once it gives way, that digest no longer vouches for anything: the
  // bytes already read are hashed and the rest as they come.
  for (;;) {
    if (req.stop.should_stop(&result.failure)) return result;
    if (!hashing && !digests.intact()) {
      hashing = true;
      if (!hash(buf.data(), buf.size())) return result;
    }
    if (buf.spare_size() == 0) {
      if (buf.capacity() >= limit) break;
      size_t next = buf.capacity() * 2 < limit ? buf.capacity() * 2 : static_cast<size_t>(limit);
      if (!buf.reserve(next)) {
        result.failure.set(Code::IoError, ENOMEM);
        return result;
      }
    }
    const size_t want = buf.spare_size() < kReadChunkBytes ? buf.spare_size() : kReadChunkBytes;
    ssize_t n = retry_eintr([&] {
      return pread(fd.get(), buf.spare(), want, static_cast<off_t>(buf.size()));
    });
    if (n < 0) {
      result.failure.set(Code::IoError, errno);
      return result;
    }
    if (n == 0) break;
    // Hashed as read: the digest covers exactly the buffer, and a file that grew past the
    // ceiling is refused below whatever the digest says.
    if (hashing && !hash(buf.spare(), static_cast<size_t>(n))) return result;
    buf.advance(static_cast<size_t>(n));
  }
  if (buf.size() > ceiling) {
    if (budgeted) {
      result.failure.set(Code::OverBudget);
      result.size_seen = buf.size();  // at least this: what to ask room for next time
    } else {
      result.failure.set(Code::TooLarge);
    }
    return result;
  }
  // The cached digest is used only if the lease held until after the last byte was read, and the
  // bytes are exactly as many as the version it was cached for.
  if (!hashing && (!digests.intact() || buf.size() != static_cast<uint64_t>(digests.under().st_size))) {
    hashing = true;
    if (!hash(buf.data(), buf.size())) return result;
  }
  if (!hashing) {
    std::memcpy(result.sha256, digests.cached(), 32);
    result.digest_cached = true;
  } else {
    if (!sha.finish(result.sha256)) {
      result.failure.set(Code::IoError, EIO);
      result.failure.detail = "sha-256 failed";
      return result;
    }
    // Counted and offered to the cache only now, once the whole file was read and hashed.
    digests.count_hash();
    digests.finish(result.sha256, static_cast<int64_t>(buf.size()));
  }
  result.mtime_ms = digests.held() ? epoch_ms(digests.under().st_mtim) : st.mtime_ms;
  return result;
}

}  // namespace rp
