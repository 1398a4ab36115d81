// The Node-API side of every operation: options unpacked by name (types are validated again here,
// the TS layer validates meaning), one AsyncWorker class per operation, each with its own async
// resource name, and the conversion of a Failure into a rejected promise whose error carries the
// stable `code`. Also the Landing class JS holds instead of the inbox descriptors.
#include "workers.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "digest_cache.h"
#include "landlock.h"
#include "list.h"
#include "read.h"
#include "request.h"
#include "resolve.h"
#include "stop.h"
#include "write.h"

namespace rp {

namespace {

// Results up to this size are copied into V8-owned buffers (see read_result_value).
constexpr size_t kCopiedReadMaxBytes = 64 * 1024;
// The most readSmall reads on the JS thread.
constexpr uint64_t kSmallReadMaxBytes = 256 * 1024;

std::string hex(const unsigned char* bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

Napi::Error to_error(Napi::Env env, const Failure& failure) {
  std::string code = code_name(failure.code);
  std::string message = failure.detail.empty() ? code : code + ": " + failure.detail;
  Napi::Error error = Napi::Error::New(env, message);
  error.Value().Set("code", Napi::String::New(env, code));
  error.Value().Set("detail", Napi::String::New(env, failure.detail));
  error.Value().Set("errno", Napi::Number::New(env, failure.err));
  return error;
}

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

// Per-environment state: the classes whose instances the addon must recognise or create.
struct AddonData {
  Napi::FunctionReference landing_ctor;
  Napi::FunctionReference cancel_ctor;
};

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

// ── Named options ───────────────────────────────────────────────────────────────────────────────
// Every operation takes one plain object; each field is read by name and must have its type. A
// missing or mistyped field is a TypeError, never a silent default (a forgotten `refuseSymlinks`
// must not quietly mean "follow").

Napi::Object options_arg(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsObject())
    throw Napi::TypeError::New(info.Env(), "expected one options object");
  return info[0].As<Napi::Object>();
}

Napi::Value field(const Napi::Object& o, const char* name) { return o.Get(name); }

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

// `timeBudgetMs`: absent, or a whole number of milliseconds in [1, 2^31 - 1].
void budget_field(const Napi::Object& o, StopSignal* stop) {
  Napi::Value v = field(o, "timeBudgetMs");
  if (v.IsUndefined()) return;
  if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), "timeBudgetMs must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 1) || d > 2147483647.0 || d != static_cast<double>(static_cast<int64_t>(d)))
    throw Napi::RangeError::New(o.Env(), "timeBudgetMs must be a whole number of ms in [1, 2^31 - 1]");
  stop->set_budget(static_cast<uint64_t>(d));
}

enum class Wants { Root, File, FileWithCeiling };

// The one input of read/stat/list: {workdirFd, root, relpath?, maxBytes?, refuseSymlinks, resolver}.
ExportRequest request_from(const Napi::Object& o, Wants wants) {
  // (cancel and timeBudgetMs are read by the operations that honour them: Read and List.)
  ExportRequest req;
  req.workdir_fd = fd_field(o, "workdirFd");
  req.root = string_field(o, "root");
  if (wants != Wants::Root) req.rel = string_field(o, "relpath");
  if (wants == Wants::FileWithCeiling) {
    req.max_bytes = byte_count_field(o, "maxBytes");
    if (!field(o, "budgetBytes").IsUndefined()) req.budget_bytes = byte_count_field(o, "budgetBytes");
  }
  req.policy = bool_field(o, "refuseSymlinks") ? SymlinkPolicy::Refuse : SymlinkPolicy::Follow;
  req.resolver = resolver_field(o);
  return req;
}

// ── Export operations ───────────────────────────────────────────────────────────────────────────

class OpenDirectoryWorker final : public PromiseWorker {
 public:
  OpenDirectoryWorker(Napi::Env env, std::string path)
      : PromiseWorker(env, "resource-plane:open-directory"), path_(std::move(path)) {}
  void Execute() override { fd_ = open_directory(path_, &failure_); }
  Napi::Value Result(Napi::Env env) override {
    return Napi::Number::New(env, fd_.release());  // JS owns it now and closes it with closeFd
  }

