"""Writes the PTX of each gpu.binary in an MLIR file (the `assembly` string
of its #gpu.object, MLIR-escaped): `ptx_of.py IN.mlir OUT.ptx` writes the
first; `ptx_of.py IN.mlir --all DIR` writes every one as DIR/<binary>.ptx and
prints their paths."""

import os
import re
import sys

BINARY = re.compile(r'gpu\.binary @(\w+)[^\n]*?assembly = "((?:[^"\\]|\\.)*)"')


def unescape(text):
    return re.sub(
        r'\\([0-9A-Fa-f]{2}|\\|")',
        lambda m: m.group(1) if m.group(1) in ("\\", '"') else chr(int(m.group(1), 16)),
        text,
    )


def main(argv):
    text = open(argv[1]).read()
    found = [(name, unescape(body)) for name, body in BINARY.findall(text)]
    if not found:
        sys.exit(f"{argv[1]}: no gpu.binary with an assembly")
    if argv[2] != "--all":
        open(argv[2], "w").write(found[0][1])
        return
    os.makedirs(argv[3], exist_ok=True)
    for name, ptx in found:
        path = os.path.join(argv[3], name + ".ptx")
        open(path, "w").write(ptx)
        print(path)


if __name__ == "__main__":
    main(sys.argv)
