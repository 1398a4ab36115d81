// The export operations as JS calls them: openDirectory, read, readSmall, stat, list, checkRoot,
// closeFd, probeOpenat2, the digest cache's counters and capacity, the Workdir class (the counted
// owner of a workdir descriptor, workdir.h) they resolve beneath, and the CancelToken class that
// read and list honour. Each asynchronous operation is one AsyncWorker class with its own async
// resource name ("resource-plane:read", ...); its Execute() calls the syscall side (resolve.cc,
// read.cc, list.cc, digest_cache.cc) on the libuv pool and never touches JS.
#pragma once

#include <napi.h>

#include <string>

#include "buffer.h"
#include "read.h"
#include "request.h"
#include "stop.h"

namespace rp {

// What an operation's options name: only the root, a file, or a file with its byte ceiling.
enum class Wants { Root, File, FileWithCeiling };
// The one input of read/readSmall/stat/list: {workdirFd, root, relpath?, maxBytes?,
// refuseSymlinks, resolver}, each field by name and type.
ExportRequest request_from(const Napi::Object& o, Wants wants);
// `workdirFd`: a Workdir (a new reference to it; null once it is closed), or a descriptor number
// the caller keeps (a duplicate of its own, held for the operation). Read on the JS thread.
WorkdirRef workdir_field(const Napi::Object& o);
// `cancel`: absent, or a CancelToken made by this addon.
CancelFlag cancel_field(const Napi::Object& o);
std::string hex(const unsigned char* bytes, size_t n);
// Hands `bytes` to JS as a Node Buffer (copied when small, else moved without a copy).
Napi::Value owned_buffer_value(Napi::Env env, OwnedBuffer& bytes);
// A read's result as JS sees it: {bytes, mtimeMs, sha256, digestCached}.
Napi::Object read_result_value(Napi::Env env, ReadResult& result);

// Defines CancelToken and Workdir on `exports` (and records them in the AddonData); after
// InitAddonData.
void InitExportBindings(Napi::Env env, Napi::Object exports);

Napi::Value OpenDirectory(const Napi::CallbackInfo& info);
Napi::Value Read(const Napi::CallbackInfo& info);
Napi::Value ReadSmall(const Napi::CallbackInfo& info);
Napi::Value Stat(const Napi::CallbackInfo& info);
Napi::Value List(const Napi::CallbackInfo& info);
Napi::Value CheckRoot(const Napi::CallbackInfo& info);
Napi::Value CloseFd(const Napi::CallbackInfo& info);
Napi::Value ProbeOpenat2(const Napi::CallbackInfo& info);
Napi::Value ExportResolutions(const Napi::CallbackInfo& info);
Napi::Value DigestCacheStatsOf(const Napi::CallbackInfo& info);
Napi::Value SetDigestCacheCapacity(const Napi::CallbackInfo& info);
Napi::Value SetListingCacheMinBytes(const Napi::CallbackInfo& info);

}  // namespace rp
