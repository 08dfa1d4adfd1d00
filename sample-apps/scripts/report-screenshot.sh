#!/usr/bin/env bash
# docs/report.md's `pinwatch report` screenshot: runs `tour` (which writes the report of its run),
# then headless Chromium (Debian's `chromium`) renders the page from disk into a PNG.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-sample-apps/scripts/report-tour.png}
page=$(mktemp -d)/tour.html
cargo run --release -q -p sample-apps --bin tour -- --report "$page" | grep '^report:'
profile=$(mktemp -d)
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1500 \
  --user-data-dir="$profile" --screenshot="$out" "file://$page#pin=3" 2>/dev/null
echo "screenshot: $out"
