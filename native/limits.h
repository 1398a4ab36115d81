// Every size threshold of the export path, in one table. The TypeScript layer reads them from the
// addon (binding.limits, src/native.ts) and never restates one, so a threshold cannot drift
// between the two languages. Each carries its reason.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rp {

// Files up to this size are read synchronously on the JS thread (readSmall): hashing 16 KiB costs
// ~10 us, less than a pool round trip, and admission lets a connection have one response at a
// time, so these bodies together are bounded by the connection cap (1,024 x 16 KiB).
constexpr uint64_t kSyncReadMaxBytes = 16 * 1024;

// A body larger than this is never held whole: it streams from its descriptor in chunks of
// kStreamChunkBytes under a verified etag (stream.h). At most this much is read into one buffer,
// which is also the size of a pooled body buffer (src/export/memory.ts): one size, so reuse never
// depends on a file's exact length. Measured (docs/performance.md): an unchanged 4 MiB file streams
// at ~0.7x nginx with 256 KiB chunks, ~0.85x with 512 KiB, no better with 1 MiB (whose buffers
// cross the mmap threshold), and a window of two 512 KiB chunks is the ~1 MiB a response may hold.
constexpr uint64_t kStreamThresholdBytes = 512 * 1024;
constexpr uint64_t kStreamChunkBytes = kStreamThresholdBytes;

// Bodies up to this size are copied into V8-owned memory: a finalizer per response costs more than
// the copy. Larger ones move into the Node Buffer without a copy.
constexpr size_t kCopiedReadMaxBytes = 64 * 1024;

// A read (or a stream's digest) of a file at least this large asks the digest cache (under a read
// lease); below it hashing costs less than the lease's syscalls.
constexpr uint64_t kCachedReadMinBytes = 256 * 1024;

// A listing asks the digest cache (under a read lease) only for files at least this large. A hit
// costs four system calls more than hashing from one read (three fcntl to take the lease, statx
// under it, one to let go, against a pread), a miss seven more. Measured on this 2-core VM
// (bench/listing-threshold.mjs; docs/performance.md, "The listing's lease threshold"): a repeat
// listing of 1,000 cached files takes 1.1x the time of hashing them again at 4 and 8 KiB, 0.7-0.95x
// at 16 KiB and 0.4x at 32 KiB.
constexpr uint64_t kListingCachedMinBytes = 16 * 1024;

// What one pread of a whole-body read asks for: bounds how long a worker runs between two looks at
// its cancel flag and deadline.
constexpr size_t kReadChunkBytes = 4 << 20;

// The chunk a whole-descriptor hash (a listing, a stream's digest) reads per pread, kept per pool
// thread.
constexpr size_t kHashChunkBytes = 1 << 20;

// glibc's mmap threshold, fixed: a buffer of at least this much gets its own mapping, returned to
// the system on free (the dynamic threshold would otherwise rise and keep such buffers in arenas).
constexpr int kMmapThresholdBytes = 1024 * 1024;

}  // namespace rp
