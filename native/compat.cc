// Two definitions that keep the committed prebuilds loadable on older systems (README, "Native
// addon and prebuilds": the prebuild needs glibc >= 2.28 and the libstdc++ of GCC 5 or newer).
//
// Debian 12's GCC 12 headers make inline code reference two symbols that only new runtimes
// export. Each one referenced from this binary would become a load-time requirement, and the
// dynamic loader refuses the whole addon on a system without it. Both are defined here instead,
// so the linker binds every reference in this binary to these copies, and native/exports.map
// keeps them (like everything but the two N-API entry points) out of the dynamic symbol table.
// test/native/prebuilds.test.ts reads the committed binaries' requirements and fails if either (or any
// other requirement above the stated floor) comes back.
//
// Only where the problem exists: glibc with GCC 11+'s libstdc++ (_GLIBCXX_RELEASE names the
// GCC major). A source build elsewhere (musl, libc++, an older GCC) compiles nothing from here.
//
// No napi.h here.
#include <new>

#if defined(__GLIBC__) && defined(_GLIBCXX_RELEASE) && _GLIBCXX_RELEASE >= 11

// std::allocator<T>::allocate() in GCC 11+ calls this when asked for more than max_size()
// elements; libstdc++ exports it only from GCC 11 on (GLIBCXX_3.4.29: not on Debian 11, RHEL 8 or
// Ubuntu 20.04). It does exactly what libstdc++'s own does: throw std::bad_array_new_length,
// whose type information is CXXABI_1.3.8 (GCC 4.9).
namespace std {
void __throw_bad_array_new_length() { throw bad_array_new_length(); }
}  // namespace std

// GCC 11+'s <ext/atomicity.h> (shared_ptr's reference counts) reads glibc's
// __libc_single_threaded (GLIBC_2.32) to skip atomic instructions while a process has one
// thread. Here it is always 0, "other threads may exist", which is always a correct answer: the
// counts are then always atomic, as they were before GCC 11. Node never runs single-threaded
// (V8's platform threads start with it), so nothing is lost.
extern "C" {
char __libc_single_threaded = 0;
}

#endif
