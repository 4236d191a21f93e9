"""Regenerates tests/data/rerank/: tiny random rerankers as GGUFs and llama.cpp's scores.

Usage (from the repo root; needs torch 2.13 CPU, transformers 5, tokenizers, sentencepiece,
protobuf, safetensors, numpy and llama-cpp-python 0.3.36, with its sdist unpacked for the
converter; none of this is a llamapy dependency):

    python tools/make_rerank_fixtures.py --sdist /tmp/llama_cpp_python-0.3.36 [--work /tmp/rerankw]

Three families, all seeded, hidden size 64, two layers:
- xlmr: XLMRobertaForSequenceClassification (num_labels 1, bge-reranker's shape): a unigram
  SentencePiece vocabulary (sentencepiece.bpe.model + the fast tokenizer's tokenizer.json, so
  the converter writes add_bos / add_eos / add_sep as for bge-reranker-v2-m3).
- bert: BertForSequenceClassification (num_labels 1, ms-marco cross-encoders' shape): a
  WordPiece vocabulary. llama.cpp's converter drops BERT's pooler, so its score is
  out_proj([CLS] state) and not transformers' logit; the cross-check below computes that.
- qwen3: a Qwen3ForCausalLM in a folder named "qwen3-reranker-tiny", which the converter turns
  into a Qwen3-Reranker GGUF (cls.output = the LM head's "yes" / "no" rows, pooling rank, the
  "rerank" chat template), on the MoE fixtures' byte-level BPE (tools/moe/tokenizer.py) with
  "yes" and "no" added.
Steps: HF checkpoint -> convert_hf_to_gguf.py --outtype f32 (tools/moe/tokpre_shim.py for the
BPE / WordPiece vocabularies) -> for each (query, document) the prompt as llama-server's
format_prompt_rerank builds it, through llama.cpp's own tokenizer and special-token flags, and
the n_cls_out scores llama.cpp's pooling rank gives for it (llama-cpp-python 0.3.36's
low-level API) -> the same token ids through transformers (hf_max_abs_diff) -> record.json and
manifest.json. This script is a fixture generator, not part of llamapy.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "moe"))

import hf_models  # noqa: E402  (tools/moe: randomize)
import tokenizer as moe_tok  # noqa: E402  (tools/moe: the shared tiny BPE)

REPO = HERE.parent
DATA = REPO / "tests" / "data" / "rerank"
FAMILIES = ["xlmr", "bert", "qwen3"]
N_THREADS = 2
N_CTX = 512

QUERY = "what does a reranker do?"
DOCUMENTS = [
    "a reranker scores a query against each document.",
    "the quick brown fox jumps over the lazy dog.",
    "héllo wörld, ça va?",
    "rerankers score documents; the best one comes first",
    "a mixture of experts routes every token to a few experts.",
]

CORPUS = ("the quick brown fox jumps over the lazy dog. a reranker scores a query against each "
          "document and the best one comes first. what does a mixture of experts do? it routes "
          "every token to a few experts. héllo wörld, ça va? rerankers, embeddings and search.\n")


# --------------------------------------------------------------------------- checkpoints
def _small(cfg_cls, **kw):
    base = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    base.update(kw)
    return cfg_cls(**base)


def build_xlmr(out: pathlib.Path, work: pathlib.Path) -> dict:
    import sentencepiece as spm
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification
    from transformers.convert_slow_tokenizer import XLMRobertaConverter

    out.mkdir(parents=True, exist_ok=True)
    sp_dir = work / "spm_unigram"
    sp_dir.mkdir(parents=True, exist_ok=True)
    (sp_dir / "corpus.txt").write_text(CORPUS * 40)
    spm.SentencePieceTrainer.train(
        input=str(sp_dir / "corpus.txt"), model_prefix=str(sp_dir / "sp"), vocab_size=150,
        model_type="unigram", character_coverage=1.0, num_threads=1, shuffle_input_sentence=False,
        hard_vocab_limit=False, unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    shutil.copy(sp_dir / "sp.model", out / "sentencepiece.bpe.model")

    class _Slow:  # what XLMRobertaConverter reads of a slow tokenizer (fairseq's first four ids)
        vocab_file = str(out / "sentencepiece.bpe.model")

        @staticmethod
        def convert_tokens_to_ids(t: str) -> int:
            return {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}[t]

    fast = XLMRobertaConverter(_Slow()).converted()
    fast.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "XLMRobertaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
        "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>", "pad_token": "<pad>",
        "mask_token": "<mask>", "model_max_length": 64}, indent=1))
    n_vocab = fast.get_vocab_size()
    cfg = _small(XLMRobertaConfig, vocab_size=n_vocab, max_position_embeddings=66, type_vocab_size=1,
                 pad_token_id=1, bos_token_id=0, eos_token_id=2, num_labels=1, layer_norm_eps=1e-5)
    import torch
    torch.manual_seed(0)
    model = XLMRobertaForSequenceClassification(cfg).eval()
    hf_models.randomize(model, 601)
    model.save_pretrained(out)
    return json.loads((out / "config.json").read_text())


def build_bert(out: pathlib.Path, work: pathlib.Path) -> dict:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification

    out.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = sorted({w for w in CORPUS.lower().replace(".", " . ").replace(",", " , ")
                    .replace("?", " ? ").replace(";", " ; ").split()})
    pieces = ["##s", "##er", "##ing", "##ed", "re", "##rank", "##ers"]
    chars = sorted({c for c in CORPUS.lower() if not c.isspace()})
    vocab = specials + words + pieces + chars + ["##" + c for c in chars]
    seen, uniq = set(), []
    for v in vocab:
        if v not in seen:
            seen.add(v)
            uniq.append(v)
    (out / "vocab.txt").write_text("\n".join(uniq) + "\n")
    tok = Tokenizer(models.WordPiece({v: i for i, v in enumerate(uniq)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=None, clean_text=True,
                                                handle_chinese_chars=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    cls_id, sep_id = uniq.index("[CLS]"), uniq.index("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "BertTokenizer", "do_lower_case": True, "cls_token": "[CLS]",
        "sep_token": "[SEP]", "unk_token": "[UNK]", "pad_token": "[PAD]", "mask_token": "[MASK]",
        "model_max_length": 64}, indent=1))
    cfg = _small(BertConfig, vocab_size=len(uniq), max_position_embeddings=64, type_vocab_size=2,
                 num_labels=1, pad_token_id=0)
    model = BertForSequenceClassification(cfg).eval()
    hf_models.randomize(model, 602)
    model.save_pretrained(out)
    return json.loads((out / "config.json").read_text())


def build_qwen3(out: pathlib.Path, work: pathlib.Path) -> dict:
    from tokenizers import AddedToken, Tokenizer
    from transformers import Qwen3Config, Qwen3ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    base = moe_tok.train(work)
    tok = Tokenizer.from_file(str(base))
    # the real vocabulary has "yes" / "no" as ordinary tokens; here they are added ones
    tok.add_tokens([AddedToken("yes", normalized=False), AddedToken("no", normalized=False)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096, "bos_token": None,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "add_bos_token": False,
        "clean_up_tokenization_spaces": False}, indent=1))
    cfg = _small(Qwen3Config, vocab_size=tok.get_vocab_size(), num_key_value_heads=2, head_dim=16,
                 max_position_embeddings=512, tie_word_embeddings=False, rms_norm_eps=1e-6)
    model = Qwen3ForCausalLM(cfg).eval()
    hf_models.randomize(model, 603)
    model.save_pretrained(out)
    return json.loads((out / "config.json").read_text())


BUILDERS = {"xlmr": build_xlmr, "bert": build_bert, "qwen3": build_qwen3}
HF_DIRS = {"xlmr": "xlmr-reranker-tiny", "bert": "bert-reranker-tiny", "qwen3": "qwen3-reranker-tiny"}
TOKPRE = {"xlmr": None, "bert": "default", "qwen3": "qwen2"}


def convert(fam: str, hf_dir: pathlib.Path, out: pathlib.Path, sdist: pathlib.Path,
            work: pathlib.Path) -> pathlib.Path:
    lc = sdist / "vendor" / "llama.cpp"
    env = dict(os.environ, PYTHONPATH=str(lc / "gguf-py"))
    dst = out / f"{fam}-reranker-f32.gguf"
    cmd = [sys.executable]
    if TOKPRE[fam] is not None:
        cmd += [str(HERE / "moe" / "tokpre_shim.py"), TOKPRE[fam]]
    cmd += [str(lc / "convert_hf_to_gguf.py"), str(hf_dir), "--outtype", "f32", "--outfile", str(dst)]
    log = work / f"{fam}-convert.log"
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if rc != 0:
        raise RuntimeError(f"convert {fam} failed (rc={rc}), see {log}")
    return dst


# --------------------------------------------------------------------------- llama.cpp
def _tokenize(lc, vocab, text: str, add_special: bool, parse_special: bool) -> list:
    raw = text.encode("utf-8")
    buf = (lc.llama_token * (len(raw) + 16))()
    n = lc.llama_tokenize(vocab, raw, len(raw), buf, len(buf), add_special, parse_special)
    if n < 0:
        raise RuntimeError("llama_tokenize failed")
    return list(buf[:n])


def rerank_prompt(llm, query: str, doc: str) -> list:
    """The tokens of llama-server's format_prompt_rerank (tools/server/server-common.cpp) for
    one pair, through llama.cpp's API: the model's "rerank" chat template with {query} and
    {document} replaced (tokenized without added specials, special tokens parsed), else BOS?
    query EOS? SEP? doc EOS? by the vocabulary's add_bos / add_eos / add_sep flags."""
    import llama_cpp as lc

    model = llm._model.model
    vocab = lc.llama_model_get_vocab(model)
    tmpl = lc.llama_model_chat_template(model, b"rerank")
    if tmpl:
        prompt = tmpl.decode("utf-8").replace("{query}", query).replace("{document}", doc)
        return _tokenize(lc, vocab, prompt, False, True)
    eos = lc.llama_vocab_eos(vocab)
    if eos == -1:
        eos = lc.llama_vocab_sep(vocab)
    out = []
    if lc.llama_vocab_get_add_bos(vocab):
        out.append(lc.llama_vocab_bos(vocab))
    out += _tokenize(lc, vocab, query, False, False)
    if lc.llama_vocab_get_add_eos(vocab):
        out.append(eos)
    if lc.llama_vocab_get_add_sep(vocab):
        out.append(lc.llama_vocab_sep(vocab))
    out += _tokenize(lc, vocab, doc, False, False)
    if lc.llama_vocab_get_add_eos(vocab):
        out.append(eos)
    return out


