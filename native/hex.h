// Lowercase hex, the one spelling of a digest: the bindings' `sha256` strings and the listing's
// JSON both write it from here. Pure.
#pragma once

#include <cstddef>
#include <string>

namespace rp {

inline void append_hex(std::string* out, const unsigned char* bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out->push_back(digits[bytes[i] >> 4]);
    out->push_back(digits[bytes[i] & 15]);
  }
}

inline std::string hex(const unsigned char* bytes, size_t n) {
  std::string out;
  out.reserve(n * 2);
  append_hex(&out, bytes, n);
  return out;
}

}  // namespace rp
