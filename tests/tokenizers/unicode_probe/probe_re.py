import json
from tokenizers import pre_tokenizers as P, Regex
cps = [c for c in range(0x110000) if not (0xD800 <= c <= 0xDFFF) and c not in (0x21,)]
def isolated(pt, chars, SEP="!"):
    s = SEP + SEP.join(chr(c) for c in chars) + SEP
    pieces = pt.pre_tokenize_str(s)
    starts = {a: b for p, (a, b) in pieces}
    return [starts.get(1 + 2 * i) == 2 + 2 * i for i in range(len(chars))]
res = json.load(open("rust.json"))
for name, pat in (("re_L", r"\p{L}"), ("re_N", r"\p{N}"), ("re_s", r"\s"), ("re_w", r"\w"), ("re_P", r"\p{P}")):
    sp = P.Split(Regex(pat), behavior="isolated")
    res[name] = [c for c, f in zip(cps, isolated(sp, cps)) if f]
json.dump(res, open("rust.json", "w"))
print({k: len(v) for k, v in res.items()})
