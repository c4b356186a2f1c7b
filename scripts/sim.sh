#!/usr/bin/env bash
# Run the deterministic cluster simulation (crates/sim) for many seeds, or replay one.
#
#   scripts/sim.sh --seeds 5000            # seeds 1000000..1004999 (a release build)
#   scripts/sim.sh --seeds 500 --first 7   # seeds 7..506
#   scripts/sim.sh --seed 1000123 [--log]  # replay one seed; --log prints the cluster's log
#                                          # (--log debug for more)
#   scripts/sim.sh --jitter --seeds 1000   # only latency/jitter faults: no OSD may go down
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
seeds=2000
first=1000000
seed=""
log=""
while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) seeds="$2"; shift 2 ;;
        --first) first="$2"; shift 2 ;;
        --seed) seed="$2"; shift 2 ;;
        --jitter) export BASALT_SIM_JITTER=1; shift ;;
        --log)
            if [ $# -gt 1 ] && [[ "$2" =~ ^(info|debug|trace)$ ]]; then log="$2"; shift 2
            else log=1; shift; fi ;;
        -h|--help) usage 0 ;;
        *) echo "sim.sh: unknown argument $1" >&2; usage 2 ;;
    esac
done
[[ "$seeds" =~ ^[0-9]+$ && "$first" =~ ^[0-9]+$ ]] || { echo "sim.sh: --seeds and --first take numbers" >&2; exit 2; }
export BASALT_SIM_SEEDS="$seeds" BASALT_SIM_FIRST="$first"
[ -n "$seed" ] && export BASALT_SIM_SEED="$seed"
[ -n "$log" ] && export BASALT_SIM_LOG="$log"
exec cargo test --release -p basalt-sim --test sim many_seeds -- --ignored --nocapture
