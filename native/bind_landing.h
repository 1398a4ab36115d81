// The landing as JS holds it: landingOpen() resolves to a LandingHandle (never a descriptor)
// whose write, commit, abort and close each queue one AsyncWorker running the syscall side
// (write.cc) on the pool.
#pragma once

#include <napi.h>

namespace rp {

// Defines the LandingHandle class (recorded in the AddonData, not exported) and registers
// landingOpen({workdirFd, inbox}) -> LandingHandle on `exports`; after InitWorkdirBindings.
void InitLandingBinding(Napi::Env env, Napi::Object exports);

}  // namespace rp
