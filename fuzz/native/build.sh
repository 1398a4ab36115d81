#!/usr/bin/env bash
# Native fuzzing with libFuzzer under ASan and UBSan (`npm run fuzz:native`).
#
#   fuzz/native/build.sh build               build every target into fuzz/native/out/
#   fuzz/native/build.sh run [SECONDS] [T…]  build, then run each target (default: all) for SECONDS
#                                            (default $FUZZ_SECONDS or 60), one after another
#
# The targets link native/'s syscall files (resolve.cc, read.cc, list.cc, codes.cc, digest_cache.cc,
# sha256.cc, lease.cc: no napi.h) with fuzz/native/fixture.cc, which builds a fixed tree with escaping links.
# Each run starts from the committed seed corpus fuzz/native/corpus/<target>/ and grows a working
# corpus in fuzz/native/out/corpus-<target>/ (not committed); a crash lands in fuzz/native/out/ as
# crash-<sha1>, and `fuzz/native/out/<target> <that file>` replays it.
#
# Needs clang 14 with libclang-rt-14-dev (libFuzzer and the sanitizer runtimes) and OpenSSL's
# headers (libssl-dev): installed with apt-get when missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$here/out"
targets=(resolve_fuzzer read_fuzzer list_fuzzer)

ensure_toolchain() {
  local missing=()
  command -v clang++ >/dev/null 2>&1 || missing+=(clang)
  [ -n "$(find /usr/lib/llvm-14/lib/clang -name 'libclang_rt.fuzzer-x86_64.a' 2>/dev/null | head -1)" ] || missing+=(libclang-rt-14-dev)
  [ -f /usr/include/openssl/evp.h ] || missing+=(libssl-dev)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y clang libclang-rt-14-dev libssl-dev
  fi
}

build() {
  ensure_toolchain
  mkdir -p "$out"
  local common=(-g -O1 -std=c++17 -D_GNU_SOURCE -fno-omit-frame-pointer
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
    -I "$repo/native" -I "$here")
  local sources=("$repo"/native/{resolve,read,list,codes,digest_cache,sha256,lease}.cc "$here/fixture.cc")
  for t in "${targets[@]}"; do
    echo "== build $t" >&2
    clang++ "${common[@]}" "${sources[@]}" "$here/$t.cc" -lcrypto -o "$out/$t"
  done
}

run() {
  local seconds="${1:-${FUZZ_SECONDS:-60}}"
  shift || true
  local which=("$@")
  [ ${#which[@]} -gt 0 ] || which=("${targets[@]}")
  build
  for t in "${which[@]}"; do
    local corpus="$out/corpus-$t"
    mkdir -p "$corpus"
    local dict=()
    [ -f "$here/$t.dict" ] && dict=(-dict="$here/$t.dict")
    echo "== run $t for ${seconds}s" >&2
    # One process at a time; crashes and the final stats go to the log beside the binary.
    (cd "$out" && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
      "./$t" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$out/" "${dict[@]}" "$corpus" "$here/corpus/$t") 2>&1 | tee "$out/$t.log" | grep -E '^#[0-9]+.*(pulse|DONE)|ERROR|invariant|SUMMARY|stat::' || true
    if grep -qE 'ERROR: (libFuzzer|AddressSanitizer|UndefinedBehaviorSanitizer)|invariant violated|runtime error' "$out/$t.log"; then
      echo "== $t FOUND A FAILURE: see $out/$t.log and $out/crash-*" >&2
      exit 1
    fi
  done
}

case "${1:-run}" in
  build) build ;;
  run) shift || true; run "$@" ;;
  *) echo "usage: $0 build | run [SECONDS] [TARGET…]" >&2; exit 2 ;;
esac
