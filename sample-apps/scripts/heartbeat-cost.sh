#!/usr/bin/env bash
# What pinwatch's heartbeat (PINWATCH_HEARTBEAT, 50 ms) costs on the yield storm (200,000 tasks
# x 10 yield_now, two workers): plain tokio, pinwatch, and pinwatch without the heartbeat,
# run in alternation ROUNDS rounds (default 11); prints each one's median and the median of
# its per-round ratios to plain tokio. Wall-clock ratios here swing +-5 % run to run; the
# instruction counts in docs/blast-radius.md come from cachegrind (detector/examples/yield_storm.rs).
#
#   sample-apps/scripts/heartbeat-cost.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-11}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cargo build --release -q -p pinwatch --example yield_storm
for r in $(seq 1 "$rounds"); do
    echo "round $r/$rounds" >&2
    for mode in plain pinwatch nobeat; do
        ms=$(target/release/examples/yield_storm "$mode" 200000 | sed -n 's/.* in \([0-9.]*\) ms.*/\1/p')
        echo "$r $mode $ms"
    done
done > "$dir/times"
python3 - "$dir/times" <<'PY'
import statistics, sys
by = {}
for r, mode, ms in (l.split() for l in open(sys.argv[1])):
    by.setdefault(mode, {})[r] = float(ms)
base = by["plain"]
print(f"{'runtime':<10} {'median ms':>10} {'ratio to plain':>15}")
for mode, t in by.items():
    ratio = statistics.median(t[r] / base[r] for r in t)
    print(f"{mode:<10} {statistics.median(t.values()):>10.1f} {ratio:>15.3f}")
PY
