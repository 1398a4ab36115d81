// The digest cache: whole-file SHA-256 digests that a listing or a large read (read.h) may reuse
// instead of hashing again, so a repeat listing of an unchanged tree costs an open, fstat, fstatfs
// and fcntl per file rather than reading every byte. Owns the LRU, the rules that make a cached
// digest trustworthy (below), and the one place they are applied: DigestSession, which read.cc,
// stream.cc and list.cc (through whole_file_digest) all go through, never the reverse.
//
// Key: what identifies one version of one file, asked of the descriptor with statx: the unique
// mount id (never reused while the system runs, so a filesystem image unmounted and another
// mounted on the same device, with the same inode numbers and times, is another key), st_dev,
// st_ino, the inode's birth time (or, where it has none, its generation: one inode lifetime from
// the next), st_size, mtime ns and ctime ns. Where the kernel cannot say which mount or which
// inode lifetime (no STATX_MNT_ID_UNIQUE before Linux 6.8, neither a birth time nor a
// generation), the file is hashed and nothing is stored for it (counted as no_identity). Stat
// data alone can lie (a write through an already dirty shared mapping changes the bytes and no
// timestamp), so a digest is only ever stored or used under a read lease (lease.h):
//
//  * Use: the lease is taken, the file fstat'd under it, the key looked up, the lease released.
//    A hit is used only if the lease was granted, i.e. nobody could write the file at that moment.
//  * Store: the lease is held from that fstat through the whole hash; a writer arriving meanwhile
//    breaks it (the hash loop polls, releases within one chunk, and nothing is stored). So the
//    stored digest is of bytes no one could change while they were read.
//  * Racy entries (git's rule): stored only if the file's ctime is at least kRacyMarginNs older
//    than the moment hashing began. A later write then necessarily gets a different ctime, even
//    on a filesystem whose timestamps are coarse, so the old key can never match the new bytes.
//    2 s is the coarsest granularity of a Linux filesystem that supports leases (FAT/vfat store
//    2 s; ext2/3 with small inodes, HFS+ and others 1 s; ext4, xfs, btrfs and tmpfs keep ns but
//    take them from a clock that ticks in jiffies). A file changed in the last 2 s is simply
//    hashed on every listing until it settles. Outside the rule: a realtime clock stepped back,
//    and filesystems whose timestamps come from another clock (network filesystems, which mostly
//    refuse leases anyway).
//
// Only on filesystems whose times follow mapped writes (times_follow_mapped_writes): the lease
// proves no writer exists now, and stat data must then prove none wrote since the digest was
// stored. A write(2) or truncate always moves ctime; a write through a shared mapping moves it only
// where the filesystem takes a write fault on the first store to each clean page and updates the
// times there (its page_mkwrite). ext2/3/4, xfs and btrfs do; since no writable mapping can exist
// while the digest is stored (the lease), every later mapped write starts with such a fault, and
// the racy rule makes the new ctime differ from the stored one. tmpfs, ramfs and hugetlbfs have no
// page_mkwrite: a page first read-faulted in a writable shared mapping is mapped writable at once,
// and writing it changes the bytes and no time at all (STACK.md). overlayfs reports its own type
// whatever lies beneath, and a filesystem not on the list is unknown: all of them hash every time.
//
// Bounded, and sized by what the export holds: a table that grows as digests are stored, up to
// `capacity` entries (default kDefaultDigestCacheEntries; `serve --digest-cache-entries`), each
// kDigestCacheEntryBytes (the key's 68 bytes, the digest's 32, a reference bit) plus 8 bytes of
// index at most, so 262,144 entries hold at most ~29 MiB, beside the memory budget, and an export
// of 10,000 cacheable files ~1.1 MiB. Once full, CLOCK (second chance) picks the entry to evict:
// one that was not used since the hand last passed it. A listing of more cacheable files than the
// capacity evicts its own entries in order and gets no hits: raise the capacity for such trees.
// One process-wide cache (digest_cache()), safe to use from any number of threads.
//
// A listing asks the cache only for files of at least listing_cache_min_bytes()
// (kListingCachedMinBytes, limits.h): below it, hashing the bytes again costs less than the lease's
// system calls (docs/performance.md, the measurement), so a small file is hashed from one read of
// it and nothing is looked up or stored (counted as below_min).
#pragma once

#include <sys/stat.h>

#include <time.h>

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "codes.h"
#include "lease.h"
#include "stop.h"

