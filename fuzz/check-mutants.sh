#!/usr/bin/env bash
# Does the bounded fuzz run catch the bugs it exists for? Plants each known bug (fuzz/mutants/*.patch:
# a lowering that lets an encoded `..` through, a resolver that follows an absolute link, a verifier
# that ignores the audience, an expiry in seconds, a TTL that is not clamped, a redaction that misses
# part of a token, a digest cache keyed on stat data alone, and more) in a scratch copy of the
# repository, rebuilds the addon when the patch touches native/, and runs `vitest run test/fuzz`
# against it ROUNDS times with fresh seeds. Every round must fail.
#
# Each patch names, on a `Caught by:` line before its diff, the test/fuzz file(s) whose properties
# catch it; a round runs those files first (a failure there is a failure of the bounded run, so the
# verdict is the same) and the whole of test/fuzz only when they pass, reporting that the line is
# stale. A caught mutant then costs one property file, not a bounded run: 57 patches fit CI's time.
#
#   fuzz/check-mutants.sh [ROUNDS] [PATCH…]     (default 1 round, every patch)
#
# First the unpatched copy is run once: a property that already fails there (a known open bug)
# proves nothing about a mutant, so it is left out of the mutant runs (and reported). Each mutant
# run stops at its first failing test (--bail=1) and shrinks for at most FUZZ_SHRINK_SECONDS
# (default 5 here): a caught mutant costs a part of one bounded run, a missed one a whole run, so
# the check takes at most (1 + patches x ROUNDS) bounded runs plus an addon build per native patch,
# MUTANT_JOBS (default 2) mutants at a time.
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
export FUZZ_SHRINK_SECONDS="${FUZZ_SHRINK_SECONDS:-5}"
started=$(date +%s)

copy() {
  local scratch
  scratch="$(mktemp -d /tmp/rp-mutant-XXXXXX)"
  tar -C "$repo" --exclude=./node_modules --exclude=./.git --exclude=./fuzz/native/out --exclude=./fuzz/logs -cf - . | tar -C "$scratch" -xf -
  # Hard links (a copy where they cannot be made), not a symlink: a property that runs the real
  # `serve` is confined by Landlock to its own install, and a symlink would lead outside it.
  cp -al "$repo/node_modules" "$scratch/node_modules" 2>/dev/null || cp -a "$repo/node_modules" "$scratch/node_modules"
  echo "$scratch"
}

failing_properties() {
  grep -oE "fuzz property '[^']+' failed" "$1" | sort -u | sed -E "s/fuzz property '([^']+)' failed/\1/" | paste -sd, -
}

# The baseline: which properties fail with no bug planted.
scratch="$(copy)"
(cd "$scratch" && FORCE_COLOR=0 npx vitest run test/fuzz --maxWorkers=1 >"$scratch/baseline.log" 2>&1)
baseline="$(failing_properties "$scratch/baseline.log")"
if grep -qE '(Test Files|Tests) .*failed' "$scratch/baseline.log" && [ -z "$baseline" ]; then
  echo "baseline: a test other than a fuzz property fails with no bug planted; see below"
  tail -40 "$scratch/baseline.log"
  rm -rf "$scratch"
  exit 1
fi
rm -rf "$scratch"
filter=()
if [ -n "$baseline" ]; then
  echo "baseline: ${baseline//,/, } already fail(s) with no bug planted; left out of the mutant runs"
  filter=(-t "^(?!.*\\b(${baseline//,/|})\$)")
fi

# One mutant: plant, build if native, run ROUNDS bounded runs; its lines go to $2, its verdict to $3.
one_mutant() {
  local patch=$1 out=$2 verdict=$3 name scratch caught r log which
  name="$(basename "$patch" .patch)"
  scratch="$(copy)"
  if ! (cd "$scratch" && patch -s -p1 < "$patch"); then
    echo "$name: DOES NOT APPLY (refresh fuzz/mutants/$name.patch)" >"$out"
    echo 1 >"$verdict"
    rm -rf "$scratch"
    return
  fi
  if grep -q '^+++ b/native/' "$patch"; then
    if ! (cd "$scratch" && npx node-gyp rebuild >/dev/null 2>&1); then
      echo "$name: the mutant does not build" >"$out"
      echo 1 >"$verdict"
      rm -rf "$scratch"
      return
    fi
  fi
  caught=0
  : >"$out"
  # shellcheck disable=SC2207
  named=($(sed -n '1,/^--- /s/^Caught by: //p' "$patch"))
  # One bounded run of FILES… in the scratch copy, stopping at the first failure; its output to $log.
  fuzz_run() { (cd "$scratch" && FORCE_COLOR=0 npx vitest run "$@" --maxWorkers=1 --bail=1 "${filter[@]}" >"$log" 2>&1); }
  for ((r = 1; r <= rounds; r++)); do
    log="$scratch/round-$r.log"
    if [ ${#named[@]} -gt 0 ] && ! fuzz_run "${named[@]}"; then
      caught=$((caught + 1))
      which="$(failing_properties "$log")"
      echo "$name: round $r caught by ${which:-a failing test} (${named[*]##*/})" >>"$out"
    elif fuzz_run test/fuzz; then
      echo "$name: round $r MISSED" >>"$out"
    else
      caught=$((caught + 1))
      which="$(failing_properties "$log")"
      if [ ${#named[@]} -gt 0 ]; then
        echo "$name: round $r caught by ${which:-a failing test}, not by its 'Caught by:' files (${named[*]##*/}): correct the patch's line" >>"$out"
      else
        echo "$name: round $r caught by ${which:-a failing test} (the patch names no 'Caught by:' files: add them)" >>"$out"
      fi
    fi
  done
  if [ "$caught" -eq "$rounds" ]; then echo 0 >"$verdict"; else echo 1 >"$verdict"; fi
  rm -rf "$scratch"
}

# MUTANT_JOBS mutants at a time (default 2, one per core: each bounded run uses one worker), so the
# check fits CI's time as the set grows; each mutant's lines are printed in the patches' order.
jobs_max="${MUTANT_JOBS:-2}"
results="$(mktemp -d /tmp/rp-mutant-results-XXXXXX)"
i=0
for patch in "${patches[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  one_mutant "$patch" "$results/$i.out" "$results/$i.verdict" &
  i=$((i + 1))
done
wait
for ((j = 0; j < i; j++)); do
  cat "$results/$j.out"
  [ "$(cat "$results/$j.verdict" 2>/dev/null || echo 1)" = 0 ] || status=1
done
rm -rf "$results"
echo "check-mutants: ${#patches[@]} patch(es) x $rounds round(s) in $(( $(date +%s) - started )) s"
exit $status
