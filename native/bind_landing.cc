// See bind_landing.h: the LandingHandle class and one worker per operation on it.
#include "bind_landing.h"

#include <string>
#include <utility>

#include "bind_common.h"
#include "bind_workdir.h"
#include "workdir.h"
#include "write.h"

namespace rp {

namespace {

// JS holds a LandingHandle, never a descriptor. Each method queues one worker that runs the
// syscall side (write.cc) on the pool. One operation at a time: a second call while one is in
// flight is a programming error and throws. While a worker runs it holds a strong reference to
// the handle, so the handle (and the Landing it owns) outlives every operation on it; once JS
// drops the handle, its finalizer closes the descriptors and removes an uncommitted temp file.
class LandingHandle final : public Napi::ObjectWrap<LandingHandle> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "LandingHandle",
                       {InstanceMethod<&LandingHandle::Write>("write"),
                        InstanceMethod<&LandingHandle::Commit>("commit"),
                        InstanceMethod<&LandingHandle::Abort>("abort"),
                        InstanceMethod<&LandingHandle::Close>("close")});
  }

  // Only the open worker constructs one, passing the Landing in an External that JS cannot forge.
  explicit LandingHandle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<LandingHandle>(info) {
    if (info.Length() != 1 || !info[0].IsExternal())
      throw Napi::TypeError::New(info.Env(), "a landing is made by landingOpen, not constructed");
    Landing* landing = info[0].As<Napi::External<Landing>>().Data();
    landing_ = std::move(*landing);
  }

  Landing& landing() { return landing_; }
  void Done() { busy_ = false; }

 private:
  Napi::Value Write(const Napi::CallbackInfo& info);
  Napi::Value Commit(const Napi::CallbackInfo& info);
  Napi::Value Abort(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);

  void Claim(Napi::Env env) {
    if (busy_) throw Napi::Error::New(env, "another operation on this landing is still in flight");
    busy_ = true;
  }

  Landing landing_;
  bool busy_ = false;
};

class LandingOpenWorker final : public PromiseWorker {
 public:
  // `workdir`: the reference taken when the call was made (workdir.h), held until the open is done.
  LandingOpenWorker(Napi::Env env, WorkdirRef workdir, std::string inbox)
      : PromiseWorker(env, "resource-plane:landing-open"), workdir_(std::move(workdir)), inbox_(std::move(inbox)) {}
  void Execute() override { landing_ = Landing::open(workdir_fd(workdir_), inbox_, &failure_); }
  Napi::Value Result(Napi::Env env) override {
    AddonData* data = env.GetInstanceData<AddonData>();
    // The handle's constructor moves the Landing out of landing_; if it throws, landing_ still
    // owns it and closes it (removing the temp file) when this worker is deleted.
    return data->landing_ctor.New({Napi::External<Landing>::New(env, &landing_)});
  }

 private:
  WorkdirRef workdir_;
  std::string inbox_;
  Landing landing_;
};

// Base of the operations on an existing landing: keeps the handle alive and marks it idle again.
class LandingOpWorker : public PromiseWorker {
 public:
  LandingOpWorker(Napi::Env env, const char* name, const Napi::Object& self, LandingHandle* handle)
      : PromiseWorker(env, name), self_(Napi::Persistent(self)), handle_(handle) {}

 protected:
  void OnOK() override {
    handle_->Done();
    PromiseWorker::OnOK();
  }
  void OnError(const Napi::Error& error) override {
    handle_->Done();
    PromiseWorker::OnError(error);
  }
  Napi::Value Result(Napi::Env env) override { return env.Undefined(); }
  Landing& landing() { return handle_->landing(); }

 private:
  Napi::ObjectReference self_;  // strong: the handle cannot be collected while this runs
  LandingHandle* handle_;
};

class LandingWriteWorker final : public LandingOpWorker {
 public:
  LandingWriteWorker(Napi::Env env, const Napi::Object& self, LandingHandle* handle,
                     Napi::Buffer<unsigned char> chunk)
      : LandingOpWorker(env, "resource-plane:landing-write", self, handle),
        chunk_(Napi::Persistent(chunk)), data_(chunk.Data()), length_(chunk.Length()) {}
  void Execute() override { failure_ = landing().append(data_, length_); }

 private:
  Napi::Reference<Napi::Buffer<unsigned char>> chunk_;  // the bytes stay alive until written
  const unsigned char* data_;
  size_t length_;
};

class LandingCommitWorker final : public LandingOpWorker {
 public:
  LandingCommitWorker(Napi::Env env, const Napi::Object& self, LandingHandle* handle, std::string name)
      : LandingOpWorker(env, "resource-plane:landing-commit", self, handle), name_(std::move(name)) {}
  void Execute() override { failure_ = landing().commit(name_); }

 private:
  std::string name_;
};

class LandingAbortWorker final : public LandingOpWorker {
 public:
  LandingAbortWorker(Napi::Env env, const Napi::Object& self, LandingHandle* handle)
      : LandingOpWorker(env, "resource-plane:landing-abort", self, handle) {}
  void Execute() override { landing().abort(); }
};

class LandingCloseWorker final : public LandingOpWorker {
 public:
  LandingCloseWorker(Napi::Env env, const Napi::Object& self, LandingHandle* handle)
      : LandingOpWorker(env, "resource-plane:landing-close", self, handle) {}
  void Execute() override { landing().close(); }
};

// write(chunk: Buffer)
Napi::Value LandingHandle::Write(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsBuffer())
    throw Napi::TypeError::New(info.Env(), "write takes one Buffer");
  Claim(info.Env());
  return queue<LandingWriteWorker>(info.Env(), info.This().As<Napi::Object>(), this,
                                   info[0].As<Napi::Buffer<unsigned char>>());
}

// commit(finalName: string)
Napi::Value LandingHandle::Commit(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsString())
    throw Napi::TypeError::New(info.Env(), "commit takes the final name");
  std::string name = info[0].As<Napi::String>().Utf8Value();
  Claim(info.Env());
  return queue<LandingCommitWorker>(info.Env(), info.This().As<Napi::Object>(), this, std::move(name));
}

Napi::Value LandingHandle::Abort(const Napi::CallbackInfo& info) {
  Claim(info.Env());
  return queue<LandingAbortWorker>(info.Env(), info.This().As<Napi::Object>(), this);
}

Napi::Value LandingHandle::Close(const Napi::CallbackInfo& info) {
  Claim(info.Env());
  return queue<LandingCloseWorker>(info.Env(), info.This().As<Napi::Object>(), this);
}

// landingOpen({workdirFd, inbox}) -> LandingHandle; workdirFd a Workdir or a number (workdir_field).
Napi::Value LandingOpen(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  std::string inbox = string_field(o, "inbox");
  return queue<LandingOpenWorker>(info.Env(), workdir_field(o), std::move(inbox));
}

}  // namespace

void InitLandingBinding(Napi::Env env, Napi::Object exports) {
  env.GetInstanceData<AddonData>()->landing_ctor = Napi::Persistent(LandingHandle::Define(env));
  exports.Set("landingOpen", Napi::Function::New(env, LandingOpen, "landingOpen"));
}

}  // namespace rp
