"""Tiny from_pretrained folders with seeded random weights and tokenizers trained here (nothing downloaded):
the inputs of test_export.py. Each maker returns the folder it wrote."""
import json
import os
import random

SEED = 20240617


def captions(n=300, seed=SEED):
    rng = random.Random(seed)
    subjects = ["a red fox", "an old lighthouse", "two children", "a wooden boat", "a snowy mountain", "a city street",
                "a bowl of ramen", "a golden retriever", "a vintage car", "a robot", "an astronaut", "a stone bridge"]
    verbs = ["standing", "sleeping", "floating", "glowing", "running", "riding a horse"]
    places = ["at sunset", "in the rain", "under a starry sky", "near the river", "beside a lake", "on the beach"]
    styles = ["photograph", "oil painting", "watercolor", "35mm film", "digital art", "3d render"]
    extras = ["東京の夜景", "café crème", "🌅 sunrise", "naïve façade", "misty", "colorful lanterns"]
    out = []
    for _ in range(n):
        s = f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(places)}, {rng.choice(styles)}"
        if rng.random() < 0.3:
            s += ", " + rng.choice(extras)
        out.append(s if rng.random() < 0.7 else s.capitalize() + "!")
    return out


def make_vae(root, name="vae", sample_size=(48, 40)):
    import torch
    import diffusers

    torch.manual_seed(SEED)
    vae = diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=8, down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4,
        sample_size=list(sample_size), scaling_factor=0.5, shift_factor=0.1)
    d = os.path.join(root, name)
    vae.save_pretrained(d)
    return d


def _clip_vocab(work):
    """vocab.json + merges.txt of a byte-level BPE with CLIP's '</w>' suffix trained on the captions, in the
    files CLIP checkpoints ship (every byte symbol and its '</w>' form, the merges, then the two specials)."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tok = Tokenizer(models.BPE(end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""), behavior="removed",
                             invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.train_from_iterator(captions(), trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), end_of_word_suffix="</w>",
        show_progress=False))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in json.loads(tok.to_str())["model"]["merges"]]
    base = list(bytes_to_unicode().values())
    vocab = {}
    for s in base + [b + "</w>" for b in base] + [a + b for a, b in merges] + ["<|startoftext|>", "<|endoftext|>"]:
        vocab.setdefault(s, len(vocab))
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(work, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    return vocab


def make_clip(root, name="clip", projection=False, fast=True, max_length=77):
    """CLIPTextModel (or WithProjection) + its tokenizer: tokenizer.json when fast, else only the slow files
    (vocab.json, merges.txt, tokenizer_config.json) so that the export makes tokenizer.json."""
    import torch
    import transformers

    d = os.path.join(root, name)
    vocab = _clip_vocab(d)
    json.dump({"tokenizer_class": "CLIPTokenizer", "model_max_length": max_length, "bos_token": "<|startoftext|>",
               "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "unk_token": "<|endoftext|>"},
              open(os.path.join(d, "tokenizer_config.json"), "w"))
    if fast:
        tok = transformers.AutoTokenizer.from_pretrained(d)
        for f in ("vocab.json", "merges.txt"):
            os.remove(os.path.join(d, f))
        tok.save_pretrained(d)
    cfg = transformers.CLIPTextConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, max_position_embeddings=max_length, projection_dim=24,
                                      bos_token_id=vocab["<|startoftext|>"], eos_token_id=vocab["<|endoftext|>"],
                                      pad_token_id=vocab["<|endoftext|>"])
    torch.manual_seed(SEED + 1)
    cls = transformers.CLIPTextModelWithProjection if projection else transformers.CLIPTextModel
    cls(cfg).eval().save_pretrained(d)
    return d


def _spiece(work, **kw):
    import sentencepiece as spm

    os.makedirs(work, exist_ok=True)
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(captions()) + "\n")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(work, "spiece"), vocab_size=200,
                                   hard_vocab_limit=False, model_type="unigram", character_coverage=1.0, num_threads=1,
                                   minloglevel=2, **kw)
    os.remove(corpus)
    os.remove(os.path.join(work, "spiece.vocab"))
    return os.path.join(work, "spiece.model")


def make_t5(root, name="t5", max_length=32):
    """T5EncoderModel + spiece.model and a slow tokenizer_config.json only (the export converts it)."""
    import torch
    import transformers
    import sentencepiece as spm

    d = os.path.join(root, name)
    sp_path = _spiece(d, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)  # T5's conventions
    json.dump({"tokenizer_class": "T5Tokenizer", "extra_ids": 0, "model_max_length": max_length},
              open(os.path.join(d, "tokenizer_config.json"), "w"))
    n = spm.SentencePieceProcessor(model_file=sp_path).get_piece_size()
    cfg = transformers.T5Config(vocab_size=n, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                relative_attention_num_buckets=8, relative_attention_max_distance=32, dropout_rate=0.0,
                                feed_forward_proj="relu", pad_token_id=0, eos_token_id=1)
    torch.manual_seed(SEED + 2)
    transformers.T5EncoderModel(cfg).eval().save_pretrained(d)
    return d


def make_siglip(root, name="siglip", max_length=16):
    """SiglipTextModel + a SiglipTokenizer (SentencePiece; pad = eos = '</s>' as SigLIP's)."""
    import torch
    import transformers
    import sentencepiece as spm

    d = os.path.join(root, name)
    sp_path = _spiece(d, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)  # SiglipTokenizer pads with </s> (1)
    tok = transformers.SiglipTokenizer(vocab_file=sp_path, model_max_length=max_length)
    tok.save_pretrained(d)
    n = spm.SentencePieceProcessor(model_file=sp_path).get_piece_size()
    cfg = transformers.SiglipTextConfig(vocab_size=n, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, max_position_embeddings=max_length, projection_size=24,
                                        pad_token_id=1, eos_token_id=1, bos_token_id=None)
    torch.manual_seed(SEED + 3)
    transformers.SiglipTextModel(cfg).eval().save_pretrained(d)
    return d
