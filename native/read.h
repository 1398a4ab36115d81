// Reading one export file: resolve, open once, fstat that descriptor, pread its first size bytes,
// and SHA-256 over exactly the bytes returned (or, for a large file, a digest the digest cache
// vouches for). Nothing here re-opens or re-stats by name, so the size, mtime, bytes and hash always
// describe one inode, whatever happens to the path meanwhile. Syscalls only; uses digest_cache and
// sha256, which do not use it.
#pragma once

#include <sys/stat.h>

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
  struct stat st = {};  // the whole fstat: the version a body is of (size, times, identity)
};

struct ReadResult {
  Failure failure;
  OwnedBuffer bytes;  // exactly the bytes served; moves into the Node Buffer without a copy
  int64_t mtime_ms = 0;
  unsigned char sha256[32] = {};
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

// open_regular_beneath of `req.rel` against `req.root`, itself opened beneath `req.workdir`: the
// one resolution of a request. Everything a read serves comes from the descriptor it returns.
Fd open_export_file(const ExportRequest& req, OpenFor purpose, FileStat* stat, Failure* failure);

// How many times open_export_file has resolved a path in this process: a read resolves once, and
// a test holds it to that.
uint64_t export_resolutions();

// The body of an opened regular file: its first st.st_size bytes (the fstat it was opened with:
// bytes appended since are the next version's, and a file that shrank meanwhile gives fewer),
// read from that one descriptor in chunks, asking `stop` before each one and hashing as it goes.
// A file of at least kCachedReadMinBytes, on a filesystem the digest cache trusts, is read under a
// read lease when one is granted: a digest cached for exactly this version then stands in for
// hashing, provided the lease is still intact after the last byte was read (no writer can have
// changed them), and a digest hashed under an intact lease is stored for the next read. Whenever
// the lease is refused or broken, the bytes in the buffer are what is hashed.
ReadResult read_opened(int fd, const struct stat& st, const StopSignal& stop);

// open_export_file of req, its size refused above req.max_bytes by that fstat before a byte is
// read, then read_opened.
ReadResult read_export_file(const ExportRequest& req);

// The open flags every served file is opened with: never blocks (FIFO), never becomes a
// controlling terminal, never follows a final symlink by itself.
int served_file_flags();

}  // namespace rp
