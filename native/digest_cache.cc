// The digest cache (see digest_cache.h): the LRU, the filesystem allowlist, the racy rule, the
// DigestSession that applies them, and whole_file_digest, which a listing calls per file. Depends
// on sha256 and lease, never on read.
#include "digest_cache.h"

#include <sys/ioctl.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <time.h>

#include <cstring>
#include <new>

#include "fd.h"
#include "limits.h"
#include "lease.h"
#include "sha256.h"
#include "stat_call.h"

namespace rp {

namespace {

// The version statx describes: the key (false when it cannot name the mount and the inode lifetime)
// and the stat fields callers read (size, times, mode, identity).
bool file_version(int fd, const KernelStatx& x, FileKey* key, struct stat* st) {
  *st = {};
  st->st_dev = makedev(x.dev_major, x.dev_minor);
  st->st_ino = static_cast<ino_t>(x.ino);
  st->st_mode = x.mode;
  st->st_size = static_cast<off_t>(x.size);
  st->st_mtim = {static_cast<time_t>(x.mtime.tv_sec), static_cast<long>(x.mtime.tv_nsec)};
  st->st_ctim = {static_cast<time_t>(x.ctime.tv_sec), static_cast<long>(x.ctime.tv_nsec)};
  key->mnt_id = x.mnt_id;
  key->dev = static_cast<uint64_t>(st->st_dev);
  key->ino = x.ino;
  key->size = x.size;
  key->mtime_sec = x.mtime.tv_sec;
  key->mtime_nsec = x.mtime.tv_nsec;
  key->ctime_sec = x.ctime.tv_sec;
  key->ctime_nsec = x.ctime.tv_nsec;
  if ((x.mask & kStatxMntIdUnique) == 0) return false;
  if (x.mask & kStatxBtime) {
    key->lifetime_sec = x.btime.tv_sec;
    key->lifetime_nsec = static_cast<int32_t>(x.btime.tv_nsec);
    return true;
  }
  // No birth time: the inode generation (ext2/3 with small inodes keep one) tells a reused inode
  // number apart; the kernel writes an int.
  unsigned long generation = 0;
  if (ioctl(fd, _IOR('v', 1, long), &generation) != 0) return false;  // FS_IOC_GETVERSION
  key->lifetime_sec = static_cast<int64_t>(generation & 0xffffffffUL);
  key->lifetime_nsec = -1;  // never a birth time's nanoseconds
  return true;
}

}  // namespace

size_t DigestCache::hash(const FileKey& k) {
  // splitmix64 over the fields: cheap, and no field can cancel another out.
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t v : {k.mnt_id, k.dev, k.ino, k.size, static_cast<uint64_t>(k.mtime_sec), static_cast<uint64_t>(k.mtime_nsec),
                     static_cast<uint64_t>(k.ctime_sec), static_cast<uint64_t>(k.ctime_nsec),
                     static_cast<uint64_t>(k.lifetime_sec), static_cast<uint64_t>(static_cast<uint32_t>(k.lifetime_nsec))}) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return static_cast<size_t>(h);
}

size_t DigestCache::find(const FileKey& key) const {
  const size_t mask = index_.size() - 1;
  size_t pos = hash(key) & mask;
  for (;;) {
    const uint32_t slot = index_[pos];
    if (slot == 0) return pos;
    const Entry& e = blocks_[(slot - 1) >> kBlockShift][(slot - 1) & (kBlock - 1)];
    if (e.key == key) return pos;
    pos = (pos + 1) & mask;
  }
}

bool DigestCache::grow_index(size_t buckets) {
  std::vector<uint32_t> next;
  try {
    next.assign(buckets, 0);
  } catch (const std::bad_alloc&) {
    return false;
  }
  const size_t mask = buckets - 1;
  for (uint32_t i = 0; i < count_; i++) {
    size_t pos = hash(at(i).key) & mask;
    while (next[pos] != 0) pos = (pos + 1) & mask;
    next[pos] = i + 1;
  }
  index_.swap(next);
  return true;
}

void DigestCache::unindex(size_t pos) {
  // Backward-shift deletion: every entry after the hole that could live in it moves back, so no
  // probe ever stops short at the hole (no tombstones).
  const size_t mask = index_.size() - 1;
  size_t hole = pos;
  size_t next = pos;
  for (;;) {
    next = (next + 1) & mask;
    const uint32_t slot = index_[next];
    if (slot == 0) break;
    const size_t home = hash(at(slot - 1).key) & mask;
    // The entry at `next` may move into the hole unless its home lies cyclically in (hole, next].
    const bool stays = hole <= next ? (hole < home && home <= next) : (hole < home || home <= next);
    if (stays) continue;
    index_[hole] = slot;
    hole = next;
  }
  index_[hole] = 0;
}