namespace rp {

constexpr size_t kDefaultDigestCacheEntries = 262144;
constexpr size_t kMaxDigestCacheEntries = size_t{1} << 24;  // the setter's bound (~1.8 GiB at most)
constexpr int64_t kRacyMarginNs = 2000000000;  // 2 s, see above

// 68 bytes of key: the nanoseconds are below 10^9 and fit 32 bits.
struct FileKey {
  uint64_t mnt_id = 0, dev = 0, ino = 0, size = 0;
  int64_t mtime_sec = 0, ctime_sec = 0;
  // The birth time where the filesystem keeps one, else the inode generation in lifetime_sec (and
  // lifetime_nsec -1, never a birth time's).
  int64_t lifetime_sec = 0;
  uint32_t mtime_nsec = 0, ctime_nsec = 0;
  int32_t lifetime_nsec = 0;
  bool operator==(const FileKey& o) const {
    return mnt_id == o.mnt_id && dev == o.dev && ino == o.ino && size == o.size && mtime_sec == o.mtime_sec &&
           mtime_nsec == o.mtime_nsec && ctime_sec == o.ctime_sec && ctime_nsec == o.ctime_nsec &&
           lifetime_sec == o.lifetime_sec && lifetime_nsec == o.lifetime_nsec;
  }
};

struct DigestCacheStats {
  uint64_t capacity = 0, entries = 0;
  uint64_t bytes = 0;         // memory the table holds now (entries allocated in blocks, and the index)
  uint64_t hits = 0;          // digests taken from the cache instead of hashing
  uint64_t hashes = 0;        // files hashed whole
  uint64_t stores = 0;        // digests stored
  uint64_t evictions = 0;     // entries dropped to stay within capacity
  uint64_t lease_refused = 0; // no lease (a writer or writable mapping, not the owner, ...): hashed
  uint64_t lease_broken = 0;  // a writer arrived while hashing: hashed, not stored
  uint64_t racy = 0;          // hashed but not stored: ctime too recent
  uint64_t fs_uncached = 0;   // hashed without the cache: the filesystem is not on the allowlist
  uint64_t no_identity = 0;   // hashed without the cache: no unique mount id, or no inode lifetime
  uint64_t below_min = 0;     // a listing hashed without the cache: smaller than listing_cache_min_bytes()
};

class DigestCache {
 public:
  explicit DigestCache(size_t capacity) : capacity_(capacity) {}
  DigestCache(const DigestCache&) = delete;
  DigestCache& operator=(const DigestCache&) = delete;
  bool lookup(const FileKey& key, unsigned char out[32]);
  void store(const FileKey& key, const unsigned char digest[32]);
  void set_capacity(size_t capacity);
  DigestCacheStats stats();
  // Counted as hashing starts, without the lock (a listing counts every file).
  void count_hash() { hashes_.fetch_add(1, std::memory_order_relaxed); }
  void count_lease_refused() { std::lock_guard<std::mutex> lock(mu_); stats_.lease_refused++; }
  void count_lease_broken() { std::lock_guard<std::mutex> lock(mu_); stats_.lease_broken++; }
  void count_racy() { std::lock_guard<std::mutex> lock(mu_); stats_.racy++; }
  void count_fs_uncached() { fs_uncached_.fetch_add(1, std::memory_order_relaxed); }
  void count_below_min() { below_min_.fetch_add(1, std::memory_order_relaxed); }
  void count_no_identity() { std::lock_guard<std::mutex> lock(mu_); stats_.no_identity++; }

 private:
  struct Entry {
    FileKey key;
    unsigned char digest[32];
  };
  static constexpr size_t kBlockShift = 12;  // entries are allocated 4,096 at a time, never moved
  static constexpr size_t kBlock = size_t{1} << kBlockShift;
  static size_t hash(const FileKey& k);
  Entry& at(uint32_t i) { return blocks_[i >> kBlockShift][i & (kBlock - 1)]; }
  // The index position holding entry `i` + 1 for `key`, or of the empty bucket ending its probe.
  size_t find(const FileKey& key) const;
  bool grow_index(size_t buckets);  // rehash into `buckets` (a power of two); false without memory
  void unindex(size_t pos);         // backward-shift deletion from the linear-probing index
  void clear();                     // with mu_ held: every entry evicted, memory returned

