"""``llamapy.perplexity`` and ``python -m llamapy perplexity``: a model's
perplexity over a text by llama-perplexity's method, and the KL divergence of
a (quantized) model from a base model's saved log-probabilities.

The method, as llama-perplexity's: tokenize the whole text (with BOS when the
vocabulary adds one), cut the tokens into chunks of n_ctx, put BOS in place
of each chunk's first token (when the vocabulary adds BOS), evaluate each
chunk from an empty cache and score only the second half of it (every
scored token has at least n_ctx / 2 tokens of context). Several chunks go
into one batch as separate sequences when n_batch holds them (n_batch //
n_ctx of them), as there. Only the scored rows' logits are computed (the
output projection is skipped for the first half, as there, and for the last
position, whose logits llama-perplexity computes but never reads); they come from
the engine as a view (no copy when a chunk is one batch) and go straight back
to it for the log-softmax and the KL sums (llamapy._logprobs: SIMD, on the
context's thread count, the GIL released), so perplexity costs little more
than the prefill of the same tokens with those logits (benchmarks/perplexity.py).

Not here: llama-perplexity's --ppl-stride, HellaSwag, WinoGrande and
multiple-choice scoring.
"""
from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

from . import _logits_file as lf
from . import _logprobs as lp

logger = logging.getLogger("llamapy.perplexity")

DEFAULT_CTX = 512  # llama-perplexity's -c
MIN_CTX = 8  # below this a chunk scores too few tokens for the error estimates
# llama-perplexity prints the final KL statistics only over at least this many tokens.
MIN_KLD_STAT_TOKENS = 100



def _mean_and_uncertainty(s: float, s2: float, n: int) -> Tuple[float, float]:
    """Mean of a sample from its sum and sum of squares, and the mean's
    standard error (0 for fewer than 11 values)."""
    if n < 1:
        return 0.0, 0.0
    f = s / n
    var = s2 / n - f * f
    return f, (math.sqrt(var / (n - 1)) if var > 0 and n > 10 else 0.0)


def _covariance(sa: float, sb: float, sab: float, n: int) -> float:
    """Covariance of the two means (0 for fewer than 10 values)."""
    if n < 10:
        return 0.0
    return (sab / n - (sa / n) * (sb / n)) / (n - 1)


def _percentile(sorted_values: npt.NDArray[np.float32], fraction: float) -> float:
    """Linear interpolation between the sorted values' neighbours at
    fraction * (n - 1), llama-perplexity's percentile."""
    if fraction <= 0:
        return float(sorted_values[0])
    if fraction >= 1:
        return float(sorted_values[-1])
    p = fraction * (len(sorted_values) - 1)
    ip = int(p)
    p -= ip
    return float((1 - p) * sorted_values[ip] + p * sorted_values[min(ip + 1, len(sorted_values) - 1)])


