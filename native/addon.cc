// The export table and nothing else: each function is defined by the bind_*.cc file of its
// concern (bind_exports: the export operations and the digest cache; bind_stream: streamed bodies
// and the size limits; bind_landing: the landing; bind_landlock: confinement; bind_sockets: listeners and sd_notify), over the syscall files, which never include napi.h.
#include <malloc.h>
#include <napi.h>

#include "bind_common.h"
#include "bind_exports.h"
#include "bind_landing.h"
#include "bind_landlock.h"
#include "bind_sockets.h"
#include "bind_stream.h"
#include "codes.h"
#include "landlock.h"
#include "digest_cache.h"
#include "limits.h"

namespace {

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  mallopt(M_MMAP_THRESHOLD, rp::kMmapThresholdBytes);  // see limits.h
  rp::InitAddonData(env);
  rp::InitExportBindings(env, exports);
  rp::InitLandingBinding(env);
  rp::InitStreamBinding(env, exports);
  rp::InitSocketBindings(env, exports);
  exports.Set("openDirectory", Napi::Function::New(env, rp::OpenDirectory, "openDirectory"));
  exports.Set("closeFd", Napi::Function::New(env, rp::CloseFd, "closeFd"));
  exports.Set("read", Napi::Function::New(env, rp::Read, "read"));
  exports.Set("readSmall", Napi::Function::New(env, rp::ReadSmall, "readSmall"));
  exports.Set("releasePages", Napi::Function::New(env, rp::ReleasePages, "releasePages"));
  exports.Set("stat", Napi::Function::New(env, rp::Stat, "stat"));
  exports.Set("list", Napi::Function::New(env, rp::List, "list"));
  exports.Set("checkRoot", Napi::Function::New(env, rp::CheckRoot, "checkRoot"));
  exports.Set("landingOpen", Napi::Function::New(env, rp::LandingOpen, "landingOpen"));
  exports.Set("probeOpenat2", Napi::Function::New(env, rp::ProbeOpenat2, "probeOpenat2"));
  exports.Set("exportResolutions", Napi::Function::New(env, rp::ExportResolutions, "exportResolutions"));
  exports.Set("digestCacheStats", Napi::Function::New(env, rp::DigestCacheStatsOf, "digestCacheStats"));
  exports.Set("setDigestCacheCapacity",
              Napi::Function::New(env, rp::SetDigestCacheCapacity, "setDigestCacheCapacity"));
  exports.Set("setListingCacheMinBytes",
              Napi::Function::New(env, rp::SetListingCacheMinBytes, "setListingCacheMinBytes"));
  exports.Set("defaultDigestCacheEntries", Napi::Number::New(env, static_cast<double>(rp::kDefaultDigestCacheEntries)));
  Napi::Array codes = Napi::Array::New(env);
  // Every failure code, straight from the table, so a test can prove the TS catalogue covers it.
  for (int c = static_cast<int>(rp::Code::NotFound); c <= static_cast<int>(rp::Code::IoError); c++)
    codes.Set(codes.Length(), rp::code_name(static_cast<rp::Code>(c)));
  exports.Set("codes", codes);
  exports.Set("landlockAbi", Napi::Function::New(env, rp::LandlockAbi, "landlockAbi"));
  exports.Set("landlockRestrictSelf", Napi::Function::New(env, rp::LandlockRestrictSelf, "landlockRestrictSelf"));
  exports.Set("replaceProcessImage", Napi::Function::New(env, rp::ReplaceProcessImage, "replaceProcessImage"));
  Napi::Array landlock_codes = Napi::Array::New(env);
  for (int c = static_cast<int>(rp::LandlockCode::Unsupported); c <= static_cast<int>(rp::LandlockCode::ExecFailed); c++)
    landlock_codes.Set(landlock_codes.Length(), rp::landlock_code_name(static_cast<rp::LandlockCode>(c)));
  exports.Set("landlockCodes", landlock_codes);
  return exports;
}

}  // namespace

NODE_API_MODULE(resource_plane, Init)
