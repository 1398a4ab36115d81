// The export operations as JS calls them: read, readSmall, stat, list, checkRoot, probeOpenat2,
// the digest cache's counters and capacity, beneath a Workdir and honouring a CancelToken
// (bind_workdir.h). Each asynchronous operation is one AsyncWorker class with its own async
// resource name ("resource-plane:read", ...); its Execute() calls the syscall side (resolve.cc,
// read.cc, list.cc, digest_cache.cc) on the libuv pool and never touches JS.
#pragma once

#include <napi.h>

#include "buffer.h"
#include "read.h"
#include "request.h"
#include "stop.h"

namespace rp {

// Hands `bytes` to JS as a Node Buffer (copied when small, else moved without a copy).
Napi::Value owned_buffer_value(Napi::Env env, OwnedBuffer& bytes);
// A read's result as JS sees it: {bytes, mtimeMs, sha256, digestCached}.
Napi::Object read_result_value(Napi::Env env, ReadResult& result);

// Registers the export operations on `exports` (read, readSmall, stat, list, checkRoot,
// probeOpenat2, exportResolutions, the digest cache's counters and sizes, and the failure codes);
// after InitWorkdirBindings.
void InitExportBindings(Napi::Env env, Napi::Object exports);

}  // namespace rp
