// See bind_sockets.h: options unpacked by name, outcomes converted to plain objects.
#include "bind_sockets.h"

#include <sys/socket.h>

#include <string>

#include "bind_common.h"
#include "codes.h"
#include "sockets.h"

namespace rp {

namespace {

int backlog_field(const Napi::Object& o) {
  Napi::Value v = field(o, "backlog");
  double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
  if (!(d >= 1) || d > 65535 || d != static_cast<double>(static_cast<int>(d)))
    throw Napi::RangeError::New(o.Env(), "backlog must be a whole number in [1, 65535]");
  return static_cast<int>(d);
}

Napi::Object outcome(Napi::Env env, const SocketOutcome& out) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("ok", Napi::Boolean::New(env, out.ok()));
  o.Set("code", Napi::String::New(env, socket_code_name(out.code)));
  o.Set("errno", Napi::Number::New(env, out.err));
  o.Set("detail", Napi::String::New(env, out.err ? errno_text(out.err) : std::string()));
  o.Set("fd", Napi::Number::New(env, out.fd));
  return o;
}

std::string checked_string(const Napi::Object& o, const char* name) {
  std::string s = string_field(o, name);
  if (s.empty() || s.find('\0') != std::string::npos)
    throw Napi::TypeError::New(o.Env(), std::string(name) + " must be a non-empty string without NUL");
  return s;
}

// listenTcp({address: numeric host, port, backlog}) -> {ok, code, errno, detail, fd}
Napi::Value ListenTcp(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  std::string address = checked_string(o, "address");
  Napi::Value p = field(o, "port");
  double port = p.IsNumber() ? p.As<Napi::Number>().DoubleValue() : -1;
  if (!(port >= 0) || port > 65535 || port != static_cast<double>(static_cast<int>(port)))
    throw Napi::RangeError::New(info.Env(), "port must be in [0, 65535]");
  return outcome(info.Env(), listen_tcp(address, static_cast<uint16_t>(port), backlog_field(o)));
}

// listenUnix({path, backlog}) -> {ok, code, errno, detail, fd}
Napi::Value ListenUnix(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  return outcome(info.Env(), listen_unix(checked_string(o, "path"), backlog_field(o)));
}

// socketInfo({fd}) -> {ok, errno, family: 'ipv4'|'ipv6'|'unix'|'other', stream, listening, address, port}
Napi::Value SocketInfoOf(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SocketInfo s = socket_info(fd_field(options_arg(info), "fd"));
  Napi::Object o = Napi::Object::New(env);
  o.Set("ok", Napi::Boolean::New(env, s.ok));
  o.Set("errno", Napi::Number::New(env, s.err));
  o.Set("detail", Napi::String::New(env, s.err ? errno_text(s.err) : std::string()));
  const char* family = s.family == AF_INET ? "ipv4" : s.family == AF_INET6 ? "ipv6" : s.family == AF_UNIX ? "unix" : "other";
  o.Set("family", Napi::String::New(env, family));
  o.Set("stream", Napi::Boolean::New(env, s.stream));
  o.Set("listening", Napi::Boolean::New(env, s.listening));
  o.Set("address", Napi::String::New(env, s.address));
  o.Set("port", Napi::Number::New(env, s.port));
  return o;
}

// setCloexec({fd}) -> errno (0: done)
Napi::Value SetCloexec(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), set_cloexec(fd_field(options_arg(info), "fd")));
}

// probeUnixSocket({path}) -> {state: 'live'|'stale'|'error', pid, errno, detail}
Napi::Value ProbeUnixSocket(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int pid = 0;
  int err = 0;
  int state = probe_unix_socket(checked_string(options_arg(info), "path"), &pid, &err);
  Napi::Object o = Napi::Object::New(env);
  o.Set("state", Napi::String::New(env, state == 1 ? "live" : state == 0 ? "stale" : "error"));
  o.Set("pid", Napi::Number::New(env, pid));
  o.Set("errno", Napi::Number::New(env, err));
  o.Set("detail", Napi::String::New(env, err ? errno_text(err) : std::string()));
  return o;
}

// notifyOpen({target: '/path' | '@abstract'}) -> {ok, code, errno, detail, fd}
Napi::Value NotifyOpen(const Napi::CallbackInfo& info) {
  return outcome(info.Env(), notify_open(checked_string(options_arg(info), "target")));
}

// notifySend({fd, message}) -> {ok, code, errno, detail, fd: -1}
Napi::Value NotifySend(const Napi::CallbackInfo& info) {
  Napi::Object o = options_arg(info);
  return outcome(info.Env(), notify_send(fd_field(o, "fd"), checked_string(o, "message")));
}

}  // namespace

void InitSocketBindings(Napi::Env env, Napi::Object exports) {
  exports.Set("listenTcp", Napi::Function::New(env, ListenTcp, "listenTcp"));
  exports.Set("listenUnix", Napi::Function::New(env, ListenUnix, "listenUnix"));
  exports.Set("socketInfo", Napi::Function::New(env, SocketInfoOf, "socketInfo"));
  exports.Set("setCloexec", Napi::Function::New(env, SetCloexec, "setCloexec"));
  exports.Set("probeUnixSocket", Napi::Function::New(env, ProbeUnixSocket, "probeUnixSocket"));
  exports.Set("notifyOpen", Napi::Function::New(env, NotifyOpen, "notifyOpen"));
  exports.Set("notifySend", Napi::Function::New(env, NotifySend, "notifySend"));
  Napi::Array codes = Napi::Array::New(env);
  for (int c = static_cast<int>(SocketCode::SocketFailed); c <= static_cast<int>(SocketCode::SendFailed); c++)
    codes.Set(codes.Length(), socket_code_name(static_cast<SocketCode>(c)));
  exports.Set("socketCodes", codes);
}

}  // namespace rp
