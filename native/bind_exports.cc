// See bind_exports.h: options unpacked by name (types are validated again here, the TS layer
// validates meaning), one worker per operation, results converted to plain JS objects.
#include "bind_exports.h"

#include <fcntl.h>

#include <atomic>
#include <string>
#include <utility>

#include "bind_common.h"
#include "bind_workdir.h"
#include "hex.h"
#include "bind_stream.h"
#include "digest_cache.h"
#include "limits.h"
#include "list.h"
#include "listing_json.h"
#include "read.h"
#include "request.h"
#include "resolve.h"
#include "stop.h"

namespace rp {

// `timeBudgetMs`: absent, or a whole number of milliseconds in [1, 2^31 - 1].
static void budget_field(const Napi::Object& o, StopSignal* stop) {
  Napi::Value v = field(o, "timeBudgetMs");
  if (v.IsUndefined()) return;
  if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), "timeBudgetMs must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 1) || d > 2147483647.0 || d != static_cast<double>(static_cast<int64_t>(d)))
    throw Napi::RangeError::New(o.Env(), "timeBudgetMs must be a whole number of ms in [1, 2^31 - 1]");
  stop->set_budget(static_cast<uint64_t>(d));
}

// Hands `bytes` to JS as a Node Buffer. Small: copied into a buffer V8 owns (a finalizer per
// response costs more than the copy). Larger: ownership moves to the Buffer's finalizer, no copy
// (NewOrCopy copies, and frees ours at once, only where the runtime forbids external buffers); the
// allocation is reported to V8 as external memory, so that it weighs on when V8 collects.
Napi::Value owned_buffer_value(Napi::Env env, OwnedBuffer& bytes) {
  const size_t length = bytes.size();
  if (length <= kCopiedReadMaxBytes) return Napi::Buffer<unsigned char>::Copy(env, bytes.data(), length);
  const int64_t held = static_cast<int64_t>(bytes.capacity());
  Napi::MemoryManagement::AdjustExternalMemory(env, held);
  return Napi::Buffer<unsigned char>::NewOrCopy(
      env, bytes.release(), length,
      [](Napi::Env e, unsigned char* p, int64_t* size) {
        OwnedBuffer::free_released(p);
        Napi::MemoryManagement::AdjustExternalMemory(e, -*size);
        delete size;
      },
      new int64_t(held));
}

Napi::Object read_result_value(Napi::Env env, ReadResult& result) {
  Napi::Object out = Napi::Object::New(env);
  out.Set("bytes", owned_buffer_value(env, result.bytes));
  out.Set("mtimeMs", Napi::Number::New(env, static_cast<double>(result.mtime_ms)));
  out.Set("sha256", Napi::String::New(env, hex(result.sha256, 32)));
  out.Set("digestCached", Napi::Boolean::New(env, result.digest_cached));
  return out;
}

namespace {

// ── Export operations ───────────────────────────────────────────────────────────────────────────

class ReadWorker final : public PromiseWorker {
 public:
  ReadWorker(Napi::Env env, ExportRequest req) : PromiseWorker(env, "resource-plane:read"), req_(std::move(req)) {}
  void Execute() override {
    result_ = read_export_file(req_);
    failure_ = result_.failure;
  }
  Napi::Value Result(Napi::Env env) override { return read_result_value(env, result_); }