def _median(sorted_values: npt.NDArray[np.float32]) -> float:
    n = len(sorted_values)
    return float(sorted_values[n // 2]) if n % 2 else float(0.5 * (sorted_values[n // 2] + sorted_values[n // 2 - 1]))


KLD_PERCENTILES = (("Maximum", 1.0), ("99.9%", 0.999), ("99.0%", 0.99), ("95.0%", 0.95), ("90.0%", 0.9),
                   ("Median", None), ("10.0%", 0.1), (" 5.0%", 0.05), (" 1.0%", 0.01), (" 0.1%", 0.001),
                   ("Minimum", 0.0))
DP_PERCENTILES = (("Maximum", 1.0), ("99.9%", 0.999), ("99.0%", 0.99), ("95.0%", 0.95), ("90.0%", 0.9),
                  ("75.0%", 0.75), ("Median", None), ("25.0%", 0.25), ("10.0%", 0.1), (" 5.0%", 0.05),
                  (" 1.0%", 0.01), (" 0.1%", 0.001), ("Minimum", 0.0))


def _quantiles(sorted_values: npt.NDArray[np.float32], table) -> Dict[str, float]:
    return {name.strip(): (_median(sorted_values) if f is None else _percentile(sorted_values, f))
            for name, f in table}


@dataclass
class KLDResult:
    """llama-perplexity's KL-divergence statistics of a model (Q) against the
    base model whose log-probabilities were saved. Values with ``_unc`` are
    standard errors. ``kld_quantiles`` / ``p_diff_quantiles`` are keyed
    "Maximum", "99.9%", ..., "Median", ..., "Minimum" (Δp as fractions, not %)."""
    count: int
    ppl: float
    ppl_unc: float
    ppl_base: float
    ppl_base_unc: float
    cor: float  # correlation of ln PPL(Q) and ln PPL(base) over the tokens
    ln_ratio: float
    ln_ratio_unc: float
    ratio: float
    ratio_unc: float
    diff: float
    diff_unc: float
    kld: float
    kld_unc: float
    kld_quantiles: Dict[str, float]
    p_diff: float
    p_diff_unc: float
    p_diff_quantiles: Dict[str, float]
    rms_p_diff: float
    rms_p_diff_unc: float
    same_top: float
    same_top_unc: float

    @classmethod
    def from_sums(cls, s: lp.KLDSums, kld_values: Optional[np.ndarray] = None,
                  p_diff_values: Optional[np.ndarray] = None) -> "KLDResult":
        """The statistics from the running sums; the quantiles from every
        token's values when given (empty without: the running estimates after
        each chunk skip sorting everything so far)."""
        n = s.count
        lppl, lppl_unc = _mean_and_uncertainty(s.sum_nll, s.sum_nll2, n)
        lbase, lbase_unc = _mean_and_uncertainty(s.sum_nll_base, s.sum_nll_base2, n)
        cov = _covariance(s.sum_nll, s.sum_nll_base, s.sum_nll_nll_base, n)
        ppl, ppl_base = math.exp(lppl), math.exp(lbase)
        ln_ratio_unc = math.sqrt(max(lppl_unc ** 2 + lbase_unc ** 2 - 2.0 * cov, 0.0))
        ppl_unc, ppl_base_unc = ppl * lppl_unc, ppl_base * lbase_unc
        diff_unc = math.sqrt(max(ppl_unc ** 2 + ppl_base_unc ** 2 - 2.0 * ppl * ppl_base * cov, 0.0))
        kld, kld_unc = _mean_and_uncertainty(s.sum_kld, s.sum_kld2, n)
        dp, dp_unc = _mean_and_uncertainty(s.sum_p_diff, s.sum_p_diff2, n)
        mse, mse_unc = _mean_and_uncertainty(s.sum_p_diff2, s.sum_p_diff4, n)
        rms = math.sqrt(mse)
        same = s.n_same_top / n if n else 0.0
        quantiles = n > 0 and kld_values is not None and p_diff_values is not None
        kv, dv = (np.sort(kld_values), np.sort(p_diff_values)) if quantiles else (None, None)
        return cls(count=n, ppl=ppl, ppl_unc=ppl_unc, ppl_base=ppl_base, ppl_base_unc=ppl_base_unc,
                   cor=cov / (lppl_unc * lbase_unc) if lppl_unc > 0 and lbase_unc > 0 else 0.0,
                   ln_ratio=lppl - lbase, ln_ratio_unc=ln_ratio_unc, ratio=math.exp(lppl - lbase),
                   ratio_unc=math.exp(lppl - lbase) * ln_ratio_unc, diff=ppl - ppl_base, diff_unc=diff_unc,
                   kld=kld, kld_unc=kld_unc, kld_quantiles=_quantiles(kv, KLD_PERCENTILES) if quantiles else {},
                   p_diff=dp, p_diff_unc=dp_unc, p_diff_quantiles=_quantiles(dv, DP_PERCENTILES) if quantiles else {},
                   rms_p_diff=rms, rms_p_diff_unc=0.5 / rms * mse_unc if rms > 0 else 0.0,
                   same_top=same, same_top_unc=math.sqrt(same * (1 - same) / (n - 1)) if n > 1 else 0.0)

    def chunk_line(self, chunk: int) -> str:
        """One row of llama-perplexity's running table (chunk, PPL, ln ratio,
        KLD, RMS Δp, same top)."""
        return (f"{chunk:4d}    {self.ppl:9.4f} ± {self.ppl_unc:9.4f}    {self.ln_ratio:10.5f} ± "
                f"{self.ln_ratio_unc:10.5f}    {self.kld:10.5f} ± {self.kld_unc:10.5f}    "
                f"{100 * self.rms_p_diff:6.3f} ± {100 * self.rms_p_diff_unc:6.3f} %    "
                f"{100 * self.same_top:6.3f} ± {100 * self.same_top_unc:6.3f} %")

    def report(self) -> str:
        """The final statistics in llama-perplexity's layout."""
        lines = ["====== Perplexity statistics ======",
                 f"Mean PPL(Q)                   : {self.ppl:10.6f} ± {self.ppl_unc:10.6f}",
                 f"Mean PPL(base)                : {self.ppl_base:10.6f} ± {self.ppl_base_unc:10.6f}",
                 f"Cor(ln(PPL(Q)), ln(PPL(base))): {100 * self.cor:6.2f}%",
                 f"Mean ln(PPL(Q)/PPL(base))     : {self.ln_ratio:10.6f} ± {self.ln_ratio_unc:10.6f}",
                 f"Mean PPL(Q)/PPL(base)         : {self.ratio:10.6f} ± {self.ratio_unc:10.6f}",
                 f"Mean PPL(Q)-PPL(base)         : {self.diff:10.6f} ± {self.diff_unc:10.6f}",
                 "", "====== KL divergence statistics ======",
                 f"Mean    KLD: {self.kld:10.6f} ± {self.kld_unc:10.6f}"]
        for name, _ in KLD_PERCENTILES:
            lines.append(f"{name:<7} KLD: {self.kld_quantiles[name.strip()]:10.6f}")
        lines += ["", "====== Token probability statistics ======",
                  f"Mean    Δp: {100 * self.p_diff:6.3f} ± {100 * self.p_diff_unc:5.3f} %"]
        for name, _ in DP_PERCENTILES:
            lines.append(f"{name:<7} Δp: {100 * self.p_diff_quantiles[name.strip()]:6.3f}%")
        lines += [f"RMS Δp    : {100 * self.rms_p_diff:6.3f} ± {100 * self.rms_p_diff_unc:5.3f} %",
                  f"Same top p: {100 * self.same_top:6.3f} ± {100 * self.same_top_unc:5.3f} %"]
        return "\n".join(lines)


@dataclass
class ChunkProgress:
    """What a progress callback gets after each chunk: chunks done of
    n_chunk, the running perplexity estimate, chunks evaluated per pass (one
    batch of chunks side by side), the seconds per pass so far and the
    estimated seconds left; with KL divergence, the statistics so far
    (without quantiles: those only in the final result)."""
    done: int
    n_chunk: int
    ppl: float
    chunks_per_pass: int
    seconds_per_pass: float
    seconds_left: float
    kld: Optional[KLDResult] = None


Progress = Callable[[ChunkProgress], None]


@dataclass
class PerplexityResult:
    """ppl ± ppl_unc (standard error) over n_scored tokens in n_chunk chunks
    of n_ctx; chunk_ppl[i] is the running estimate after chunk i + 1 (the
    numbers llama-perplexity prints as [1]..., [2]...). With KL divergence,
    ``kld`` holds those statistics and ppl is PPL(Q)."""
    ppl: float
    ppl_unc: float
    n_ctx: int
    n_chunk: int
    n_scored: int
    n_tokens: int  # tokens of the whole text (or of the base file)
    chunk_ppl: List[float] = field(default_factory=list)
    kld: Optional[KLDResult] = None
    seconds: float = 0.0


def scored_rows(pos: npt.NDArray[np.int32], n_ctx: int) -> npt.NDArray[np.bool_]:
    """The rows of a chunk whose logits perplexity reads: positions n_ctx // 2 .. n_ctx - 2
    (the last position predicts a token outside the chunk, so its logits, which
    llama-perplexity computes and never reads, are not computed here)."""
    return (pos >= n_ctx // 2) & (pos < n_ctx - 1)


# score(chunk index, logits (scored, n_vocab) float32, targets (scored,)): the logits are a
# view of the engine's buffer, valid only during the call.
Score = Callable[[int, np.ndarray, np.ndarray], None]


class _Evaluator:
    """Chunks of one token list through one context: hands each chunk's
    scored logits and the tokens they predict to a scoring function.

    It holds the engine's logits view only while scoring: a view still
    alive when the next decode starts makes the context write into a fresh
    buffer (it never writes under a reader), which for Gemma 3's vocabulary
    at -c 512 -b 2048 meant allocating and zeroing 1 GB every pass."""

    def __init__(self, llm, tokens: npt.NDArray[np.int32], n_ctx: int, n_seq: int, n_batch: int) -> None:
        self.llm, self.tokens, self.n_ctx, self.n_seq, self.n_batch = llm, tokens, n_ctx, n_seq, n_batch
        self.first = n_ctx // 2
        self.bos = int(llm.token_bos()) if llm.tokenizer_.add_bos else None
        self._rows: Optional[np.ndarray] = None  # (scored, n_vocab), only when a chunk spans batches

    def _chunk_tokens(self, chunk: int) -> npt.NDArray[np.int32]:
        t = self.tokens[chunk * self.n_ctx:(chunk + 1) * self.n_ctx].copy()
        if self.bos is not None:
            t[0] = self.bos
        return t

    def run(self, n_chunk: int, score: Score) -> None:
        """score(...) for chunks 0 .. n_chunk - 1, in order."""
        ctx, n_ctx = self.llm._ctx, self.n_ctx
        n_scored = lf.scored_per_chunk(n_ctx)
        for c0 in range(0, n_chunk, self.n_seq):
            k = min(self.n_seq, n_chunk - c0)
            ctx.kv_clear()
            if n_ctx <= self.n_batch:  # whole chunks, k sequences in one batch
                toks = np.concatenate([self._chunk_tokens(c0 + s) for s in range(k)])
                pos = np.tile(np.arange(n_ctx, dtype=np.int32), k)
                ctx.decode(tokens=toks, pos=pos, seq_ids=np.repeat(np.arange(k, dtype=np.int32), n_ctx),
                           logits=scored_rows(pos, n_ctx))
                out = ctx.get_logits_all()  # (k * n_scored, n_vocab), a view
                for s in range(k):
                    score(c0 + s, out[s * n_scored:(s + 1) * n_scored], self._targets(c0 + s))
                del out  # before the next decode (above)
            else:  # one chunk in several batches; its scored rows gathered once
                toks = self._chunk_tokens(c0)
                got = 0
                for b0 in range(0, n_ctx, self.n_batch):
                    b1 = min(n_ctx, b0 + self.n_batch)
                    pos = np.arange(b0, b1, dtype=np.int32)
                    want = scored_rows(pos, n_ctx)
                    ctx.decode(tokens=toks[b0:b1], pos=pos, seq_ids=np.zeros(b1 - b0, dtype=np.int32), logits=want)
                    n_out = int(want.sum())
                    if n_out:
                        out = ctx.get_logits_all()
                        if self._rows is None:
                            self._rows = np.empty((n_scored, out.shape[1]), dtype=np.float32)
                        self._rows[got:got + n_out] = out[:n_out]
                        got += n_out
                        del out  # before the next decode (above)
                score(c0, self._rows, self._targets(c0))

    def _targets(self, chunk: int) -> npt.NDArray[np.int32]:
        start = chunk * self.n_ctx
        return self.tokens[start + self.first + 1:start + self.n_ctx]


def open_chunked_model(model_path: str, n_ctx: int, n_batch: int, n_threads: Optional[int], n_gpu_layers: int,
                llama_kwargs: dict):
    """A Llama with room for n_batch // n_ctx chunks side by side, as
    llama-perplexity sizes its context."""
    from .llama import Llama

    if n_batch < 1:
        raise ValueError(f"n_batch must be positive, got {n_batch}")
    if n_batch >= n_ctx and n_batch % n_ctx:
        raise ValueError(f"n_batch {n_batch} must be below n_ctx {n_ctx} or a multiple of it "
                         "(llama-perplexity's rule: whole chunks side by side in one batch)")
    n_seq = max(1, n_batch // n_ctx)
    # Flash attention on, as llama-perplexity's "auto" resolves on a CPU. Ours would
    # turn it off with several sequences (so that a server reply does not depend on
    # what it is packed with), which perplexity does not need; on Gemma 3 270M the
    # explicit path's rounding moved the Q4_K_M perplexity 0.8 % from llama.cpp's.
    kw = dict(n_ctx=n_seq * n_ctx, n_batch=min(n_batch, n_seq * n_ctx), n_seq_max=n_seq, n_threads=n_threads,
              n_threads_batch=n_threads, n_gpu_layers=n_gpu_layers, flash_attn=True, verbose=False)
    kw.update(llama_kwargs)
    llm = Llama(model_path, **kw)
    if llm.tokenizer_.add_eos:
        llm.close()
        raise ValueError("this model's vocabulary appends EOS to every text; perplexity does not support that "
                         "(as llama-perplexity)")
    return llm, n_seq


def tokenize_text(llm, text: Union[str, bytes]) -> npt.NDArray[np.int32]:
    """The whole text's tokens, BOS first when the vocabulary adds it (llama-perplexity's
    common_tokenize(..., add_special=true, parse_special=false))."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return np.asarray(llm.tokenize(data, add_bos=True, special=False), dtype=np.int32)


def chunk_count(n_tokens: int, n_ctx: int, n_chunks: int, what: str) -> int:
    """How many whole n_ctx chunks of the text to evaluate (all of them for n_chunks < 0);
    ValueError for a text shorter than two chunks, as llama-perplexity / llama-imatrix say it
    (``what``: the task, for the message)."""
    if n_tokens < 2 * n_ctx:
        raise ValueError(f"you need at least {2 * n_ctx} tokens {what} with a context of {n_ctx}; the text "
                         f"tokenizes to only {n_tokens} tokens")
    n_chunk = n_tokens // n_ctx if n_chunks < 0 else min(n_chunks, n_tokens // n_ctx)
    if n_chunk < 1:
        raise ValueError(f"n_chunks must be -1 (all) or positive, got {n_chunks}")
    return n_chunk


class _Clock:
    """Seconds per pass and the time left, from the passes so far (a pass
    evaluates n_seq chunks side by side)."""

    def __init__(self, n_chunk: int, n_seq: int) -> None:
        self.t0, self.n_chunk, self.n_seq = time.perf_counter(), n_chunk, n_seq

    def progress(self, done: int, ppl: float, kld: Optional[KLDResult] = None) -> ChunkProgress:
        passes_done = -(-done // self.n_seq)
        per = (time.perf_counter() - self.t0) / passes_done
        passes_left = -(-self.n_chunk // self.n_seq) - passes_done
        return ChunkProgress(done, self.n_chunk, ppl, self.n_seq, per, per * passes_left, kld)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def perplexity(model_path: str, text: Union[str, bytes, None] = None, *, n_ctx: Optional[int] = None,
               n_chunks: int = -1, n_batch: int = 2048, n_threads: Optional[int] = None, n_gpu_layers: int = 0,
               kl_divergence_base: Optional[str] = None, kl_divergence: bool = False,
               progress: Optional[Progress] = None, **llama_kwargs) -> PerplexityResult:
    """Perplexity of the model at `model_path` over `text`, llama-perplexity's way.

    n_ctx: tokens per chunk (default 512); n_chunks: at most this many chunks (-1: all the
    text holds); n_batch: tokens per batch (n_batch // n_ctx chunks side by
    side). ``kl_divergence_base=PATH`` alone also saves the model's
    log-probabilities there (llama-perplexity's file); with
    ``kl_divergence=True`` that file is read instead, `text` is not needed
    (the file holds the tokens), its n_ctx is used, and the result's ``kld``
    holds the KL statistics against it. Other keywords go to Llama.

    Raises ValueError for a text shorter than 2 * n_ctx tokens and for a base
    file from another vocabulary or context size."""
    if kl_divergence:
        if not kl_divergence_base:
            raise ValueError("kl_divergence needs kl_divergence_base: the base model's log-probabilities file")
        return _kl_divergence(model_path, kl_divergence_base, n_ctx=n_ctx, n_chunks=n_chunks, n_batch=n_batch,
                              n_threads=n_threads, n_gpu_layers=n_gpu_layers, progress=progress,
                              llama_kwargs=llama_kwargs)
    if text is None:
        raise ValueError("perplexity needs a text")
    n_ctx = DEFAULT_CTX if n_ctx is None else n_ctx
    if n_ctx < MIN_CTX:
        raise ValueError(f"n_ctx must be at least {MIN_CTX} (a chunk scores its second half), got {n_ctx}")
    llm, n_seq = open_chunked_model(model_path, n_ctx, n_batch, n_threads, n_gpu_layers, llama_kwargs)
    try:
        tokens = tokenize_text(llm, text)
        n_chunk = chunk_count(len(tokens), n_ctx, n_chunks, "to evaluate perplexity")
        logger.info("calculating perplexity over %d chunks, n_ctx=%d, batch_size=%d, n_seq=%d",
                    n_chunk, n_ctx, n_batch, n_seq)
        return _run_perplexity(llm, tokens, n_ctx, n_chunk, n_seq, n_batch, kl_divergence_base, progress)
    finally:
        llm.close()


def _run_perplexity(llm, tokens, n_ctx, n_chunk, n_seq, n_batch, base_path, progress) -> PerplexityResult:
    ev = _Evaluator(llm, tokens, n_ctx, n_seq, n_batch)
    clock, nll, nll2, count, running = _Clock(n_chunk, n_seq), 0.0, 0.0, 0, []
    out_f, tmp_path = None, None
    words, threads = lp.row_words(llm.n_vocab()), llm.n_threads_batch
    try:
        if base_path:
            # Written under a temporary name and renamed at the end: an interrupted
            # run leaves no file that looks complete.
            tmp_path = f"{base_path}.tmp{os.getpid()}"
            out_f = open(tmp_path, "wb")
            lf.write_header(out_f, n_ctx, llm.n_vocab(), tokens[:n_chunk * n_ctx])
            stored = np.zeros((lf.scored_per_chunk(n_ctx), words), dtype=np.uint16)
        def score(chunk: int, logits: np.ndarray, targets: np.ndarray) -> None:
            nonlocal nll, nll2, count
            if logits.shape[1] != llm.n_vocab():
                raise ValueError(f"the model's logits have {logits.shape[1]} columns for a vocabulary of "
                                 f"{llm.n_vocab()}")
            if out_f is not None:
                v = lp.quantize_rows(logits, targets, stored, threads)
                out_f.write(stored)  # the array's buffer, no copy
            else:
                v = lp.nll(logits, targets, threads)
            nll += float(v.sum())
            nll2 += float((v * v).sum())
            count += len(targets)
            running.append(math.exp(nll / count))
            if progress is not None:
                progress(clock.progress(chunk + 1, running[-1]))
        ev.run(n_chunk, score)
        if out_f is not None:
            out_f.close()
            out_f = None
            os.replace(tmp_path, base_path)
            tmp_path = None
    finally:
        if out_f is not None:
            out_f.close()
        if tmp_path is not None and os.path.exists(tmp_path):
            os.unlink(tmp_path)
    mean, var = nll / count, nll2 / count - (nll / count) ** 2
    ppl = math.exp(mean)
    unc = ppl * math.sqrt(var / (count - 1)) if var > 0 else 0.0
    return PerplexityResult(ppl=ppl, ppl_unc=unc, n_ctx=n_ctx, n_chunk=n_chunk, n_scored=count,
                            n_tokens=len(tokens), chunk_ppl=running, seconds=clock.elapsed())


def _kl_divergence(model_path: str, base_path: str, *, n_ctx: Optional[int], n_chunks: int, n_batch: int,
                   n_threads: Optional[int], n_gpu_layers: int, progress: Optional[Progress],
                   llama_kwargs: dict) -> PerplexityResult:
    with open(base_path, "rb") as f:
        head = lf.read_header(f, base_path)
        if n_ctx and n_ctx != head.n_ctx:
            raise ValueError(f"{base_path} was computed with a context of {head.n_ctx} tokens, not {n_ctx}: "
                             f"run with -c {head.n_ctx}")
        size = os.fstat(f.fileno()).st_size
        want = lf.expected_size(head.n_ctx, head.n_vocab, head.n_chunk)
        if size != want:
            raise ValueError(f"{base_path} has {size} bytes where its header promises {want} "
                             f"({head.n_chunk} chunks of {head.n_ctx}, vocabulary {head.n_vocab})")
        n_chunk = head.n_chunk if n_chunks < 0 else min(n_chunks, head.n_chunk)
        if n_chunk < 1:
            raise ValueError(f"n_chunks must be -1 (all) or positive, got {n_chunks}")
        llm, n_seq = open_chunked_model(model_path, head.n_ctx, n_batch, n_threads, n_gpu_layers, llama_kwargs)
        try:
            if head.n_vocab != llm.n_vocab():
                raise ValueError(f"{base_path} comes from a model with a vocabulary of {head.n_vocab} tokens; "
                                 f"this model has {llm.n_vocab()} (inconsistent vocabulary)")
            bad = (head.tokens < 0) | (head.tokens >= llm.n_vocab())
            if bad.any():
                raise ValueError(f"{base_path} holds token ids outside this vocabulary (e.g. {head.tokens[bad][0]})")
            logger.info("computing KL divergence over %d chunks, n_ctx=%d, batch_size=%d, n_seq=%d",
                        n_chunk, head.n_ctx, n_batch, n_seq)
            return _run_kld(llm, f, head, base_path, n_chunk, n_seq, n_batch, progress)
        finally:
            llm.close()


def _run_kld(llm, f, head, base_path, n_chunk, n_seq, n_batch, progress) -> PerplexityResult:
    ev = _Evaluator(llm, head.tokens, head.n_ctx, n_seq, n_batch)
    clock, sums = _Clock(n_chunk, n_seq), lp.KLDSums()
    n_scored = lf.scored_per_chunk(head.n_ctx)
    kld_values = np.empty(n_scored * n_chunk, dtype=np.float32)
    p_diff_values = np.empty(n_scored * n_chunk, dtype=np.float32)
    running = []

    def score(chunk: int, logits: np.ndarray, targets: np.ndarray) -> None:
        base = lf.read_chunk_rows(f, head, chunk, base_path)
        o = chunk * n_scored
        k, d = lp.kl_divergence_rows(logits, base, targets, sums, llm.n_threads_batch)
        kld_values[o:o + len(k)] = k
        p_diff_values[o:o + len(d)] = d
        so_far = KLDResult.from_sums(sums)
        running.append(so_far.ppl)
        if progress is not None:
            progress(clock.progress(chunk + 1, so_far.ppl, so_far))
    ev.run(n_chunk, score)
    kld = KLDResult.from_sums(sums, kld_values, p_diff_values)
    return PerplexityResult(ppl=kld.ppl, ppl_unc=kld.ppl_unc, n_ctx=head.n_ctx, n_chunk=n_chunk,
                            n_scored=sums.count, n_tokens=len(head.tokens), chunk_ppl=running, kld=kld,
                            seconds=clock.elapsed())


def read_text_file(path: str) -> bytes:
    """The file's bytes less one trailing newline, as llama-perplexity's -f."""
    with open(path, "rb") as f:
        data = f.read()
    return data[:-1] if data.endswith(b"\n") else data


def run_cli(args, model_path: str) -> int:
    """``python -m llamapy perplexity``: llama-perplexity's output. The
    running estimates and the results go to stdout, timing to stderr."""
    import sys

    out, err = sys.stdout, sys.stderr
    if args.kl_divergence and not args.kl_divergence_base:
        raise ValueError("--kl-divergence needs --kl-divergence-base FILE (the base model's log-probabilities)")
    if not args.kl_divergence and not args.file:
        raise ValueError("give the text with -f FILE")
    if args.kl_divergence_base and not args.kl_divergence:
        print(f"perplexity: saving all logits to {args.kl_divergence_base}", file=err)

    def progress(p: ChunkProgress) -> None:
        if p.done == min(p.chunks_per_pass, p.n_chunk):  # the first pass, as llama-perplexity
            print(f"perplexity: {p.seconds_per_pass:.2f} seconds per pass - ETA {p.seconds_left / 60:.2f} minutes",
                  file=err, flush=True)
        if p.done == 1 and p.kld is not None:
            print("\nchunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence"
                  "              Δp RMS            Same top p", file=out)
        if p.kld is not None:
            print(p.kld.chunk_line(p.done), file=out, flush=True)
        else:
            print(f"[{p.done}]{p.ppl:.4f},", end="", file=out, flush=True)

    res = perplexity(model_path, None if args.kl_divergence else read_text_file(args.file),
                     n_ctx=args.ctx_size,
                     n_chunks=args.chunks, n_batch=args.batch_size, n_threads=args.threads or None,
                     n_gpu_layers=args.n_gpu_layers, kl_divergence_base=args.kl_divergence_base,
                     kl_divergence=args.kl_divergence, progress=progress)
    print(file=out)
    if res.kld is not None:
        if res.kld.count >= MIN_KLD_STAT_TOKENS:  # llama-perplexity's floor for the statistics
            print(res.kld.report(), file=out)
        else:
            print(f"({res.kld.count} scored tokens: too few for the final statistics, which need "
                  f"{MIN_KLD_STAT_TOKENS})", file=out)
    else:
        print(f"Final estimate: PPL = {res.ppl:.4f} +/- {res.ppl_unc:.5f}", file=out)
    print(f"perplexity: {res.n_chunk} chunks of {res.n_ctx} tokens, {res.n_scored} scored, in "
          f"{res.seconds:.2f} s ({res.n_chunk * res.n_ctx / max(res.seconds, 1e-9):.1f} tokens/s)", file=err)
    return 0
