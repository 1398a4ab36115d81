// Opening a relative path beneath a directory descriptor without ever leaving it.
//
// Two resolvers implement one contract. `Openat2` hands the whole walk to the kernel with
// RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS (plus RESOLVE_NO_SYMLINKS when symlinks are refused).
// `Walk` is the fallback for kernels or seccomp filters without openat2: it opens one component at
// a time with O_NOFOLLOW on descriptors it holds, reads symlinks itself and keeps its own stack of
// ancestors, so `..` is never resolved by the kernel and a renamed directory cannot carry the walk
// outside. Both refuse the same things with the same codes; tests replay one table against both.
#pragma once

#include <string>

#include "codes.h"
#include "fd.h"

namespace rp {

enum class Resolver { Openat2, Walk };

// Components a request path may have; deeper paths name nothing (list.cc stops at the same depth).
constexpr size_t kMaxComponents = 256;
enum class SymlinkPolicy { Follow, Refuse };

// True when openat2 with RESOLVE_BENEATH works in this process (probed once, cached).
bool openat2_available();

// Opens `rel` beneath `dirfd` with `flags` (O_CLOEXEC is always added). `rel` must already be
// lexically clean for request paths: no empty, `.` or `..` component (src/paths.ts refuses those
// before any call); the resolver still survives them, because link targets contain them.
// An absolute `rel` or absolute link target is OutsideRoot. A `rel` of PATH_MAX bytes or more, or
// of more than kMaxComponents components, is NotFound under both resolvers.
Fd open_beneath(int dirfd, const std::string& rel, int flags, SymlinkPolicy policy,
                Resolver resolver, Failure* failure);

// The workdir by its host path, links followed: that path is the launcher's choice, not the capsule's.
Fd open_directory_following_links(const std::string& path, Failure* failure);

// Opens the declared export root beneath the workdir descriptor, as a directory. The root may
// itself be (or pass through) a symlink that stays inside the workdir, so symlinks are followed
// here whatever the containment class: the class only governs what lies beneath the root.
// `workdir_fd` is -1 when the operation holds no workdir (workdir.h): IoError, EBADF.
Fd open_root(int workdir_fd, const std::string& root, int flags, Resolver resolver,
             Failure* failure);

}  // namespace rp
