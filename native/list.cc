// Listing: the tree is walked on descriptors only. Each directory is opened with O_NOFOLLOW on a
// descriptor the walk already holds and read with getdents64 on that same descriptor, so a symlinked
// directory is never descended and one swapped for a link mid-walk is simply skipped. The entry's
// type comes from getdents64 (newfstatat only where the filesystem says DT_UNKNOWN): a type that
// changed since is caught when the file is opened (O_NOFOLLOW, O_NONBLOCK) and fstat'd. Each file
// is opened once; its size, mtime and hash come from that descriptor. Whatever vanishes, cannot be
// opened or is not a regular file is left out, never an error.
//
// Per file that is: openat, fstat, one pread (a file below kHashChunkBytes), close. Whether the
// digest cache may be used is decided per filesystem, not per file: fstatfs once for the root and
// once for each directory or file whose st_dev differs from its parent's (a mount point, a btrfs
// subvolume, a bind-mounted file). Only a file of at least listing_cache_min_bytes() on an
// allowlisted filesystem goes through the digest cache and its read lease (digest_cache.h).
#include "list.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <deque>
#include <iterator>
#include <memory>
#include <new>
#include <sys/syscall.h>

#include "digest_cache.h"
#include "limits.h"
#include "read.h"
#include "sha256.h"
#include "stat_call.h"
#include "time_ms.h"

// glibc 2.34 moved the pthread functions into libc under new versions; a reference to those
// would make the prebuilds refuse to load on the older glibc they support (README, the floor).
// Bound here to the versions every glibc since 2.17 exports (compat.cc explains the floor).
#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 34)
#if defined(__x86_64__)
__asm__(".symver pthread_create, pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_join, pthread_join@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver pthread_create, pthread_create@GLIBC_2.17");
__asm__(".symver pthread_join, pthread_join@GLIBC_2.17");
#endif
#endif
#endif

namespace rp {

namespace {

// Directory depth beyond which the listing stops descending (each level holds one descriptor):
// the depth at which a read's path would have too many components to resolve anyway.
constexpr int kMaxDepth = static_cast<int>(kMaxComponents) - 1;

// Files handed to a hashing thread at a time: one lock and one wake-up per batch, not per file.
constexpr size_t kBatchFiles = 64;
// Symlinks' targets are opened by the walker (the resolver's one open), so a batch holds their
// descriptors: at most this many, so the queue (Hashing::kQueueMax batches) holds at most 64
// descriptors of them, as the per-file queue did before.
constexpr size_t kBatchOpened = 8;

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) { i++; continue; }
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > n) return false;
    for (size_t k = 1; k < len; k++) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

// One open directory of the walk, shared by the batches of its files until the last is hashed.
struct Dir {
  Fd fd;
  dev_t dev = 0;
  int allowlisted = 0;  // times_follow_mapped_writes for this directory's filesystem
};
using DirRef = std::shared_ptr<const Dir>;

struct FileJob {
  std::string name;  // beneath the batch's directory
  std::string path;  // relative to the root
  Fd opened;         // a symlink's target, already opened by the resolver (name unused)
};

struct Batch {
  DirRef dir;
  std::vector<FileJob> files;
  size_t opened = 0;  // of files, those whose descriptor is already open (symlinks' targets)
};

// The batches a walk queued, hashed by the walking thread and up to kMaxHelpers threads of its
// own, so a listing uses every core. The queue is bounded (each batch holds its directory open):
// when it is full the walker hashes one itself. Entries land in `out` in any order (sorted later).
//
// pthread directly, not std::thread or std::condition_variable: those would make the prebuilds
// require a newer libstdc++ (GLIBCXX_3.4.22 and 3.4.30) than their floor (README); compat.cc
// binds pthread_create and pthread_join to versions every supported glibc has.
class Hashing {
 public:
  static constexpr size_t kQueueMax = 8;
  static constexpr unsigned kMaxHelpers = 3;

  Hashing(const StopSignal& stop, std::vector<ListEntry>* out, Failure* stopped)
      : stop_(stop), out_(out), stopped_(stopped), min_bytes_(listing_cache_min_bytes()) {
    pthread_mutex_init(&mu_, nullptr);
    pthread_cond_init(&ready_, nullptr);
  }
  Hashing(const Hashing&) = delete;
  Hashing& operator=(const Hashing&) = delete;
  ~Hashing() {
    finish();
    pthread_cond_destroy(&ready_);
    pthread_mutex_destroy(&mu_);
  }

