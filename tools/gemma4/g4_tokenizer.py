"""A Gemma-style tokenizer.json for the tiny Gemma 4 fixtures.

What this is: the VLM fixtures' seeded SentencePiece BPE model (tools/vlm/hf_models.py,
byte fallback) rewritten as a Hugging Face `tokenizers` BPE model with byte fallback, the
"▁" space normaliser and the SentencePiece decoder chain, as Google ships Gemma's
tokenizer.json. llama.cpp's converter reads Gemma 4's vocabulary only in that form
(gguf.LlamaHfVocab: BPE + byte_fallback + a Sequence decoder) and writes it as
tokenizer.ggml.model "gemma4". Merges are derived from the pieces as transformers'
SentencePieceExtractor does (every split of a piece into two pieces, ranked by the piece's id).
What it is not: Gemma 4's vocabulary.
"""
from __future__ import annotations

import json
import pathlib


def write(spm_model: pathlib.Path, out: pathlib.Path) -> tuple[int, int, int, int]:
    """Writes tokenizer.json + tokenizer_config.json into out/; returns (n_vocab, bos, eos, pad)."""
    import sentencepiece as spm
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    n = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    merges = []
    for piece, pid in sorted(vocab.items(), key=lambda kv: kv[1]):
        if sp.is_control(pid) or sp.is_unknown(pid) or sp.is_byte(pid) or len(piece) < 2:
            continue
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
        merges += local
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    specials = [sp.id_to_piece(i) for i in range(n)
                if sp.is_control(i) or sp.is_unknown(i) or
                (sp.id_to_piece(i).startswith("<") and sp.id_to_piece(i).endswith(">") and
                 not sp.is_byte(i) and len(sp.id_to_piece(i)) > 2)]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tok.save(str(out / "tokenizer.json"))
    bos, eos, unk = sp.bos_id(), sp.eos_id(), sp.unk_id()
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096,
           "bos_token": sp.id_to_piece(bos), "eos_token": sp.id_to_piece(eos),
           "unk_token": sp.id_to_piece(unk), "pad_token": sp.id_to_piece(unk),
           "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False}
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1, ensure_ascii=False))
    return n, bos, eos, unk
