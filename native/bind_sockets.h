// Sockets as JS calls them (listenTcp, listenUnix, socketInfo, setCloexec, probeUnixSocket,
// notifyOpen, notifySend), over the syscall side in sockets.cc. Synchronous on purpose: each is
// one or two non-blocking syscalls, and the first stage must hold its listeners before it does
// anything else. Failures are results with a stable `code` and the errno, not exceptions.
#pragma once

#include <napi.h>

namespace rp {

void InitSocketBindings(Napi::Env env, Napi::Object exports);

}  // namespace rp