bool DigestCache::lookup(const FileKey& key, unsigned char out[32]) {
  std::lock_guard<std::mutex> lock(mu_);
  if (count_ == 0) return false;
  const uint32_t slot = index_[find(key)];
  if (slot == 0) return false;
  std::memcpy(out, at(slot - 1).digest, 32);
  referenced_[slot - 1] = 1;
  stats_.hits++;
  return true;
}

void DigestCache::store(const FileKey& key, const unsigned char digest[32]) {
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_ == 0) return;
  if (count_ > 0) {
    const uint32_t slot = index_[find(key)];
    if (slot != 0) {
      std::memcpy(at(slot - 1).digest, digest, 32);
      referenced_[slot - 1] = 1;
      stats_.stores++;
      return;
    }
  }
  uint32_t victim;
  if (count_ < capacity_) {
    // Room left: the table grows (a block of entries, the index kept at most half full). Without
    // the memory for it, the digest is simply not stored.
    if ((count_ & (kBlock - 1)) == 0 && (count_ >> kBlockShift) == blocks_.size()) {
      try {
        blocks_.emplace_back(new Entry[kBlock]);
        referenced_.resize(blocks_.size() * kBlock, 0);
      } catch (const std::bad_alloc&) {
        return;
      }
    }
    if ((static_cast<size_t>(count_) + 1) * 2 > index_.size() && !grow_index(index_.empty() ? 64 : index_.size() * 2)) return;
    victim = count_++;
  } else {
    // Full: CLOCK. The hand clears the bit of each entry used since it last passed and takes the
    // first one that was not.
    while (referenced_[hand_]) {
      referenced_[hand_] = 0;
      hand_ = hand_ + 1 == count_ ? 0 : hand_ + 1;
    }
    victim = hand_;
    hand_ = hand_ + 1 == count_ ? 0 : hand_ + 1;
    unindex(find(at(victim).key));
    stats_.evictions++;
  }
  Entry& e = at(victim);
  e.key = key;
  std::memcpy(e.digest, digest, 32);
  referenced_[victim] = 0;
  index_[find(key)] = victim + 1;
  stats_.stores++;
}

void DigestCache::clear() {
  stats_.evictions += count_;
  count_ = 0;
  hand_ = 0;
  blocks_ = std::vector<std::unique_ptr<Entry[]>>();
  referenced_ = std::vector<uint8_t>();
  index_ = std::vector<uint32_t>();
}

void DigestCache::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = capacity;
  if (count_ <= capacity) return;
  if (capacity == 0) {
    clear();
    return;
  }
  // Shrinking keeps the first `capacity` entries and gives back the rest of the memory at once.
  stats_.evictions += count_ - capacity;
  count_ = static_cast<uint32_t>(capacity);
  hand_ = 0;
  blocks_.resize((capacity + kBlock - 1) >> kBlockShift);
  blocks_.shrink_to_fit();
  referenced_.resize(blocks_.size() * kBlock);
  referenced_.shrink_to_fit();
  size_t buckets = 64;
  while (buckets < static_cast<size_t>(count_) * 2) buckets *= 2;
  if (!grow_index(buckets)) clear();
}

DigestCacheStats DigestCache::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  DigestCacheStats out = stats_;
  out.capacity = capacity_;
  out.entries = count_;
  out.hashes = hashes_.load(std::memory_order_relaxed);
  out.fs_uncached = fs_uncached_.load(std::memory_order_relaxed);
  out.below_min = below_min_.load(std::memory_order_relaxed);
  out.bytes = blocks_.size() * kBlock * sizeof(Entry) + referenced_.capacity() + index_.capacity() * sizeof(uint32_t) +
              blocks_.capacity() * sizeof(blocks_[0]);
  return out;
}

namespace {

std::atomic<uint64_t> listing_min_bytes{kListingCachedMinBytes};

}  // namespace

uint64_t listing_cache_min_bytes() { return listing_min_bytes.load(std::memory_order_relaxed); }
void set_listing_cache_min_bytes(uint64_t bytes) { listing_min_bytes.store(bytes, std::memory_order_relaxed); }

