// The digest cache (see digest_cache.h): the LRU, the filesystem allowlist, the racy rule, the
// DigestSession that applies them, and whole_file_digest, which a listing calls per file. Depends
// on sha256 and lease, never on read.
#include "digest_cache.h"

#include <sys/ioctl.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <time.h>

#include <cstring>

#include "fd.h"
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
    key->lifetime_nsec = x.btime.tv_nsec;
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

size_t DigestCache::KeyHash::operator()(const FileKey& k) const {
  // splitmix64 over the fields: cheap, and no field can cancel another out.
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t v : {k.mnt_id, k.dev, k.ino, k.size, static_cast<uint64_t>(k.mtime_sec), static_cast<uint64_t>(k.mtime_nsec),
                     static_cast<uint64_t>(k.ctime_sec), static_cast<uint64_t>(k.ctime_nsec),
                     static_cast<uint64_t>(k.lifetime_sec), static_cast<uint64_t>(k.lifetime_nsec)}) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return static_cast<size_t>(h);
}

bool DigestCache::lookup(const FileKey& key, unsigned char out[32]) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second);
  std::memcpy(out, it->second->digest, 32);
  stats_.hits++;
  return true;
}

void DigestCache::store(const FileKey& key, const unsigned char digest[32]) {
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_ == 0) return;
  auto it = index_.find(key);
  if (it != index_.end()) {
    std::memcpy(it->second->digest, digest, 32);
    lru_.splice(lru_.begin(), lru_, it->second);
  } else {
    evict_to(capacity_ - 1);
    Entry e;
    e.key = key;
    std::memcpy(e.digest, digest, 32);
    lru_.push_front(e);
    index_.emplace(key, lru_.begin());
  }
  stats_.stores++;
}

void DigestCache::evict_to(size_t capacity) {
  while (lru_.size() > capacity) {
    index_.erase(lru_.back().key);
    lru_.pop_back();
    stats_.evictions++;
  }
}

void DigestCache::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = capacity;
  evict_to(capacity);
}

DigestCacheStats DigestCache::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  DigestCacheStats out = stats_;
  out.capacity = capacity_;
  out.entries = lru_.size();
  return out;
}

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

bool DigestSession::begin(int fd, Failure* failure) {
  DigestCache& cache = digest_cache();
  begun_ = true;
  if (!times_follow_mapped_writes(fd)) {
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
                          Failure* failure) {
  DigestSession session;
  if (!session.begin(fd, failure)) return -1;
  if (session.held()) *st = session.under();
  return session.whole_file(fd, out, stop, failure);
}

}  // namespace rp
