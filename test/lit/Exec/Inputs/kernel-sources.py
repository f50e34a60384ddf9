"""Prints the unescaped `source` of every weftx.kernel in the MLIR on stdin,
each after a line `==== @<name> <file>` (for FileCheck)."""
import re
import sys

KERNEL = re.compile(
    r'weftx\.kernel @(\S+) file "([^"]*)" constants \{[^}]*\} '
    r'source "((?:[^"\\]|\\[0-9A-Fa-f]{2}|\\.)*)"')


def unescape(text):
    # The MLIR printer writes '"', '\' and non-printable bytes as \XX (hex).
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "\\":
            out.append(int(text[i + 1:i + 3], 16))
            i += 3
        else:
            out += text[i].encode()
            i += 1
    return out.decode()


for name, path, source in KERNEL.findall(sys.stdin.read()):
    print(f"==== @{name} {path}")
    sys.stdout.write(unescape(source))
