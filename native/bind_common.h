// What every Node-API file (bind_*.cc) shares: the promise-settling AsyncWorker base each
// operation's worker derives from (one class per operation, each with its own async resource
// name), the conversion of a Failure into an error carrying its stable `code`, the per-environment
// data, and the readers of named options (each field by name and type: a missing or mistyped one
// is a TypeError, never a silent default). The syscall files never include this.
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>
#include <utility>

#include "codes.h"

namespace rp {

// An Error whose `code` is the stable name of failure.code, with `detail` and `errno` beside it.
Napi::Error to_error(Napi::Env env, const Failure& failure);

// Base for every worker: a deferred promise settled from OnOK/OnError. `resource_name` is what
// async_hooks and diagnostics see, one per operation ("resource-plane:read", ...).
class PromiseWorker : public Napi::AsyncWorker {
 public:
  PromiseWorker(Napi::Env env, const char* resource_name)
      : Napi::AsyncWorker(env, resource_name), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void OnOK() override {
    Napi::Env env = Env();
    if (failure_.failed()) {
      deferred_.Reject(to_error(env, failure_).Value());
      return;
    }
    try {
      deferred_.Resolve(Result(env));
    } catch (const Napi::Error& error) {
      deferred_.Reject(error.Value());  // building the result failed: the caller hears it
    }
  }
  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }
  virtual Napi::Value Result(Napi::Env env) = 0;

  Napi::Promise::Deferred deferred_;
  Failure failure_;
};


// Per-environment state: the classes whose instances the addon must recognise or create, each set
// by the file that defines the class (bind_exports.cc, bind_landing.cc, bind_stream.cc).
struct AddonData {
  Napi::FunctionReference landing_ctor;
  Napi::FunctionReference cancel_ctor;
  Napi::FunctionReference stream_ctor;
  Napi::FunctionReference open_file_ctor;
  Napi::FunctionReference workdir_ctor;
};

// Creates the per-environment data; call first from the module's Init.
void InitAddonData(Napi::Env env);

// Queues a new W(env, args...) and returns its promise.
template <typename W, typename... Args>
Napi::Value queue(Napi::Env env, Args&&... args) {
  auto* worker = new W(env, std::forward<Args>(args)...);
  Napi::Promise promise = worker->Promise();
  worker->Queue();  // AsyncWorker deletes itself after OnOK/OnError
  return promise;
}

// ── Named options ───────────────────────────────────────────────────────────────────────────────

// The one options object every operation takes.
Napi::Object options_arg(const Napi::CallbackInfo& info);
inline Napi::Value field(const Napi::Object& o, const char* name) { return o.Get(name); }
int fd_field(const Napi::Object& o, const char* name);
std::string string_field(const Napi::Object& o, const char* name);
bool bool_field(const Napi::Object& o, const char* name);
// A whole number of bytes in [0, 2^53 - 1].
uint64_t byte_count_field(const Napi::Object& o, const char* name);

}  // namespace rp
