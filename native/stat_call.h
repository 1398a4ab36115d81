// fstat and fstatat as direct system calls, for the prebuild's glibc floor (README, "Native addon
// and prebuilds").
//
// Built against glibc >= 2.33, a call to fstat()/fstatat() binds to fstat64@GLIBC_2.33 and
// fstatat64@GLIBC_2.33 (before 2.33 they were inline wrappers around __fxstat64@GLIBC_2.2.5), so
// the committed binary would refuse to load on any older glibc. On x86_64 and aarch64, glibc's
// fstat is nothing but the fstat / newfstatat system call into the caller's struct stat: the
// kernel's struct stat there is the layout glibc exposes (checked below), so calling the system
// call ourselves gives the same result and errno and needs only syscall@GLIBC_2.2.5 (2.17 on
// aarch64). Elsewhere (another architecture, x32 or ILP32, musl), where only a source build exists
// and a floor means nothing, these are the libc calls.
//
// No napi.h here: this is syscall code.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace rp {

#if defined(__GLIBC__) && (defined(__x86_64__) || defined(__aarch64__)) && !defined(__ILP32__)
// The kernel's struct stat: 144 bytes on x86_64 (arch/x86/include/uapi/asm/stat.h), 128 on
// aarch64 (include/uapi/asm-generic/stat.h). glibc's must match or the call writes past it.
#if defined(__x86_64__)
static_assert(sizeof(struct stat) == 144 && offsetof(struct stat, st_mode) == 24,
              "glibc's struct stat is not the kernel's on x86_64");
#else
static_assert(sizeof(struct stat) == 128 && offsetof(struct stat, st_mode) == 16,
              "glibc's struct stat is not the kernel's on aarch64");
#endif
static_assert(offsetof(struct stat, st_ino) == 8 && offsetof(struct stat, st_size) == 48 &&
                  offsetof(struct stat, st_mtim) == 88 && offsetof(struct stat, st_ctim) == 104,
              "glibc's struct stat is not the kernel's");

// fstat(2): 0, or -1 with errno set.
inline int stat_fd(int fd, struct stat* st) { return static_cast<int>(syscall(SYS_fstat, fd, st)); }

// fstatat(2) (newfstatat on 64-bit kernels): 0, or -1 with errno set.
inline int stat_at(int dirfd, const char* path, struct stat* st, int flags) {
  return static_cast<int>(syscall(SYS_newfstatat, dirfd, path, st, flags));
}
#else
inline int stat_fd(int fd, struct stat* st) { return ::fstat(fd, st); }
inline int stat_at(int dirfd, const char* path, struct stat* st, int flags) {
  return ::fstatat(dirfd, path, st, flags);
}
#endif

// statx(2) on a descriptor, with the kernel's own layout (include/uapi/linux/stat.h, fixed ABI):
// declared here so that neither glibc's wrapper (2.28) nor a build host's header age decides which
// fields exist. Only what the digest cache's key needs is named.
struct StatxTimestamp {
  int64_t tv_sec;
  uint32_t tv_nsec;
  int32_t reserved;
};
struct KernelStatx {
  uint32_t mask, blksize;
  uint64_t attributes;
  uint32_t nlink, uid, gid;
  uint16_t mode, spare0;
  uint64_t ino, size, blocks, attributes_mask;
  StatxTimestamp atime, btime, ctime, mtime;
  uint32_t rdev_major, rdev_minor, dev_major, dev_minor;
  uint64_t mnt_id;
  uint32_t dio_mem_align, dio_offset_align;
  uint64_t spare3[12];
};
static_assert(sizeof(KernelStatx) == 256 && offsetof(KernelStatx, btime) == 0x50 &&
                  offsetof(KernelStatx, dev_major) == 0x88 && offsetof(KernelStatx, mnt_id) == 0x90,
              "KernelStatx is not the kernel's struct statx");
constexpr uint32_t kStatxBasicStats = 0x7ffU;
constexpr uint32_t kStatxBtime = 0x800U;
// A mount id never reused while the system runs (Linux 6.8); the older STATX_MNT_ID (0x1000) is
// reused once its mount is gone, so it cannot tell a remounted image from the one before.
constexpr uint32_t kStatxMntIdUnique = 0x4000U;

// statx(fd, "", AT_EMPTY_PATH, mask): 0, or -1 with errno set (ENOSYS before Linux 4.11).
inline int statx_fd(int fd, uint32_t mask, KernelStatx* out) {
#if defined(SYS_statx)
  return static_cast<int>(syscall(SYS_statx, fd, "", AT_EMPTY_PATH, mask, out));
#else
  (void)fd, (void)mask, (void)out;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace rp
