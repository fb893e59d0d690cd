#!/usr/bin/env python3
"""The reference of the tokenizers component: a seeded caption corpus, real tokenizer.json pipelines built from it
without downloading anything, and the ids the Python `tokenizers` library (Rust) gives for every caption.

  .venv/bin/python tests/tokenizers/make_corpus.py --out BUILD/tokenizers_reference [--captions N] [--force]

Writes into --out:
  corpus.bin          b"JTKCORP1", u32 count, then per caption u32 byte length + UTF-8 bytes
  <name>.json         tokenizer.json files: clip (CLIPTokenizer from a trained vocab + merges), gpt2 (byte-level
                      BPE), llama3 (Llama-3's Split regex, ignore_merges, BOS by TemplateProcessing), bert and
                      bert_cased (BertTokenizer from a trained WordPiece vocab), t5 (T5TokenizerFast from a
                      SentencePiece model trained here: Precompiled charsmap, Metaspace, Unigram) and variants of it
                      (byte_fallback, Nmt + NFKC, prepend_scheme first / never), and "sink" pipelines that cover the
                      other normalizers, pre-tokenizers, post-processors and added-token flags
  cases.json          one entry per (tokenizer, settings): add_special_tokens, pair, truncation, padding, file
  <case>.bin          u32 n; u32 first[n]; u32 second[n] (pairs only); u8 failed[n]; u64 offsets[n + 1];
                      u32 ids[total]; u8 type_ids[total]; u8 attention_mask[total] (all little-endian)
  .stamp              hash of this script and of the package versions: a rerun with the same stamp does nothing

Exit 77 (skip) when tokenizers / transformers / sentencepiece / numpy are missing.
"""
import argparse
import hashlib
import json
import os
import random
import struct
import sys
import time

try:
    import numpy as np
    import sentencepiece as spm
    import tokenizers
    import transformers
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
except ImportError as e:  # pragma: no cover
    print(f"make_corpus: skipped: {e}")
    sys.exit(77)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

# ---------------------------------------------------------------------------------------------------------------
# Corpus
ADJ = "red blue green small large old young happy tiny huge bright dark wooden shiny fluffy wet dry empty busy quiet".split()
NOUN = ("cat dog man woman child bird car bicycle tree house street beach mountain river table chair laptop pizza "
        "guitar horse boat train plane flower cup book window door market garden kitchen city bridge").split()
VERB = "sits stands runs walks sleeps jumps plays looks waits rides eats holds carries watches swims flies".split()
PREP = "on under near beside behind inside above across through along".split()
CONTRACTIONS = ["it's", "don't", "they're", "I'll", "we've", "he'd", "I'm", "IT'S", "DON'T", "She'S", "you'RE",
                "can't", "won't", "Let's", "o'clock", "rock'n'roll", "it’s", "l'été"]
NUMBERS = ["3", "42", "2019", "1,000", "3.14", "$12.50", "10:30", "5km", "99%", "1st", "2nd", "100000000", "0.5",
           "#1", "+49 30 1234", "1/2", "x2", "v1.2.3", "٣٤", "१२३", "١٢٣", "①", "Ⅻ", "½", "x²", "１２３"]
ACCENTED = ["café", "naïve", "São Paulo", "Zürich", "Ångström", "crème brûlée", "cafe\u0301", "nai\u0308ve",
            "Việt Nam", "Łódź", "İstanbul", "Straße", "STRASSE", "Ὀδυσσεύς", "ΣΟΦΟΣ σοφός", "résumé", "El Niño",
            "Ærøskøbing", "Dvořák", "Ça va", "ﬁsh ﬂies", "Ｆｕｌｌｗｉｄｔｈ", "ｶﾀｶﾅ", "Ⓐ Ⓑ"]
