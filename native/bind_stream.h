// An opened file's body as JS holds it: readSmall() hands back an OpenFile (never a descriptor) for
// a file above its synchronous size; its read() queues one AsyncWorker reading the whole body from
// that descriptor, its body() one deciding how a large body goes (stream.h) and resolving to
// {settled, size, mtimeMs, sha256?, digestCached, stream}, where `stream` is a StreamHandle whose
// next(buffer) queues one AsyncWorker reading (and hashing) the next chunk on the pool (stream.cc),
// whose digest() names a finished snapshot, and whose close() lets the descriptor go. The size
// thresholds (limits.h) are exported beside them as `limits`.
#pragma once

#include <napi.h>
#include <sys/stat.h>

#include "fd.h"

namespace rp {

// Defines the StreamHandle and OpenFile classes (recorded in the AddonData, not exported) and sets
// exports.limits; after InitAddonData.
void InitStreamBinding(Napi::Env env, Napi::Object exports);

// A new OpenFile owning `fd`, opened with fstat `st`.
Napi::Value open_file_value(Napi::Env env, Fd fd, const struct stat& st);

// releasePages(buffer): an idle pooled buffer's pages back to the system.
}  // namespace rp
