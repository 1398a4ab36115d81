// libFuzzer target: the listing (native/list.cc list_export_root) over a tree the input describes,
// beside secrets. Each input builds a fresh root from up to 24 lines, one operation each:
//   byte 0 % 5 = 0 directory, 1 file (its content is its own path, length from byte 1),
//   2 symlink (`path` 0x01 `target`; the target may escape, be absolute or loop), 3 FIFO,
//   4 hard link (`path` 0x01 `existing path`);
// paths are relative to the root with no `.`/`..` components (the tree stays inside). Then, under
// both symlink policies and both resolvers:
//   - openat2 and the walk list the same entries;
//   - entries are valid UTF-8, strictly sorted, and every proper prefix of an entry is a real
//     directory (a symlinked directory is never descended); under refuse no entry is a symlink;
//   - every entry reads back (read_export_file, same policy and resolver) with the size and SHA-256
//     the listing gave, and no byte of a secret is ever listed or read.
#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "codes.h"
#include "fixture.h"
#include "list.h"
#include "read.h"
#include "request.h"

using fuzzfix::fail;

namespace {

int g_workdir = -1;
int g_serial = 0;
std::vector<std::string> g_secret_digests;

void remove_at(int dirfd, const char* name) {
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
      DIR* d = fdopendir(dup);
      std::vector<std::string> names;
      while (d) {
        struct dirent* e = readdir(d);
        if (!e) break;
        if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) names.push_back(e->d_name);
      }
      if (d) closedir(d);
      for (const auto& n : names) remove_at(fd, n.c_str());
      close(fd);
    }
    unlinkat(dirfd, name, AT_REMOVEDIR);
  } else {
    unlinkat(dirfd, name, 0);
  }
}

bool clean_path(const std::string& p) {
  if (p.empty() || p.size() > 300 || p[0] == '/' || p.back() == '/' || p.find('\0') != std::string::npos) return false;
  // A file's content is its own path: a path holding the secrets' marker would be read back as a
  // "secret" the input wrote itself (a false alarm the fuzzer found).
  if (p.find("SECRET-") != std::string::npos) return false;
  size_t start = 0;
  for (;;) {
    size_t slash = p.find('/', start);
    std::string c = p.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (c.empty() || c == "." || c == "..") return false;
    if (slash == std::string::npos) return true;
    start = slash + 1;
  }
}

std::string hex(const unsigned char* d) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 32; i++) {
    s.push_back(digits[d[i] >> 4]);
    s.push_back(digits[d[i] & 15]);
  }
  return s;
}