SCRIPTS = ["一只猫坐在垫子上", "两个人在海滩上散步", "猫がマットの上に座っている", "カメラ", "고양이가 매트 위에 앉아 있다",
           "قطة تجلس على السجادة", "مَرْحَبًا بِكُمْ", "एक बिल्ली चटाई पर बैठी है", "क्षत्रिय", "Кошка сидит на коврике",
           "Ёлка и ёжик", "แมวนั่งบนเสื่อ", "สวัสดีครับ", "שלום עולם", "Γάτα στο χαλί", "ঝড় আসছে", "ಕನ್ನಡ",
           "北京欢迎你", "東京タワー", "𠮷野家"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸🇫🇷", "1️⃣", "❤️", "🐱", "🔥🔥🔥", "👩🏿‍💻", "🥲", "🫠", "🫨",
         "☕", "✨", "🧑‍🤝‍🧑", "😂😂"]
SYMBOLS = ["∑", "∞", "≤", "€", "£", "¥", "₹", "©", "™", "°C", "→", "•", "…", "—", "–", "«quoted»", "“smart”",
           "‘single’", "(parens)", "[brackets]", "{braces}", "a/b", "x=y+z", "50/50", "C++", "e-mail", "well-known",
           "@user", "#hashtag", "https://example.com/a?b=c", "~tilde~", "back\\slash", "`code`", "a_b_c", "1+1=2",
           "!!!", "???", "...", "''", "\"\"", "--", "::", "<>", "^_^", "|pipe|"]
WHITESPACE = ["  ", "   ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2009", "\u200b", "\ufeff", " \t ", "\n\n",
              "\u2028", "\u0085", "\u000b"]
CONTROL = ["\x00", "\x07", "\x1b", "\ufffd", "\ue000", "\u00ad", "\u200d", "\u2060", "\u0301"]
SPECIALS = ["<|endoftext|>", "<|startoftext|>", "[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "</s>", "<pad>",
            "<unk>", "<extra_id_0>", "<extra_id_99>", "<|begin_of_text|>", "<|eot_id|>", "<|endoftext", "[cls]",
            "<sep>", "[num]", "Hello", "HELLO", "hello", " <sep> ", "x[num]y", "<s>", "<mask>"]


def sentence(r):
    n = r.choice(NOUN)
    parts = [r.choice(["A", "The", "a", "the", "Two", "Some", "THE", "An old"]), r.choice(ADJ), n, r.choice(VERB),
             r.choice(PREP), "the", r.choice(ADJ), r.choice(NOUN)]
    if r.random() < 0.3:
        parts.insert(r.randrange(len(parts)), r.choice(CONTRACTIONS))
    if r.random() < 0.3:
        parts.insert(r.randrange(len(parts)), r.choice(NUMBERS))
    s = " ".join(parts)
    s += r.choice([".", "", "!", "?", ",", " .", "..."])
    if r.random() < 0.1:
        s = s.upper()
    elif r.random() < 0.1:
        s = "".join(c.upper() if r.random() < 0.3 else c for c in s)
    return s


def fragment(r):
    k = r.random()
    if k < 0.45:
        return sentence(r)
    pool = [ACCENTED, SCRIPTS, EMOJI, SYMBOLS, NUMBERS, CONTRACTIONS, SPECIALS, CONTROL][
        min(int((k - 0.45) / 0.55 * 8), 7)]
    return r.choice(pool)


def caption(r):
    k = r.random()
    if k < 0.004:
        return r.choice(["", " ", "\n", "\t \n", "\u3000"])
    if k < 0.012:  # very long: > 2k characters
        out = []
        while sum(len(x) for x in out) < 2100:
            out.append(fragment(r) if r.random() < 0.7 else sentence(r))
        return " ".join(out)
    if k < 0.016:  # long words without spaces (WordPiece max_input_chars_per_word, long BPE words)
        return r.choice(["a", "ab", "xyz", "猫", "é", "😀", "ع"]) * r.randrange(50, 400)
    n = r.choice([1, 1, 1, 2, 2, 3, 4])
    out = []
    for _ in range(n):
        out.append(fragment(r))
        out.append(r.choice(WHITESPACE) if r.random() < 0.15 else " ")
    s = "".join(out)
    return s if r.random() < 0.8 else s.strip()


