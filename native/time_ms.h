// Time stamps as the wire carries them: integer milliseconds since the Unix epoch.
//
// A file's timestamp is whatever the filesystem holds, and the agent chooses it (utimensat takes
// any 64-bit tv_sec that tmpfs and friends will store): tv_sec = 2^62 times 1000 overflows int64,
// which is undefined behaviour and, in practice, wrapped to 0. So the conversion saturates. The
// bound is +/-(2^53 - 1) ms (about +/-285,616 years): the largest magnitude a JS number, and so the
// listing's JSON and the x-murmur-mtime-ms header, carries exactly. Anything beyond is reported as
// that bound, never rounded, wrapped or zero. Within it the result is floor(time in ms), so
// -0.5 s is -500 and -1.000000001 s is -1001.
#pragma once

#include <cstdint>
#include <ctime>

namespace rp {

constexpr int64_t kMaxExactMs = (int64_t{1} << 53) - 1;  // Number.MAX_SAFE_INTEGER

inline int64_t epoch_ms(const struct timespec& ts) {
  // Compare seconds before multiplying, so the multiplication itself can never overflow.
  constexpr int64_t kMaxSec = kMaxExactMs / 1000;
  const int64_t sec = static_cast<int64_t>(ts.tv_sec);
  if (sec > kMaxSec) return kMaxExactMs;
  if (sec < -kMaxSec - 1) return -kMaxExactMs;
  // tv_nsec is [0, 1e9) from the kernel; clamp anyway rather than trust it.
  int64_t nsec = static_cast<int64_t>(ts.tv_nsec);
  if (nsec < 0) nsec = 0;
  if (nsec > 999999999) nsec = 999999999;
  const int64_t ms = sec * 1000 + nsec / 1000000;  // |sec * 1000| <= 2^53 + 1000: no overflow
  if (ms > kMaxExactMs) return kMaxExactMs;
  if (ms < -kMaxExactMs) return -kMaxExactMs;
  return ms;
}

}  // namespace rp
