// See fixture.h. Plain POSIX, no Node: this file and the targets link against native/'s syscall
// files only (resolve.cc, read.cc, list.cc, codes.cc, digest_cache.cc, sha256.cc, lease.cc).
#include "fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace fuzzfix {

void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "\n*** fuzz invariant violated: %s\n    %s\n", what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

namespace {

void check(bool ok, const char* what) {
  if (!ok) fail("fixture", std::string(what) + ": " + std::strerror(errno));
}

void write_file(int dirfd, const std::string& name, const std::string& content) {
  int fd = openat(dirfd, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  check(fd >= 0, name.c_str());
  check(write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()), name.c_str());
  close(fd);
}

void link_at(int dirfd, const std::string& name, const std::string& target) {
  check(symlinkat(target.c_str(), dirfd, name.c_str()) == 0, name.c_str());
}

int mkdir_open(int dirfd, const std::string& name) {
  check(mkdirat(dirfd, name.c_str(), 0755) == 0, name.c_str());
  int fd = openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  check(fd >= 0, name.c_str());
  return fd;
}

void collect(int dirfd, std::set<std::pair<dev_t, ino_t>>* out) {
  int dup = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  DIR* dir = fdopendir(dup);
  check(dir != nullptr, "fdopendir");
  std::vector<std::string> subdirs;
  while (struct dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    check(fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0, name.c_str());
    out->insert({st.st_dev, st.st_ino});
    if (S_ISDIR(st.st_mode)) subdirs.push_back(name);
  }
  closedir(dir);
  for (const auto& name : subdirs) {
    int fd = openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    check(fd >= 0, name.c_str());
    collect(fd, out);
    close(fd);
  }
}

void remove_tree(const std::string& path) {
  std::string cmd = "rm -rf -- '" + path + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", path.c_str());
}

World* build() {
  auto* w = new World();
  char tmpl[] = "/tmp/rp-native-fuzz-XXXXXX";
  check(mkdtemp(tmpl) != nullptr, "mkdtemp");
  w->base = tmpl;
  int base = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  check(base >= 0, "base");
  write_file(base, "outside-secret.txt", "SECRET-native-outside");
  int wd = mkdir_open(base, "w");
  write_file(wd, "secret.txt", "SECRET-native-workdir");
  int evil = mkdir_open(wd, "out-evil");
  write_file(evil, "secret.txt", "SECRET-native-sibling");
  close(evil);
  int out = mkdir_open(wd, "out");
  const std::string abs = w->base + "/w";

  write_file(out, "a.txt", "file a");
  write_file(out, ".hidden", "hidden bytes");
  write_file(out, "empty", "");
  write_file(out, "big.bin", std::string(5000, 'b'));
  write_file(out, "\xff.bin", "not utf-8 named");
  write_file(out, "\xc3\xa9.txt", "e acute");
  int sub = mkdir_open(out, "sub");
  write_file(sub, "b.txt", "file b");
  int deeper = mkdir_open(sub, "deeper");
  write_file(deeper, "c.txt", "file c");
  close(deeper);
  link_at(sub, "up-escape", "../../secret.txt");
  link_at(sub, "up-inside", "../a.txt");
  close(sub);
  int spaced = mkdir_open(out, "sub dir");
  write_file(spaced, "x.md", "spaced");
  close(spaced);

  link_at(out, "link-file", "a.txt");
  link_at(out, "link-dir", "sub");
  link_at(out, "link-dir-slash", "sub/");
  link_at(out, "dotdot-inside", "sub/../a.txt");
  link_at(out, "reenter", "sub/../../out/a.txt");
  link_at(out, "abs-inside", abs + "/out/a.txt");
  link_at(out, "abs-root-rel", "/a.txt");
  link_at(out, "abs-secret", abs + "/secret.txt");
  link_at(out, "escape", "../secret.txt");
  link_at(out, "escape-dir", "..");
  link_at(out, "sibling", "../out-evil/secret.txt");
  link_at(out, "loop-a", "loop-b");
  link_at(out, "loop-b", "loop-a");
  link_at(out, "self", "self");
  link_at(out, "magic", "/proc/self/root/etc/passwd");
  link_at(out, "magic-rel", "../../../../../../../../proc/self/root/etc/passwd");
  link_at(out, "dangling", "nowhere");
  link_at(out, "file-slash", "a.txt/");
  link_at(out, "dot", ".");
  link_at(out, "nonutf8-link", "\xff.bin");
  // Around the 40-link ceiling, and a chain that ends in an escape (the kernel counts the links of
  // an RCU walk again when it restarts in ref walk, which a `..` at the root always causes).
  for (int i = 0; i < 45; i++) link_at(out, "chain" + std::to_string(i), i + 1 < 45 ? "chain" + std::to_string(i + 1) : "a.txt");
  for (int i = 0; i < 39; i++) link_at(out, "short" + std::to_string(i), i + 1 < 39 ? "short" + std::to_string(i + 1) : "a.txt");
  for (int i = 0; i < 25; i++) link_at(out, "esc" + std::to_string(i), i + 1 < 25 ? "esc" + std::to_string(i + 1) : "../secret.txt");
  // Link targets of thousands of components: the walk bounds its steps, the kernel does not.
  std::string dots;
  for (int i = 0; i < 2000; i++) dots += "./";
  link_at(out, "dots", dots + "a.txt");
  link_at(out, "dots2", dots + "dots");
  link_at(out, "dots3", dots + "dots2");
  check(mkfifoat(out, "fifo", 0644) == 0, "fifo");
  {
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    check(s >= 0, "socket");
    struct sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::string p = abs + "/out/sock";
    if (p.size() < sizeof addr.sun_path) {
      std::memcpy(addr.sun_path, p.c_str(), p.size() + 1);
      check(bind(s, reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) == 0, "bind");
    }
    close(s);
  }
  // 300 directories deep (past the 256-component request bound), a file and a link at the bottom.
  int cur = fcntl(out, F_DUPFD_CLOEXEC, 0);
  for (int i = 0; i < 300; i++) {
    int next = mkdir_open(cur, "d");
    close(cur);
    cur = next;
  }
  write_file(cur, "f", "bottom");
  link_at(cur, "up", "../../../a.txt");
  close(cur);

  collect(out, &w->inside);
  struct stat st;
  check(fstat(out, &st) == 0, "fstat out");
  w->inside.insert({st.st_dev, st.st_ino});
  for (const char* p : {"w/secret.txt", "w/out-evil/secret.txt", "outside-secret.txt"}) {
    check(fstatat(base, p, &st, 0) == 0, p);
    w->secrets.insert({st.st_dev, st.st_ino});
  }
  close(out);
  close(base);
  w->workdir_fd = wd;
  w->root_fd = openat(wd, "out", O_PATH | O_DIRECTORY | O_CLOEXEC);
  check(w->root_fd >= 0, "root");
  struct open_how how = {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH;
  long probe = syscall(SYS_openat2, w->root_fd, ".", &how, sizeof how);
  w->openat2 = probe >= 0;
  if (probe >= 0) close(static_cast<int>(probe));
  static std::string to_remove = w->base;
  std::atexit([] { remove_tree(to_remove); });
  return w;
}

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

const World& world() {
  static World* w = build();
  return *w;
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) { i++; continue; }
    if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
    else return false;
    if (i + n >= s.size()) return false;
    for (size_t k = 1; k <= n; k++) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

std::optional<std::string> lower(const std::string& raw) {
  std::string t;
  for (size_t i = 0; i < raw.size(); i++) {
    if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
      t.push_back(static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2])));
      i += 2;
    } else {
      t.push_back(raw[i]);
    }
  }
  if (t.empty() || t.find('\0') != std::string::npos || !valid_utf8(t) || t[0] == '/') return std::nullopt;
  if (t.back() == '/') t.pop_back();
  size_t start = 0;
  for (;;) {
    size_t slash = t.find('/', start);
    std::string c = t.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (c.empty() || c == "." || c == "..") return std::nullopt;
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return t;
}

bool is_inside(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) fail("fstat of a returned descriptor", std::strerror(errno));
  std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
  if (world().secrets.count(id)) fail("containment", "a resolver opened a secret outside the root");
  return world().inside.count(id) > 0;
}

}  // namespace fuzzfix
