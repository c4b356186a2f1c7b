#!/usr/bin/env bash
# The test suite: install test dependencies, check formatting and lints, run the tests.
#
#   scripts/test.sh          # everything (what CI runs), then a short fuzz run of every target
#   scripts/test.sh --fast   # unit, property, library-level and simulation tests: no
#                            # end-to-end tests of the basalt binary (crates/cli/tests), no fuzz
set -euo pipefail
cd "$(dirname "$0")/.."

fast=0
case "${1:-}" in
    "") ;;
    --fast) fast=1 ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument $1 (try --fast or --help)" >&2; exit 2 ;;
esac

./scripts/install-test-deps.sh
# The build and the tests' clusters need disk; say how much there is, so that a run that
# fails with ENOSPC is recognised for what it is (the debug build takes about 3 GB).
avail_kb=$(df -Pk . | awk 'NR == 2 {print $4}')
echo "== free disk here: $((avail_kb / 1024 / 1024)) GiB"
if [ "$avail_kb" -lt $((6 * 1024 * 1024)) ]; then
    echo "test.sh: warning: under 6 GiB free; the build and tests may fail with ENOSPC" >&2
fi
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
log=$(mktemp)
e2e_dir=$(mktemp -d)
trap 'rm -rf "$log" "$e2e_dir"' EXIT
status=0

# The end-to-end test binaries of crates/cli/tests, longest first (measured), so that the
# lanes below end together. They start their own daemons on ephemeral ports, in their own
# temporary directories, network namespaces and subnets (basalt-testcluster allocates those
# across processes), so two binaries run side by side without sharing anything.
e2e_parallel=(
    cluster_failures ec_multihost s3_clients vm_boot restart objvol
    snapshots io_clients layers_multihost s3_multihost volume_cli auth_multihost nvmf
    ec_pool filesystem nbd_tls bench_existing slow_ops protocol operator_script s3_limits
    nbdinfo data_tls status
)
# Binaries that run alone, after the others: bench_smoke measures speed (a neighbour's load
# would be measured with it) and observability checks latency quantiles against bounds.
e2e_alone=(bench_smoke observability)
# How many end-to-end binaries run at once (each runs its own tests two at a time). Two: the
# rest of the binaries leave a core idle much of the time (waiting on leases, timeouts,
# guests booting), measured at 117% of 200% CPU on average when run one at a time. (Before
# bench_smoke ran alone and at smoke sizes, two lanes made the whole run slower: 33 min
# against ~27.) BASALT_E2E_LANES=1 runs them one at a time.
e2e_lanes="${BASALT_E2E_LANES:-2}"

# The test executables of one build (`cargo test --workspace --no-run`), one per line:
# "e2e|unit NAME DIR EXE" (DIR: the package's directory, where cargo would run it). They are
# run directly: a `cargo test` that selects other packages (`-p basalt-cli`, `--exclude`)
# resolves dependency features differently and rebuilds most of the workspace — measured:
# every test binary built twice, 6.6 GB in target/debug, the build time doubled.
executables="$e2e_dir/executables"

# One end-to-end binary, its output into $e2e_dir/NAME.log; prints one line when it ends.
run_e2e() {
    local name=$1 start=$SECONDS rc=0 exe
    exe=$(awk -v n="$name" '$1 == "e2e" && $2 == n {print $4}' "$executables")
    if [ -z "$exe" ]; then
        echo "no end-to-end test binary $name was built" >"$e2e_dir/$name.log"
        rc=1
    else
        { echo "     Running tests/$name.rs ($exe)"
          (cd crates/cli && "$exe"); } >"$e2e_dir/$name.log" 2>&1 || rc=$?
    fi
    echo "$rc" >"$e2e_dir/$name.rc"
    echo "== e2e $name: $([ "$rc" = 0 ] && echo ok || echo FAILED) in $((SECONDS - start)) s"
}
export -f run_e2e
export e2e_dir executables

