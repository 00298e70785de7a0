#!/usr/bin/env bash
# Installs the MCP servers the tests talk to, pinned, into target/mcp-servers
# on first use: PyPI's `mcp` (for tests/mcp/tickets_server.py) in a venv, and
# the reference server @modelcontextprotocol/server-everything from npm.
#   scripts/mcp-servers.sh --python       print the venv's python
#   scripts/mcp-servers.sh --everything   print server-everything's entry (run with node)
set -euo pipefail
cd "$(dirname "$0")/.."
MCP_VERSION=2.3.0
EVERYTHING_VERSION=2026.8.31
DIR="$PWD/target/mcp-servers"
PYTHON="$DIR/venv/bin/python"
EVERYTHING="$DIR/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
mkdir -p "$DIR"
# One installer at a time (tests run in parallel and may ask at once).
exec 9>"$DIR/.lock"
flock 9
if [ ! -x "$PYTHON" ] || [ "$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null)" != "$MCP_VERSION" ]; then
  echo "mcp-servers: installing mcp $MCP_VERSION (PyPI) into $DIR/venv" >&2
  rm -rf "$DIR/venv"
  python3 -m venv "$DIR/venv"
  "$DIR/venv/bin/pip" install -q --disable-pip-version-check "mcp==$MCP_VERSION" >&2
fi
if [ ! -f "$EVERYTHING" ] || ! grep -q "\"version\": \"$EVERYTHING_VERSION\"" "$DIR/npm/node_modules/@modelcontextprotocol/server-everything/package.json"; then
  echo "mcp-servers: installing @modelcontextprotocol/server-everything $EVERYTHING_VERSION (npm) into $DIR/npm" >&2
  rm -rf "$DIR/npm"
  mkdir -p "$DIR/npm"
  (cd "$DIR/npm" && echo '{"private": true}' > package.json &&
    npm install --no-audit --no-fund --loglevel=error --save-exact \
      "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" >&2)
fi
flock -u 9
case "${1:-}" in
  --python) echo "$PYTHON" ;;
  --everything) echo "$EVERYTHING" ;;
  *) echo "usage: $0 --python | --everything" >&2; exit 2 ;;
esac
