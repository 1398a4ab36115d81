// See bind_stream.h: the OpenFile class (the one descriptor a read opened), its read and body
// workers, the StreamHandle class and its chunk worker.
#include "bind_stream.h"

#include <memory>
#include <utility>

#include "bind_common.h"
#include "bind_exports.h"
#include "bind_workdir.h"
#include "buffer.h"
#include "hex.h"
#include "limits.h"
#include "read.h"
#include "stream.h"

namespace rp {

namespace {

// The descriptor a read opened and the fstat it was opened with, shared by the OpenFile handle and
// the worker in flight: close() while one runs only lets go of the handle's share.
struct OpenedFile {
  Fd fd;
  struct stat st = {};
};

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
                        InstanceMethod<&StreamHandle::Digest>("digest"),
                        InstanceAccessor<&StreamHandle::Leased>("leased")});
  }

  // Only the body worker constructs one, passing the BodyStream in an External JS cannot forge.
  explicit StreamHandle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<StreamHandle>(info) {
    if (info.Length() != 1 || !info[0].IsExternal())
      throw Napi::TypeError::New(info.Env(), "a stream is made by an OpenFile's body(), not constructed");
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
  // digest(): a snapshot's sha256 (hex) once its final chunk was read; throws before that.
  Napi::Value Digest(const Napi::CallbackInfo& info) {
    unsigned char digest[32];
    if (!stream_ || busy_ || !stream_->snapshot_digest(digest))
      throw Napi::Error::New(info.Env(), "a snapshot's digest exists once its final chunk was read");
    return Napi::String::New(info.Env(), hex(digest, 32));
  }
  Napi::Value Leased(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), leased_); }

  std::shared_ptr<BodyStream> stream_;
  bool busy_ = false;
  bool leased_ = false;
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

// ── The opened file ─────────────────────────────────────────────────────────────────────────────
// What readSmall hands back for a file above its synchronous size: the descriptor it opened, with
// that fstat's size. Everything the read then serves comes from it: read() (the whole body, on the
// pool) or body() (streamed or snapshot, stream.h), once; then the handle is spent. close() lets go
// of the descriptor (after the worker in flight, if any); dropped without close(), the finalizer
// does.

class OpenFileHandle final : public Napi::ObjectWrap<OpenFileHandle> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "OpenFile",
                       {InstanceMethod<&OpenFileHandle::Read>("read"), InstanceMethod<&OpenFileHandle::Body>("body"),
                        InstanceMethod<&OpenFileHandle::Close>("close"),
                        InstanceAccessor<&OpenFileHandle::Size>("size")});
  }
  explicit OpenFileHandle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<OpenFileHandle>(info) {
    if (info.Length() != 1 || !info[0].IsExternal())
      throw Napi::TypeError::New(info.Env(), "an OpenFile is made by readSmall, not constructed");
    file_.reset(info[0].As<Napi::External<OpenedFile>>().Data());
    size_ = static_cast<double>(file_->st.st_size);
  }

 private:
  // The file, taken for one operation; throws once spent or closed.
  std::shared_ptr<OpenedFile> take(Napi::Env env) {
    if (!file_) throw Napi::Error::New(env, "the file was already read, or closed");
    return std::move(file_);
  }
  Napi::Value Read(const Napi::CallbackInfo& info);
  Napi::Value Body(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info) {
    file_.reset();
    return info.Env().Undefined();
  }
  Napi::Value Size(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), size_); }

  std::shared_ptr<OpenedFile> file_;
  double size_ = 0;
};

class FileReadWorker final : public PromiseWorker {
 public:
  FileReadWorker(Napi::Env env, std::shared_ptr<OpenedFile> file, StopSignal stop)
      : PromiseWorker(env, "resource-plane:read"), file_(std::move(file)), stop_(std::move(stop)) {}
  void Execute() override {
    result_ = read_opened(file_->fd.get(), file_->st, stop_);
    failure_ = result_.failure;
    file_.reset();  // the descriptor closes here, on the pool, once read
  }
  Napi::Value Result(Napi::Env env) override { return read_result_value(env, result_); }

 private:
  std::shared_ptr<OpenedFile> file_;
  StopSignal stop_;
  ReadResult result_;
};