 private:
  std::string path_;
  Fd fd_;
};

// A read's result as JS sees it: {bytes, mtimeMs, sha256, digestCached}. `into`: the caller's
// buffer the bytes were read into, if any; bytes is then a view of its first bytes.
Napi::Object read_result_value(Napi::Env env, ReadResult& result, Napi::Object into = Napi::Object()) {
  Napi::Object out = Napi::Object::New(env);
  const size_t length = result.bytes.size();
  if (result.bytes.borrowed()) {
    Napi::Function subarray = into.Get("subarray").As<Napi::Function>();
    out.Set("bytes", subarray.Call(into, {Napi::Number::New(env, 0), Napi::Number::New(env, static_cast<double>(length))}));
  } else if (length <= kCopiedReadMaxBytes) {
    // Small: copied into a buffer V8 owns. A finalizer per response costs more than the copy.
    out.Set("bytes", Napi::Buffer<unsigned char>::Copy(env, result.bytes.data(), length));
  } else {
    // Ownership moves to the Buffer's finalizer: no copy (NewOrCopy copies, and frees ours at
    // once, only where the runtime forbids external buffers). The allocation is reported to V8 as
    // external memory, so that buffers nobody holds any more are collected while clients come and
    // go, not only when the JS heap happens to grow.
    const int64_t held = static_cast<int64_t>(result.bytes.capacity());
    Napi::MemoryManagement::AdjustExternalMemory(env, held);
    out.Set("bytes", Napi::Buffer<unsigned char>::NewOrCopy(
                         env, result.bytes.release(), length,
                         [](Napi::Env e, unsigned char* p, int64_t* size) {
                           OwnedBuffer::free_released(p);
                           Napi::MemoryManagement::AdjustExternalMemory(e, -*size);
                           delete size;
                         },
                         new int64_t(held)));
  }
  out.Set("mtimeMs", Napi::Number::New(env, static_cast<double>(result.mtime_ms)));
  out.Set("sha256", Napi::String::New(env, hex(result.sha256, 32)));
  out.Set("digestCached", Napi::Boolean::New(env, result.digest_cached));
  return out;
}

class ReadWorker final : public PromiseWorker {
 public:
  // `into`: the caller's buffer the read fills (req.into points into it); held here, so it stays
  // alive until the read is done whatever the caller drops meanwhile.
  ReadWorker(Napi::Env env, ExportRequest req, Napi::Object into)
      : PromiseWorker(env, "resource-plane:read"), req_(std::move(req)) {
    if (!into.IsEmpty()) into_ = Napi::Persistent(into);
  }
  void Execute() override {
    result_ = read_export_file(req_);
    failure_ = result_.failure;
  }
  Napi::Value Result(Napi::Env env) override {
    return read_result_value(env, result_, into_.IsEmpty() ? Napi::Object() : into_.Value());
  }

 private:
  ExportRequest req_;
  ReadResult result_;
  Napi::ObjectReference into_;
};

class StatWorker final : public PromiseWorker {
 public:
  StatWorker(Napi::Env env, ExportRequest req) : PromiseWorker(env, "resource-plane:stat"), req_(std::move(req)) {}
  void Execute() override { Fd fd = open_export_file(req_, OpenFor::Probe, &stat_, &failure_); }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object out = Napi::Object::New(env);
    out.Set("size", Napi::Number::New(env, static_cast<double>(stat_.size)));
    out.Set("mtimeMs", Napi::Number::New(env, static_cast<double>(stat_.mtime_ms)));
    return out;
  }

 private:
  ExportRequest req_;
  FileStat stat_;
};

// Resolves only the export root beneath the workdir, as every request does; a missing root is not
// a failure (it may be created later), an escape is.
class CheckRootWorker final : public PromiseWorker {
 public:
  CheckRootWorker(Napi::Env env, ExportRequest req)
      : PromiseWorker(env, "resource-plane:check-root"), req_(std::move(req)) {}
  void Execute() override {
    Fd fd = open_root(req_.workdir_fd, req_.root, O_PATH, req_.resolver, &failure_);
    if (!fd.valid() && failure_.code == Code::NotFound) {
      failure_ = Failure();
      exists_ = false;
    }
  }
  Napi::Value Result(Napi::Env env) override { return Napi::Boolean::New(env, exists_); }

 private:
  ExportRequest req_;
  bool exists_ = true;
};

class ListWorker final : public PromiseWorker {
 public:
  ListWorker(Napi::Env env, ExportRequest req) : PromiseWorker(env, "resource-plane:list"), req_(std::move(req)) {}
  void Execute() override {
    result_ = list_export_root(req_);
    failure_ = result_.failure;
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object out = Napi::Object::New(env);
    out.Set("rootMissing", Napi::Boolean::New(env, result_.root_missing));
    Napi::Array entries = Napi::Array::New(env, result_.entries.size());
    uint32_t i = 0;
    for (const ListEntry& e : result_.entries) {
      Napi::Object o = Napi::Object::New(env);
      o.Set("path", Napi::String::New(env, e.path));
      o.Set("size", Napi::Number::New(env, static_cast<double>(e.size)));
      o.Set("mtimeMs", Napi::Number::New(env, static_cast<double>(e.mtime_ms)));
      o.Set("sha256", Napi::String::New(env, hex(e.sha256, 32)));
      entries.Set(i++, o);
    }
    out.Set("entries", entries);
    return out;
  }

