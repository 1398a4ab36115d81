// The landing as JS holds it: landingOpen() resolves to a LandingHandle (never a descriptor)
// whose write, commit, abort and close each queue one AsyncWorker running the syscall side
// (write.cc) on the pool.
#pragma once

#include <napi.h>

namespace rp {

// Defines the LandingHandle class (recorded in the AddonData, not exported); after InitAddonData.
void InitLandingBinding(Napi::Env env);

// landingOpen({workdirFd, inbox}) -> LandingHandle
Napi::Value LandingOpen(const Napi::CallbackInfo& info);

}  // namespace rp
