// The recursive listing of an export root, on descriptors only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codes.h"
#include "resolve.h"

namespace rp {

struct ListEntry {
  std::string path;  // relative to the root, '/'-separated, valid UTF-8
  uint64_t size = 0;
  int64_t mtime_ms = 0;
  unsigned char sha256[32] = {};
};

struct ListResult {
  Failure failure;
  bool root_missing = false;
  std::vector<ListEntry> entries;  // sorted by path in byte (= UTF-8 code point) order
};

ListResult list_export_root(int workdir_fd, const std::string& root, SymlinkPolicy policy,
                            Resolver resolver);

}  // namespace rp
