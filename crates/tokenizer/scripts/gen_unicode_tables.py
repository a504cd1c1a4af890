#!/usr/bin/env python3
"""Writes src/unicode/tables.rs from llama.cpp's src/unicode-data.cpp.

plumb must classify code points exactly as llama.cpp does, so the tables are copied from
llama.cpp rather than regenerated from a (possibly different) Unicode database.

usage: gen_unicode_tables.py path/to/llama.cpp/src/unicode-data.cpp > src/unicode/tables.rs
"""
import re
import sys


def block(source, name):
    start = source.index(name)
    body = source[source.index("{", start) + 1:]
    return body[:body.index("};")]


def main():
    source = open(sys.argv[1], encoding="utf-8").read()
    ranges = [(int(a, 16), int(b, 16)) for a, b in
              re.findall(r"\{(0x[0-9A-Fa-f]+), (0x[0-9A-Fa-f]+)\}", block(source, "unicode_ranges_flags"))]
    whitespace = [int(x, 16) for x in re.findall(r"0x[0-9A-Fa-f]+", block(source, "unicode_set_whitespace"))]
    assert ranges[0][0] == 0 and ranges[-1][0] == 0x110000
    assert all(flags <= 0xFF for _, flags in ranges), "only category flags are expected in the ranges"

    out = sys.stdout
    out.write("//! Code point classes, copied from llama.cpp's `src/unicode-data.cpp` (commit 0c1e57098)\n")
    out.write("//! by `scripts/gen_unicode_tables.py`. Do not edit by hand.\n\n")
    out.write("/// `(first code point, category flags)`; a range runs to the next entry's first code point.\n")
    out.write("/// The last entry (0x110000) only closes the table.\n")
    out.write(f"pub(super) static CATEGORY_RANGES: [(u32, u8); {len(ranges)}] = [\n")
    for a, b in ranges:
        out.write(f"    (0x{a:06X}, 0x{b:02X}),\n")
    out.write("];\n\n")
    out.write("/// The code points llama.cpp treats as whitespace (`\\s` in its pre-tokenizers).\n")
    out.write(f"pub(super) static WHITESPACE: [u32; {len(whitespace)}] = [\n")
    for i in range(0, len(whitespace), 8):
        out.write("   " + "".join(f" 0x{c:04X}," for c in whitespace[i:i + 8]) + "\n")
    out.write("];\n")


if __name__ == "__main__":
    main()
