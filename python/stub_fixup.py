"""Post-processes nanobind's stub of jitembed._jitembed: the errc classes named like a builtin they derive
from (TimeoutError) get the builtin by its qualified name, so the stub does not make a class its own base."""
import re
import sys

src, dst = sys.argv[1], sys.argv[2]
text = open(src, encoding="utf-8").read()
fixed, n = re.subn(r"^class (\w+)\(Error, \1\):", r"class \1(Error, builtins.\1):", text, flags=re.M)
if n:
    fixed = "import builtins\n" + fixed
open(dst, "w", encoding="utf-8").write(fixed)
