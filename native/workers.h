// One AsyncWorker per operation; each Execute() runs on the libuv pool and never touches JS.
#pragma once

#include <napi.h>

namespace rp {

Napi::Value OpenDirectory(const Napi::CallbackInfo& info);
Napi::Value Read(const Napi::CallbackInfo& info);
Napi::Value Stat(const Napi::CallbackInfo& info);
Napi::Value List(const Napi::CallbackInfo& info);
Napi::Value CheckRoot(const Napi::CallbackInfo& info);
Napi::Value InboxCreate(const Napi::CallbackInfo& info);
Napi::Value InboxCommit(const Napi::CallbackInfo& info);
Napi::Value InboxDiscard(const Napi::CallbackInfo& info);
Napi::Value CloseFd(const Napi::CallbackInfo& info);
Napi::Value ProbeOpenat2(const Napi::CallbackInfo& info);

}  // namespace rp
