// The streamed body as JS holds it: openStream() resolves to {size, mtimeMs, sha256, digestCached,
// stream}, where `stream` is a StreamHandle (never a descriptor) whose next(buffer) queues one
// AsyncWorker reading and hashing the next chunk on the pool (stream.cc), and whose close() lets the
// descriptor go. The size thresholds (limits.h) are exported beside it as `limits`.
#pragma once

#include <napi.h>

namespace rp {

// Defines the StreamHandle class (recorded in the AddonData, not exported) and sets
// exports.limits; after InitAddonData.
void InitStreamBinding(Napi::Env env, Napi::Object exports);

// openStream({workdirFd, root, relpath, maxBytes, refuseSymlinks, resolver, cancel?})
Napi::Value OpenStream(const Napi::CallbackInfo& info);
// releasePages(buffer): an idle pooled buffer's pages back to the system.
Napi::Value ReleasePages(const Napi::CallbackInfo& info);

}  // namespace rp
