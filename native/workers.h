// One AsyncWorker per operation; each Execute() runs on the libuv pool and never touches JS.
// Every operation takes one named-options object (see workers.cc for each one's fields).
#pragma once

#include <napi.h>

namespace rp {

// Per-environment state (the LandingHandle class); call once from the module's Init.
void InitWorkers(Napi::Env env, Napi::Object exports);

Napi::Value OpenDirectory(const Napi::CallbackInfo& info);
Napi::Value Read(const Napi::CallbackInfo& info);
Napi::Value ReadSmall(const Napi::CallbackInfo& info);
Napi::Value Stat(const Napi::CallbackInfo& info);
Napi::Value List(const Napi::CallbackInfo& info);
Napi::Value CheckRoot(const Napi::CallbackInfo& info);
Napi::Value LandingOpen(const Napi::CallbackInfo& info);
Napi::Value CloseFd(const Napi::CallbackInfo& info);
Napi::Value ProbeOpenat2(const Napi::CallbackInfo& info);
Napi::Value DigestCacheStatsOf(const Napi::CallbackInfo& info);
Napi::Value SetDigestCacheCapacity(const Napi::CallbackInfo& info);

// Confinement: synchronous on purpose. A Landlock domain binds the calling thread, so these must
// run on the JS main thread itself, never on the pool.
Napi::Value LandlockAbi(const Napi::CallbackInfo& info);
Napi::Value LandlockRestrictSelf(const Napi::CallbackInfo& info);
Napi::Value ReplaceProcessImage(const Napi::CallbackInfo& info);

}  // namespace rp