  // True once the listing must end (a hash saw the stop signal): the walker unwinds.
  bool halted() const { return halted_.load(std::memory_order_relaxed); }

  void add(Batch batch) {
    if (batch.files.empty()) return;
    pthread_mutex_lock(&mu_);
    if (!spawned_) spawn_helpers();
    if (queue_.size() >= kQueueMax || helpers_ == 0) {
      pthread_mutex_unlock(&mu_);
      run(batch);
      return;
    }
    // No exception may leave with mu_ held (the listing would deadlock in finish()).
    try {
      queue_.push_back(std::move(batch));
    } catch (const std::bad_alloc&) {
      pthread_mutex_unlock(&mu_);
      run(batch);  // push_back leaves the batch as it was when it throws
      return;
    }
    pthread_cond_signal(&ready_);
    pthread_mutex_unlock(&mu_);
  }

  // Every queued batch hashed (the walker helps), helpers joined.
  void finish() {
    for (;;) {
      pthread_mutex_lock(&mu_);
      if (queue_.empty()) {
        closing_ = true;
        pthread_cond_broadcast(&ready_);
        pthread_mutex_unlock(&mu_);
        break;
      }
      Batch batch = std::move(queue_.front());
      queue_.pop_front();
      pthread_mutex_unlock(&mu_);
      run(batch);
    }
    for (unsigned i = 0; i < helpers_; i++) pthread_join(threads_[i], nullptr);
    helpers_ = 0;
  }

 private:
  static void* help_entry(void* self) {
    static_cast<Hashing*>(self)->help();
    return nullptr;
  }

  void spawn_helpers() {  // with mu_ held
    spawned_ = true;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned n = cores > 1 ? static_cast<unsigned>(std::min<long>(cores - 1, kMaxHelpers)) : 1;
    // A thread that cannot be had (EAGAIN) only means the walker hashes more itself.
    while (helpers_ < n && pthread_create(&threads_[helpers_], nullptr, help_entry, this) == 0) helpers_++;
  }

  void help() {
    pthread_mutex_lock(&mu_);
    for (;;) {
      while (!closing_ && queue_.empty()) pthread_cond_wait(&ready_, &mu_);
      if (queue_.empty()) break;
      Batch batch = std::move(queue_.front());
      queue_.pop_front();
      pthread_mutex_unlock(&mu_);
      run(batch);
      pthread_mutex_lock(&mu_);
    }
    pthread_mutex_unlock(&mu_);
  }

  void halt(const Failure& why) {  // with mu_ held
    if (halted()) return;
    *stopped_ = why;
    halted_.store(true, std::memory_order_relaxed);
  }

