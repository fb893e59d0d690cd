import json, sys
from tokenizers import normalizers as N, pre_tokenizers as P, Regex
cps = [c for c in range(0x110000) if not (0xD800 <= c <= 0xDFFF) and c not in (0x7C, 0x78, 1)]
SEP = "x"
def norm_map(n, chars, sep="\u0001"):
    s = sep.join(chr(c) for c in chars)
    out = n.normalize_str(s).split(sep)
    assert len(out) == len(chars), (len(out), len(chars))
    return out
res = {}
# 1: BertNormalizer clean_text: removed / to-space
bn = N.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
out = norm_map(bn, cps, '|')
res["bert_removed"] = [c for c, o in zip(cps, out) if o == ""]
res["bert_space"] = [c for c, o in zip(cps, out) if o == " " and c != 0x20]
# 2: StripAccents (is_combining_mark)
out = norm_map(N.StripAccents(), cps)
res["combining_mark"] = [c for c, o in zip(cps, out) if o == ""]
# 3: Bert strip accents: nfd + filter Mn, compare to NFD
nfd = norm_map(N.NFD(), cps)
bs = norm_map(N.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False), cps)
res["mn_removed"] = [c for c, a, b in zip(cps, nfd, bs) if a != b and len(a) == 1]
# 4: lowercase differences from simple mapping recorded as full map
low = norm_map(N.Lowercase(), cps)
res["lower"] = {c: o for c, o in zip(cps, low) if o != chr(c)}
for name, n in (("nfc", N.NFC()), ("nfd", N.NFD()), ("nfkc", N.NFKC()), ("nfkd", N.NFKD())):
    out = norm_map(n, cps)
    res[name] = {c: o for c, o in zip(cps, out) if o != chr(c)}
def isolated(pt, chars):
    s = SEP + SEP.join(chr(c) for c in chars) + SEP
    pieces = pt.pre_tokenize_str(s)
    starts = {}
    for p, (a, b) in pieces:
        starts[a] = b
    out = []
    for i, c in enumerate(chars):
        pos = 1 + 2 * i
        out.append(starts.get(pos) == pos + 1)
    return out
res["punct"] = [c for c, f in zip(cps, isolated(P.Punctuation(), cps)) if f]
res["numeric"] = [c for c, f in zip(cps, isolated(P.Digits(individual_digits=True), cps)) if f]
# whitespace: WhitespaceSplit removes them: piece count
def removed_ws(chars):
    s = SEP + SEP.join(chr(c) for c in chars) + SEP
    pieces = P.WhitespaceSplit().pre_tokenize_str(s)
    covered = set()
    for p, (a, b) in pieces:
        covered.update(range(a, b))
    return [c for i, c in enumerate(chars) if (1 + 2 * i) not in covered]
res["whitespace"] = removed_ws(cps)
# Whitespace pre-tokenizer (\w+|[^\w\s]+): \w chars merge with x's; [^\w\s] isolated; \s removed
pieces = P.Whitespace().pre_tokenize_str(SEP + SEP.join(chr(c) for c in cps) + SEP)
starts = {a: b for p, (a, b) in pieces}
covered = set()
for p, (a, b) in pieces: covered.update(range(a, b))
word = []
for i, c in enumerate(cps):
    pos = 1 + 2 * i
    if pos in covered and starts.get(pos) != pos + 1:
        word.append(c)
res["word"] = word
for name, pat in (("re_L", r"\p{L}"), ("re_N", r"\p{N}"), ("re_s", r"\s"), ("re_w", r"\w")):
    sp = P.Split(Regex(pat), behavior="isolated")
    res[name] = [c for c, f in zip(cps, isolated(sp, cps)) if f]
json.dump(res, open("rust.json", "w"))
print({k: len(v) for k, v in res.items()})
