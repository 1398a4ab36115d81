// The module's entry and nothing else: each bind_*.cc registers the exports of its concern
// (bind_workdir: Workdir, CancelToken and the descriptor calls; bind_exports: the export operations
// and the digest cache; bind_stream: streamed bodies and the size limits; bind_landing: the
// landing; bind_landlock: confinement; bind_sockets: listeners and sd_notify), over the syscall
// files, which never include napi.h.
#include <malloc.h>
#include <napi.h>

#include "bind_common.h"
#include "bind_exports.h"
#include "bind_landing.h"
#include "bind_landlock.h"
#include "bind_sockets.h"
#include "bind_stream.h"
#include "bind_workdir.h"
#include "limits.h"

namespace {

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  mallopt(M_MMAP_THRESHOLD, rp::kMmapThresholdBytes);  // see limits.h
  rp::InitAddonData(env);
  // Each bind_*.cc registers its own exports, the same way.
  rp::InitWorkdirBindings(env, exports);
  rp::InitExportBindings(env, exports);
  rp::InitStreamBinding(env, exports);
  rp::InitLandingBinding(env, exports);
  rp::InitLandlockBindings(env, exports);
  rp::InitSocketBindings(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(resource_plane, Init)
