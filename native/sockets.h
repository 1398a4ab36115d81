// Listening and notification sockets, syscalls only (no Node-API here: bind_sockets.cc converts).
// The first stage of a confined launch binds its listeners here rather than through libuv, so that
// nothing in that process ever accepts: connections wait in the kernel's backlog across the execve
// and the confined image accepts them (a libuv listener would accept them into the first image,
// which the execve then resets). It also inspects sockets systemd hands over (LISTEN_FDS), probes
// a unix socket file to tell a stale one from a live one, and speaks sd_notify.
#pragma once

#include <cstdint>
#include <string>

namespace rp {

// Stable outcome codes; they cross to JS as strings (socket_code_name) and renaming one is a
// breaking change.
enum class SocketCode {
  Ok = 0,
  SocketFailed,   // socket() refused
  BindFailed,     // bind() refused (EADDRINUSE, EACCES, EADDRNOTAVAIL, ...)
  ListenFailed,   // listen() refused
  NotAListener,   // a handed-over descriptor is not a listening stream socket we can serve
  ConnectFailed,  // connect() refused (the notify socket, or a probe)
  SendFailed,     // send() refused. Keep last: the export table iterates up to it.
};

std::string socket_code_name(SocketCode code);

struct SocketOutcome {
  SocketCode code = SocketCode::Ok;
  int err = 0;
  int fd = -1;
  bool ok() const { return code == SocketCode::Ok; }
};

// A listening TCP socket on a numeric address (v4 or v6), SOCK_CLOEXEC, SO_REUSEADDR as libuv
// sets it (never SO_REUSEPORT: another socket of this user could then share the port). Port 0
// picks an ephemeral one. The caller owns out.fd.
SocketOutcome listen_tcp(const std::string& address, uint16_t port, int backlog);
// A listening unix stream socket at `path`, created mode 0600 (the umask is narrowed for the
// bind alone). The caller owns out.fd and the file.
SocketOutcome listen_unix(const std::string& path, int backlog);

struct SocketInfo {
  bool ok = false;
  int err = 0;
  int family = 0;  // AF_INET, AF_INET6, AF_UNIX
  bool stream = false;
  bool listening = false;
  std::string address;  // numeric host, or the unix path ("" when unnamed or abstract)
  uint16_t port = 0;
};
// What `fd` is, by getsockname and getsockopt; ok false (with err) when it is not a socket.
SocketInfo socket_info(int fd);

// Marks `fd` close-on-exec; 0 or an errno.
int set_cloexec(int fd);

// A unix socket file's state, by a non-blocking connect: 1 live (someone accepts, or its backlog
// is full; *pid is the listener's pid by SO_PEERCRED, or 0), 0 stale (ECONNREFUSED: nobody
// listens), -1 anything else (*err says).
int probe_unix_socket(const std::string& path, int* pid, int* err);

// A datagram socket connected to NOTIFY_SOCKET (`/path` or `@abstract`), SOCK_CLOEXEC. Connected
// now, so that a Landlock domain entered later (which scopes abstract sockets on ABI 6+) still
// lets it send: the kernel remembers the pair was allowed.
SocketOutcome notify_open(const std::string& target);
// One sd_notify datagram ("READY=1", "STOPPING=1", newline-separated assignments).
SocketOutcome notify_send(int fd, const std::string& message);

}  // namespace rp
