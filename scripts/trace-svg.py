#!/usr/bin/env python3
"""Draws the trace `crates/cli/tests/traces.rs` prints (with --no-capture) as
an SVG timeline: one row per span, indented under its parent, a bar from its
start to its end, coloured by the process that made it.

    cargo nextest run -p agentenkit --test traces --no-capture 2>&1 |
      python3 scripts/trace-svg.py > docs/trace.svg

Input lines: `<start ms> <length ms>  <process>  <indent><span name ...>`.
Short spans get a minimum width so that they stay visible; the time axis is
broken (compressed) over gaps longer than a second in which nothing starts,
since a person's wait would otherwise squeeze every other bar to a line.
"""

import html
import re
import sys

# `{:>7} {:>7}  {:<18} {indent}{name}`: the process is padded to 18
# columns, so the indent starts at column 36.
LINE = re.compile(r"^ *(\d+) +(\d+)  (.{18}) ( *)(\S.*)$")
COLOURS = {
    "agentenkit-api": "#4e79a7",
    "agentenkit-reaper": "#e15759",
    "worker-1": "#59a14f",
    "worker-2": "#f28e2b",
}
ROW, LABEL_W, BAR_W, GAP = 22, 430, 560, 1000


def spans(lines):
    first_indent = None
    for line in lines:
        m = LINE.match(line.rstrip("\n"))
        if not m:
            continue
        start, length, process, indent, name = m.groups()
        process = process.strip()
        depth = len(indent) // 2
        if first_indent is None:
            first_indent = depth
        yield int(start), int(length), process, depth - first_indent, name


def axis(rows):
    """Maps a time (ms) to x, compressing idle stretches to GAP/10 ms."""
    starts = sorted({s for s, *_ in rows} | {s + l for s, l, *_ in rows})
    cuts = []  # (from, to) of each compressed stretch
    for a, b in zip(starts, starts[1:]):
        busy = any(s < b and s + l > a and l < GAP for s, l, *_ in rows)
        if b - a > GAP and not busy:
            cuts.append((a, b))

    def squeeze(t):
        removed = sum(min(t, b) - a - GAP // 10 for a, b in cuts if t > a + GAP // 10)
        return t - max(removed, 0)

    end = squeeze(max(s + l for s, l, *_ in rows))
    return (lambda t: LABEL_W + BAR_W * squeeze(t) / max(end, 1)), cuts


def main():
    rows = list(spans(sys.stdin))
    if not rows:
        sys.exit("trace-svg: no span lines on standard input")
    x, cuts = axis(rows)
    height = ROW * (len(rows) + 3)
    width = LABEL_W + BAR_W + 20
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="monospace" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="8" y="16" font-weight="bold">one approval cycle with a sub-agent: '
        f"one trace, four processes (ms)</text>",
    ]
    for a, b in cuts:
        xa = x(a + GAP // 20)
        out.append(
            f'<line x1="{xa:.1f}" y1="{ROW}" x2="{xa:.1f}" y2="{height - ROW}" '
            f'stroke="#999" stroke-dasharray="3,3"/>'
            f'<text x="{xa + 3:.1f}" y="{height - 8}" fill="#666">… {b - a} ms …</text>'
        )
    for i, (start, length, process, depth, name) in enumerate(rows):
        y = ROW * (i + 2)
        colour = COLOURS.get(process, "#9c755f")
        label = html.escape(f"{'  ' * depth}{name}")
        out.append(f'<text x="8" y="{y + 14}" xml:space="preserve">{label}</text>')
        out.append(f'<text x="{LABEL_W - 150}" y="{y + 14}" fill="{colour}">{process}</text>')
        x0, x1 = x(start), x(start + length)
        out.append(
            f'<rect x="{x0:.1f}" y="{y + 3}" width="{max(x1 - x0, 2):.1f}" height="{ROW - 6}" '
            f'fill="{colour}"><title>{html.escape(name)}: {length} ms from {start} ms</title></rect>'
        )
        if length >= 100:
            out.append(f'<text x="{x1 + 4:.1f}" y="{y + 14}" fill="#333">{length} ms</text>')
    out.append("</svg>")
    print("\n".join(out))


if __name__ == "__main__":
    main()
