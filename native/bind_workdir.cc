// See bind_workdir.h: the N-API plumbing every export operation shares (the Workdir and
// CancelToken classes, and the request's fields read by name and type), and the two descriptor
// calls that are not export operations: openDirectory and closeFd.
#include "bind_workdir.h"

#include <atomic>
#include <string>
#include <utility>

#include "bind_common.h"
#include "resolve.h"

namespace rp {

namespace {

// ── Cancel tokens ───────────────────────────────────────────────────────────────────────────────
// `new CancelToken()` in JS; `cancel()` sets a flag that every worker given the token asks
// between chunks. The flag is shared, so a worker still running after JS dropped the token is fine.

class CancelTokenHandle final : public Napi::ObjectWrap<CancelTokenHandle> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "CancelToken",
                       {InstanceMethod<&CancelTokenHandle::Cancel>("cancel"),
                        InstanceAccessor<&CancelTokenHandle::Cancelled>("cancelled")});
  }
  // Not std::make_shared: since GCC 9 it calls std::_Sp_make_shared_tag::_S_eq, which libstdc++
  // exports only from GCC 9 on (GLIBCXX_3.4.26), above the prebuild's floor (see compat.cc).
  explicit CancelTokenHandle(const Napi::CallbackInfo& info)
      : Napi::ObjectWrap<CancelTokenHandle>(info), flag_(new std::atomic<bool>(false)) {}
  const CancelFlag& flag() const { return flag_; }

 private:
  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    flag_->store(true, std::memory_order_relaxed);
    return info.Env().Undefined();
  }
  Napi::Value Cancelled(const Napi::CallbackInfo& info) {
    return Napi::Boolean::New(info.Env(), flag_->load(std::memory_order_relaxed));
  }

  CancelFlag flag_;
};

// ── The workdir ─────────────────────────────────────────────────────────────────────────────────
// `new Workdir(fd)` in JS takes over an open directory descriptor (workdir.h). The handle holds
// one reference and every operation given it takes another, on this thread, when it is queued.
// close() drops the handle's: operations given it afterwards fail IO_ERROR (EBADF), those already
// queued or running keep theirs, and the descriptor closes when the last is done. Dropped without
// close(), the finalizer lets go the same way.

class WorkdirHandle final : public Napi::ObjectWrap<WorkdirHandle> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Workdir",
                       {InstanceMethod<&WorkdirHandle::Close>("close"),
                        InstanceAccessor<&WorkdirHandle::Closed>("closed")});
  }
  explicit WorkdirHandle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<WorkdirHandle>(info) {
    Napi::Env env = info.Env();
    if (info.Length() != 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "new Workdir(fd) takes a descriptor number");
    double d = info[0].As<Napi::Number>().DoubleValue();
    if (!(d >= 0) || d > 2147483647.0 || d != static_cast<double>(static_cast<int>(d)))
      throw Napi::RangeError::New(env, "fd is not a descriptor");
    int err = 0;
    ref_ = adopt_workdir(static_cast<int>(d), &err);
    if (!ref_) {  // not taken over: the caller still owns the descriptor
      Failure failure;
      failure.set(Code::IoError, err);
      throw to_error(env, failure);
    }
  }
  // A new reference for an operation; null once closed.
  WorkdirRef ref() const { return ref_; }

 private:
  Napi::Value Close(const Napi::CallbackInfo& info) {
    ref_.reset();
    return info.Env().Undefined();
  }
  Napi::Value Closed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), !ref_); }

  WorkdirRef ref_;
};

class OpenDirectoryWorker final : public PromiseWorker {
 public:
  OpenDirectoryWorker(Napi::Env env, std::string path)
      : PromiseWorker(env, "resource-plane:open-directory"), path_(std::move(path)) {}
  void Execute() override { fd_ = open_directory_following_links(path_, &failure_); }
  Napi::Value Result(Napi::Env env) override {
    return Napi::Number::New(env, fd_.release());  // JS owns it now and closes it with closeFd
  }

 private:
  std::string path_;
  Fd fd_;
};

}  // namespace

WorkdirRef workdir_field(const Napi::Object& o) {
  Napi::Value v = field(o, "workdirFd");
  AddonData* data = o.Env().GetInstanceData<AddonData>();
  if (v.IsObject() && v.As<Napi::Object>().InstanceOf(data->workdir_ctor.Value()))
    return WorkdirHandle::Unwrap(v.As<Napi::Object>())->ref();
  if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), "workdirFd must be a Workdir or a descriptor number");
  return duplicate_workdir(fd_field(o, "workdirFd"));
}


Resolver resolver_field(const Napi::Object& o) {
  std::string name = string_field(o, "resolver");
  if (name == "openat2") return Resolver::Openat2;
  if (name == "walk") return Resolver::Walk;
  throw Napi::TypeError::New(o.Env(), "resolver must be 'openat2' or 'walk'");
}

// `cancel`: absent, or a CancelToken made by this addon (anything else is a TypeError: an object
// that merely looks like one could never be cancelled).
CancelFlag cancel_field(const Napi::Object& o) {
  Napi::Value v = field(o, "cancel");
  if (v.IsUndefined()) return nullptr;
  AddonData* data = o.Env().GetInstanceData<AddonData>();
  if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(data->cancel_ctor.Value()))
    throw Napi::TypeError::New(o.Env(), "cancel must be a CancelToken");
  return CancelTokenHandle::Unwrap(v.As<Napi::Object>())->flag();
}

// The one input of read/stat/list: {workdirFd, root, relpath?, maxBytes?, refuseSymlinks, resolver},
// workdirFd being a Workdir or a descriptor number (workdir_field).
ExportRequest request_from(const Napi::Object& o, Wants wants) {
  // (cancel and timeBudgetMs are read by the operations that honour them: Read and List.)
  ExportRequest req;
  req.workdir = workdir_field(o);
  req.root = string_field(o, "root");
  if (wants != Wants::Root) req.rel = string_field(o, "relpath");
  if (wants == Wants::FileWithCeiling) req.max_bytes = byte_count_field(o, "maxBytes");
  req.policy = bool_field(o, "refuseSymlinks") ? SymlinkPolicy::Refuse : SymlinkPolicy::Follow;
  req.resolver = resolver_field(o);
  return req;
}

namespace {

Napi::Value OpenDirectory(const Napi::CallbackInfo& info) {
  if (!info[0].IsString()) throw Napi::TypeError::New(info.Env(), "path must be a string");
  return queue<OpenDirectoryWorker>(info.Env(), info[0].As<Napi::String>().Utf8Value());
}

// closeFd(fd): synchronous; close(2) on a descriptor we own does not block meaningfully.
Napi::Value CloseFd(const Napi::CallbackInfo& info) {
  if (!info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "descriptor must be a number");
  Fd owned(info[0].As<Napi::Number>().Int32Value());  // closed when this scope ends
  return info.Env().Undefined();
}

}  // namespace

void InitWorkdirBindings(Napi::Env env, Napi::Object exports) {
  AddonData* data = env.GetInstanceData<AddonData>();
  Napi::Function cancel = CancelTokenHandle::Define(env);
  data->cancel_ctor = Napi::Persistent(cancel);
  exports.Set("CancelToken", cancel);
  Napi::Function workdir = WorkdirHandle::Define(env);
  data->workdir_ctor = Napi::Persistent(workdir);
  exports.Set("Workdir", workdir);
  exports.Set("openDirectory", Napi::Function::New(env, OpenDirectory, "openDirectory"));
  exports.Set("closeFd", Napi::Function::New(env, CloseFd, "closeFd"));
}

}  // namespace rp
