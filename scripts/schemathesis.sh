#!/usr/bin/env bash
# Installs schemathesis (PyPI, pinned) into target/schemathesis on first use.
#   scripts/schemathesis.sh --path   print the binary's path (for the tests)
#   scripts/schemathesis.sh ARGS...  run it with ARGS
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=4.32.5
VENV="$PWD/target/schemathesis"
BIN="$VENV/bin/schemathesis"
mkdir -p target
# One installer at a time (tests and make may ask at once).
exec 9>target/.schemathesis.lock
flock 9
if [ ! -x "$BIN" ] || ! "$BIN" --version 2>/dev/null | grep -q "$VERSION"; then
  echo "schemathesis: installing $VERSION into $VENV" >&2
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "schemathesis==$VERSION" >&2
fi
flock -u 9
if [ "${1:-}" = "--path" ]; then
  echo "$BIN"
else
  exec "$BIN" "$@"
fi
