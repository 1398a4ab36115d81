// A body too large to hold whole (limits.h: kStreamThresholdBytes), sent in chunks from the one
// descriptor it was checked on, under an etag known before the headers. The digest comes first:
// from the digest cache where that is sound (digest_cache.h), else from a hashing pass over the
// same descriptor with bounded memory. Then every chunk sent is hashed as it is read, and the final
// chunk is released only once the hash of everything sent equals the etag promised, nothing lies
// past the promised size, and no chunk came up short. Otherwise the caller is told FileChanged and
// never sends that chunk, so no client can complete a body whose sha256 differs from its etag.
// Syscalls only; uses read (open_export_file), digest_cache and sha256.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codes.h"
#include "fd.h"
#include "request.h"
#include "sha256.h"

namespace rp {

// One streamed body: its descriptor, the size and digest promised in the headers, and the hash of
// what was handed out so far. Chunks are taken in order, one at a time (the caller serialises).
class BodyStream {
 public:
  BodyStream(Fd fd, uint64_t size, const unsigned char promised[32]);
  BodyStream(const BodyStream&) = delete;
  BodyStream& operator=(const BodyStream&) = delete;

  // Reads the next chunk (at most `capacity` bytes, never past the promised size) into `into` and
  // hashes it. The chunk that reaches the promised size is the final one: `*final` is set only if
  // the file has no byte past it and the hash of every chunk equals the promise. Returns the bytes
  // read; 0 with `failure` set (FileChanged, saying how, or IoError) when the chunk must not be sent.
  size_t next(unsigned char* into, size_t capacity, bool* final, Failure* failure);

  uint64_t size() const { return size_; }
  uint64_t offset() const { return offset_; }

 private:
  Fd fd_;
  uint64_t size_;
  uint64_t offset_ = 0;
  unsigned char promised_[32];
  Sha256 sha_;
  bool done_ = false;  // the final chunk was handed out, or a failure ended the stream
};

struct StreamOpening {
  Failure failure;
  Fd fd;
  uint64_t size = 0;  // the bytes the digest covers: the body's content-length
  int64_t mtime_ms = 0;
  unsigned char sha256[32] = {};
  bool digest_cached = false;
};

// open_export_file of req (the same resolution and checks as a read), max_bytes refused by fstat
// before a byte is read and again by what was hashed, then the digest of the whole file (cache or
// hashing pass, asking req.stop between chunks).
StreamOpening open_export_stream(const ExportRequest& req);

}  // namespace rp