 private:
  ExportRequest req_;
  ListResult result_;
};

template <typename W, typename... Args>
Napi::Value queue(Napi::Env env, Args&&... args) {
  auto* worker = new W(env, std::forward<Args>(args)...);
  Napi::Promise promise = worker->Promise();
  worker->Queue();  // AsyncWorker deletes itself after OnOK/OnError
  return promise;
}

// ── The landing ─────────────────────────────────────────────────────────────────────────────────
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
  LandingOpenWorker(Napi::Env env, int workdir_fd, std::string inbox)
      : PromiseWorker(env, "resource-plane:landing-open"), workdir_fd_(workdir_fd), inbox_(std::move(inbox)) {}
  void Execute() override { landing_ = Landing::open(workdir_fd_, inbox_, &failure_); }
  Napi::Value Result(Napi::Env env) override {
    AddonData* data = env.GetInstanceData<AddonData>();
    // The handle's constructor moves the Landing out of landing_; if it throws, landing_ still
    // owns it and closes it (removing the temp file) when this worker is deleted.
    return data->landing_ctor.New({Napi::External<Landing>::New(env, &landing_)});
  }

 private:
  int workdir_fd_;
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

}  // namespace

void InitWorkers(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  data->landing_ctor = Napi::Persistent(LandingHandle::Define(env));
  Napi::Function cancel = CancelTokenHandle::Define(env);
  data->cancel_ctor = Napi::Persistent(cancel);
  exports.Set("CancelToken", cancel);
  env.SetInstanceData<AddonData>(data);  // deleted by Node-API when the environment goes away
}

Napi::Value OpenDirectory(const Napi::CallbackInfo& info) {
  if (!info[0].IsString()) throw Napi::TypeError::New(info.Env(), "path must be a string");
  return queue<OpenDirectoryWorker>(info.Env(), info[0].As<Napi::String>().Utf8Value());
}