def make_corpus(n, seed=1234):
    r = random.Random(seed)
    return [caption(r) for _ in range(n)]


def write_corpus(path, captions):
    with open(path, "wb") as f:
        f.write(b"JTKCORP1" + struct.pack("<I", len(captions)))
        for c in captions:
            b = c.encode("utf-8")
            f.write(struct.pack("<I", len(b)) + b)


def read_corpus(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"JTKCORP1", path
    (n,) = struct.unpack_from("<I", data, 8)
    out, at = [], 12
    for _ in range(n):
        (k,) = struct.unpack_from("<I", data, at)
        out.append(data[at + 4:at + 4 + k].decode("utf-8"))
        at += 4 + k
    return out


# ---------------------------------------------------------------------------------------------------------------
# Tokenizers
BYTE_ALPHABET = sorted(pre_tokenizers.ByteLevel.alphabet())
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")


def trained_vocab_merges(tok, trainer, corpus):
    tok.train_from_iterator(corpus, trainer=trainer)
    j = json.loads(tok.to_str())
    return j["model"]["vocab"], [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in j["model"]["merges"]]


def build_clip(corpus, out):
    t = Tokenizer(models.BPE(end_of_word_suffix="</w>", continuing_subword_prefix=""))
    t.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""),
                             behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    trainer = trainers.BpeTrainer(vocab_size=6000, end_of_word_suffix="</w>", initial_alphabet=BYTE_ALPHABET,
                                  special_tokens=["<|startoftext|>", "<|endoftext|>"], show_progress=False)
    vocab, merges = trained_vocab_merges(t, trainer, corpus)
    for c in BYTE_ALPHABET:  # as CLIP's vocabulary: every byte alone and at the end of a word
        for s in (c, c + "</w>"):
            vocab.setdefault(s, len(vocab))
    tok = transformers.CLIPTokenizer(vocab=vocab, merges=merges)
    return save(tok, out, "clip")


def build_gpt2(corpus, out):
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.post_processor = processors.ByteLevel(trim_offsets=True)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=5000, initial_alphabet=BYTE_ALPHABET, special_tokens=["<|endoftext|>"],
                                  show_progress=False)
    t.train_from_iterator(corpus, trainer=trainer)
    return save_tokenizer(t, out, "gpt2")


def build_llama3(corpus, out):
    t = Tokenizer(models.BPE(ignore_merges=True))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>"]
    trainer = trainers.BpeTrainer(vocab_size=6000, initial_alphabet=BYTE_ALPHABET, show_progress=False)
    t.train_from_iterator(corpus, trainer=trainer)
    t.add_special_tokens(specials)  # after the vocabulary, as Llama-3's 128000+
    bos = t.token_to_id("<|begin_of_text|>")
    t.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=t, bos_token="<|begin_of_text|>",
                                                eos_token="<|end_of_text|>")
    return save(fast, out, "llama3")


def build_bert(corpus, out):
    t = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=6000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                        show_progress=False)
    t.train_from_iterator(corpus, trainer=trainer)
    vocab = json.loads(t.to_str())["model"]["vocab"]
    paths = [save(transformers.BertTokenizer(vocab=vocab), out, "bert")]
    cased = transformers.BertTokenizer(vocab=vocab, do_lower_case=False, tokenize_chinese_chars=False, strip_accents=True)
    paths.append(save(cased, out, "bert_cased"))
    return paths