# Every test executable but the end-to-end ones, each from its package's directory; fails
# when any of them fails (all run).
run_units() {
    local rc=0 kind name dir exe
    while read -r kind name dir exe; do
        [ "$kind" = unit ] || continue
        echo "     Running $name ($exe)"
        (cd "$dir" && "$exe") || rc=1
    done <"$executables"
    return "$rc"
}

if [ "$fast" = 1 ]; then
    echo "== cargo test (fast tier)"
    { cargo test --workspace --exclude basalt-cli --no-fail-fast \
        && cargo test -p basalt-cli --bins --no-fail-fast; } 2>&1 | tee "$log" || status=$?
else
    echo "== cargo test"
    # Build every test target once; the runs below then only run.
    cargo test --workspace --no-run --message-format=json-render-diagnostics \
        >"$e2e_dir/build.json" || status=$?
    python3 scripts/test-executables.py "$e2e_dir/build.json" >"$executables" || status=$?
    # Unit, property, library-level and simulation tests, the binary's own, then doc tests.
    run_units 2>&1 | tee "$log" || status=1
    cargo test --workspace --doc --no-fail-fast 2>&1 | tee -a "$log" || status=$?
    # Every binary in the list above and every one in the directory: a new test file
    # joins the parallel lanes without an edit here.
    mapfile -t all_e2e < <(ls crates/cli/tests/*.rs | xargs -n1 basename | sed 's/\.rs$//')
    queue=("${e2e_parallel[@]}")
    for name in "${all_e2e[@]}"; do
        case " ${e2e_parallel[*]} ${e2e_alone[*]} " in
            *" $name "*) ;;
            *) queue+=("$name") ;;
        esac
    done
    echo "== end-to-end tests: ${#queue[@]} binaries in $e2e_lanes lanes, then ${e2e_alone[*]} alone"
    printf '%s\n' "${queue[@]}" | xargs -P "$e2e_lanes" -I{} bash -c 'run_e2e {}'
    for name in "${e2e_alone[@]}"; do
        run_e2e "$name"
    done
    for name in "${queue[@]}" "${e2e_alone[@]}"; do
        echo "== output of e2e $name"
        cat "$e2e_dir/$name.log"
    done | tee -a "$log"
    for name in "${queue[@]}" "${e2e_alone[@]}"; do
        [ "$(cat "$e2e_dir/$name.rc")" = 0 ] || status=1
    done
    # Every fuzz target for a few seconds each; its targets count as tests in the closing line.
    echo "== fuzz smoke"
    ./scripts/fuzz-smoke.sh 2>&1 | tee -a "$log" || status=$?
fi
# The tests that did not run, by name with the reason given in their #[ignore = "..."],
# under the test binary that holds them (cargo prints "test NAME ... ignored, REASON").
echo
echo "== skipped (ignored) tests"
awk '
    /^ *Running / { bin = $NF; gsub(/[()]/, "", bin); sub(/^.*\//, "", bin); sub(/-[0-9a-f]+$/, "", bin) }
    /^ *Doc-tests / { bin = "doc-tests " $2 }
    /^test .* \.\.\. ignored/ {
        name = $0; sub(/^test /, "", name); sub(/ \.\.\. ignored.*$/, "", name); reason = $0
        if (sub(/^.*\.\.\. ignored, /, "", reason) == 0) reason = "(no reason given)"
        printf "  %s: %s - %s\n", bin, name, reason
    }
' "$log"
# One closing line for the whole run (cargo prints one per test binary).
passed=$(awk '/^test result:/ {s += $4} /^fuzz: [0-9]+ passed/ {s += $2} END {print s + 0}' "$log")
failed=$(awk '/^test result:/ {s += $6} /^fuzz: [0-9]+ passed/ {s += $4} END {print s + 0}' "$log")
ignored=$(awk '/^test result:/ {s += $8} END {print s + 0}' "$log")
echo
echo "${passed} passed, ${failed} failed, ${ignored} skipped"
exit "$status"
