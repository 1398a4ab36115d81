// See read.h. SHA-256 comes from the OpenSSL inside the node binary (no -lcrypto needed).
#include "read.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace rp {

namespace {

constexpr size_t kHashChunk = 1 << 20;

int64_t mtime_ms_of(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

bool sha256_once(const unsigned char* data, size_t len, unsigned char out[32]) {
  unsigned int out_len = 0;
  return EVP_Digest(data, len, out, &out_len, EVP_sha256(), nullptr) == 1 && out_len == 32;
}

}  // namespace

int served_file_flags() { return O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC; }

namespace {

// fstat's `fd` into `stat`; false (with NotARegularFile or IoError set) unless a regular file.
bool regular_file_stat(int fd, FileStat* stat, Failure* failure) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    failure->set(Code::IoError, errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    failure->set(Code::NotARegularFile);
    return false;
  }
  stat->size = static_cast<uint64_t>(st.st_size);
  stat->mtime_ms = mtime_ms_of(st);
  return true;
}

}  // namespace

Fd open_regular_beneath(int dirfd, const std::string& rel, SymlinkPolicy policy, Resolver resolver,
                        bool for_reading, FileStat* stat, Failure* failure) {
  // The walk decides every symlink itself, so it never lets open(2) follow one. openat2 follows an
  // in-root final link under Follow (RESOLVE_BENEATH keeps it inside) and refuses it under Refuse
  // (RESOLVE_NO_SYMLINKS covers the final component unless O_PATH|O_NOFOLLOW asks for the link).
  const bool nofollow = resolver == Resolver::Walk;
  Fd probe = open_beneath(dirfd, rel, O_PATH | (nofollow ? O_NOFOLLOW : 0), policy, resolver, failure);
  if (!probe.valid() || !regular_file_stat(probe.get(), stat, failure)) return Fd();
  if (!for_reading) return probe;
  int flags = served_file_flags();
  if (nofollow || policy == SymlinkPolicy::Refuse) flags |= O_NOFOLLOW;
  Fd fd = open_beneath(dirfd, rel, flags, policy, resolver, failure);
  if (!fd.valid() || !regular_file_stat(fd.get(), stat, failure)) return Fd();
  return fd;
}

Fd open_export_file(int workdir_fd, const std::string& root, const std::string& rel,
                    SymlinkPolicy policy, Resolver resolver, bool for_reading, FileStat* stat,
                    Failure* failure) {
  Fd root_fd = open_root(workdir_fd, root, O_PATH, resolver, failure);
  if (!root_fd.valid()) return Fd();
  return open_regular_beneath(root_fd.get(), rel, policy, resolver, for_reading, stat, failure);
}

ReadResult read_export_file(int workdir_fd, const std::string& root, const std::string& rel,
                            uint64_t max_bytes, SymlinkPolicy policy, Resolver resolver) {
  ReadResult result;
  FileStat st;
  Fd fd = open_export_file(workdir_fd, root, rel, policy, resolver, true, &st, &result.failure);
  if (!fd.valid()) return result;
  // Refused before a single byte is read: an 8 GiB sparse file costs one fstat.
  if (st.size > max_bytes) {
    result.failure.set(Code::TooLarge);
    return result;
  }
  // Start at the fstat size plus one byte to notice growth; grow up to max_bytes + 1, which is
  // the most that is ever read: one byte past the ceiling proves the file grew past it.
  const uint64_t limit = max_bytes + 1;
  size_t capacity = static_cast<size_t>(st.size + 1 < limit ? st.size + 1 : limit);
  unsigned char* buf = static_cast<unsigned char*>(std::malloc(capacity ? capacity : 1));
  if (!buf) {
    result.failure.set(Code::IoError, ENOMEM);
    return result;
  }
  size_t got = 0;
  for (;;) {
    if (got == capacity) {
      if (capacity >= limit) break;
      size_t next = capacity * 2 < limit ? capacity * 2 : static_cast<size_t>(limit);
      unsigned char* grown = static_cast<unsigned char*>(std::realloc(buf, next));
      if (!grown) {
        std::free(buf);
        result.failure.set(Code::IoError, ENOMEM);
        return result;
      }
      buf = grown;
      capacity = next;
    }
    ssize_t n = retry_eintr([&] {
      return pread(fd.get(), buf + got, capacity - got, static_cast<off_t>(got));
    });
    if (n < 0) {
      int err = errno;
      std::free(buf);
      result.failure.set(Code::IoError, err);
      return result;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes) {
    std::free(buf);
    result.failure.set(Code::TooLarge);
    return result;
  }
  if (!sha256_once(buf, got, result.sha256)) {
    std::free(buf);
    result.failure.set(Code::IoError, EIO);
    result.failure.detail = "sha-256 failed";
    return result;
  }
  result.data = buf;
  result.length = got;
  result.mtime_ms = st.mtime_ms;
  return result;
}

int64_t hash_whole_fd(int fd, unsigned char out[32], int* err) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx) {
    *err = ENOMEM;
    return -1;
  }
  unsigned char* buf = static_cast<unsigned char*>(std::malloc(kHashChunk));
  int64_t total = -1;
  if (buf && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1) {
    int64_t off = 0;
    for (;;) {
      ssize_t n = retry_eintr([&] { return pread(fd, buf, kHashChunk, static_cast<off_t>(off)); });
      if (n < 0) {
        *err = errno;
        break;
      }
      if (n == 0) {
        unsigned int len = 0;
        if (EVP_DigestFinal_ex(ctx, out, &len) == 1 && len == 32) total = off;
        else *err = EIO;
        break;
      }
      if (EVP_DigestUpdate(ctx, buf, static_cast<size_t>(n)) != 1) {
        *err = EIO;
        break;
      }
      off += n;
    }
  } else {
    *err = ENOMEM;
  }
  std::free(buf);
  EVP_MD_CTX_free(ctx);
  return total;
}

}  // namespace rp
