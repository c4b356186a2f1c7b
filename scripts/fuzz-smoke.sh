#!/usr/bin/env bash
# Fuzz smoke run: every cargo-fuzz target in fuzz/ for a short while (FUZZ_SECONDS each,
# default 15; FUZZ_JOBS of them at once, default 2), with libFuzzer and AddressSanitizer as
# `cargo fuzz run` sets them up.
# Fails if any target crashes, hangs or cannot be built. Needs the nightly toolchain and
# cargo-fuzz (scripts/install-test-deps.sh installs both).
#
# Not a search for deep bugs: a smoke run catches a decoder that panics on input that is
# easy to reach, and a target that no longer builds. Longer runs: `cargo +nightly fuzz run T`.
# The corpus grows in fuzz/corpus/T and a crashing input is kept in fuzz/artifacts/T
# (both ignored by git).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds="${FUZZ_SECONDS:-15}"
# A single input slower than this counts as a hang (libFuzzer's default is 20 minutes).
input_timeout_secs=10

echo "== cargo fuzz build"
cargo +nightly fuzz build
mapfile -t targets < <(cargo +nightly fuzz list)
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz-smoke: no fuzz targets found" >&2
  exit 1
fi

# Two targets at a time: each libFuzzer run is one process on one core.
jobs="${FUZZ_JOBS:-2}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# One target: its outcome line into $dir/T.result, its report (on failure) into $dir/T.report.
run_target() {
  local target=$1 start=$SECONDS log="$dir/$1.log"
  if cargo +nightly fuzz run "$target" -- \
    -max_total_time="$seconds" -timeout="$input_timeout_secs" >"$log" 2>&1; then
    runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log")
    echo "fuzz ${target}: ok, ${runs:-?} inputs in $((SECONDS - start)) s" >"$dir/$target.result"
  else
    echo "fuzz ${target}: FAILED after $((SECONDS - start)) s" >"$dir/$target.result"
    # The report from the panic or sanitizer message on: the stack, where the input was
    # saved and how to reproduce it. A build or setup error has neither, so its tail.
    if grep -qE 'panicked at|ERROR: ' "$log"; then
      awk '/panicked at|ERROR: /{on=1} on' "$log" | head -n 120 >"$dir/$target.report"
    else
      tail -n 40 "$log" >"$dir/$target.report"
    fi
  fi
}

for target in "${targets[@]}"; do
  # Bound: at most $jobs runs at once; each ends after its max_total_time.
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
    wait -n || true
  done
  run_target "$target" &
done
wait

passed=0
failed=0
for target in "${targets[@]}"; do
  cat "$dir/$target.result"
  if grep -q ': ok,' "$dir/$target.result"; then
    passed=$((passed + 1))
  else
    [ -f "$dir/$target.report" ] && cat "$dir/$target.report"
    failed=$((failed + 1))
  fi
done

echo "fuzz: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
