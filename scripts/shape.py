#!/usr/bin/env python3
"""The shape counts issue 37 asks for, read from the source tree.

  python3 scripts/shape.py [--list] [--check] [ROOT]

Prints: product files over 600 lines, functions over 80 lines in
crates/*/src, public methods of `Store`, and the statements that write a
tool call (`UPDATE tool_calls` / `INSERT INTO tool_calls`) with the files
they sit in. `--list` names each one. `--check` (what `make test` runs)
exits 1, naming them, when a product file is over 600 lines or a product
function over 80. Test modules (`#[cfg(test)] mod`)
are left out of a file's length, as the issue counts them; product code
is everything under crates/*/src except the bench and chaos crates.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAX_FILE_LINES = 600
MAX_FN_LINES = 80
TOOLING = ("crates/bench/", "crates/chaos/")
FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def sources(root):
    for path in sorted(root.glob("crates/*/src/**/*.rs")):
        yield path.relative_to(root).as_posix(), path.read_text().splitlines()


def strip(line):
    """The line without its comment and string contents, for brace counting."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//", 1)[0]


def without_tests(lines):
    """The lines before a trailing `#[cfg(test)] mod ... {`."""
    for i, line in enumerate(lines):
        if line.startswith("#[cfg(test)]") and i + 1 < len(lines) and lines[i + 1].startswith("mod "):
            return lines[:i]
    return lines


def functions(lines):
    """(name, first line, length) of each function with a body."""
    found = []
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        depth, opened = 0, False
        for j in range(i, len(lines)):
            code = strip(lines[j])
            if not opened and ";" in code and "{" not in code:
                break  # a declaration without a body
            depth += code.count("{") - code.count("}")
            opened = opened or "{" in code
            if opened and depth <= 0:
                found.append((m.group(6), i + 1, j - i + 1))
                break
    return found


def main():
    listing = "--list" in sys.argv
    checking = "--check" in sys.argv
    roots = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = pathlib.Path(roots[0]).resolve() if roots else ROOT
    long_files, long_fns, store_methods, writes = [], [], [], []
    for rel, lines in sources(root):
        product = not rel.startswith(TOOLING)
        body = without_tests(lines)
        if product and len(body) > MAX_FILE_LINES:
            long_files.append((rel, len(body)))
        for name, at, length in functions(body):
            if length > MAX_FN_LINES:
                long_fns.append((rel, name, at, length, product))
        in_store_impl = False
        for n, line in enumerate(body, 1):
            if line.startswith("impl Store {"):
                in_store_impl = True
            elif line.startswith("}"):
                in_store_impl = False
            elif in_store_impl and re.match(r"^    pub (async )?fn (\w+)", line):
                store_methods.append((rel, re.match(r"^    pub (async )?fn (\w+)", line).group(2)))
            if re.search(r"(UPDATE|INSERT INTO) tool_calls\b", line):
                writes.append((rel, n))
    product_fns = [f for f in long_fns if f[4]]
    if checking:
        for rel, n in long_files:
            print(f"shape: {rel} has {n} lines (tests left out), over {MAX_FILE_LINES}: split it where a seam is")
        for rel, name, at, length, _ in product_fns:
            print(f"shape: {rel}:{at} fn {name} has {length} lines, over {MAX_FN_LINES}: name its steps as functions")
        if long_files or product_fns:
            sys.exit(1)
        print(f"shape: no product file over {MAX_FILE_LINES} lines, no product function over {MAX_FN_LINES}")
        return
    print(f"product files over 600 lines (tests left out): {len(long_files)}")
    print(f"functions over 80 lines in crates/*/src: {len(long_fns)} ({len(product_fns)} outside bench and chaos)")
    print(f"public Store methods: {len(store_methods)}")
    print(f"tool_calls writes: {len(writes)} statements in {len({w[0] for w in writes})} files")
    if listing:
        for rel, n in long_files:
            print(f"  file {rel} {n}")
        for rel, name, at, length, _ in long_fns:
            print(f"  fn {rel}:{at} {name} {length}")
        for rel, name in store_methods:
            print(f"  store {rel} {name}")
        for rel, n in writes:
            print(f"  write {rel}:{n}")


if __name__ == "__main__":
    main()
