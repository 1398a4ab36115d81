// The Node-API side of every operation: argument unpacking (types are validated again here, the
// TS layer validates meaning), one AsyncWorker class per operation, and the conversion of a
// Failure into a rejected promise whose error carries the stable `code`.
#include "workers.h"

#include <fcntl.h>

#include <cstdlib>
#include <string>

#include "list.h"
#include "read.h"
#include "resolve.h"
#include "write.h"

namespace rp {

namespace {

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

// Base for every worker: a deferred promise settled from OnOK/OnError.
class PromiseWorker : public Napi::AsyncWorker {
 public:
  explicit PromiseWorker(Napi::Env env)
      : Napi::AsyncWorker(env, "resource-plane"), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void OnOK() override {
    Napi::Env env = Env();
    if (failure_.failed()) {
      deferred_.Reject(to_error(env, failure_).Value());
      return;
    }
    deferred_.Resolve(Result(env));
  }
  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }
  virtual Napi::Value Result(Napi::Env env) = 0;

  Napi::Promise::Deferred deferred_;
  Failure failure_;
};

SymlinkPolicy policy_arg(const Napi::Value& v) {
  return v.ToBoolean().Value() ? SymlinkPolicy::Refuse : SymlinkPolicy::Follow;
}
Resolver resolver_arg(const Napi::Value& v) {
  return v.ToBoolean().Value() ? Resolver::Walk : Resolver::Openat2;
}
int fd_arg(const Napi::CallbackInfo& info, size_t i) {
  if (!info[i].IsNumber()) throw Napi::TypeError::New(info.Env(), "descriptor must be a number");
  return info[i].As<Napi::Number>().Int32Value();
}
std::string string_arg(const Napi::CallbackInfo& info, size_t i) {
  if (!info[i].IsString()) throw Napi::TypeError::New(info.Env(), "expected a string argument");
  return info[i].As<Napi::String>().Utf8Value();
}

class OpenDirectoryWorker final : public PromiseWorker {
 public:
  OpenDirectoryWorker(Napi::Env env, std::string path) : PromiseWorker(env), path_(std::move(path)) {}
  void Execute() override { fd_ = open_directory(path_, &failure_); }
  Napi::Value Result(Napi::Env env) override {
    return Napi::Number::New(env, fd_.release());  // JS owns it now and closes it with closeFd
  }

 private:
  std::string path_;
  Fd fd_;
};

class ReadWorker final : public PromiseWorker {
 public:
  ReadWorker(Napi::Env env, int workdir, std::string root, std::string rel, uint64_t max,
             SymlinkPolicy policy, Resolver resolver)
      : PromiseWorker(env), workdir_(workdir), root_(std::move(root)), rel_(std::move(rel)),
        max_(max), policy_(policy), resolver_(resolver) {}
  ~ReadWorker() override { std::free(result_.data); }
  void Execute() override {
    result_ = read_export_file(workdir_, root_, rel_, max_, policy_, resolver_);
    failure_ = result_.failure;
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object out = Napi::Object::New(env);
    unsigned char* data = result_.data;
    result_.data = nullptr;  // ownership moves to the Buffer's finalizer: no copy
    out.Set("bytes", Napi::Buffer<unsigned char>::New(
                         env, data, result_.length, [](Napi::Env, unsigned char* p) { std::free(p); }));
    out.Set("mtimeMs", Napi::Number::New(env, static_cast<double>(result_.mtime_ms)));
    out.Set("sha256", Napi::String::New(env, hex(result_.sha256, 32)));
    return out;
  }

 private:
  int workdir_;
  std::string root_, rel_;
  uint64_t max_;
  SymlinkPolicy policy_;
  Resolver resolver_;
  ReadResult result_;
};

class StatWorker final : public PromiseWorker {
 public:
  StatWorker(Napi::Env env, int workdir, std::string root, std::string rel, SymlinkPolicy policy,
             Resolver resolver)
      : PromiseWorker(env), workdir_(workdir), root_(std::move(root)), rel_(std::move(rel)),
        policy_(policy), resolver_(resolver) {}
  void Execute() override {
    Fd fd = open_export_file(workdir_, root_, rel_, policy_, resolver_, false, &stat_, &failure_);
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object out = Napi::Object::New(env);
    out.Set("size", Napi::Number::New(env, static_cast<double>(stat_.size)));
    out.Set("mtimeMs", Napi::Number::New(env, static_cast<double>(stat_.mtime_ms)));
    return out;
  }

 private:
  int workdir_;
  std::string root_, rel_;
  SymlinkPolicy policy_;
  Resolver resolver_;
  FileStat stat_;
};

// Resolves only the export root beneath the workdir, as every request does; a missing root is not
// a failure (it may be created later), an escape is.
class RootWorker final : public PromiseWorker {
 public:
  RootWorker(Napi::Env env, int workdir, std::string root, Resolver resolver)
      : PromiseWorker(env), workdir_(workdir), root_(std::move(root)), resolver_(resolver) {}
  void Execute() override {
    Fd fd = open_root(workdir_, root_, O_PATH, resolver_, &failure_);
    if (!fd.valid() && failure_.code == Code::NotFound) {
      failure_ = Failure();
      exists_ = false;
    }
  }
  Napi::Value Result(Napi::Env env) override { return Napi::Boolean::New(env, exists_); }

