#!/usr/bin/env bash
# Every test of the workspace, on a fresh Debian machine with only Rust on it: installs what the
# end-to-end tests talk to when it is missing (a real Prometheus and promtool, Alertmanager and
# amtool, setpriv, headless Chromium, kubernetes-validate, Go for `go tool pprof`), then runs
# `cargo test --workspace --locked` with any arguments given. `.ci/run` calls this same script.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for tool in prometheus promtool prometheus-alertmanager amtool setpriv chromium go; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "tests/run.sh: installing what the end-to-end tests need (missing: ${missing[*]})"
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || {
      echo "tests/run.sh: ${missing[*]} missing, and installing them needs root: run as root, or" >&2
      echo "  apt-get install -y prometheus prometheus-alertmanager util-linux chromium golang-go" >&2
      exit 1
    }
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  # setpriv (util-linux) runs `pinwatch ctl` as another user in the control socket's test;
  # headless Chromium renders `pinwatch report`'s page in its test; golang-go's `go tool pprof`
  # reads `pinwatch profile`'s output in tests/profile.rs.
  "${sudo[@]}" apt-get install -y -qq prometheus prometheus-alertmanager util-linux chromium golang-go >/dev/null
  # The packages start their own services; the tests start their own on free loopback ports.
  for s in prometheus prometheus-alertmanager prometheus-node-exporter; do
    "${sudo[@]}" service "$s" stop >/dev/null 2>&1 || true
  done
fi
# kubernetes-validate and PyYAML: the Python on PATH has them, or a virtual environment of the
# project's own (target/pyvenv) gets them from PyPI — Debian's system Python refuses
# `pip install` (PEP 668, "externally-managed-environment"), and may have no pip at all.
venv="$PWD/target/pyvenv"
if [ -x "$venv/bin/kubernetes-validate" ]; then
  export PATH="$venv/bin:$PATH"
fi
if ! { python3 -c 'import yaml' 2>/dev/null && command -v kubernetes-validate >/dev/null 2>&1; }; then
  echo "tests/run.sh: installing kubernetes-validate and PyYAML (PyPI) into $venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    # Debian's python3 lacks the venv module until python3-venv is installed.
    rm -rf "$venv"
    if [ "$(id -u)" -eq 0 ]; then as_root=(); else as_root=(sudo); fi
    DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv"
  fi
  "$venv/bin/python3" -m pip install -q kubernetes-validate pyyaml
  export PATH="$venv/bin:$PATH"
fi
for tool in prometheus promtool prometheus-alertmanager amtool kubernetes-validate setpriv chromium go; do
  command -v "$tool" >/dev/null || { echo "tests/run.sh: $tool did not install" >&2; exit 1; }
done

exec cargo test --workspace --locked "$@"
