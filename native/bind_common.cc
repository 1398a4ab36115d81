// See bind_common.h.
#include "bind_common.h"

namespace rp {

Napi::Error to_error(Napi::Env env, const Failure& failure) {
  std::string code = code_name(failure.code);
  std::string message = failure.detail.empty() ? code : code + ": " + failure.detail;
  Napi::Error error = Napi::Error::New(env, message);
  error.Value().Set("code", Napi::String::New(env, code));
  error.Value().Set("detail", Napi::String::New(env, failure.detail));
  error.Value().Set("errno", Napi::Number::New(env, failure.err));
  return error;
}

void InitAddonData(Napi::Env env) {
  env.SetInstanceData<AddonData>(new AddonData());  // deleted by Node-API when the environment goes away
}

Napi::Object options_arg(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsObject())
    throw Napi::TypeError::New(info.Env(), "expected one options object");
  return info[0].As<Napi::Object>();
}

int fd_field(const Napi::Object& o, const char* name) {
  Napi::Value v = field(o, name);
  if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), std::string(name) + " must be a descriptor number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 0) || d > 2147483647.0 || d != static_cast<double>(static_cast<int>(d)))
    throw Napi::RangeError::New(o.Env(), std::string(name) + " is not a descriptor");
  return static_cast<int>(d);
}

std::string string_field(const Napi::Object& o, const char* name) {
  Napi::Value v = field(o, name);
  if (!v.IsString()) throw Napi::TypeError::New(o.Env(), std::string(name) + " must be a string");
  return v.As<Napi::String>().Utf8Value();
}

bool bool_field(const Napi::Object& o, const char* name) {
  Napi::Value v = field(o, name);
  if (!v.IsBoolean()) throw Napi::TypeError::New(o.Env(), std::string(name) + " must be a boolean");
  return v.As<Napi::Boolean>().Value();
}

uint64_t byte_count_field(const Napi::Object& o, const char* name) {
  Napi::Value v = field(o, name);
  if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), std::string(name) + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 0) || d > 9007199254740991.0 || d != static_cast<double>(static_cast<uint64_t>(d)))
    throw Napi::RangeError::New(o.Env(), std::string(name) + " out of range");
  return static_cast<uint64_t>(d);
}

}  // namespace rp
