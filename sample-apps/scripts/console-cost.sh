#!/usr/bin/env bash
# What the `console` cargo feature costs on the yield storm (200,000 tasks x 10 yield_now, two
# workers): the storm built without the feature and with it, in five configurations run in
# alternation, ROUNDS rounds (default 11); prints each configuration's median and the median of
# its per-round ratios to plain tokio built without the feature. Wall-clock ratios here swing
# +-5 % run to run; the instruction counts in docs/console.md come from cachegrind (see
# detector/examples/yield_storm.rs).
#
#   sample-apps/scripts/console-cost.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-11}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cargo build --release -p pinwatch --example yield_storm
cp target/release/examples/yield_storm "$dir/without"
cargo build --release -p pinwatch --features console --example yield_storm
cp target/release/examples/yield_storm "$dir/with"

configs=("without plain" "without pinwatch" "with plain" "with pinwatch" "with console")
for r in $(seq 1 "$rounds"); do
    echo "round $r/$rounds" >&2
    for c in "${configs[@]}"; do
        set -- $c
        # Its own port each time: the console server binds TOKIO_CONSOLE_BIND.
        ms=$(TOKIO_CONSOLE_BIND=127.0.0.1:0 "$dir/$1" "$2" 200000 | sed -n 's/.* in \([0-9.]*\) ms.*/\1/p')
        echo "$r $1-feature $2 $ms"
    done
done > "$dir/times"
python3 - "$dir/times" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for r, feat, mode, ms in rows:
    by.setdefault((feat, mode), {})[r] = float(ms)
base = by[("without-feature", "plain")]
print(f"{'build':<16} {'runtime':<9} {'median ms':>10} {'ratio':>7}")
for (feat, mode), t in by.items():
    ratio = statistics.median(t[r] / base[r] for r in t)
    print(f"{feat:<16} {mode:<9} {statistics.median(t.values()):>10.1f} {ratio:>7.3f}")
PY
