// A body too large to hold whole (limits.h: kStreamThresholdBytes), sent in chunks from the one
// descriptor its read opened (read.h). Which way it goes depends on whether the file can be shown
// not to move while it is sent (SPEC section 10, a live workdir):
//
//  * Settled: a digest cached for exactly this version, found under a read lease that the stream
//    keeps (digest_cache.h: no writer can open the file while it holds, so chunks are not hashed
//    again), or a hashing pass over the first size bytes whose descriptor shows the same size,
//    mtime and ctime before and after, on a file whose ctime is older than the racy margin. The
//    etag is known before the headers; every chunk is hashed as it is read, and the final chunk is
//    released only once the hash of everything read equals it and no chunk came up short.
//    Otherwise the caller is told FileChanged and never sends that chunk, so no client can
//    complete a body whose sha256 differs from its etag.
//  * Unsettled (a file being written): a snapshot. The caller reads every chunk into memory it
//    holds first (each hashed as read), then sends exactly those bytes under the digest of them
//    (snapshot_digest): torn or short as the writer made it, but vouched for by its etag.
//
// A body is the first `size` bytes of the descriptor at its fstat: bytes appended after that are
// the next version's, and neither hashing nor sending looks past them.
//
// Under a lease, the lease is asked before every chunk, before the final one is released, and (by
// the caller, while a slow client holds the send) at any time through lease_intact(); the first
// time a writer waits for it, it is let go at once and the stream fails FileChanged, so a writer is
// never kept waiting by a reader for long.
// Syscalls only; uses digest_cache, lease and sha256.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "codes.h"
#include "fd.h"
#include "lease.h"
#include "sha256.h"
#include "stop.h"

namespace rp {

// One body's chunks: its descriptor, its size, the digest promised in the headers (none for a
// snapshot), and the hash of what was handed out so far. Chunks are taken in order, one at a time
// (the caller serialises).
class BodyStream {
 public:
  // `promised`: the etag's digest (null: a snapshot, whose digest is what was read). `lease`: the
  // read lease a cached digest was found under (null: the chunks are hashed).
  BodyStream(Fd fd, uint64_t size, const unsigned char* promised, std::unique_ptr<ReadLease> lease = nullptr);
  BodyStream(const BodyStream&) = delete;
  BodyStream& operator=(const BodyStream&) = delete;

  // Reads the next chunk (at most `capacity` bytes, never past the body's size) into `into` and
  // hashes it. The chunk that reaches the size is the final one. A promised stream sets `*final`
  // only if the hash of every chunk equals the promise; a chunk that comes up short fails it. A
  // snapshot that comes up short ends there (`*final`, the bytes it got). Returns the bytes read;
  // 0 with `failure` set (FileChanged, saying how, or IoError) when the chunk must not be sent.
  size_t next(unsigned char* into, size_t capacity, bool* final, Failure* failure);

  // A snapshot's digest, once its final chunk was read: the sha256 of every byte handed out.
  // False before that, or for a promised stream.
  bool snapshot_digest(unsigned char out[32]) const;

  uint64_t size() const { return size_; }
  uint64_t offset() const { return offset_; }
  bool snapshot() const { return snapshot_; }
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
  bool snapshot_;
  unsigned char promised_[32] = {};
  unsigned char read_digest_[32] = {};  // a snapshot's, once done_
  Sha256 sha_;
  bool done_ = false;      // the final chunk was handed out, or a failure ended the stream
  bool complete_ = false;  // a snapshot's final chunk was handed out: read_digest_ names it all
  std::mutex lease_mu_;
  std::unique_ptr<ReadLease> lease_;  // after fd_: released before the descriptor closes
  bool leased_ = false;               // sent under a lease (whether or not it still holds)
  bool verified_ = false;             // under lease_mu_: the final chunk was released
};

struct BodyOpening {
  Failure failure;
  Fd fd;
  // Settled: stream `size` bytes under `sha256`. Unsettled: the caller snapshots (or, if it cannot
  // hold one, refuses); no digest was taken, or the one taken no longer describes the file.
  bool settled = false;
  uint64_t size = 0;  // the bytes the body holds at most: its content-length when settled
  int64_t mtime_ms = 0;
  unsigned char sha256[32] = {};
  bool digest_cached = false;
  std::unique_ptr<ReadLease> lease;  // held, with a cached digest: see BodyStream
};

// Decides how the body of an opened file (`fd`, with the fstat `st` its read took, already within
// max_bytes) is sent. A caller that can hold a snapshot (`snapshot_ok`) gets one (unsettled) for a
// file that is moving: its ctime inside the racy margin (nothing else is asked then), changed since
// `st`, or moved during the hashing pass (or a writer came for the lease meanwhile). Otherwise a
// digest cached for this version under its read lease (settled, the lease kept), or a hashing pass
// over the first size bytes (asking `stop` between chunks), settled if the descriptor shows the same
// version after it as before. The descriptor is handed back either way.
BodyOpening open_body(Fd fd, const struct stat& st, uint64_t max_bytes, bool snapshot_ok, const StopSignal& stop);

}  // namespace rp