// read({workdirFd, root, relpath, maxBytes, budgetBytes?, into?, refuseSymlinks, resolver, cancel?})
// `into`: a Buffer to read into instead of a fresh allocation, at least one byte longer than the
// most the read may take (budgetBytes when it is set and below maxBytes, else maxBytes); the
// result's bytes are then a view of it. The caller must not touch it until the promise settles.
Napi::Value Read(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = options_arg(info);
  ExportRequest req = request_from(o, Wants::FileWithCeiling);
  req.stop.operation = "read";
  req.stop.cancel = cancel_field(o);
  Napi::Value into = field(o, "into");
  Napi::Object held;
  if (!into.IsUndefined()) {
    if (!into.IsTypedArray() || into.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
      throw Napi::TypeError::New(env, "into must be a Buffer");
    Napi::Buffer<unsigned char> buffer = into.As<Napi::Buffer<unsigned char>>();
    if (static_cast<uint64_t>(buffer.Length()) <= read_ceiling(req))
      throw Napi::RangeError::New(env, "into must be longer than the most the read may take");
    req.into = buffer.Data();
    req.into_capacity = buffer.Length();
    held = buffer;
  }
  return queue<ReadWorker>(env, std::move(req), held);
}

// readSmall({workdirFd, root, relpath, maxBytes, smallBytes, refuseSymlinks, resolver}): the same
// read, synchronously on the calling thread, of a file of at most smallBytes (at most
// kSmallReadMaxBytes) by its fstat: {bytes, mtimeMs, sha256, digestCached}. A larger file is not
// read: {size} is returned, its fstat size, for the caller to reserve memory and read it on the
// pool. A failure throws the same error a rejected read carries. Small reads of regular files
// (the O_PATH probe has refused FIFOs and devices) cost less than the pool's round trip.
Napi::Value ReadSmall(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = options_arg(info);
  ExportRequest req = request_from(o, Wants::FileWithCeiling);
  const uint64_t small = byte_count_field(o, "smallBytes");
  if (small > kSmallReadMaxBytes) throw Napi::RangeError::New(env, "smallBytes is above the synchronous read limit");
  req.budget_bytes = small == 0 ? 1 : small;  // budget 0 would mean "no limit"
  req.stop.operation = "read";
  ReadResult result = read_export_file(req);
  if (result.failure.code == Code::OverBudget) {
    Napi::Object out = Napi::Object::New(env);
    out.Set("size", Napi::Number::New(env, static_cast<double>(result.size_seen)));
    return out;
  }
  if (result.failure.failed()) throw to_error(env, result.failure);
  return read_result_value(env, result);
}

// stat({workdirFd, root, relpath, refuseSymlinks, resolver})
Napi::Value Stat(const Napi::CallbackInfo& info) {
  return queue<StatWorker>(info.Env(), request_from(options_arg(info), Wants::File));
}

// list({workdirFd, root, refuseSymlinks, resolver, cancel?, timeBudgetMs?}). The budget runs
// from this call, so time spent queued for a pool thread counts.
Napi::Value List(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  ExportRequest req = request_from(o, Wants::Root);
  req.stop.operation = "listing";
  req.stop.cancel = cancel_field(o);
  budget_field(o, &req.stop);
  return queue<ListWorker>(info.Env(), std::move(req));
}

// checkRoot({workdirFd, root, resolver}) -> exists. No symlink policy: the root itself may be a
// link that stays inside the workdir, whatever the class.
Napi::Value CheckRoot(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  ExportRequest req;
  req.workdir_fd = fd_field(o, "workdirFd");
  req.root = string_field(o, "root");
  req.resolver = resolver_field(o);
  return queue<CheckRootWorker>(info.Env(), std::move(req));
}

// landingOpen({workdirFd, inbox}) -> LandingHandle
Napi::Value LandingOpen(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  return queue<LandingOpenWorker>(info.Env(), fd_field(o, "workdirFd"), string_field(o, "inbox"));
}

// closeFd(fd): synchronous; close(2) on a descriptor we own does not block meaningfully.
Napi::Value CloseFd(const Napi::CallbackInfo& info) {
  if (!info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "descriptor must be a number");
  Fd owned(info[0].As<Napi::Number>().Int32Value());  // closed when this scope ends
  return info.Env().Undefined();
}

// digestCacheStats() -> counters and size of the process-wide digest cache (digest_cache.h).
// Synchronous: it copies a few integers under the cache's mutex.
Napi::Value DigestCacheStatsOf(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  DigestCacheStats s = digest_cache().stats();
  Napi::Object out = Napi::Object::New(env);
  auto set = [&](const char* name, uint64_t v) { out.Set(name, Napi::Number::New(env, static_cast<double>(v))); };
  set("capacity", s.capacity);
  set("entries", s.entries);
  set("hits", s.hits);
  set("hashes", s.hashes);
  set("stores", s.stores);
  set("evictions", s.evictions);
  set("leaseRefused", s.lease_refused);
  set("leaseBroken", s.lease_broken);
  set("racy", s.racy);
  return out;
}

// setDigestCacheCapacity(entries): 0 turns the cache off; shrinking evicts at once.
Napi::Value SetDigestCacheCapacity(const Napi::CallbackInfo& info) {
  if (!info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "entries must be a number");
  double d = info[0].As<Napi::Number>().DoubleValue();
  if (!(d >= 0) || d > 16777216.0 || d != static_cast<double>(static_cast<uint64_t>(d)))
    throw Napi::RangeError::New(info.Env(), "entries must be a whole number in [0, 2^24]");
  digest_cache().set_capacity(static_cast<size_t>(d));
  return info.Env().Undefined();
}

Napi::Value ProbeOpenat2(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), openat2_available());
}

// ── Confinement ─────────────────────────────────────────────────────────────────────────────────
// Synchronous: the domain binds the thread that calls landlock_restrict_self, and execve keeps
// only the thread that calls it, so both must run on the JS main thread (landlock.cc checks).
// Failures are results with a stable `code`, not exceptions: a launch degrades on them.

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

}  // namespace

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

// replaceProcessImage({path, argv, env}): execve. Returns {ok: false, code: 'EXEC_FAILED', ...}
// only when execve failed; on success nothing returns (the process is a new image).
Napi::Value ReplaceProcessImage(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  std::string path = string_field(o, "path");
  std::vector<std::string> argv = string_list_field(o, "argv");
  std::vector<std::string> env = string_list_field(o, "env");
  if (syscall(SYS_gettid) != getpid())
    return landlock_failure(info.Env(), LandlockCode::NotMainThread, 0, "execve must be called from the main thread");
  int err = replace_process_image(path, argv, env);
  return landlock_failure(info.Env(), LandlockCode::ExecFailed, err, errno_text(err));
}

}  // namespace rp