 private:
  ExportRequest req_;
  ReadResult result_;
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
    Fd fd = open_root(req_.workdir_fd(), req_.root, O_PATH, req_.resolver, &failure_);
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
  // `render`: set, the body is rendered here (listing_json.h) between `head` and `tail`, and JS gets
  // {rootMissing, entryCount, totalBytes, body} instead of one object per entry.
  ListWorker(Napi::Env env, ExportRequest req, bool render, std::string head, std::string tail)
      : PromiseWorker(env, "resource-plane:list"), req_(std::move(req)), render_(render), head_(std::move(head)), tail_(std::move(tail)) {}
  void Execute() override {
    result_ = list_export_root(req_);
    failure_ = result_.failure;
    if (failure_.failed() || !render_) return;
    for (const ListEntry& e : result_.entries) total_ += e.size;
    if (!render_listing(result_, head_, tail_, &body_)) failure_.set(Code::IoError, ENOMEM);
    count_ = result_.entries.size();
    result_.entries = std::vector<ListEntry>();  // the body is all that is left of them
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object out = Napi::Object::New(env);
    out.Set("rootMissing", Napi::Boolean::New(env, result_.root_missing));
    if (render_) {
      out.Set("entryCount", Napi::Number::New(env, static_cast<double>(count_)));
      out.Set("totalBytes", Napi::Number::New(env, static_cast<double>(total_)));
      out.Set("body", owned_buffer_value(env, body_));
      return out;
    }
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
  bool render_;
  std::string head_, tail_;
  OwnedBuffer body_;
  uint64_t total_ = 0;
  size_t count_ = 0;
};

}  // namespace

namespace {

// read({workdirFd, root, relpath, maxBytes, refuseSymlinks, resolver, cancel?}): one resolution,
// max_bytes refused by fstat, then the first size bytes of that descriptor, hashed.
Napi::Value Read(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  ExportRequest req = request_from(o, Wants::FileWithCeiling);
  req.stop.operation = "read";
  req.stop.cancel = cancel_field(o);
  return queue<ReadWorker>(info.Env(), std::move(req));
}

// readSmall({workdirFd, root, relpath, maxBytes, smallBytes, refuseSymlinks, resolver}): the one
// resolution of a read, synchronously on the calling thread: max_bytes refused by the fstat, and a
// file of at most smallBytes (at most kStreamThresholdBytes, limits.h) read and hashed here:
// {bytes, mtimeMs, sha256, digestCached}. A larger file is not read: {size, file} is returned, its
// fstat size and an OpenFile holding the descriptor (bind_stream.h), for the caller to reserve
// memory and read or stream it from that same descriptor on the pool. A failure throws the same
// error a rejected read carries. Small reads of regular files (the O_PATH probe has refused FIFOs
// and devices) cost less than the pool's round trip.
Napi::Value ReadSmall(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = options_arg(info);
  ExportRequest req = request_from(o, Wants::FileWithCeiling);
  const uint64_t small = byte_count_field(o, "smallBytes");
  if (small > kStreamThresholdBytes) throw Napi::RangeError::New(env, "smallBytes is above the synchronous read limit");
  req.stop.operation = "read";
  Failure failure;
  FileStat st;
  Fd fd = open_export_file(req, OpenFor::Reading, &st, &failure);
  // Refused before a single byte is read: an 8 GiB sparse file costs one fstat.
  if (fd.valid() && st.size > req.max_bytes) failure.set(Code::TooLarge);
  if (failure.failed()) throw to_error(env, failure);
  if (st.size > small) {
    Napi::Object out = Napi::Object::New(env);
    out.Set("size", Napi::Number::New(env, static_cast<double>(st.size)));
    out.Set("file", open_file_value(env, std::move(fd), st.st));
    return out;
  }
  ReadResult result = read_opened(fd.get(), st.st, req.stop);
  if (result.failure.failed()) throw to_error(env, result.failure);
  return read_result_value(env, result);
}

// stat({workdirFd, root, relpath, refuseSymlinks, resolver})
Napi::Value Stat(const Napi::CallbackInfo& info) {
  ExportRequest req = request_from(options_arg(info), Wants::File);
  return queue<StatWorker>(info.Env(), std::move(req));
}

// list({workdirFd, root, refuseSymlinks, resolver, cancel?, timeBudgetMs?, render?: {head, tail}}).
// The budget runs from this call, so time spent queued for a pool thread counts.
Napi::Value List(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  ExportRequest req = request_from(o, Wants::Root);
  req.stop.operation = "listing";
  req.stop.cancel = cancel_field(o);
  budget_field(o, &req.stop);
  Napi::Value render = field(o, "render");
  if (render.IsUndefined()) return queue<ListWorker>(info.Env(), std::move(req), false, std::string(), std::string());
  if (!render.IsObject()) throw Napi::TypeError::New(info.Env(), "render must be {head, tail}");
  Napi::Object r = render.As<Napi::Object>();
  return queue<ListWorker>(info.Env(), std::move(req), true, string_field(r, "head"), string_field(r, "tail"));
}

// checkRoot({workdirFd, root, resolver}) -> exists. No symlink policy: the root itself may be a
// link that stays inside the workdir, whatever the class.
Napi::Value CheckRoot(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  ExportRequest req;
  req.workdir = workdir_field(o);
  req.root = string_field(o, "root");
  req.resolver = resolver_field(o);
  return queue<CheckRootWorker>(info.Env(), std::move(req));
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
  set("fsUncached", s.fs_uncached);
  set("noIdentity", s.no_identity);
  set("belowMin", s.below_min);
  set("bytes", s.bytes);
  return out;
}

// setDigestCacheCapacity(entries): 0 turns the cache off; shrinking evicts at once.
Napi::Value SetDigestCacheCapacity(const Napi::CallbackInfo& info) {
  if (!info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "entries must be a number");
  double d = info[0].As<Napi::Number>().DoubleValue();
  if (!(d >= 0) || d > static_cast<double>(kMaxDigestCacheEntries) || d != static_cast<double>(static_cast<uint64_t>(d)))
    throw Napi::RangeError::New(info.Env(), "entries must be a whole number in [0, 2^24]");
  digest_cache().set_capacity(static_cast<size_t>(d));
  return info.Env().Undefined();
}

// setListingCacheMinBytes(bytes): the smallest file a listing asks the digest cache for (limits.h,
// kListingCachedMinBytes, unless set): for tests and the threshold's measurement.
Napi::Value SetListingCacheMinBytes(const Napi::CallbackInfo& info) {
  if (!info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "bytes must be a number");
  double d = info[0].As<Napi::Number>().DoubleValue();
  if (!(d >= 0) || d > 9007199254740991.0 || d != static_cast<double>(static_cast<uint64_t>(d)))
    throw Napi::RangeError::New(info.Env(), "bytes must be a whole number in [0, 2^53 - 1]");
  set_listing_cache_min_bytes(static_cast<uint64_t>(d));
  return info.Env().Undefined();
}

// exportResolutions() -> how many times this process resolved a served path (read.h): a read does once.
Napi::Value ExportResolutions(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(export_resolutions()));
}

Napi::Value ProbeOpenat2(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), openat2_available());
}

}  // namespace

