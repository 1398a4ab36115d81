// See read.h: opening a served file and the bounded, hashed read of it.
#include "read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "digest_cache.h"
#include "sha256.h"
#include "stat_call.h"
#include "time_ms.h"

namespace rp {

int served_file_flags() { return O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC; }

namespace {

std::atomic<uint64_t> resolutions{0};

// fstat's `fd` into `stat`; false (with NotARegularFile or IoError set) unless a regular file.
bool regular_file_stat(int fd, FileStat* stat, Failure* failure) {
  if (stat_fd(fd, &stat->st) != 0) {
    failure->set(Code::IoError, errno);
    return false;
  }
  if (!S_ISREG(stat->st.st_mode)) {
    failure->set(Code::NotARegularFile);
    return false;
  }
  stat->size = static_cast<uint64_t>(stat->st.st_size);
  stat->mtime_ms = epoch_ms(stat->st.st_mtim);
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
  resolutions.fetch_add(1, std::memory_order_relaxed);
  Fd root_fd = open_root(req.workdir_fd(), req.root, O_PATH, req.resolver, failure);
  if (!root_fd.valid()) return Fd();
  return open_regular_beneath(root_fd.get(), req.rel, req.policy, req.resolver, purpose, stat, failure);
}

uint64_t export_resolutions() { return resolutions.load(std::memory_order_relaxed); }

ReadResult read_opened(int fd, const struct stat& st, const StopSignal& stop) {
  ReadResult result;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  // A large file goes through the digest cache (digest_cache.h): under a read lease, a digest
  // cached for exactly this version may stand in for hashing (see read.h). A small one does not.
  DigestSession digests;
  if (size >= kCachedReadMinBytes && !digests.begin(fd, &result.failure)) return result;
  OwnedBuffer& buf = result.bytes;
  Sha256 sha;
  if (!sha.ok() || !buf.reserve(static_cast<size_t>(size))) {
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
  while (buf.size() < size) {
    if (stop.should_stop(&result.failure)) return result;
    if (!hashing && !digests.intact()) {
      hashing = true;
      if (!hash(buf.data(), buf.size())) return result;
    }
    const size_t left = static_cast<size_t>(size - buf.size());
    const size_t want = left < kReadChunkBytes ? left : kReadChunkBytes;
    ssize_t n = retry_eintr([&] { return pread(fd, buf.spare(), want, static_cast<off_t>(buf.size())); });
    if (n < 0) {
      result.failure.set(Code::IoError, errno);
      return result;
    }
    if (n == 0) break;  // it shrank since the fstat: what is there is the body, short
    if (hashing && !hash(buf.spare(), static_cast<size_t>(n))) return result;
    buf.advance(static_cast<size_t>(n));
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
    // Counted and offered to the cache only now, once the whole body was read and hashed.
    digests.count_hash();
    digests.finish(result.sha256, static_cast<int64_t>(buf.size()));
  }
  result.mtime_ms = epoch_ms(digests.held() ? digests.under().st_mtim : st.st_mtim);
  return result;
}

ReadResult read_export_file(const ExportRequest& req) {
  ReadResult result;
  FileStat st;
  Fd fd = open_export_file(req, OpenFor::Reading, &st, &result.failure);
  if (!fd.valid()) return result;
  // Refused before a single byte is read: an 8 GiB sparse file costs one fstat.
  if (st.size > req.max_bytes) {
    result.failure.set(Code::TooLarge);
    return result;
  }
  return read_opened(fd.get(), st.st, req.stop);
}

}  // namespace rp