def build_t5(corpus, out):
    text = os.path.join(out, "spm_corpus.txt")
    with open(text, "w", encoding="utf-8") as f:
        for c in corpus:
            c = " ".join(c.split())
            if c:
                f.write(c + "\n")
    paths = []
    for name, byte_fallback in (("t5", False), ("t5_byte_fallback", True)):
        prefix = os.path.join(out, name + "_sp")
        spm.SentencePieceTrainer.train(input=text, model_prefix=prefix, vocab_size=2000, model_type="unigram", hard_vocab_limit=False,
                                       normalization_rule_name="nmt_nfkc", character_coverage=0.995,
                                       pad_id=0, eos_id=1, unk_id=2, bos_id=-1, byte_fallback=byte_fallback,
                                       num_threads=2, minloglevel=2, input_sentence_size=20000,
                                       shuffle_input_sentence=False)
        src = os.path.join(out, name + "_spm")  # from_pretrained converts spiece.model (the slow->fast converter)
        os.makedirs(src, exist_ok=True)
        os.replace(prefix + ".model", os.path.join(src, "spiece.model"))
        tok = transformers.T5TokenizerFast.from_pretrained(src, extra_ids=10)
        paths.append(save(tok, out, name))
        if byte_fallback:
            edit(out, name, lambda j: j["model"].__setitem__("byte_fallback", True))
    # The other normalizers SentencePiece converters write (no precompiled charsmap: Nmt + NFKC), and the other
    # Metaspace prepend schemes
    def nmt(j):
        j["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Nmt"}, {"type": "NFKC"}, {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True}
    paths.append(derive(out, "t5", "t5_nmt_first", nmt))

    def never(j):
        j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": False}]}
    paths.append(derive(out, "t5", "t5_never", never))
    return paths


def build_sinks(corpus, out):
    """Pipelines no single real tokenizer has, for the parts the real ones above do not use."""
    paths = []
    # 1: WordPiece-style BPE with continuing_subword_prefix, unk + fuse_unk, added tokens with every flag
    t = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##", fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase(),
                                         normalizers.Strip(left=True, right=True), normalizers.Replace("``", '"'),
                                         normalizers.Replace(Regex(r"\d{4,}"), "<num>")])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Split("-", behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[aeiou]+"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"[xyz]"), behavior="contiguous", invert=True)])
    trainer = trainers.BpeTrainer(vocab_size=3000, continuing_subword_prefix="##", special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=150, show_progress=False)
    t.train_from_iterator(corpus, trainer=trainer)
    t.add_tokens([AddedToken("<sep>", lstrip=True, rstrip=True, normalized=False),
                  AddedToken("[num]", single_word=True, normalized=True),
                  AddedToken("Hello", normalized=True)])
    t.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    t.post_processor = processors.RobertaProcessing(("</s>", t.token_to_id("</s>")), ("<s>", t.token_to_id("<s>")))
    paths.append(save_tokenizer(t, out, "sink_bpe"))

    # 2: byte-fallback BPE (Llama-2 style: Prepend + Replace normalizers, no pre-tokenizer) with BertProcessing
    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=2500, special_tokens=["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)],
                                  limit_alphabet=200, show_progress=False)
    t.train_from_iterator(corpus, trainer=trainer)
    t.post_processor = processors.BertProcessing(("</s>", t.token_to_id("</s>")), ("<s>", t.token_to_id("<s>")))
    paths.append(save_tokenizer(t, out, "sink_byte_fallback"))

    # 3: WordPiece with Whitespace, NFKC/NFD/NFC, Split removed/isolated, Metaspace, no post-processor
    t = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=20, continuing_subword_prefix="@@"))
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.NFD(), normalizers.NFC(),
                                         normalizers.Strip(left=False, right=True)])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Whitespace(), pre_tokenizers.Split(Regex(r"\p{P}"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"[A-Z]"), behavior="isolated"),
        pre_tokenizers.Metaspace(replacement="_", prepend_scheme="always", split=False),
        pre_tokenizers.Digits(individual_digits=False)])
    trainer = trainers.WordPieceTrainer(vocab_size=3000, continuing_subword_prefix="@@", special_tokens=["[UNK]"],
                                        show_progress=False)
    t.train_from_iterator(corpus, trainer=trainer)
    paths.append(save_tokenizer(t, out, "sink_wordpiece"))
    return paths