class FileBodyWorker final : public PromiseWorker {
 public:
  FileBodyWorker(Napi::Env env, std::shared_ptr<OpenedFile> file, uint64_t max_bytes, bool snapshot_ok, StopSignal stop)
      : PromiseWorker(env, "resource-plane:body"), file_(std::move(file)), max_bytes_(max_bytes), snapshot_ok_(snapshot_ok), stop_(std::move(stop)) {}
  void Execute() override {
    opening_ = open_body(std::move(file_->fd), file_->st, max_bytes_, snapshot_ok_, stop_);
    failure_ = opening_.failure;
    file_.reset();
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object out = Napi::Object::New(env);
    out.Set("settled", Napi::Boolean::New(env, opening_.settled));
    out.Set("size", Napi::Number::New(env, static_cast<double>(opening_.size)));
    out.Set("mtimeMs", Napi::Number::New(env, static_cast<double>(opening_.mtime_ms)));
    if (opening_.settled) out.Set("sha256", Napi::String::New(env, hex(opening_.sha256, 32)));
    out.Set("digestCached", Napi::Boolean::New(env, opening_.digest_cached));
    // The handle owns the BodyStream from here; if building it throws, the unique_ptr frees it.
    std::unique_ptr<BodyStream> body(new BodyStream(std::move(opening_.fd), opening_.size,
                                                    opening_.settled ? opening_.sha256 : nullptr, std::move(opening_.lease)));
    AddonData* data = env.GetInstanceData<AddonData>();
    Napi::Object handle = data->stream_ctor.New({Napi::External<BodyStream>::New(env, body.get())});
    body.release();
    out.Set("stream", handle);
    return out;
  }

 private:
  std::shared_ptr<OpenedFile> file_;
  uint64_t max_bytes_;
  bool snapshot_ok_;
  StopSignal stop_;
  BodyOpening opening_;
};

// read({cancel?}) -> {bytes, mtimeMs, sha256, digestCached}: the first size bytes, on the pool.
Napi::Value OpenFileHandle::Read(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  StopSignal stop;
  stop.operation = "read";
  stop.cancel = cancel_field(o);
  return queue<FileReadWorker>(info.Env(), take(info.Env()), std::move(stop));
}

// body({maxBytes, snapshotOk, cancel?}) -> {settled, size, mtimeMs, sha256?, digestCached, stream}.
Napi::Value OpenFileHandle::Body(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  const uint64_t max_bytes = byte_count_field(o, "maxBytes");
  const bool snapshot_ok = bool_field(o, "snapshotOk");
  StopSignal stop;
  stop.operation = "read";
  stop.cancel = cancel_field(o);
  return queue<FileBodyWorker>(info.Env(), take(info.Env()), max_bytes, snapshot_ok, std::move(stop));
}

// releasePages(buffer) -> bytes given back: see release_pages (buffer.h). For an idle pooled body
// buffer only; the caller promises nothing else uses it.
Napi::Value ReleasePages(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsBuffer()) throw Napi::TypeError::New(env, "releasePages takes one Buffer");
  Napi::Buffer<unsigned char> buffer = info[0].As<Napi::Buffer<unsigned char>>();
  return Napi::Number::New(env, static_cast<double>(release_pages(buffer.Data(), buffer.Length())));
}

}  // namespace

void InitStreamBinding(Napi::Env env, Napi::Object exports) {
  AddonData* data = env.GetInstanceData<AddonData>();
  data->stream_ctor = Napi::Persistent(StreamHandle::Define(env));
  data->open_file_ctor = Napi::Persistent(OpenFileHandle::Define(env));
  Napi::Object limits = Napi::Object::New(env);
  auto set = [&](const char* name, uint64_t v) { limits.Set(name, Napi::Number::New(env, static_cast<double>(v))); };
  set("syncReadMaxBytes", kSyncReadMaxBytes);
  set("streamThresholdBytes", kStreamThresholdBytes);
  set("streamChunkBytes", kStreamChunkBytes);
  set("copiedReadMaxBytes", kCopiedReadMaxBytes);
  set("cachedReadMinBytes", kCachedReadMinBytes);
  set("listingCachedMinBytes", kListingCachedMinBytes);
  set("readChunkBytes", kReadChunkBytes);
  set("hashChunkBytes", kHashChunkBytes);
  set("mmapThresholdBytes", static_cast<uint64_t>(kMmapThresholdBytes));
  limits.Freeze();
  exports.Set("limits", limits);
  exports.Set("releasePages", Napi::Function::New(env, ReleasePages, "releasePages"));
}

Napi::Value open_file_value(Napi::Env env, Fd fd, const struct stat& st) {
  std::unique_ptr<OpenedFile> file(new OpenedFile());
  file->fd = std::move(fd);
  file->st = st;
  Napi::Object handle = env.GetInstanceData<AddonData>()->open_file_ctor.New({Napi::External<OpenedFile>::New(env, file.get())});
  file.release();
  return handle;
}

}  // namespace rp
