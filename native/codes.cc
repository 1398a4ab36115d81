// The code table and errno text. No Node-API here: bind_common.cc turns these into JS errors.
#include "codes.h"

#include <cctype>
#include <cstring>

namespace rp {

std::string code_name(Code code) {
  switch (code) {
    case Code::Ok: return "OK";
    case Code::NotFound: return "NOT_FOUND";
    case Code::OutsideRoot: return "OUTSIDE_ROOT";
    case Code::SymlinkRefused: return "SYMLINK_REFUSED";
    case Code::NotARegularFile: return "NOT_A_REGULAR_FILE";
    case Code::TooLarge: return "TOO_LARGE";
    case Code::UnsafeInbox: return "UNSAFE_INBOX";
    case Code::Cancelled: return "CANCELLED";
    case Code::TimeBudget: return "TIME_BUDGET";
    case Code::FileChanged: return "FILE_CHANGED";
    case Code::IoError: return "IO_ERROR";
  }
  return "E_UNKNOWN_" + std::to_string(static_cast<int>(code));
}

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r may return a static string rather than filling buf.
  const char* text = strerror_r(err, buf, sizeof buf);
  std::string out = text ? text : "unknown error";
  if (!out.empty()) out[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(out[0])));
  return out;
}

void Failure::set(Code c, int e) {
  code = c;
  err = e;
  detail = e ? errno_text(e) : std::string();
}

}  // namespace rp