void build_tree(int root, const uint8_t* data, size_t size) {
  std::vector<std::string> lines;
  std::string cur;
  for (size_t i = 0; i < size; i++) {
    if (data[i] == '\n') {
      lines.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  lines.push_back(cur);
  int made = 0;
  for (const auto& line : lines) {
    if (line.size() < 2 || made >= 24) continue;
    const int kind = static_cast<unsigned char>(line[0]) % 5;
    std::string rest = line.substr(1);
    std::string path = rest;
    std::string arg;
    size_t sep = rest.find('\x01');
    if (sep != std::string::npos) {
      path = rest.substr(0, sep);
      arg = rest.substr(sep + 1);
    }
    if (!clean_path(path)) continue;
    made++;
    switch (kind) {
      case 0: mkdirat(root, path.c_str(), 0755); break;
      case 1: {
        int fd = openat(root, path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) {
          std::string content = path + std::string(arg.size() % 7, '+');
          if (write(fd, content.data(), content.size()) < 0) { /* a full disk only shortens the file */ }
          close(fd);
        }
        break;
      }
      case 2:
        if (!arg.empty() && arg.find('\0') == std::string::npos) symlinkat(arg.c_str(), root, path.c_str());
        break;
      case 3: mkfifoat(root, path.c_str(), 0644); break;
      case 4:
        if (clean_path(arg)) linkat(root, arg.c_str(), root, path.c_str(), 0);
        break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const auto& w = fuzzfix::world();
  // A second workdir beside the fixed one: secrets next to a root rebuilt for every input.
  int base = open(w.base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  mkdirat(base, "lw", 0755);
  g_workdir = openat(base, "lw", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g_workdir < 0) fail("fixture", "lw");
  int fd = openat(g_workdir, "secret.txt", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const char secret[] = "SECRET-native-list";
  if (fd < 0 || write(fd, secret, sizeof secret - 1) < 0) fail("fixture", "secret");
  close(fd);
  unsigned char d[32];
  unsigned int len = 0;
  EVP_Digest(secret, sizeof secret - 1, d, &len, EVP_sha256(), nullptr);
  g_secret_digests.push_back(hex(d));
  close(base);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  const std::string name = "out";
  remove_at(g_workdir, name.c_str());
  if (mkdirat(g_workdir, name.c_str(), 0755) != 0) fail("fixture", "out");
  int root = openat(g_workdir, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  build_tree(root, data, size);
  g_serial++;

  for (auto policy : {rp::SymlinkPolicy::Follow, rp::SymlinkPolicy::Refuse}) {
    std::vector<rp::ListEntry> first;
    bool have_first = false;
    for (auto resolver : {rp::Resolver::Walk, rp::Resolver::Openat2}) {
      if (resolver == rp::Resolver::Openat2 && !fuzzfix::world().openat2) continue;
      static const rp::WorkdirRef workdir = rp::duplicate_workdir(g_workdir);
      rp::ExportRequest req;
      req.workdir = workdir;
      req.root = "out/";
      req.policy = policy;
      req.resolver = resolver;
      req.stop.operation = "listing";
      rp::ListResult r = rp::list_export_root(req);
      if (r.failure.failed()) fail("a listing failed on a quiet tree", rp::code_name(r.failure.code));
      const std::string who = std::string(policy == rp::SymlinkPolicy::Refuse ? "refuse" : "follow") + "/" +
                              (resolver == rp::Resolver::Walk ? "walk" : "openat2");
      for (size_t i = 0; i < r.entries.size(); i++) {
        const auto& e = r.entries[i];
        if (!fuzzfix::valid_utf8(e.path)) fail("a listed path is not UTF-8", who);
        if (i > 0 && !(r.entries[i - 1].path < e.path)) fail("entries not strictly sorted", who + " " + e.path);
        for (size_t slash = e.path.find('/'); slash != std::string::npos; slash = e.path.find('/', slash + 1)) {
          struct stat st;
          if (fstatat(root, e.path.substr(0, slash).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
            fail("the listing descended a symlinked directory", who + " " + e.path);
          }
        }
        struct stat own;
        if (fstatat(root, e.path.c_str(), &own, AT_SYMLINK_NOFOLLOW) != 0) fail("a listed path does not exist", who + " " + e.path);
        if (policy == rp::SymlinkPolicy::Refuse && !S_ISREG(own.st_mode)) fail("a symlink listed under refuse", who + " " + e.path);
        const std::string digest = hex(e.sha256);
        for (const auto& s : g_secret_digests) if (digest == s) fail("a secret's digest was listed", who + " " + e.path);
        rp::ExportRequest rr = req;
        rr.rel = e.path;
        rr.max_bytes = 1 << 20;
        rp::ReadResult read = rp::read_export_file(rr);
        if (read.failure.failed()) fail("a listed entry does not read", who + " " + e.path + ": " + rp::code_name(read.failure.code));
        if (read.bytes.size() != e.size || std::memcmp(read.sha256, e.sha256, 32) != 0) fail("a listed entry reads differently", who + " " + e.path);
        const std::string body = read.bytes.size() == 0 ? std::string() : std::string(reinterpret_cast<const char*>(read.bytes.data()), read.bytes.size());
        if (body.find("SECRET-") != std::string::npos) fail("a listed entry serves a secret", who + " " + e.path);
      }
      if (!have_first) {
        first = std::move(r.entries);
        have_first = true;
        continue;
      }
      bool same = first.size() == r.entries.size();
      for (size_t i = 0; same && i < first.size(); i++) {
        same = first[i].path == r.entries[i].path && first[i].size == r.entries[i].size &&
               std::memcmp(first[i].sha256, r.entries[i].sha256, 32) == 0;
      }
      if (!same) fail("the resolvers list differently", who);
    }
  }
  close(root);
  return 0;
}
