// The N-API plumbing every export operation shares: `new Workdir(fd)` (the counted owner of a
// workdir descriptor, workdir.h) and `new CancelToken()` (a flag read and list honour), and the
// request's fields, each read by name and type: a missing or mistyped one is a TypeError. Also
// openDirectory (a host path, for the launcher) and closeFd.
#pragma once

#include <napi.h>

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
// `resolver`: 'openat2' or 'walk'.
Resolver resolver_field(const Napi::Object& o);

// Defines Workdir and CancelToken (recorded in the AddonData), openDirectory and closeFd on
// `exports`; after InitAddonData.
void InitWorkdirBindings(Napi::Env env, Napi::Object exports);

}  // namespace rp
