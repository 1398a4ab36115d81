// A body too large to hold whole (limits.h: kStreamThresholdBytes), sent in chunks from the one
// descriptor it was checked on, under an etag known before the headers. The digest comes first:
// from the digest cache where that is sound (digest_cache.h), else from a hashing pass over the
// same descriptor with bounded memory. Then every chunk sent is hashed as it is read, and the final
// chunk is released only once the hash of everything sent equals the etag promised, nothing lies
// past the promised size, and no chunk came up short. Otherwise the caller is told FileChanged and
// never sends that chunk, so no client can complete a body whose sha256 differs from its etag.
//
// A digest from the cache comes with the read lease it was looked up under (digest_cache.h), and
// the stream keeps it: while it is intact no writer can have opened the file or mapped it writable,
// so no byte can change, and the chunks are not hashed again. The lease is asked before every
// chunk, before the final one is released, and (by the caller, while a slow client holds the send)
// at any time through lease_intact(); the first time a writer waits for it, it is let go at once and
// the stream fails FileChanged, so a writer is never kept waiting by a reader for long.
// Syscalls only; uses read (open_export_file), digest_cache, lease and sha256.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "codes.h"
#include "fd.h"
#include "lease.h"
#include "request.h"
#include "sha256.h"

namespace rp {

// One streamed body: its descriptor, the size and digest promised in the headers, and the hash of
// what was handed out so far. Chunks are taken in order, one at a time (the caller serialises).
class BodyStream {
 public:
  // `lease`: the read lease a cached digest was found under (null: the chunks are hashed).
  BodyStream(Fd fd, uint64_t size, const unsigned char promised[32], std::unique_ptr<ReadLease> lease = nullptr);
  BodyStream(const BodyStream&) = delete;
  BodyStream& operator=(const BodyStream&) = delete;

  // Reads the next chunk (at most `capacity` bytes, never past the promised size) into `into` and
  // hashes it. The chunk that reaches the promised size is the final one: `*final` is set only if
  // the file has no byte past it and the hash of every chunk equals the promise. Returns the bytes
  // read; 0 with `failure` set (FileChanged, saying how, or IoError) when the chunk must not be sent.
  size_t next(unsigned char* into, size_t capacity, bool* final, Failure* failure);

  uint64_t size() const { return size_; }
  uint64_t offset() const { return offset_; }
  // Sent under the lease of a cached digest (its chunks are not hashed).
  bool leased() const { return leased_; }

  // For a stream sent under its lease: false once a writer waits (the lease is then let go, and the
  // next chunk fails). True for a stream that hashes its chunks, and once the final chunk was
  // released. Safe from any thread.
  bool lease_intact();

 private:
  bool vouched();  // under lease_mu_: the lease still vouches for the bytes

  Fd fd_;
  uint64_t size_;
  uint64_t offset_ = 0;
  unsigned char promised_[32];
  Sha256 sha_;
  bool done_ = false;  // the final chunk was handed out, or a failure ended the stream
  std::mutex lease_mu_;
  std::unique_ptr<ReadLease> lease_;  // after fd_: released before the descriptor closes
  bool leased_ = false;               // sent under a lease (whether or not it still holds)
  bool verified_ = false;             // under lease_mu_: the final chunk was released
};

struct StreamOpening {
  Failure failure;
  Fd fd;
  uint64_t size = 0;  // the bytes the digest covers: the body's content-length
  int64_t mtime_ms = 0;
  unsigned char sha256[32] = {};
  bool digest_cached = false;
  std::unique_ptr<ReadLease> lease;  // held, with a cached digest: see BodyStream
};

// open_export_file of req (the same resolution and checks as a read), max_bytes refused by fstat
// before a byte is read and again by what was hashed, then the digest of the whole file through
// one DigestSession: a digest cached for exactly this version, found under a read lease that is
// then kept, or else a hashing pass under that lease (asking req.stop between chunks).
StreamOpening open_export_stream(const ExportRequest& req);

}  // namespace rp
