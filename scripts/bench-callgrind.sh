#!/usr/bin/env bash
# Instructions per park → approve → resume → complete cycle in the bench
# process (its clients and its in-process worker), counted by callgrind:
# stable on a noisy machine where wall-clock figures are not. Two runs at
# c=1 with N1 and N2 cycles; the difference divided by N2 - N1 leaves out
# what a run costs once (start-up, migrations, truncation, reports).
#   scripts/bench-callgrind.sh [N1] [N2]     (default 200 400)
# Needs valgrind (Debian: apt-get install valgrind) and the services
# (`make services`). Postgres's and RabbitMQ's own CPU is not in it: the
# bench's CPU table (make bench) has them per process.
# It also names the project's source files a cycle runs code of (those with
# a function called at least once more per cycle in the N2 run than in the
# N1 one: a timer's task, which runs by time rather than by cycle, does
# not count), by crate: what one approval cycle crosses. CALLGRIND_FILES=1
# lists them. Count files with CALLGRIND_PROFILE=dev: callgrind names a
# function's own file, so in a release build a function inlined into
# another file's is not seen (the instruction count is the release build's
# figure).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n1=${1:-200}
n2=${2:-400}
if ! command -v valgrind >/dev/null 2>&1; then
  echo "bench-callgrind: valgrind is not installed (Debian: apt-get install valgrind)" >&2
  exit 1
fi
# Line tables only: callgrind needs them to name files, and they change no
# instruction.
profile=${CALLGRIND_PROFILE:-release}
CARGO_PROFILE_RELEASE_DEBUG=line-tables-only ${CARGO:-cargo} build --profile "$profile" -q --bin agentenkit-bench
bin=target/$([ "$profile" = dev ] && echo debug || echo "$profile")/agentenkit-bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
count() {
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$1" \
    "$bin" --n "$1" --warmup 5 --concurrency 1 \
      --expiry-n 0 --round-trip-n 0 --scale-n 0 --shares-n 0 --baseline-secs 0 --stats-flush-secs 0 \
    >"$out/log.$1" 2>&1 || { tail -20 "$out/log.$1" >&2; exit 1; }
  sed -n 's/^totals: //p' "$out/cg.$1"
}
ir1=$(count "$n1")
ir2=$(count "$n2")
echo "callgrind, bench process (clients + in-process worker), c=1, $profile build:"
echo "  N=$n1: $ir1 instructions; N=$n2: $ir2 instructions"
echo "  per cycle (marginal, (Ir($n2) - Ir($n1)) / $((n2 - n1))): $(( (ir2 - ir1) / (n2 - n1) )) instructions"

# Calls of each function of a project source file in each run, read from
# callgrind's output itself (scripts/callgrind-calls.py).
calls() {
  python3 scripts/callgrind-calls.py "$out/cg.$1" | LC_ALL=C sort -t$'\t' -k1,1
}
calls "$n1" >"$out/calls.$n1"
calls "$n2" >"$out/calls.$n2"
crossed=$(LC_ALL=C join -t$'\t' -a 2 -e 0 -o 0,1.2,2.2 "$out/calls.$n1" "$out/calls.$n2" |
  awk -F'\t' -v n="$((n2 - n1))" '($3 - $2) >= n { split($1, at, ":"); print at[1] }' | sort -u)
echo "  project source files a cycle runs code of: $(echo "$crossed" | grep -c . || true)"
echo "$crossed" | sed 's|^crates/\([a-z]*\)/.*|\1|' | sort | uniq -c | awk '{ printf "    %s %s\n", $2, $1 }'
if [ -n "${CALLGRIND_FILES:-}" ]; then
  echo "$crossed" | sed 's/^/      /'
fi
