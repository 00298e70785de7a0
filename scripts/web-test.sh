#!/usr/bin/env bash
# The TypeScript side (crates/web): install its locked dependencies, type-check,
# check the inbox page's committed build (crates/api/ui) is what its sources
# build to, and run the tests (vitest; the page's end to end through Debian's
# chromium driven by playwright-core) against a real `agentenkit dev` on the
# test database and RabbitMQ. Needs Node ^20.19 or >= 22.12 with npm, and chromium: both
# installed from the distribution's packages when missing on a Debian-family
# machine (as root).
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
# Vite 8 needs Node ^20.19 or >= 22.12 (Debian 12's own nodejs is 18: use
# Debian 13's, or NodeSource's).
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit((a === 20 && b >= 19) || (a === 22 && b >= 12) || a > 22 ? 0 : 1)'; then
  echo "web-test: Node $(node --version) is too old; the web side needs Node ^20.19 or >= 22.12" >&2
  exit 1
fi

chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "web-test: installing chromium from the distribution's packages"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-liberation >/dev/null
  else
    echo "web-test: no chromium at $chromium; install it (Debian: apt-get install chromium) or set CHROMIUM" >&2
    exit 1
  fi
fi
export CHROMIUM="$chromium"

(
  cd crates/web
  npm ci --no-audit --no-fund --loglevel=error
  npm run --silent typecheck
  # The page is embedded from crates/api/ui, committed so `cargo build`
  # needs no Node: it must be exactly what the sources build to.
  fresh=$(mktemp -d)
  trap 'rm -rf "$fresh"' EXIT
  INBOX_OUT_DIR="$fresh" npm run --silent -w agentenkit-inbox build >/dev/null
  if ! diff -r "$fresh" ../api/ui >/dev/null; then
    diff -r "$fresh" ../api/ui | head -20 >&2
    echo "web-test: crates/api/ui is not the build of crates/web: run \`make ui\` and commit it" >&2
    exit 1
  fi
)

${CARGO:-cargo} build -q --bin agentenkit
export AGENTENKIT_BIN="$PWD/target/debug/agentenkit"
cd crates/web
npm test
