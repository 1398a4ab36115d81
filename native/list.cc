// Listing: directories are entered with O_NOFOLLOW on descriptors the walk opened, so a symlinked
// directory is never descended and a directory swapped for a link mid-walk is simply skipped.
// Each file is opened once; its size, mtime and hash come from that descriptor. Whatever vanishes,
// cannot be opened or is not a regular file is left out, never an error.
#include "list.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "digest_cache.h"
#include "read.h"
#include "stat_call.h"
#include "time_ms.h"

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

struct Walker {
  int root_fd;
  SymlinkPolicy policy;
  Resolver resolver;
  const StopSignal& stop;
  std::vector<ListEntry>* out;
  Failure* stopped;  // set (Cancelled, TimeBudget) when the whole listing must end

  // Adds the file behind `fd` (already opened) if fstat says it is a regular file. False when
  // the listing must stop; an entry that cannot be hashed is only skipped.
  bool add_if_regular(int fd, const std::string& path) {
    struct stat st;
    if (stat_fd(fd, &st) != 0 || !S_ISREG(st.st_mode)) return true;
    ListEntry entry;
    Failure failure;
    // From the digest cache when a read lease proves nobody can be writing, else hashed whole.
    int64_t hashed = whole_file_digest(fd, &st, entry.sha256, stop, &failure);
    if (hashed < 0) {
      if (!is_stop(failure.code)) return true;
      *stopped = failure;
      return false;
    }
    entry.path = path;
    // The byte count that was hashed, so size and hash agree even if the file changed under us.
    entry.size = static_cast<uint64_t>(hashed);
    entry.mtime_ms = epoch_ms(st.st_mtim);
    out->push_back(std::move(entry));
    return true;
  }

  // Walks one directory; false when the listing must stop (the caller unwinds at once).
  bool walk(int dir_fd, const std::string& prefix, int depth) {
    if (stop.should_stop(stopped)) return false;
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
      if (stop.should_stop(stopped)) return false;
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
        if (file.valid() && !add_if_regular(file.get(), path)) return false;
      } else if (S_ISLNK(st.st_mode)) {
        if (policy == SymlinkPolicy::Refuse) continue;
        // Listed under its own path only if, resolved from the root by the same resolver a read
        // uses, it reaches a regular file beneath the root. A link to a directory is never
        // entered, and one to a FIFO or device is refused without being opened.
        Failure failure;
        FileStat ignored;
        Fd file = open_regular_beneath(root_fd, path, SymlinkPolicy::Follow, resolver,
                                       OpenFor::Reading, &ignored, &failure);
        if (file.valid() && !add_if_regular(file.get(), path)) return false;
      }
      // FIFOs, sockets and devices are skipped without being opened.
    }
    return true;
  }
};

}  // namespace

ListResult list_export_root(const ExportRequest& req) {
  ListResult result;
  Fd root_fd = open_root(req.workdir_fd, req.root, O_RDONLY, req.resolver, &result.failure);
  if (!root_fd.valid()) {
    // A root that does not exist yet lists as empty; only an escape or an I/O fault is an error.
    if (result.failure.code == Code::NotFound) {
      result.failure = Failure();
      result.root_missing = true;
    }
    return result;
  }
  Walker walker{root_fd.get(), req.policy, req.resolver, req.stop, &result.entries, &result.failure};
  if (!walker.walk(root_fd.get(), "", 0)) {
    result.entries.clear();  // a listing that stopped early is a failure, never a partial list
    return result;
  }
  std::sort(result.entries.begin(), result.entries.end(),
            [](const ListEntry& a, const ListEntry& b) { return a.path < b.path; });
  return result;
}

}  // namespace rp
