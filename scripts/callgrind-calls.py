#!/usr/bin/env python3
"""Calls of each function of the project's sources in a callgrind output.

  scripts/callgrind-calls.py CALLGRIND_OUT

Prints `FILE:FUNCTION<TAB>CALLS` for every function whose own file is under
crates/*/src (the bench's left out), read from the output's `calls=` lines
rather than from callgrind_annotate, whose listing stops once its rounded
percentages reach 100 % and so leaves out a varying tail of small functions.
"""
import collections
import re
import sys

NAMED = re.compile(r"\((\d+)\)(?: (.*))?")
PROJECT = re.compile(r".*?(crates/[a-z]+/src/.*\.rs)$")


def main(path: str) -> None:
    files: dict[str, str] = {}
    functions: dict[str, str] = {}
    file_of: dict[str, str] = {}
    calls: collections.Counter[str] = collections.Counter()
    current_file = ""
    callee = ""

    def named(table: dict[str, str], text: str) -> str:
        match = NAMED.match(text.strip())
        if not match:  # an output written without name compression
            return text.strip()
        key, name = match.groups()
        if name is not None:
            table[key] = name
        return table.get(key, key)

    with open(path, encoding="utf-8", errors="replace") as out:
        for line in out:
            if line.startswith("fl="):
                current_file = named(files, line[3:])
            elif line.startswith(("fi=", "fe=", "cfi=", "cfl=")):
                named(files, line.split("=", 1)[1])
            elif line.startswith("fn="):
                file_of.setdefault(named(functions, line[3:]), current_file)
            elif line.startswith("cfn="):
                callee = named(functions, line[4:])
            elif line.startswith("calls="):
                calls[callee] += int(line[6:].split()[0])
    for function, file in sorted(file_of.items(), key=lambda kv: (kv[1], kv[0])):
        project = PROJECT.match(file)
        if project and not project.group(1).startswith("crates/bench/"):
            print(f"{project.group(1)}:{function}\t{calls[function]}")


if __name__ == "__main__":
    main(sys.argv[1])