def save(tok, out, name):
    d = os.path.join(out, "hf_" + name)
    tok.save_pretrained(d)
    os.replace(os.path.join(d, "tokenizer.json"), os.path.join(out, name + ".json"))
    return name


def save_tokenizer(t, out, name):
    t.save(os.path.join(out, name + ".json"))
    return name


def edit(out, name, fn):
    p = os.path.join(out, name + ".json")
    with open(p, encoding="utf-8") as f:
        j = json.load(f)
    fn(j)
    with open(p, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)


def derive(out, base, name, fn):
    with open(os.path.join(out, base + ".json"), encoding="utf-8") as f:
        j = json.load(f)
    fn(j)
    with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    return name


# ---------------------------------------------------------------------------------------------------------------
# Reference ids
def write_case(out, case, corpus, first, second):
    tok = Tokenizer.from_file(os.path.join(out, case["tokenizer"] + ".json"))
    tok.no_truncation()
    tok.no_padding()
    tr, pad = case.get("truncation"), case.get("padding")
    if tr:
        tok.enable_truncation(tr["max_length"], strategy=tr["strategy"])
    if pad:
        tok.enable_padding(length=pad["length"], pad_id=pad["pad_id"], pad_type_id=pad["pad_type_id"],
                           pad_token=pad["pad_token"])
    inputs = [(corpus[a], corpus[b]) for a, b in zip(first, second)] if second is not None else [corpus[a] for a in first]
    add = case["add_special_tokens"]
    try:
        encs = tok.encode_batch_fast(inputs, add_special_tokens=add)
        failed = [0] * len(inputs)
    except Exception:  # a batch with a failing item (only_first truncation of a short first): one by one
        encs, failed = [], []
        for x in inputs:
            try:
                encs.append(tok.encode(*x, add_special_tokens=add) if second is not None else tok.encode(x, add_special_tokens=add))
                failed.append(0)
            except Exception:
                encs.append(None)
                failed.append(1)
    lens = np.array([0 if e is None else len(e.ids) for e in encs], dtype=np.uint64)
    offsets = np.zeros(len(encs) + 1, dtype=np.uint64)
    np.cumsum(lens, out=offsets[1:])
    ids = np.fromiter((i for e in encs if e is not None for i in e.ids), dtype=np.uint32, count=int(offsets[-1]))
    types = np.fromiter((i for e in encs if e is not None for i in e.type_ids), dtype=np.uint8, count=int(offsets[-1]))
    mask = np.fromiter((i for e in encs if e is not None for i in e.attention_mask), dtype=np.uint8, count=int(offsets[-1]))
    with open(os.path.join(out, case["name"] + ".bin"), "wb") as f:
        f.write(struct.pack("<I", len(first)))
        f.write(np.asarray(first, dtype=np.uint32).tobytes())
        if second is not None:
            f.write(np.asarray(second, dtype=np.uint32).tobytes())
        f.write(np.asarray(failed, dtype=np.uint8).tobytes())
        f.write(offsets.tobytes())
        f.write(ids.tobytes())
        f.write(types.tobytes())
        f.write(mask.tobytes())
    case["file"] = case["name"] + ".bin"
    case["count"] = len(first)
    case["failed"] = int(sum(failed))
    return case


