#!/usr/bin/env bash
# Shows pinwatch's worker resources in the real tokio-console, and saves a text capture of its
# resources view and its task list: the `deadlock` sample runs with PINWATCH_CONSOLE=on (two workers stuck), and
# tokio-console runs against it in tmux. Run by hand (it installs tokio-console, a few minutes
# the first time); not part of the tests, which speak the console protocol themselves.
#
#   sample-apps/scripts/console-capture.sh [OUT]     (default: sample-apps/scripts/console-resources.txt)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-sample-apps/scripts/console-resources.txt}
port=${PORT:-6670}
session=pinwatch-console-$$

for tool in tmux cargo; do
    command -v "$tool" >/dev/null || { echo "console-capture: $tool is missing (apt-get install -y $tool)" >&2; exit 1; }
done
if ! command -v tokio-console >/dev/null; then
    echo "console-capture: installing tokio-console (cargo install --locked tokio-console)" >&2
    cargo install --locked tokio-console
fi
cargo build --release -p sample-apps --bin deadlock

trap 'tmux kill-session -t "$session" 2>/dev/null || true' EXIT
tmux new-session -d -s "$session" -x 290 -y 12 \
    "PINWATCH_CONSOLE=on TOKIO_CONSOLE_BIND=127.0.0.1:$port PINWATCH_TRACING=off target/release/deadlock --stuck 2; sleep 600"
tmux new-window -t "$session" "tokio-console http://127.0.0.1:$port"

# Wait (bounded) for the console to connect, switch to its resources view (`r`), and wait for the
# stuck workers to show pinned.
capture() { tmux capture-pane -p -t "$session:1"; }
for _ in $(seq 1 60); do
    capture | grep -q "(CONNECTED)" && break
    sleep 0.5
done
tmux send-keys -t "$session:1" r
for _ in $(seq 1 60); do
    if [ "$(capture | grep -c 'pinned=true')" -ge 2 ]; then
        sleep 1.5 # one more refresh, so that pinned_for has moved on from the first report
        capture > "$out"
        # And the task list, where the stuck tasks' ids (the workers' task_id) are.
        tmux send-keys -t "$session:1" t
        sleep 1.5
        capture | sed -n '4,$p' >> "$out"
        echo "console-capture: saved $out" >&2
        cat "$out"
        exit 0
    fi
    sleep 0.5
done
echo "console-capture: the resources view never showed two pinned workers; last screen:" >&2
capture >&2
exit 1
