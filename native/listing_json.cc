// See listing_json.h.
#include "listing_json.h"

#include <cstdio>
#include <cstring>

#include "hex.h"

namespace rp {

namespace {

void append_entry(std::string* out, const ListEntry& e) {
  out->append("{\"path\":");
  append_json_string(out, e.path);
  out->append(",\"size_bytes\":");
  out->append(std::to_string(e.size));
  out->append(",\"mtime_ms\":");
  out->append(std::to_string(e.mtime_ms));
  out->append(",\"sha256\":\"");
  append_hex(out, e.sha256, 32);
  out->append("\"}");
}

}  // namespace

void append_json_string(std::string* out, const std::string& s) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (c < 0x20) {
          char esc[7];
          std::snprintf(esc, sizeof esc, "\\u%04x", c);
          out->append(esc);
        } else {
          out->push_back(static_cast<char>(c));  // valid UTF-8 passes as is, as JSON.stringify leaves it
        }
    }
  }
  out->push_back('"');
}

bool render_listing(const ListResult& list, const std::string& head, const std::string& tail, OwnedBuffer* out) {
  std::string entry;
  size_t total = head.size() + tail.size() + (list.entries.empty() ? 0 : list.entries.size() - 1);
  // Two passes: the exact length first, so the body is one allocation of exactly its size.
  for (const ListEntry& e : list.entries) {
    entry.clear();
    append_entry(&entry, e);
    total += entry.size();
  }
  if (!out->reserve(total)) return false;
  auto put = [&](const std::string& s) {
    std::memcpy(out->spare(), s.data(), s.size());
    out->advance(s.size());
  };
  put(head);
  bool first = true;
  for (const ListEntry& e : list.entries) {
    entry.clear();
    if (!first) entry.push_back(',');
    first = false;
    append_entry(&entry, e);
    put(entry);
  }
  put(tail);
  return true;
}

}  // namespace rp
