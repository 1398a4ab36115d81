// See sockets.h. Every descriptor is opened close-on-exec and owned by an Fd until handed out.
#include "sockets.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "fd.h"

namespace rp {

namespace {

SocketOutcome failed(SocketCode code, int err) {
  SocketOutcome out;
  out.code = code;
  out.err = err;
  return out;
}

// sockaddr_un for `/path` or `@abstract` (a leading NUL); false when it does not fit.
bool unix_address(const std::string& target, sockaddr_un* sun, socklen_t* len) {
  std::memset(sun, 0, sizeof *sun);
  sun->sun_family = AF_UNIX;
  if (target.empty() || target.size() >= sizeof sun->sun_path) return false;
  std::memcpy(sun->sun_path, target.data(), target.size());
  if (target[0] == '@') sun->sun_path[0] = '\0';
  // An abstract name is exactly its bytes; a path carries its terminating NUL.
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + target.size() + (target[0] == '@' ? 0 : 1));
  return true;
}

}  // namespace

std::string socket_code_name(SocketCode code) {
  switch (code) {
    case SocketCode::Ok: return "OK";
    case SocketCode::SocketFailed: return "SOCKET_FAILED";
    case SocketCode::BindFailed: return "BIND_FAILED";
    case SocketCode::ListenFailed: return "LISTEN_FAILED";
    case SocketCode::NotAListener: return "NOT_A_LISTENER";
    case SocketCode::ConnectFailed: return "CONNECT_FAILED";
    case SocketCode::SendFailed: return "SEND_FAILED";
  }
  return "E_UNKNOWN_" + std::to_string(static_cast<int>(code));
}

SocketOutcome listen_tcp(const std::string& address, uint16_t port, int backlog) {
  sockaddr_storage ss;
  std::memset(&ss, 0, sizeof ss);
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    len = sizeof *v4;
  } else if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    len = sizeof *v6;
  } else {
    return failed(SocketCode::BindFailed, EINVAL);
  }
  Fd fd(socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return failed(SocketCode::SocketFailed, errno);
  int on = 1;
  if (setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0) return failed(SocketCode::SocketFailed, errno);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) return failed(SocketCode::BindFailed, errno);
  if (listen(fd.get(), backlog) != 0) return failed(SocketCode::ListenFailed, errno);
  SocketOutcome out;
  out.fd = fd.release();
  return out;
}

SocketOutcome listen_unix(const std::string& path, int backlog) {
  sockaddr_un sun;
  socklen_t len = 0;
  if (path.empty() || path[0] != '/' || !unix_address(path, &sun, &len)) return failed(SocketCode::BindFailed, ENAMETOOLONG);
  Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return failed(SocketCode::SocketFailed, errno);
  // No window before a chmod: the file is born 0600 (the first stage runs nothing else meanwhile).
  mode_t previous = umask(0177);
  int r = bind(fd.get(), reinterpret_cast<sockaddr*>(&sun), len);
  int err = errno;
  umask(previous);
  if (r != 0) return failed(SocketCode::BindFailed, err);
  if (listen(fd.get(), backlog) != 0) {
    err = errno;
    unlink(path.c_str());
    return failed(SocketCode::ListenFailed, err);
  }
  SocketOutcome out;
  out.fd = fd.release();
  return out;
}

SocketInfo socket_info(int fd) {
  SocketInfo info;
  sockaddr_storage ss;
  socklen_t len = sizeof ss;
  std::memset(&ss, 0, sizeof ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    info.err = errno;
    return info;
  }
  int type = 0;
  int accepting = 0;
  socklen_t optlen = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &optlen) != 0) {
    info.err = errno;
    return info;
  }
  optlen = sizeof accepting;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &optlen) != 0) {
    info.err = errno;
    return info;
  }
  info.ok = true;
  info.family = ss.ss_family;
  info.stream = type == SOCK_STREAM;
  info.listening = accepting != 0;
  char text[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    info.address = text;
    info.port = ntohs(v4->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    info.address = text;
    info.port = ntohs(v6->sin6_port);
  } else if (ss.ss_family == AF_UNIX) {
    auto* sun = reinterpret_cast<sockaddr_un*>(&ss);
    size_t n = len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
    if (n > 0 && sun->sun_path[0] != '\0') info.address.assign(sun->sun_path, strnlen(sun->sun_path, n));
  }
  return info;
}

int set_cloexec(int fd) {
  int flags = fcntl(fd, F_GETFD);
  if (flags < 0) return errno;
  if (!(flags & FD_CLOEXEC) && fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) return errno;
  return 0;
}

int probe_unix_socket(const std::string& path, int* pid, int* err) {
  *pid = 0;
  *err = 0;
  sockaddr_un sun;
  socklen_t len = 0;
  if (path.empty() || path[0] != '/' || !unix_address(path, &sun, &len)) {
    *err = ENAMETOOLONG;
    return -1;
  }
  // Non-blocking: a live listener with a full backlog answers EAGAIN instead of holding us.
  Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    *err = errno;
    return -1;
  }
  if (retry_eintr([&] { return connect(fd.get(), reinterpret_cast<sockaddr*>(&sun), len); }) == 0) {
    ucred cred;
    socklen_t clen = sizeof cred;
    if (getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0) *pid = cred.pid;
    return 1;
  }
  if (errno == EAGAIN) return 1;
  if (errno == ECONNREFUSED) return 0;
  *err = errno;
  return -1;
}

SocketOutcome notify_open(const std::string& target) {
  sockaddr_un sun;
  socklen_t len = 0;
  if ((target[0] != '/' && target[0] != '@') || !unix_address(target, &sun, &len)) return failed(SocketCode::ConnectFailed, EINVAL);
  Fd fd(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return failed(SocketCode::SocketFailed, errno);
  if (retry_eintr([&] { return connect(fd.get(), reinterpret_cast<sockaddr*>(&sun), len); }) != 0)
    return failed(SocketCode::ConnectFailed, errno);
  SocketOutcome out;
  out.fd = fd.release();
  return out;
}

SocketOutcome notify_send(int fd, const std::string& message) {
  ssize_t n = retry_eintr([&] { return send(fd, message.data(), message.size(), MSG_NOSIGNAL); });
  if (n < 0) return failed(SocketCode::SendFailed, errno);
  if (static_cast<size_t>(n) != message.size()) return failed(SocketCode::SendFailed, EMSGSIZE);
  return SocketOutcome();
}

}  // namespace rp
