#!/usr/bin/env bash
# Does the bounded fuzz run catch the bugs it exists for? Plants each known bug (fuzz/mutants/*.patch:
# a lowering that lets an encoded `..` through, a resolver that follows an absolute link, a verifier
# that ignores the audience, a listing that descends a symlinked directory, and a few more) in a
# scratch copy of the repository, rebuilds the addon when the patch touches native/, and runs
# `vitest run test/fuzz` against it ROUNDS times with fresh seeds. Every round must fail.
#
#   fuzz/check-mutants.sh [ROUNDS] [PATCH…]     (default 1 round, every patch)
#
# Exit status 0 when every mutant was caught in every round. A patch that no longer applies (the
# code moved) is reported as such and counts as a failure of this check: refresh the patch.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
rounds="${1:-1}"
shift || true
patches=("$@")
[ ${#patches[@]} -gt 0 ] || patches=("$here"/mutants/*.patch)
status=0

for patch in "${patches[@]}"; do
  name="$(basename "$patch" .patch)"
  scratch="$(mktemp -d /tmp/rp-mutant-XXXXXX)"
  tar -C "$repo" --exclude=./node_modules --exclude=./.git --exclude=./fuzz/native/out --exclude=./fuzz/logs -cf - . | tar -C "$scratch" -xf -
  ln -s "$repo/node_modules" "$scratch/node_modules"
  if ! (cd "$scratch" && patch -s -p1 < "$patch"); then
    echo "$name: DOES NOT APPLY (refresh fuzz/mutants/$name.patch)"
    status=1
    rm -rf "$scratch"
    continue
  fi
  if grep -q '^+++ b/native/' "$patch"; then
    (cd "$scratch" && npx node-gyp rebuild >/dev/null 2>&1) || { echo "$name: the mutant does not build"; status=1; rm -rf "$scratch"; continue; }
  fi
  caught=0
  for ((r = 1; r <= rounds; r++)); do
    log="$scratch/round-$r.log"
    if (cd "$scratch" && FORCE_COLOR=0 npx vitest run test/fuzz --maxWorkers=1 >"$log" 2>&1); then
      echo "$name: round $r MISSED"
    else
      caught=$((caught + 1))
      which="$(grep -oE "fuzz property '[^']+' failed" "$log" | sort -u | sed -E "s/fuzz property '([^']+)' failed/\1/" | paste -sd, -)"
      echo "$name: round $r caught by ${which:-a failing test}"
    fi
  done
  [ "$caught" -eq "$rounds" ] || status=1
  rm -rf "$scratch"
done
exit $status
