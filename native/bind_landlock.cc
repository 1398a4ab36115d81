// See bind_landlock.h: plans unpacked from named options, outcomes converted to plain objects.
#include "bind_landlock.h"

#include <cerrno>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bind_common.h"
#include "codes.h"
#include "landlock.h"

namespace rp {

namespace {

Napi::Array string_array(Napi::Env env, const std::vector<std::string>& items) {
  Napi::Array out = Napi::Array::New(env, items.size());
  for (uint32_t i = 0; i < items.size(); i++) out.Set(i, Napi::String::New(env, items[i]));
  return out;
}

std::vector<std::string> string_list_field(const Napi::Object& o, const char* name) {
  Napi::Value v = field(o, name);
  if (!v.IsArray()) throw Napi::TypeError::New(o.Env(), std::string(name) + " must be an array of strings");
  Napi::Array a = v.As<Napi::Array>();
  std::vector<std::string> out;
  out.reserve(a.Length());
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value item = a.Get(i);
    if (!item.IsString()) throw Napi::TypeError::New(o.Env(), std::string(name) + " must be an array of strings");
    std::string s = item.As<Napi::String>().Utf8Value();
    // execve takes C strings: an embedded NUL would silently cut an argument short.
    if (s.find('\0') != std::string::npos)
      throw Napi::TypeError::New(o.Env(), std::string(name) + " items must not contain NUL");
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<uint16_t> port_list_field(const Napi::Object& o, const char* name) {
  Napi::Value v = field(o, name);
  if (!v.IsArray()) throw Napi::TypeError::New(o.Env(), std::string(name) + " must be an array of ports");
  Napi::Array a = v.As<Napi::Array>();
  std::vector<uint16_t> out;
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value item = a.Get(i);
    double d = item.IsNumber() ? item.As<Napi::Number>().DoubleValue() : -1;
    if (!(d >= 0) || d > 65535 || d != static_cast<double>(static_cast<int>(d)))
      throw Napi::RangeError::New(o.Env(), std::string(name) + " items must be ports in [0, 65535]");
    out.push_back(static_cast<uint16_t>(d));
  }
  return out;
}

Napi::Object landlock_failure(Napi::Env env, LandlockCode code, int err, const std::string& detail) {
  Napi::Object out = Napi::Object::New(env);
  out.Set("ok", Napi::Boolean::New(env, code == LandlockCode::Ok));
  out.Set("code", Napi::String::New(env, landlock_code_name(code)));
  out.Set("errno", Napi::Number::New(env, err));
  out.Set("detail", Napi::String::New(env, detail));
  return out;
}

// landlockAbi() -> {ok, code, errno, detail, abi}: abi 0 where the kernel offers none.
Napi::Value LandlockAbi(const Napi::CallbackInfo& info) {
  int err = 0;
  int abi = landlock_abi(&err);
  LandlockCode code = abi > 0 ? LandlockCode::Ok
                      : err == ENOSYS ? LandlockCode::Unsupported
                      : err == EOPNOTSUPP ? LandlockCode::Disabled
                      : LandlockCode::RulesetFailed;
  Napi::Object out = landlock_failure(info.Env(), code, err, err ? errno_text(err) : std::string());
  out.Set("abi", Napi::Number::New(info.Env(), abi));
  return out;
}

// landlockRestrictSelf({paths: [{path, access: string[], directory, optional}], bindPorts,
// restrictConnect, connectPorts}) -> {ok, code, errno, detail, abi, handledFs, handledNet, scoped,
// skipped: [{index, errno}]}
Napi::Value LandlockRestrictSelf(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = options_arg(info);
  LandlockPlan plan;
  Napi::Value paths = field(o, "paths");
  if (!paths.IsArray()) throw Napi::TypeError::New(env, "paths must be an array of rules");
  Napi::Array rules = paths.As<Napi::Array>();
  for (uint32_t i = 0; i < rules.Length(); i++) {
    Napi::Value item = rules.Get(i);
    if (!item.IsObject()) throw Napi::TypeError::New(env, "each path rule must be an object");
    Napi::Object r = item.As<Napi::Object>();
    LandlockPathRule rule;
    rule.path = string_field(r, "path");
    if (rule.path.empty() || rule.path[0] != '/' || rule.path.find('\0') != std::string::npos)
      throw Napi::TypeError::New(env, "a rule path must be absolute");
    for (const std::string& name : string_list_field(r, "access")) {
      uint64_t bit = landlock_fs_right(name);
      if (bit == 0) throw Napi::TypeError::New(env, "unknown filesystem right '" + name + "'");
      rule.access |= bit;
    }
    rule.directory = bool_field(r, "directory");
    rule.optional = bool_field(r, "optional");
    plan.paths.push_back(std::move(rule));
  }
  plan.bind_ports = port_list_field(o, "bindPorts");
  plan.restrict_connect = bool_field(o, "restrictConnect");
  plan.connect_ports = port_list_field(o, "connectPorts");

  LandlockOutcome outcome = landlock_restrict_self(plan);
  Napi::Object out = landlock_failure(env, outcome.code, outcome.err, outcome.detail);
  out.Set("abi", Napi::Number::New(env, outcome.abi));
  out.Set("handledFs", string_array(env, landlock_fs_right_names(outcome.handled_fs)));
  out.Set("handledNet", string_array(env, landlock_net_right_names(outcome.handled_net)));
  out.Set("scoped", string_array(env, landlock_scope_names(outcome.scoped)));
  Napi::Array skipped = Napi::Array::New(env, outcome.skipped.size());
  for (uint32_t i = 0; i < outcome.skipped.size(); i++) {
    Napi::Object s = Napi::Object::New(env);
    s.Set("index", Napi::Number::New(env, static_cast<double>(outcome.skipped[i].index)));
    s.Set("errno", Napi::Number::New(env, outcome.skipped[i].err));
    s.Set("detail", Napi::String::New(env, errno_text(outcome.skipped[i].err)));
    skipped.Set(i, s);
  }
  out.Set("skipped", skipped);
  return out;
}

// replaceProcessImage({path, argv, env, keep: fd[]}): execve, with `keep` the only descriptors
// above stderr that cross. Returns {ok: false, code, ...} only when it did
// not happen (NOT_MAIN_THREAD, EXEC_FAILED); on success nothing returns (the process is a new image).
Napi::Value ReplaceProcessImage(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  std::string path = string_field(o, "path");
  std::vector<std::string> argv = string_list_field(o, "argv");
  std::vector<std::string> env = string_list_field(o, "env");
  std::vector<int> keep;
  Napi::Value k = field(o, "keep");
  if (!k.IsUndefined()) {
    if (!k.IsArray()) throw Napi::TypeError::New(info.Env(), "keep must be an array of descriptors");
    Napi::Array a = k.As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); i++) {
      Napi::Value item = a.Get(i);
      double d = item.IsNumber() ? item.As<Napi::Number>().DoubleValue() : -1;
      if (!(d >= 3) || d > 2147483647.0 || d != static_cast<double>(static_cast<int>(d)))
        throw Napi::RangeError::New(info.Env(), "keep items must be descriptors above stderr");
      keep.push_back(static_cast<int>(d));
    }
  }
  LandlockOutcome outcome = replace_process_image(path, argv, env, keep);
  return landlock_failure(info.Env(), outcome.code, outcome.err, outcome.detail);
}

}  // namespace

void InitLandlockBindings(Napi::Env env, Napi::Object exports) {
  exports.Set("landlockAbi", Napi::Function::New(env, LandlockAbi, "landlockAbi"));
  exports.Set("landlockRestrictSelf", Napi::Function::New(env, LandlockRestrictSelf, "landlockRestrictSelf"));
  exports.Set("replaceProcessImage", Napi::Function::New(env, ReplaceProcessImage, "replaceProcessImage"));
  Napi::Array codes = Napi::Array::New(env);
  for (int c = static_cast<int>(LandlockCode::Unsupported); c <= static_cast<int>(LandlockCode::ExecFailed); c++)
    codes.Set(codes.Length(), landlock_code_name(static_cast<LandlockCode>(c)));
  exports.Set("landlockCodes", codes);
}

}  // namespace rp