  std::mutex mu_;
  size_t capacity_;
  uint32_t count_ = 0;                          // entries in use: 0 .. count_-1
  std::vector<std::unique_ptr<Entry[]>> blocks_;
  std::vector<uint8_t> referenced_;             // CLOCK's bit, per entry
  std::vector<uint32_t> index_;                 // entry + 1, 0 empty; at most half full
  uint32_t hand_ = 0;
  DigestCacheStats stats_;  // all but the three below, under mu_
  std::atomic<uint64_t> hashes_{0}, fs_uncached_{0}, below_min_{0};
};

// The smallest file a listing asks the cache for (kListingCachedMinBytes unless set: tests and the
// threshold's measurement set it).
uint64_t listing_cache_min_bytes();
void set_listing_cache_min_bytes(uint64_t bytes);

DigestCache& digest_cache();

// Whether the filesystem of open descriptor `fd` is known to update a file's times on the first
// write through a shared mapping (the allowlist above, by fstatfs f_type). False when unknown or
// when fstatfs fails: the caller then hashes and neither looks up nor stores.
bool times_follow_mapped_writes(int fd);

// Whether a file whose ctime is `ctime` may have its digest stored when hashing began at `start`
// (CLOCK_REALTIME): the racy rule above.
bool settled_before(const struct timespec& ctime, const struct timespec& start);

// One file's way through the cache: the rules above, written once. begin() takes the read lease
// (on an allowlisted filesystem only), fstat's the file under it and looks that version up. The
// caller then either uses the cached digest, for as long as intact() says the lease holds, or
// hashes; finish() then decides whether the digest may be stored. The lease is held from begin()
// until the session ends (or keep_lease() hands it on), so it covers the check and the last byte.
// The caller's descriptor must outlive the session.
class DigestSession {
 public:
  DigestSession() = default;
  DigestSession(const DigestSession&) = delete;
  DigestSession& operator=(const DigestSession&) = delete;

  // Off the allowlist: counts fs_uncached, takes no lease. Else takes the lease (a refusal is
  // counted), and under it statx's the file and, if the kernel names its mount and inode lifetime,
  // looks that version up (else counts no_identity: nothing is looked up or stored). False, with
  // IoError set, only if that stat fails. `allowlisted`: 1 or 0 when the caller already knows what
  // times_follow_mapped_writes(fd) says (a listing asks once per filesystem), -1 to ask here.
  bool begin(int fd, Failure* failure, int allowlisted = -1);

  // The lease is held now (granted by begin(), not let go since). No system call.
  bool held() const { return lease_ && lease_->held(); }
  // The stat taken under the lease: the version a cached digest is of. Set only if held() at begin().
  const struct stat& under() const { return under_; }
  // A digest cached for exactly that version (found only under the lease).
  bool hit() const { return hit_; }
  const unsigned char* cached() const { return cached_; }
  // held() and no writer waits for it: one F_GETLEASE; a waiting writer makes it let go at once.
  bool intact() { return lease_ && lease_->intact(); }
  // The held lease, for a hash loop to poll (hash_whole_fd); null when none is held.
  ReadLease* lease() { return held() ? lease_.get() : nullptr; }
  // Hands the lease on (a stream sent under the cached digest keeps it until its last byte).
  std::unique_ptr<ReadLease> keep_lease() { return std::move(lease_); }

  // Counts one file hashed whole. Nothing, for a session never begun.
  void count_hash();
  // After the caller hashed `hashed` bytes into `digest` (-1: the hash failed): counts a lease a
  // writer broke, and stores the digest only if the lease held from begin() to now, the file's
  // ctime had settled before begin() (else counted racy), and exactly as many bytes were hashed as
  // the fstat under the lease said. Nothing, for a session never begun.
  void finish(const unsigned char digest[32], int64_t hashed);

  // The whole file's digest (`fd` open O_RDONLY, at offset 0), or that of its first `limit` bytes
  // when limit >= 0: the cached one on a hit, else hashed (counted, polling the lease) and offered
  // to finish(). Returns the bytes it covers, or -1 with `failure` set (Cancelled, TimeBudget,
  // IoError). After begin().
  int64_t whole_file(int fd, unsigned char out[32], const StopSignal& stop, Failure* failure, int64_t limit = -1);
  // A writer came for the lease while it was held (it was let go for them).
  bool broken() const { return lease_ && lease_->broken(); }

 private:
  bool begun_ = false;
  std::unique_ptr<ReadLease> lease_;
  struct timespec start_ = {};  // CLOCK_REALTIME before the lease: the racy rule's reference
  struct stat under_ = {};
  FileKey key_;
  bool keyed_ = false;  // key_ names the mount and the inode lifetime: the cache may be used
  unsigned char cached_[32] = {};
  bool hit_ = false;
};

// The digest of the whole regular file behind `fd` (open O_RDONLY), from the cache or by hashing,
// through one DigestSession (on a filesystem off the allowlist: always by hashing). `st` is the
// caller's fstat of `fd`; it is replaced by the fstat taken under the lease when there is one, so
// size and mtime describe the bytes the digest is of; the hash covers the first st_size bytes of
// that fstat (fewer if the file shrank: without a lease it can). Returns the byte count the digest covers,
// or -1 with `failure` set (Cancelled, TimeBudget, IoError).
int64_t whole_file_digest(int fd, struct stat* st, unsigned char out[32], const StopSignal& stop,
                          Failure* failure, int allowlisted = -1);

}  // namespace rp
