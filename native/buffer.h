// A malloc'd byte buffer with exactly one owner. A read fills one of these and hands it to Node
// with release(): the Node Buffer's finalizer then frees it, so the bytes are never copied and
// every early return in between frees them by leaving scope, with no free() written by hand.
// malloc rather than new[] because ownership ends in a C finalizer that calls std::free.
// Or it borrows memory the caller owns (a reused JS Buffer, kept alive by the caller for the whole
// read): then it never grows past that memory and never frees it.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace rp {

class OwnedBuffer {
 public:
  OwnedBuffer() = default;
  OwnedBuffer(const OwnedBuffer&) = delete;
  OwnedBuffer& operator=(const OwnedBuffer&) = delete;
  OwnedBuffer(OwnedBuffer&& other) noexcept
      : data_(other.data_), size_(other.size_), capacity_(other.capacity_), borrowed_(other.borrowed_) {
    other.data_ = nullptr;
    other.size_ = other.capacity_ = 0;
    other.borrowed_ = false;
  }
  OwnedBuffer& operator=(OwnedBuffer&& other) noexcept {
    if (this != &other) {
      if (!borrowed_) std::free(data_);
      data_ = other.data_;
      size_ = other.size_;
      capacity_ = other.capacity_;
      borrowed_ = other.borrowed_;
      other.data_ = nullptr;
      other.size_ = other.capacity_ = 0;
      other.borrowed_ = false;
    }
    return *this;
  }
  ~OwnedBuffer() {
    if (!borrowed_) std::free(data_);
  }

  // Fills `capacity` bytes at `data` instead of an allocation of its own (an empty buffer only).
  void borrow(unsigned char* data, size_t capacity) {
    if (!borrowed_) std::free(data_);
    data_ = data;
    size_ = 0;
    capacity_ = capacity;
    borrowed_ = true;
  }
  bool borrowed() const { return borrowed_; }

  // Grows the allocation to at least `capacity` bytes (never shrinks, keeps the contents). False,
  // with the buffer unchanged, when memory runs out.
  bool reserve(size_t capacity) {
    if (capacity <= capacity_ && data_) return true;
    if (borrowed_) return false;  // the caller's memory is all there is
    if (capacity == 0) capacity = 1;  // a zero-byte file still gets a real pointer to hand over
    void* grown = std::realloc(data_, capacity);
    if (!grown) return false;
    data_ = static_cast<unsigned char*>(grown);
    capacity_ = capacity;
    return true;
  }

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  // The unfilled tail, for a read(2) to land in; advance() then counts what it wrote.
  unsigned char* spare() { return data_ + size_; }
  size_t spare_size() const { return capacity_ - size_; }
  void advance(size_t n) { size_ += n; }

  // Gives up ownership: the caller frees the pointer with std::free (free_released below). Never
  // called on a borrowed buffer (its owner already has it).
  unsigned char* release() {
    unsigned char* p = data_;
    data_ = nullptr;
    size_ = capacity_ = 0;
    return p;
  }
  static void free_released(unsigned char* p) { std::free(p); }

 private:
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
  bool borrowed_ = false;
};

// Gives the whole pages inside [data, data + length) back to the system (MADV_DONTNEED): the memory
// stays mapped and reads back as zeros, so resident memory drops at once, with no collection. Only
// for memory the caller owns exclusively and no write still uses (an idle pooled buffer). Returns
// the bytes released.
inline size_t release_pages(unsigned char* data, size_t length) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + length) & ~(page - 1);
  if (end <= begin) return 0;
  if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) != 0) return 0;
  return end - begin;
}

}  // namespace rp