def cases_for(n, n_small):
    clip_pad = {"length": 77, "pad_id": 49407, "pad_type_id": 0, "pad_token": "<|endoftext|>"}
    def trunc(m, s="longest_first"):
        return {"max_length": m, "strategy": s}

    def pad(length, pad_id, token):
        return {"length": length, "pad_id": pad_id, "pad_type_id": 0, "pad_token": token}
    full, small = n, n_small
    c = []

    def add(name, tokenizer, count, add_special_tokens=True, pair=False, truncation=None, padding=None):
        c.append({"name": name, "tokenizer": tokenizer, "add_special_tokens": add_special_tokens, "pair": pair,
                  "truncation": truncation, "padding": padding, "n": count})
    add("clip", "clip", full)
    add("clip_77", "clip", small, truncation=trunc(77), padding=pad(77, -1, "<|endoftext|>"))
    add("clip_no_special", "clip", small, add_special_tokens=False)
    add("gpt2", "gpt2", full)
    add("llama3", "llama3", full)
    add("llama3_77", "llama3", small, truncation=trunc(77), padding=pad(77, -1, "<|end_of_text|>"))
    add("llama3_pair", "llama3", small, pair=True)
    add("bert", "bert", full)
    add("bert_77", "bert", small, truncation=trunc(77), padding=pad(77, 0, "[PAD]"))
    add("bert_pair_longest_64", "bert", small, pair=True, truncation=trunc(64), padding=pad(64, 0, "[PAD]"))
    add("bert_pair_longest_31", "bert", small, pair=True, truncation=trunc(31))
    add("bert_pair_only_first_48", "bert", small, pair=True, truncation=trunc(48, "only_first"))
    add("bert_pair_no_special", "bert", small, pair=True, add_special_tokens=False)
    add("bert_cased", "bert_cased", small)
    add("t5", "t5", full)
    add("t5_77", "t5", small, truncation=trunc(77), padding=pad(77, 0, "<pad>"))
    add("t5_pair", "t5", small, pair=True)
    add("t5_byte_fallback", "t5_byte_fallback", small)
    add("t5_nmt_first", "t5_nmt_first", small)
    add("t5_never", "t5_never", small)
    add("sink_bpe", "sink_bpe", small)
    add("sink_bpe_pair", "sink_bpe", small, pair=True, truncation=trunc(40))
    add("sink_byte_fallback", "sink_byte_fallback", small)
    add("sink_byte_fallback_pair", "sink_byte_fallback", small, pair=True)
    add("sink_wordpiece", "sink_wordpiece", small)
    return c


def stamp_of(n):
    h = hashlib.sha256()
    with open(__file__, "rb") as f:
        h.update(f.read())
    h.update(f"{n} {tokenizers.__version__} {transformers.__version__} {spm.__version__} {np.__version__}".encode())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--captions", type=int, default=100_000)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    stamp = stamp_of(args.captions)
    stamp_file = os.path.join(out, ".stamp")
    if not args.force and os.path.isfile(stamp_file) and open(stamp_file).read().strip() == stamp:
        print(f"make_corpus: {out} is up to date")
        return 0
    if os.path.exists(stamp_file):
        os.remove(stamp_file)
    t0 = time.time()
    corpus = make_corpus(args.captions)
    write_corpus(os.path.join(out, "corpus.bin"), corpus)
    train = corpus[: min(len(corpus), 20000)]
    build_clip(train, out)
    build_gpt2(train, out)
    build_llama3(train, out)
    build_bert(train, out)
    build_t5(train, out)
    build_sinks(train, out)
    t1 = time.time()
    r = random.Random(99)
    n_small = min(len(corpus), 10000)
    cases = []
    for case in cases_for(len(corpus), n_small):
        n = case.pop("n")
        first = list(range(n)) if n == len(corpus) else sorted(r.sample(range(len(corpus)), n))
        second = [r.randrange(len(corpus)) for _ in first] if case["pair"] else None
        if case["padding"] and case["padding"]["pad_id"] < 0:  # the pad token's id in that tokenizer
            t = Tokenizer.from_file(os.path.join(out, case["tokenizer"] + ".json"))
            case["padding"]["pad_id"] = t.token_to_id(case["padding"]["pad_token"])
        cases.append(write_case(out, case, corpus, first, second))
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump({"corpus": "corpus.bin", "captions": len(corpus), "tokenizers_version": tokenizers.__version__,
                   "cases": cases}, f, indent=1)
    with open(stamp_file, "w") as f:
        f.write(stamp + "\n")
    print(f"make_corpus: {len(corpus)} captions, {len(cases)} cases in {out} "
          f"(tokenizers {t1 - t0:.1f} s, references {time.time() - t1:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
