// See bind_stream.h: the StreamHandle class, the open worker and the chunk worker.
#include "bind_stream.h"

#include <memory>
#include <utility>

#include "bind_common.h"
#include "bind_exports.h"
#include "buffer.h"
#include "limits.h"
#include "stream.h"

namespace rp {

namespace {

// JS holds a StreamHandle; the BodyStream (and its descriptor) is shared with the chunk worker in
// flight, so close() while a chunk is being read only lets go of the handle's share: the descriptor
// closes when that worker is done. One chunk at a time: a second next() while one is in flight
// throws. Dropped without close(), the finalizer lets go the same way.
class StreamHandle final : public Napi::ObjectWrap<StreamHandle> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "StreamHandle",
                       {InstanceMethod<&StreamHandle::Next>("next"), InstanceMethod<&StreamHandle::Close>("close"),
                        InstanceMethod<&StreamHandle::LeaseIntact>("leaseIntact"),
                        InstanceAccessor<&StreamHandle::Leased>("leased")});
  }

  // Only the open worker constructs one, passing the BodyStream in an External JS cannot forge.
  explicit StreamHandle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<StreamHandle>(info) {
    if (info.Length() != 1 || !info[0].IsExternal())
      throw Napi::TypeError::New(info.Env(), "a stream is made by openStream, not constructed");
    stream_.reset(info[0].As<Napi::External<BodyStream>>().Data());
    leased_ = stream_->leased();
  }

  void Done() { busy_ = false; }

 private:
  Napi::Value Next(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info) {
    stream_.reset();
    return info.Env().Undefined();
  }
  // leaseIntact(): false once a writer waits for the stream's lease (which is then let go): one
  // fcntl, so JS may ask while a slow client holds the send. True for a hashed stream, false once closed.
  Napi::Value LeaseIntact(const Napi::CallbackInfo& info) {
    return Napi::Boolean::New(info.Env(), stream_ && stream_->lease_intact());
  }
  Napi::Value Leased(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), leased_); }

  std::shared_ptr<BodyStream> stream_;
  bool busy_ = false;
  bool leased_ = false;
};

class StreamOpenWorker final : public PromiseWorker {
 public:
  StreamOpenWorker(Napi::Env env, ExportRequest req) : PromiseWorker(env, "resource-plane:stream-open"), req_(std::move(req)) {}
  void Execute() override {
    opening_ = open_export_stream(req_);
    failure_ = opening_.failure;
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object out = Napi::Object::New(env);
    out.Set("size", Napi::Number::New(env, static_cast<double>(opening_.size)));
    out.Set("mtimeMs", Napi::Number::New(env, static_cast<double>(opening_.mtime_ms)));
    out.Set("sha256", Napi::String::New(env, hex(opening_.sha256, 32)));
    out.Set("digestCached", Napi::Boolean::New(env, opening_.digest_cached));
    // The handle owns the BodyStream from here; if building it throws, the unique_ptr frees it.
    std::unique_ptr<BodyStream> body(new BodyStream(std::move(opening_.fd), opening_.size, opening_.sha256, std::move(opening_.lease)));
    AddonData* data = env.GetInstanceData<AddonData>();
    Napi::Object handle = data->stream_ctor.New({Napi::External<BodyStream>::New(env, body.get())});
    body.release();
    out.Set("stream", handle);
    return out;
  }

 private:
  ExportRequest req_;
  StreamOpening opening_;
};

class StreamNextWorker final : public PromiseWorker {
 public:
  StreamNextWorker(Napi::Env env, const Napi::Object& self, StreamHandle* handle, std::shared_ptr<BodyStream> stream,
                   Napi::Buffer<unsigned char> into)
      : PromiseWorker(env, "resource-plane:stream-next"),
        self_(Napi::Persistent(self)),
        handle_(handle),
        stream_(std::move(stream)),
        into_(Napi::Persistent(into)),
        data_(into.Data()),
        capacity_(into.Length()) {}
  void Execute() override { bytes_ = stream_->next(data_, capacity_, &final_, &failure_); }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object out = Napi::Object::New(env);
    out.Set("bytes", Napi::Number::New(env, static_cast<double>(bytes_)));
    out.Set("final", Napi::Boolean::New(env, final_));
    return out;
  }

 protected:
  void OnOK() override {
    handle_->Done();
    PromiseWorker::OnOK();
  }
  void OnError(const Napi::Error& error) override {
    handle_->Done();
    PromiseWorker::OnError(error);
  }

 private:
  Napi::ObjectReference self_;  // strong: the handle outlives the chunk read
  StreamHandle* handle_;
  std::shared_ptr<BodyStream> stream_;
  Napi::Reference<Napi::Buffer<unsigned char>> into_;  // the chunk's memory stays alive meanwhile
  unsigned char* data_;
  size_t capacity_;
  size_t bytes_ = 0;
  bool final_ = false;
};

// next(buffer) -> {bytes, final}: the next chunk read into buffer's first `bytes` bytes.
Napi::Value StreamHandle::Next(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsBuffer()) throw Napi::TypeError::New(env, "next takes one Buffer");
  if (!stream_) throw Napi::Error::New(env, "the stream is closed");
  if (busy_) throw Napi::Error::New(env, "another chunk of this stream is still being read");
  busy_ = true;
  return queue<StreamNextWorker>(env, info.This().As<Napi::Object>(), this, stream_, info[0].As<Napi::Buffer<unsigned char>>());
}

}  // namespace

void InitStreamBinding(Napi::Env env, Napi::Object exports) {
  env.GetInstanceData<AddonData>()->stream_ctor = Napi::Persistent(StreamHandle::Define(env));
  Napi::Object limits = Napi::Object::New(env);
  auto set = [&](const char* name, uint64_t v) { limits.Set(name, Napi::Number::New(env, static_cast<double>(v))); };
  set("syncReadMaxBytes", kSyncReadMaxBytes);
  set("streamThresholdBytes", kStreamThresholdBytes);
  set("streamChunkBytes", kStreamChunkBytes);
  set("copiedReadMaxBytes", kCopiedReadMaxBytes);
  set("cachedReadMinBytes", kCachedReadMinBytes);
  set("readChunkBytes", kReadChunkBytes);
  set("hashChunkBytes", kHashChunkBytes);
  set("mmapThresholdBytes", static_cast<uint64_t>(kMmapThresholdBytes));
  limits.Freeze();
  exports.Set("limits", limits);
}

// releasePages(buffer) -> bytes given back: see release_pages (buffer.h). For an idle pooled body
// buffer only; the caller promises nothing else uses it.
Napi::Value ReleasePages(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsBuffer()) throw Napi::TypeError::New(env, "releasePages takes one Buffer");
  Napi::Buffer<unsigned char> buffer = info[0].As<Napi::Buffer<unsigned char>>();
  return Napi::Number::New(env, static_cast<double>(release_pages(buffer.Data(), buffer.Length())));
}

Napi::Value OpenStream(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  ExportRequest req = request_from(o, Wants::FileWithCeiling);
  req.stop.operation = "read";
  req.stop.cancel = cancel_field(o);
  return queue<StreamOpenWorker>(info.Env(), std::move(req));
}

}  // namespace rp