namespace {

// statfs f_type values (include/uapi/linux/magic.h), restated so an old build host's header
// cannot leave one out.
constexpr uint32_t kExt4SuperMagic = 0xEF53;  // ext2, ext3 and ext4 share it
constexpr uint32_t kXfsSuperMagic = 0x58465342;
constexpr uint32_t kBtrfsSuperMagic = 0x9123683E;

}  // namespace

bool times_follow_mapped_writes(int fd) {
  struct statfs sfs;
  if (retry_eintr([&] { return fstatfs(fd, &sfs); }) != 0) return false;
  // f_type is a signed word; the magics are 32-bit patterns (btrfs's has the top bit set).
  switch (static_cast<uint32_t>(sfs.f_type)) {
    case kExt4SuperMagic:
    case kXfsSuperMagic:
    case kBtrfsSuperMagic:
      return true;
    default:
      return false;  // tmpfs, ramfs, hugetlbfs, overlayfs, network and unknown filesystems
  }
}

DigestCache& digest_cache() {
  // Never destroyed: pool threads may still be using it while the process exits.
  static DigestCache* cache = new DigestCache(kDefaultDigestCacheEntries);
  return *cache;
}

// ctime + margin < start, exactly, whatever the timestamps hold (128-bit: no overflow).
bool settled_before(const struct timespec& ctime, const struct timespec& start) {
  const __int128 c = static_cast<__int128>(ctime.tv_sec) * 1000000000 + ctime.tv_nsec;
  const __int128 s = static_cast<__int128>(start.tv_sec) * 1000000000 + start.tv_nsec;
  return c + kRacyMarginNs < s;
}

bool DigestSession::begin(int fd, Failure* failure, int allowlisted) {
  DigestCache& cache = digest_cache();
  begun_ = true;
  if (allowlisted == 0 || (allowlisted < 0 && !times_follow_mapped_writes(fd))) {
    cache.count_fs_uncached();
    return true;
  }
  clock_gettime(CLOCK_REALTIME, &start_);
  lease_.reset(new ReadLease(fd));
  if (!lease_->held()) {
    cache.count_lease_refused();
    return true;
  }
  // Under the lease no writer exists and none can appear, so this stat describes the bytes.
  KernelStatx x;
  if (statx_fd(fd, kStatxBasicStats | kStatxBtime | kStatxMntIdUnique, &x) == 0) {
    keyed_ = file_version(fd, x, &key_, &under_);
  } else if (errno == ENOSYS || errno == EINVAL) {  // no statx: the version, but no identity
    if (stat_fd(fd, &under_) != 0) {
      failure->set(Code::IoError, errno);
      return false;
    }
  } else {
    failure->set(Code::IoError, errno);
    return false;
  }
  if (!keyed_) {
    cache.count_no_identity();
    return true;
  }
  hit_ = cache.lookup(key_, cached_);
  return true;
}

void DigestSession::count_hash() {
  if (begun_) digest_cache().count_hash();
}

void DigestSession::finish(const unsigned char digest[32], int64_t hashed) {
  if (!begun_) return;
  DigestCache& cache = digest_cache();
  // A last look before deciding: a writer waiting right now also means nothing is stored.
  const bool unwritten = held() && intact();
  if (lease_ && lease_->broken()) cache.count_lease_broken();
  if (hashed < 0 || !unwritten || !keyed_) return;
  if (!settled_before(under_.st_ctim, start_)) cache.count_racy();
  else if (hashed == static_cast<int64_t>(under_.st_size)) cache.store(key_, digest);
}

int64_t DigestSession::whole_file(int fd, unsigned char out[32], const StopSignal& stop, Failure* failure, int64_t limit) {
  if (hit_) {
    std::memcpy(out, cached_, 32);
    return static_cast<int64_t>(under_.st_size);
  }
  // Hashed with the lease still held (when granted): hash_whole_fd polls it every chunk and lets
  // go as soon as a writer waits, and then nothing is stored.
  count_hash();
  int64_t hashed = hash_whole_fd(fd, out, stop, failure, lease(), limit);
  finish(out, hashed);
  return hashed;
}

int64_t whole_file_digest(int fd, struct stat* st, unsigned char out[32], const StopSignal& stop,
                          Failure* failure, int allowlisted) {
  DigestSession session;
  if (!session.begin(fd, failure, allowlisted)) return -1;
  if (session.held()) *st = session.under();
  // The version `st` describes, no further: one pread fewer than reading to end of file, and under
  // the lease the size cannot have changed.
  return session.whole_file(fd, out, stop, failure, static_cast<int64_t>(st->st_size));
}

}  // namespace rp
