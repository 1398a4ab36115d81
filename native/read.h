// Reading one export file: resolve, open once, fstat that descriptor, bounded pread from it, and
// SHA-256 over exactly the bytes returned (or, for a large file, a digest the digest cache vouches
// for). Nothing here re-opens or re-stats by name, so the size, mtime, bytes and hash always
// describe one inode, whatever happens to the path meanwhile. Syscalls only; uses digest_cache and
// sha256, which do not use it.
#pragma once

#include <cstdint>
#include <string>

#include "buffer.h"
#include "codes.h"
#include "limits.h"
#include "request.h"
#include "resolve.h"

namespace rp {

struct FileStat {
  uint64_t size = 0;
  int64_t mtime_ms = 0;
};

struct ReadResult {
  Failure failure;
  OwnedBuffer bytes;  // exactly the bytes served; moves into the Node Buffer without a copy
  int64_t mtime_ms = 0;
  unsigned char sha256[32] = {};
  // The fstat size of the file once it was opened, also when the read then failed (OverBudget:
  // the caller learns how much room to ask for).
  uint64_t size_seen = 0;
  bool digest_cached = false;  // the digest came from the digest cache, under a read lease
};

// What a caller wants the descriptor for: a probe (stat only, O_PATH) or reading the bytes.
enum class OpenFor { Probe, Reading };

// Resolves `rel` beneath `dirfd` and returns a descriptor of a regular file, or fails. It first
// opens O_PATH and fstat's that: a FIFO, socket or device is refused without ever being opened
// for real (no driver open(), no FIFO writer released). Only then, for Reading, is the path
// opened for reading; that descriptor is fstat'd again, since the path may have changed in
// between, and `stat` describes it. For a Probe the O_PATH descriptor is returned.
Fd open_regular_beneath(int dirfd, const std::string& rel, SymlinkPolicy policy, Resolver resolver,
                        OpenFor purpose, FileStat* stat, Failure* failure);

// open_regular_beneath of `req.rel` against `req.root`, itself opened beneath `req.workdir` on
// every call.
Fd open_export_file(const ExportRequest& req, OpenFor purpose, FileStat* stat, Failure* failure);

// open_export_file, then at most read_limit(read_ceiling(req)) bytes read from that one descriptor, in chunks,
// asking req.stop before each one and hashing as it goes. A file of at least kCachedReadMinBytes,
// on a filesystem the digest cache trusts (times_follow_mapped_writes), is read under a read lease
// when one is granted: a digest cached for exactly this version of the file
// is then used instead of hashing, provided the lease is still intact after the last byte was read
// (no writer can have changed them); a digest hashed under an intact lease is stored for the next
// read. Whenever the lease is refused or broken, the bytes in the buffer are what is hashed.
ReadResult read_export_file(const ExportRequest& req);

// The most bytes read_export_file returns for `req`: its memory budget when one is set below
// max_bytes, else max_bytes. It reads read_limit() of it (one byte more, to see the file grow).
inline uint64_t read_ceiling(const ExportRequest& req) {
  return req.budget_bytes != 0 && req.budget_bytes < req.max_bytes ? req.budget_bytes : req.max_bytes;
}

// The open flags every served file is opened with: never blocks (FIFO), never becomes a
// controlling terminal, never follows a final symlink by itself.
int served_file_flags();

}  // namespace rp
