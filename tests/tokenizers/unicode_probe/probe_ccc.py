import json, unicodedata
from tokenizers import normalizers as N
cps = [c for c in range(0x110000) if not (0xD800 <= c <= 0xDFFF) and c not in (1,)]
# candidates for reordering differences: utf8proc ccc unknown here; use python's unicodedata (Unicode 15?) as a hint
cand = [c for c in cps if unicodedata.combining(chr(c)) > 220]
s = "\u0001".join("a" + chr(c) + "\u0323" for c in cand)
out = N.NFD().normalize_str(s).split("\u0001")
noreorder = [c for c, o in zip(cand, out) if o == "a" + chr(c) + "\u0323"]
print(unicodedata.unidata_version, len(cand), len(noreorder), [hex(c) for c in noreorder[:20]])
json.dump(noreorder, open("ccc.json", "w"))
