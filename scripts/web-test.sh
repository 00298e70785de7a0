#!/usr/bin/env bash
# The TypeScript side (crates/web): install its locked dependencies, type-check,
# and run its tests (vitest) against a real `agentenkit dev` on the test
# database and RabbitMQ. Needs Node 20+ and npm: installed from the
# distribution's packages when missing on a Debian-family machine (as root).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "web-test: installing nodejs and npm from the distribution's packages"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "web-test: npm is not installed; install Node 20+ and npm (Debian: apt-get install nodejs npm)" >&2
    exit 1
  fi
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "web-test: Node $(node --version) is too old; the web tests need Node 20+" >&2
  exit 1
fi

${CARGO:-cargo} build -q --bin agentenkit
export AGENTENKIT_BIN="$PWD/target/debug/agentenkit"
cd crates/web
npm ci --no-audit --no-fund --loglevel=error
npm run --silent typecheck
npm test
