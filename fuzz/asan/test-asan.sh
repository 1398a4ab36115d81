#!/usr/bin/env bash
# `npm run test:asan`: the whole vitest suite against an ASan/UBSan build of the addon.
#
#   fuzz/asan/test-asan.sh [vitest arguments…]     (default: the whole suite)
#
# Builds native/ with clang 14, -fsanitize=address,undefined, into build-asan/ (a copy of binding.gyp
# and native/ built by node-gyp there: prebuilds/ and build/Release, which the normal suite loads,
# are never touched), then runs vitest with that build loaded through RESOURCE_PLANE_ADDON (honoured
# by src/addon/load.ts) and the ASan runtime preloaded into every node process (LD_PRELOAD; the addon is
# a shared object, so the runtime must be in the process before it). Leak detection is off: node
# itself is not instrumented and keeps memory until exit by design. A sanitizer report aborts the
# process that hit it, which fails the test; the script also fails if any report was printed.
#
# Installs clang and libclang-rt-14-dev with apt-get when they are missing.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"

if ! command -v clang++ >/dev/null 2>&1 || [ ! -f "$(clang -print-file-name=libclang_rt.asan-x86_64.so 2>/dev/null)" ]; then
  echo "== installing clang and libclang-rt-14-dev" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y clang libclang-rt-14-dev
fi
runtime="$(clang -print-file-name=libclang_rt.asan-x86_64.so)"
[ -f "$runtime" ] || { echo "no ASan runtime at '$runtime'" >&2; exit 1; }

echo "== building the addon with ASan and UBSan into build-asan/" >&2
pkg="$repo/build-asan"
mkdir -p "$pkg"
rm -rf "$pkg/native"
cp -r "$repo/native" "$pkg/native"
cp "$repo/binding.gyp" "$pkg/binding.gyp"
ln -sfn "$repo/node_modules" "$pkg/node_modules"
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1 -shared-libasan"
(cd "$pkg" && CC=clang CXX=clang++ LINK=clang++ CFLAGS="$sanitize" CXXFLAGS="$sanitize" LDFLAGS="$sanitize" \
  npx node-gyp rebuild >"$pkg/build.log" 2>&1) || { cat "$pkg/build.log" >&2; exit 1; }
addon="$pkg/build/Release/resource_plane.node"
symbols="$(nm -D "$addon")"
grep -q __asan_report <<<"$symbols" && grep -q __ubsan_handle <<<"$symbols" \
  || { echo "the build in $addon is not instrumented" >&2; exit 1; }

# A confined session (Landlock) re-executes itself and cannot read /proc/self/environ, where the
# runtime looks for ASAN_OPTIONS: it would start with the defaults, run LeakSanitizer at exit and
# fail for want of /proc/<pid>/task. So the options are also compiled in, through the runtime's
# __asan_default_options hook, in a library preloaded before the runtime (hence
# verify_asan_link_order=0; the interceptors still come from the runtime, which this library does
# not shadow). Only log_path needs the environment: a confined process reports on stderr instead.
defaults="verify_asan_link_order=0:detect_leaks=0:handle_segv=0:allow_user_segv_handler=1:detect_odr_violation=0:abort_on_error=1"
printf '%s\n' \
  "const char *__asan_default_options(void) { return \"$defaults\"; }" \
  'const char *__ubsan_default_options(void) { return "halt_on_error=1:print_stacktrace=1"; }' \
  >"$pkg/default-options.c"
clang -shared -fPIC -O1 -o "$pkg/default-options.so" "$pkg/default-options.c"

export RESOURCE_PLANE_ADDON="$addon"
# Tests that cannot hold under a preloaded sanitizer runtime skip, naming why, when this is set.
export RESOURCE_PLANE_ASAN=1
export LD_PRELOAD="$pkg/default-options.so:$runtime"
# handle_segv=0: node's own SIGSEGV handling (and a test that expects a child to die of SIGSEGV on
# no-access key memory) must see the real signal.
export ASAN_OPTIONS="$defaults:log_path=$pkg/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$pkg/ubsan"
rm -f "$pkg"/asan.* "$pkg"/ubsan.*

# The addon really loads, instrumented, under the preloaded runtime.
node -e 'const b = require(process.env.RESOURCE_PLANE_ADDON); if (!Array.isArray(b.codes)) process.exit(1)'

echo "== vitest with the ASan/UBSan addon ($addon)" >&2
started=$(date +%s)
set +e
# One file at a time: the sanitizer runtime makes every process slower, and the suite's bounds were
# set for one file per core.
npx vitest run --maxWorkers=1 "$@" 2>&1 | tee "$pkg/vitest.log"
status=${PIPESTATUS[0]}
set -e
echo "== the ASan suite took $(( $(date +%s) - started ))s" >&2
if ls "$pkg"/asan.* "$pkg"/ubsan.* >/dev/null 2>&1; then
  echo "== sanitizer reports:" >&2
  cat "$pkg"/asan.* "$pkg"/ubsan.* >&2 2>/dev/null || true
  exit 1
fi
# A confined process reports on its stderr, which a test may have printed.
if grep -aE "ERROR: (Address|Undefined|Leak)Sanitizer|runtime error: " "$pkg/vitest.log" >&2; then
  echo "== a sanitizer report appeared in the output above" >&2
  exit 1
fi
exit $status