  // One file: opened (unless the resolver already did), fstat'd, and if it is a regular file
  // hashed from that descriptor, through the digest cache where it pays. False when it is left out;
  // a stop sets `failure` (Cancelled, TimeBudget).
  bool hash_file(const Dir& dir, FileJob& job, ListEntry* entry, Failure* failure) {
    Fd fd = std::move(job.opened);
    const bool linked = fd.valid();
    if (!linked) {
      fd = Fd(retry_eintr([&] { return openat(dir.fd.get(), job.name.c_str(), served_file_flags() | O_NOFOLLOW); }));
      if (!fd.valid()) return false;
    }
    struct stat st;
    if (stat_fd(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
    // Same st_dev as its directory: the same filesystem. Else (a bind-mounted file, a link's target
    // elsewhere beneath the root) asked of the file itself.
    const bool allowlisted = !linked && st.st_dev == dir.dev ? dir.allowlisted != 0 : times_follow_mapped_writes(fd.get());
    int64_t hashed;
    if (allowlisted && static_cast<uint64_t>(st.st_size) >= min_bytes_) {
      // From the digest cache when a read lease proves nobody can be writing, else hashed whole.
      hashed = whole_file_digest(fd.get(), &st, entry->sha256, stop_, failure, 1);
    } else {
      // Hashed from this descriptor: its first st_size bytes (one pread below kHashChunkBytes), the
      // version the fstat describes; a file that shrank since gives fewer, and says so in its size.
      DigestCache& cache = digest_cache();
      cache.count_hash();
      if (allowlisted) cache.count_below_min();
      else cache.count_fs_uncached();
      hashed = hash_whole_fd(fd.get(), entry->sha256, stop_, failure, nullptr, static_cast<int64_t>(st.st_size));
    }
    if (hashed < 0) return false;
    // The byte count that was hashed, so size and hash agree even if the file changed under us.
    entry->size = static_cast<uint64_t>(hashed);
    entry->mtime_ms = epoch_ms(st.st_mtim);
    return true;
  }

  // Hashes a batch into entries of its own, then adds them to `out` under one lock. An entry that
  // cannot be hashed is only skipped; a stop ends the listing (the first reason is kept).
  void run(Batch& batch) {
    if (halted()) return;
    std::vector<ListEntry> done;
    Failure failure;
    bool stopped = false;
    try {
      done.reserve(batch.files.size());
      for (FileJob& job : batch.files) {
        if (halted()) return;
        ListEntry entry;
        if (hash_file(*batch.dir, job, &entry, &failure)) {
          entry.path = std::move(job.path);
          done.push_back(std::move(entry));
        } else if (is_stop(failure.code)) {
          stopped = true;
          break;
        }
      }
    } catch (const std::bad_alloc&) {
      // An entry that cannot be kept ends the listing: never a silently shorter list.
      failure.set(Code::IoError, ENOMEM);
      stopped = true;
    }
    batch.files = std::vector<FileJob>();  // descriptors closed before the lock is taken
    batch.dir.reset();
    pthread_mutex_lock(&mu_);
    if (!stopped) {
      try {
        out_->insert(out_->end(), std::make_move_iterator(done.begin()), std::make_move_iterator(done.end()));
      } catch (const std::bad_alloc&) {
        failure.set(Code::IoError, ENOMEM);
        stopped = true;
      }
    }
    if (stopped) halt(failure);
    pthread_mutex_unlock(&mu_);
  }

  const StopSignal& stop_;
  std::vector<ListEntry>* out_;
  Failure* stopped_;
  const uint64_t min_bytes_;
  std::atomic<bool> halted_{false};
  pthread_mutex_t mu_;
  pthread_cond_t ready_;
  std::deque<Batch> queue_;
  pthread_t threads_[kMaxHelpers];
  unsigned helpers_ = 0;
  bool spawned_ = false;
  bool closing_ = false;
};

// struct linux_dirent64 (include/linux/dirent.h), read by getdents64 with no libc in between.
struct Dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

struct Walker {
  int root_fd;
  SymlinkPolicy policy;
  Resolver resolver;
  const StopSignal& stop;
  Hashing* hashing;
  Failure* stopped;  // set (Cancelled, TimeBudget) when the whole listing must end
  std::vector<char> dents = std::vector<char>(64 * 1024);  // one directory is read at a time

  // The names in `dir_fd` (its descriptor's position is at the start: the walk opened it) with
  // getdents64's types; false when the listing must stop. An error part-way keeps what was read.
  bool read_names(int dir_fd, std::vector<std::pair<std::string, unsigned char>>* names) {
    for (;;) {
      // A directory of millions of names is read in bounded steps too.
      if (stop.should_stop(stopped)) return false;
      long n = retry_eintr([&] { return syscall(SYS_getdents64, dir_fd, dents.data(), dents.size()); });
      if (n <= 0) return true;
      for (long off = 0; off < n;) {
        const Dirent64* d = reinterpret_cast<const Dirent64*>(dents.data() + off);
        off += d->d_reclen;
        const char* name = d->d_name;
        if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
        names->emplace_back(std::string(name), d->d_type);
      }
    }
  }

  void flush(Batch* batch, const DirRef& dir) {
    hashing->add(std::move(*batch));
    *batch = Batch();
    batch->dir = dir;
  }

  // Walks one directory; false when the listing must stop (the caller unwinds at once).
  bool walk(const DirRef& dir, const std::string& prefix, int depth) {
    if (hashing->halted() || stop.should_stop(stopped)) return false;
    const int dir_fd = dir->fd.get();
    std::vector<std::pair<std::string, unsigned char>> names;
    if (!read_names(dir_fd, &names)) return false;
    Batch batch;
    batch.dir = dir;
    for (auto& named : names) {
      // A plain reference, not a structured binding: the lambdas below capture it, which clang
      // accepts only from version 16 (the sanitizer and fuzz builds use clang 14).
      const std::string& name = named.first;
      if (hashing->halted()) return false;
      if (!valid_utf8(name)) continue;  // unaddressable by a request path; never listed
      std::string path = prefix.empty() ? name : prefix + "/" + name;
      if (path.size() >= PATH_MAX) continue;  // no request could name it
      unsigned char type = named.second;
      if (type == DT_UNKNOWN) {  // the filesystem does not say: asked without following
        struct stat st;
        if (stat_at(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : S_ISLNK(st.st_mode) ? DT_LNK : DT_FIFO;
      }
      if (type == DT_DIR) {
        if (depth >= kMaxDepth) continue;
        if (batch.files.size() > 0) flush(&batch, dir);  // the directory's own files do not wait for the subtree
        std::shared_ptr<Dir> sub(new Dir());
        sub->fd = Fd(retry_eintr([&] {
          return openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }));
        struct stat st;
        if (!sub->fd.valid() || stat_fd(sub->fd.get(), &st) != 0) continue;
        sub->dev = st.st_dev;
        // A mount point (or a btrfs subvolume) changes st_dev: its filesystem is asked once.
        sub->allowlisted = st.st_dev == dir->dev ? dir->allowlisted : times_follow_mapped_writes(sub->fd.get());
        if (!walk(sub, path, depth + 1)) return false;
      } else if (type == DT_REG) {
        batch.files.push_back(FileJob{name, std::move(path), Fd()});
        if (batch.files.size() >= kBatchFiles) flush(&batch, dir);
      } else if (type == DT_LNK) {
        if (policy == SymlinkPolicy::Refuse) continue;
        // Listed under its own path only if, resolved from the root by the same resolver a read
        // uses, it reaches a regular file beneath the root. A link to a directory is never
        // entered, and one to a FIFO or device is refused without being opened.
        Failure failure;
        FileStat ignored;
        Fd file = open_regular_beneath(root_fd, path, SymlinkPolicy::Follow, resolver,
                                       OpenFor::Reading, &ignored, &failure);
        if (!file.valid()) continue;
        batch.files.push_back(FileJob{std::string(), std::move(path), std::move(file)});
        if (++batch.opened >= kBatchOpened || batch.files.size() >= kBatchFiles) flush(&batch, dir);
      }
      // FIFOs, sockets and devices are skipped without being opened.
    }
    if (batch.files.size() > 0) flush(&batch, dir);
    return !hashing->halted();
  }
};

}  // namespace

ListResult list_export_root(const ExportRequest& req) {
  ListResult result;
  std::shared_ptr<Dir> root(new Dir());
  root->fd = open_root(req.workdir_fd(), req.root, O_RDONLY | O_DIRECTORY, req.resolver, &result.failure);
  if (!root->fd.valid()) {
    // A root that does not exist yet lists as empty; only an escape or an I/O fault is an error.
    if (result.failure.code == Code::NotFound) {
      result.failure = Failure();
      result.root_missing = true;
    }
    return result;
  }
  struct stat st;
  if (stat_fd(root->fd.get(), &st) != 0) {
    result.failure.set(Code::IoError, errno);
    return result;
  }
  root->dev = st.st_dev;
  root->allowlisted = times_follow_mapped_writes(root->fd.get());
  // The walker's own stop and the hashers' land in separate failures: the hashers write theirs
  // under the hashing's lock, while the walker may be writing its own.
  Failure hash_stop;
  bool walked;
  {
    Hashing hashing(req.stop, &result.entries, &hash_stop);
    Walker walker{root->fd.get(), req.policy, req.resolver, req.stop, &hashing, &result.failure};
    walked = walker.walk(root, "", 0);
    hashing.finish();
  }
  if (!result.failure.failed() && hash_stop.failed()) result.failure = hash_stop;
  if (!walked || result.failure.failed()) {
    result.entries.clear();  // a listing that stopped early is a failure, never a partial list
    return result;
  }
  std::sort(result.entries.begin(), result.entries.end(),
            [](const ListEntry& a, const ListEntry& b) { return a.path < b.path; });
  return result;
}

}  // namespace rp
