// Listing: directories are entered with O_NOFOLLOW on descriptors the walk opened, so a symlinked
// directory is never descended and a directory swapped for a link mid-walk is simply skipped.
// Each file is opened once; its size, mtime and hash come from that descriptor. Whatever vanishes,
// cannot be opened or is not a regular file is left out, never an error.
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
#include <new>

#include "digest_cache.h"
#include "read.h"
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

// The files a walk opened, hashed by the walking thread and up to kMaxHelpers threads of its own,
// so a first listing uses every core. The queue is bounded (each entry holds a descriptor): when
// it is full the walker hashes one itself. Entries land in `out` in any order (sorted later).
//
// pthread directly, not std::thread or std::condition_variable: those would make the prebuilds
// require a newer libstdc++ (GLIBCXX_3.4.22 and 3.4.30) than their floor (README); compat.cc
// binds pthread_create and pthread_join to versions every supported glibc has.
class Hashing {
 public:
  static constexpr size_t kQueueMax = 64;
  static constexpr unsigned kMaxHelpers = 3;

  Hashing(const StopSignal& stop, std::vector<ListEntry>* out, Failure* stopped)
      : stop_(stop), out_(out), stopped_(stopped) {
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

  void add(Fd fd, std::string path) {
    Job job{std::move(fd), std::move(path)};
    pthread_mutex_lock(&mu_);
    if (!spawned_) spawn_helpers();
    if (queue_.size() >= kQueueMax || helpers_ == 0) {
      pthread_mutex_unlock(&mu_);
      run(job);
      return;
    }
    // No exception may leave with mu_ held (the listing would deadlock in finish()).
    try {
      queue_.push_back(std::move(job));
    } catch (const std::bad_alloc&) {
      pthread_mutex_unlock(&mu_);
      run(job);  // push_back leaves the job as it was when it throws
      return;
    }
    pthread_cond_signal(&ready_);
    pthread_mutex_unlock(&mu_);
  }

  // Every queued file hashed (the walker helps), helpers joined.
  void finish() {
    for (;;) {
      pthread_mutex_lock(&mu_);
      if (queue_.empty()) {
        closing_ = true;
        pthread_cond_broadcast(&ready_);
        pthread_mutex_unlock(&mu_);
        break;
      }
      Job job = std::move(queue_.front());
      queue_.pop_front();
      pthread_mutex_unlock(&mu_);
      run(job);
    }
    for (unsigned i = 0; i < helpers_; i++) pthread_join(threads_[i], nullptr);
    helpers_ = 0;
  }

 private:
  struct Job {
    Fd fd;
    std::string path;
  };

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
      Job job = std::move(queue_.front());
      queue_.pop_front();
      pthread_mutex_unlock(&mu_);
      run(job);
      pthread_mutex_lock(&mu_);
    }
    pthread_mutex_unlock(&mu_);
  }

  // Adds the file behind the job's descriptor if fstat says it is a regular file. An entry that
  // cannot be hashed is only skipped; a stop ends the listing (the first reason is kept).
  void run(Job& job) {
    if (halted()) return;
    struct stat st;
    if (stat_fd(job.fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return;
    ListEntry entry;
    Failure failure;
    // From the digest cache when a read lease proves nobody can be writing, else hashed whole.
    int64_t hashed = whole_file_digest(job.fd.get(), &st, entry.sha256, stop_, &failure);
    job.fd = Fd();  // closed before the lock is taken
    pthread_mutex_lock(&mu_);
    if (hashed < 0) {
      if (is_stop(failure.code) && !halted()) {
        *stopped_ = failure;
        halted_.store(true, std::memory_order_relaxed);
      }
    } else {
      entry.path = std::move(job.path);
      // The byte count that was hashed, so size and hash agree even if the file changed under us.
      entry.size = static_cast<uint64_t>(hashed);
      entry.mtime_ms = epoch_ms(st.st_mtim);
      try {
        out_->push_back(std::move(entry));
      } catch (const std::bad_alloc&) {
        // An entry that cannot be kept ends the listing: never a silently shorter list.
        if (!halted()) {
          stopped_->set(Code::IoError, ENOMEM);
          halted_.store(true, std::memory_order_relaxed);
        }
      }
    }
    pthread_mutex_unlock(&mu_);
  }

  const StopSignal& stop_;
  std::vector<ListEntry>* out_;
  Failure* stopped_;
  std::atomic<bool> halted_{false};
  pthread_mutex_t mu_;
  pthread_cond_t ready_;
  std::deque<Job> queue_;
  pthread_t threads_[kMaxHelpers];
  unsigned helpers_ = 0;
  bool spawned_ = false;
  bool closing_ = false;
};

struct Walker {
  int root_fd;
  SymlinkPolicy policy;
  Resolver resolver;
  const StopSignal& stop;
  Hashing* hashing;
  Failure* stopped;  // set (Cancelled, TimeBudget) when the whole listing must end

  // Hands an opened file to the hashing; false when the listing must stop.
  bool add_if_regular(Fd fd, std::string path) {
    hashing->add(std::move(fd), std::move(path));
    return !hashing->halted();
  }

  // Walks one directory; false when the listing must stop (the caller unwinds at once).
  bool walk(int dir_fd, const std::string& prefix, int depth) {
    if (hashing->halted() || stop.should_stop(stopped)) return false;
    // fdopendir takes ownership of its descriptor, so it gets a duplicate.
    int dup_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) return true;
    DIR* dir = fdopendir(dup_fd);
    if (!dir) {
      close(dup_fd);
      return true;
    }
    std::vector<std::pair<std::string, unsigned char>> names;
    for (;;) {
      // A directory of millions of names is read in bounded steps too.
      if ((names.size() & 4095) == 4095 && stop.should_stop(stopped)) {
        closedir(dir);
        return false;
      }
      errno = 0;
      struct dirent* ent = readdir(dir);
      if (!ent) break;
      std::string name = ent->d_name;
      if (name == "." || name == "..") continue;
      names.emplace_back(std::move(name), ent->d_type);
    }
    closedir(dir);
    for (const auto& named : names) {
      // A plain reference, not a structured binding: the lambdas below capture it, which clang
      // accepts only from version 16 (the sanitizer and fuzz builds use clang 14).
      const std::string& name = named.first;  // d_type (second) is not trusted: DT_UNKNOWN, races
      if (hashing->halted() || stop.should_stop(stopped)) return false;
      if (!valid_utf8(name)) continue;  // unaddressable by a request path; never listed
      std::string path = prefix.empty() ? name : prefix + "/" + name;
      if (path.size() >= PATH_MAX) continue;  // no request could name it
      struct stat st;
      if (stat_at(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        if (depth >= kMaxDepth) continue;
        Fd sub(retry_eintr([&] {
          return openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }));
        if (sub.valid() && !walk(sub.get(), path, depth + 1)) return false;
      } else if (S_ISREG(st.st_mode)) {
        Fd file(retry_eintr([&] {
          return openat(dir_fd, name.c_str(), served_file_flags() | O_NOFOLLOW);
        }));
        if (file.valid() && !add_if_regular(std::move(file), path)) return false;
      } else if (S_ISLNK(st.st_mode)) {
        if (policy == SymlinkPolicy::Refuse) continue;
        // Listed under its own path only if, resolved from the root by the same resolver a read
        // uses, it reaches a regular file beneath the root. A link to a directory is never
        // entered, and one to a FIFO or device is refused without being opened.
        Failure failure;
        FileStat ignored;
        Fd file = open_regular_beneath(root_fd, path, SymlinkPolicy::Follow, resolver,
                                       OpenFor::Reading, &ignored, &failure);
        if (file.valid() && !add_if_regular(std::move(file), path)) return false;
      }
      // FIFOs, sockets and devices are skipped without being opened.
    }
    return true;
  }
};

}  // namespace

ListResult list_export_root(const ExportRequest& req) {
  ListResult result;
  Fd root_fd = open_root(req.workdir_fd(), req.root, O_RDONLY, req.resolver, &result.failure);
  if (!root_fd.valid()) {
    // A root that does not exist yet lists as empty; only an escape or an I/O fault is an error.
    if (result.failure.code == Code::NotFound) {
      result.failure = Failure();
      result.root_missing = true;
    }
    return result;
  }
  // The walker's own stop and the hashers' land in separate failures: the hashers write theirs
  // under the hashing's lock, while the walker may be writing its own.
  Failure hash_stop;
  bool walked;
  {
    Hashing hashing(req.stop, &result.entries, &hash_stop);
    Walker walker{root_fd.get(), req.policy, req.resolver, req.stop, &hashing, &result.failure};
    walked = walker.walk(root_fd.get(), "", 0);
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