 private:
  int workdir_;
  std::string root_;
  Resolver resolver_;
  bool exists_ = true;
};

class ListWorker final : public PromiseWorker {
 public:
  ListWorker(Napi::Env env, int workdir, std::string root, SymlinkPolicy policy, Resolver resolver)
      : PromiseWorker(env), workdir_(workdir), root_(std::move(root)), policy_(policy),
        resolver_(resolver) {}
  void Execute() override {
    result_ = list_export_root(workdir_, root_, policy_, resolver_);
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
  int workdir_;
  std::string root_;
  SymlinkPolicy policy_;
  Resolver resolver_;
  ListResult result_;
};

class InboxCreateWorker final : public PromiseWorker {
 public:
  InboxCreateWorker(Napi::Env env, int workdir, std::string inbox)
      : PromiseWorker(env), workdir_(workdir), inbox_(std::move(inbox)) {}
  void Execute() override {
    temp_ = create_inbox_temp(workdir_, inbox_);
    failure_ = temp_.failure;
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object out = Napi::Object::New(env);
    out.Set("dirFd", Napi::Number::New(env, temp_.dir.release()));
    out.Set("fd", Napi::Number::New(env, temp_.file.release()));
    out.Set("name", Napi::String::New(env, temp_.name));
    return out;
  }

 private:
  int workdir_;
  std::string inbox_;
  TempFile temp_;  // its Fds close on destruction unless handed to JS
};

class InboxCommitWorker final : public PromiseWorker {
 public:
  InboxCommitWorker(Napi::Env env, int dir, int file, std::string temp, std::string final_name)
      : PromiseWorker(env), dir_(dir), file_(file), temp_(std::move(temp)),
        final_(std::move(final_name)) {}
  void Execute() override { failure_ = commit_temp(dir_, file_, temp_, final_); }
  Napi::Value Result(Napi::Env env) override { return env.Undefined(); }

 private:
  int dir_, file_;
  std::string temp_, final_;
};

class InboxDiscardWorker final : public PromiseWorker {
 public:
  InboxDiscardWorker(Napi::Env env, int dir, std::string temp)
      : PromiseWorker(env), dir_(dir), temp_(std::move(temp)) {}
  void Execute() override { discard_temp(dir_, temp_); }
  Napi::Value Result(Napi::Env env) override { return env.Undefined(); }

 private:
  int dir_;
  std::string temp_;
};

template <typename W, typename... Args>
Napi::Value queue(Napi::Env env, Args&&... args) {
  auto* worker = new W(env, std::forward<Args>(args)...);
  Napi::Promise promise = worker->Promise();
  worker->Queue();  // AsyncWorker deletes itself after OnOK/OnError
  return promise;
}

}  // namespace

Napi::Value OpenDirectory(const Napi::CallbackInfo& info) {
  return queue<OpenDirectoryWorker>(info.Env(), string_arg(info, 0));
}

// read(workdirFd, root, rel, maxBytes, refuseSymlinks, walk)
Napi::Value Read(const Napi::CallbackInfo& info) {
  if (!info[3].IsNumber()) throw Napi::TypeError::New(info.Env(), "maxBytes must be a number");
  double max = info[3].As<Napi::Number>().DoubleValue();
  if (!(max >= 0) || max > 9007199254740991.0)
    throw Napi::RangeError::New(info.Env(), "maxBytes out of range");
  return queue<ReadWorker>(info.Env(), fd_arg(info, 0), string_arg(info, 1), string_arg(info, 2),
                           static_cast<uint64_t>(max), policy_arg(info[4]), resolver_arg(info[5]));
}

// stat(workdirFd, root, rel, refuseSymlinks, walk)
Napi::Value Stat(const Napi::CallbackInfo& info) {
  return queue<StatWorker>(info.Env(), fd_arg(info, 0), string_arg(info, 1), string_arg(info, 2),
                           policy_arg(info[3]), resolver_arg(info[4]));
}

// checkRoot(workdirFd, root, walk) -> exists
Napi::Value CheckRoot(const Napi::CallbackInfo& info) {
  return queue<RootWorker>(info.Env(), fd_arg(info, 0), string_arg(info, 1), resolver_arg(info[2]));
}

// list(workdirFd, root, refuseSymlinks, walk)
Napi::Value List(const Napi::CallbackInfo& info) {
  return queue<ListWorker>(info.Env(), fd_arg(info, 0), string_arg(info, 1), policy_arg(info[2]),
                           resolver_arg(info[3]));
}

// inboxCreate(workdirFd, inboxName) -> {dirFd, fd, name}
Napi::Value InboxCreate(const Napi::CallbackInfo& info) {
  return queue<InboxCreateWorker>(info.Env(), fd_arg(info, 0), string_arg(info, 1));
}

// inboxCommit(dirFd, fd, tempName, finalName)
Napi::Value InboxCommit(const Napi::CallbackInfo& info) {
  return queue<InboxCommitWorker>(info.Env(), fd_arg(info, 0), fd_arg(info, 1), string_arg(info, 2),
                                  string_arg(info, 3));
}

// inboxDiscard(dirFd, tempName)
Napi::Value InboxDiscard(const Napi::CallbackInfo& info) {
  return queue<InboxDiscardWorker>(info.Env(), fd_arg(info, 0), string_arg(info, 1));
}

// closeFd(fd): synchronous; close(2) on a descriptor we own does not block meaningfully.
Napi::Value CloseFd(const Napi::CallbackInfo& info) {
  Fd owned(fd_arg(info, 0));  // closed when this scope ends
  return info.Env().Undefined();
}

Napi::Value ProbeOpenat2(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), openat2_available());
}

}  // namespace rp