def scores_of(llm, tokens: list, n_cls_out: int) -> list:
    """llama.cpp's pooled rank output (n_cls_out floats) for one sequence, as sequence 0."""
    import llama_cpp as lc

    lc.llama_memory_clear(lc.llama_get_memory(llm._ctx.ctx), True)
    llm._batch.set_batch(tokens, n_past=0, logits_all=True)
    llm._ctx.decode(llm._batch)
    ptr = lc.llama_get_embeddings_seq(llm._ctx.ctx, 0)
    if not ptr:
        raise RuntimeError("llama_get_embeddings_seq returned NULL")
    return [float(ptr[i]) for i in range(n_cls_out)]


def record(path: pathlib.Path) -> dict:
    import llama_cpp as lc
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), embedding=True, pooling_type=lc.LLAMA_POOLING_TYPE_RANK,
                n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, n_threads=N_THREADS,
                n_threads_batch=N_THREADS, verbose=False)
    n_cls_out = int(lc.llama_model_n_cls_out(llm._model.model))
    tmpl = lc.llama_model_chat_template(llm._model.model, b"rerank")
    vocab = lc.llama_model_get_vocab(llm._model.model)
    pairs = []
    for i, doc in enumerate(DOCUMENTS):
        toks = rerank_prompt(llm, QUERY, doc)
        pairs.append({"index": i, "document": doc, "tokens": toks, "scores": scores_of(llm, toks, n_cls_out)})
    # what llama.cpp gives for a plain text embedded with pooling rank (tokenized with its
    # specials added, as Llama.embed does; llama-cpp-python's own embed() would read n_embd
    # floats of the n_cls_out it has, so the low-level API is used here)
    embeds = [{"text": t, "tokens": (toks := _tokenize(lc, vocab, t, True, False)),
               "scores": scores_of(llm, toks, n_cls_out)} for t in (QUERY, DOCUMENTS[0])]
    # llama-server's relevance_score is the first of them (send_rerank: embd[0])
    ranked = sorted(pairs, key=lambda p: -p["scores"][0])
    return {"n_cls_out": n_cls_out, "rerank_template": tmpl.decode() if tmpl else None,
            "add_bos": bool(lc.llama_vocab_get_add_bos(vocab)),
            "add_eos": bool(lc.llama_vocab_get_add_eos(vocab)),
            "add_sep": bool(lc.llama_vocab_get_add_sep(vocab)),
            "pairs": pairs, "order": [p["index"] for p in ranked], "embed": embeds}


