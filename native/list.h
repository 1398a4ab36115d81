// The recursive listing of an export root, on descriptors only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codes.h"
#include "request.h"
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

// Lists `req.root` (opened beneath `req.workdir`) under `req.policy` and `req.resolver`;
// `req.rel` and `req.max_bytes` are not used: the whole tree is walked and every file hashed whole.
// `req.stop` is asked before every entry and every hashed chunk: once it says stop, the listing
// ends with Cancelled or TimeBudget and no entries (never a silently partial list).
ListResult list_export_root(const ExportRequest& req);

}  // namespace rp
