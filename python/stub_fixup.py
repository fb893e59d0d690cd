"""Post-processes nanobind's stub of jitembed._jitembed:
* the errc classes named like a builtin they derive from (TimeoutError) get the builtin by its qualified name,
  so the stub does not make a class its own base;
* functions that return numpy arrays made through numpy's C API (typed `object` by stubgen) are typed
  NDArray, and a few other `object` returns get their real type."""
import re
import sys

src, dst = sys.argv[1], sys.argv[2]
text = open(src, encoding="utf-8").read()
fixed, n = re.subn(r"^class (\w+)\(Error, \1\):", r"class \1(Error, builtins.\1):", text, flags=re.M)
returns = {
    # name: real return type
    "payload": "NDArray", "decode": "NDArray", "decode_image": "NDArray", "decode_video": "NDArray",
    "bytes": "NDArray", "record_bytes": "NDArray", "decode_jpeg": "NDArray", "decode_tokens": "NDArray",
    "value": "NDArray | str", "error_class": "type[Error]", "embed_async": "concurrent.futures.Future",
}
for name, typ in returns.items():
    fixed = re.sub(rf"^(\s*def {name}\(.*\)) -> object:", rf"\1 -> {typ}:", fixed, flags=re.M)
fixed = re.sub(r"^(\s*def get\(self, key: object, verify: bool = True\)) -> dict \| None:",
               r"\1 -> dict[str, NDArray] | None:", fixed, flags=re.M)
header = ["import builtins"] if n else []
if "concurrent.futures.Future" in fixed and "import concurrent.futures\n" not in fixed:
    header.append("import concurrent.futures")
if "NDArray" in fixed and "from numpy.typing import NDArray" not in fixed:
    header.append("from numpy.typing import NDArray")
fixed = "\n".join(header + [fixed]) if header else fixed
open(dst, "w", encoding="utf-8").write(fixed)