# --------------------------------------------------------------------------- cross-check
def hf_check(fam: str, hf_dir: pathlib.Path, rec: dict) -> float:
    """max |llama.cpp - transformers| over the recorded pairs, on the same token ids."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    diffs = []
    with torch.no_grad():
        if fam == "qwen3":
            m = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
            from transformers import AutoTokenizer
            t = AutoTokenizer.from_pretrained(hf_dir)
            yes, no = t.convert_tokens_to_ids("yes"), t.convert_tokens_to_ids("no")
        else:
            m = AutoModelForSequenceClassification.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
        for p in rec["pairs"]:
            ids = torch.tensor([p["tokens"]])
            if fam == "qwen3":
                h = m.model(input_ids=ids).last_hidden_state[0, -1]
                w = m.lm_head.weight
                got = torch.softmax(torch.stack([w[yes] @ h, w[no] @ h]), 0).tolist()
            elif fam == "bert":
                # llama.cpp's BERT head: out_proj of the [CLS] state (the pooler is not converted)
                h = m.bert(input_ids=ids).last_hidden_state[0, 0]
                got = [float(m.classifier(h))]
            else:
                got = m(input_ids=ids).logits[0].tolist()
            diffs += [abs(a - b) for a, b in zip(got, p["scores"])]
    return max(diffs)


# --------------------------------------------------------------------------- main
def write_manifest() -> None:
    import hashlib

    entries = {}
    for p in sorted(DATA.rglob("*")):
        if p.is_file() and p.name not in ("manifest.json", "README.md"):
            entries[str(p.relative_to(DATA))] = {"bytes": p.stat().st_size,
                                                 "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
    (DATA / "manifest.json").write_text(json.dumps(entries, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=pathlib.Path, required=True)
    ap.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/rerankw"))
    ap.add_argument("--families", default=",".join(FAMILIES))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    import importlib.metadata as md

    DATA.mkdir(parents=True, exist_ok=True)
    rec_path = DATA / "record.json"
    result = json.loads(rec_path.read_text()) if rec_path.exists() else {"families": {}}
    result.update({"reference": "llama-cpp-python 0.3.36 (llama.cpp vendored in it), CPU, AVX2 build",
                   "query": QUERY, "documents": DOCUMENTS, "n_threads": N_THREADS, "n_ctx": N_CTX,
                   "versions": {p: md.version(p) for p in ("torch", "transformers", "tokenizers",
                                                           "sentencepiece", "llama_cpp_python")}})
    for fam in args.families.split(","):
        print(f"[{fam}]", flush=True)
        hf_dir = args.work / "hf" / HF_DIRS[fam]
        shutil.rmtree(hf_dir, ignore_errors=True)
        cfg = BUILDERS[fam](hf_dir, args.work)
        gguf = convert(fam, hf_dir, DATA, args.sdist, args.work)
        rec = record(gguf)
        rec["file"] = gguf.name
        rec["hf_max_abs_diff"] = hf_check(fam, hf_dir, rec)
        rec["hf_config"] = {k: cfg[k] for k in ("architectures", "hidden_size", "num_hidden_layers",
                                                  "num_attention_heads", "vocab_size") if k in cfg}
        result["families"][fam] = rec
        print(f"  scores {[p['scores'] for p in rec['pairs']]}  hf diff {rec['hf_max_abs_diff']:.2e}",
              flush=True)
    rec_path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    write_manifest()


if __name__ == "__main__":
    main()
