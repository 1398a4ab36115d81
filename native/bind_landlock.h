// Confinement as JS calls it: landlockAbi, landlockRestrictSelf and replaceProcessImage, over the
// syscall side in landlock.cc. Synchronous on purpose: a Landlock domain binds the calling thread
// and execve keeps only the thread that calls it, so both must run on the JS main thread itself,
// never on the pool (landlock.cc checks). Failures are results with a stable `code`, not
// exceptions: a launch degrades on them.
#pragma once

#include <napi.h>

namespace rp {

// Registers landlockAbi, landlockRestrictSelf, replaceProcessImage and landlockCodes on `exports`.
void InitLandlockBindings(Napi::Env env, Napi::Object exports);

}  // namespace rp