void InitExportBindings(Napi::Env env, Napi::Object exports) {
  exports.Set("read", Napi::Function::New(env, Read, "read"));
  exports.Set("readSmall", Napi::Function::New(env, ReadSmall, "readSmall"));
  exports.Set("stat", Napi::Function::New(env, Stat, "stat"));
  exports.Set("list", Napi::Function::New(env, List, "list"));
  exports.Set("checkRoot", Napi::Function::New(env, CheckRoot, "checkRoot"));
  exports.Set("probeOpenat2", Napi::Function::New(env, ProbeOpenat2, "probeOpenat2"));
  exports.Set("exportResolutions", Napi::Function::New(env, ExportResolutions, "exportResolutions"));
  exports.Set("digestCacheStats", Napi::Function::New(env, DigestCacheStatsOf, "digestCacheStats"));
  exports.Set("setDigestCacheCapacity", Napi::Function::New(env, SetDigestCacheCapacity, "setDigestCacheCapacity"));
  exports.Set("setListingCacheMinBytes", Napi::Function::New(env, SetListingCacheMinBytes, "setListingCacheMinBytes"));
  exports.Set("defaultDigestCacheEntries", Napi::Number::New(env, static_cast<double>(kDefaultDigestCacheEntries)));
  Napi::Array codes = Napi::Array::New(env);
  // Every failure code, straight from the table, so a test can prove the TS catalogue covers it.
  for (int c = static_cast<int>(Code::NotFound); c <= static_cast<int>(Code::IoError); c++) codes.Set(codes.Length(), code_name(static_cast<Code>(c)));
  exports.Set("codes", codes);
}

}  // namespace rp
