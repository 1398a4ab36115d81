// A listing's body, rendered where the entries are (no JS object per entry): `head`, then each
// entry as {"path","size_bytes","mtime_ms","sha256"} joined by commas, then `tail`, byte for byte what
// JSON.stringify gives for the same values (paths are valid UTF-8; see list.h). Pure: no syscalls.
#pragma once

#include <string>

#include "buffer.h"
#include "list.h"

namespace rp {

// Appends `s` as a JSON string literal, escaped as JSON.stringify escapes (", \, the C0 controls).
void append_json_string(std::string* out, const std::string& s);

// The body, in a buffer of exactly its length; false when memory runs out.
bool render_listing(const ListResult& list, const std::string& head, const std::string& tail, OwnedBuffer* out);

}  // namespace rp
