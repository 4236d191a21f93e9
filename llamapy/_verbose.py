"""What ``Llama(verbose=True)`` prints, and where Python-side messages go.

llama-cpp-python's ``verbose=True`` (the default) lets llama.cpp print its
load log and, after each completion, its performance counters to stderr;
``verbose=False`` prints nothing. llamapy keeps that contract with its own
reports: a load summary (file, metadata, tensor types, model and context
sizes, system info) and per-completion timings in the shape of
``llama_perf_context_print`` (load, prompt eval, eval, total).

Other messages go through ``_log.emit`` (stderr with verbose, else the
"llamapy" logger).
"""
from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, TextIO

from .experts import expert_summary
from ._log import PREFIX, emit, logger  # noqa: F401 - PREFIX/logger: the reports print with them
from ._units import format_bytes, format_count
from .inspect_cmd import quantization_mix
from .system import system_info


# ------------------------------------------------------------------ timings
@dataclass
class PerfCounters:
    """Decode timings, counted as llama.cpp does: a decode of one token is an
    "eval" run, a larger one "prompt eval" tokens. ``reset`` starts a new
    measurement (each completion), the load time stays."""

    t_load_ms: float = 0.0
    t_start: float = field(default_factory=time.perf_counter)
    t_p_eval_ms: float = 0.0
    n_p_eval: int = 0
    t_eval_ms: float = 0.0
    n_eval: int = 0

    def reset(self) -> None:
        self.t_start = time.perf_counter()
        self.t_p_eval_ms = self.t_eval_ms = 0.0
        self.n_p_eval = self.n_eval = 0

    def add_decode(self, n_tokens: int, seconds: float) -> None:
        if n_tokens == 1:
            self.t_eval_ms += seconds * 1e3
            self.n_eval += 1
        elif n_tokens > 1:
            self.t_p_eval_ms += seconds * 1e3
            self.n_p_eval += n_tokens

    def report(self) -> str:
        total_ms = (time.perf_counter() - self.t_start) * 1e3

        def rate(ms: float, n: int) -> str:
            per = ms / n if n else 0.0
            tps = n / ms * 1e3 if ms > 0 else 0.0
            return f"({per:8.2f} ms per token, {tps:8.2f} tokens per second)"

        return "\n".join([
            f"{PREFIX}       load time = {self.t_load_ms:10.2f} ms",
            f"{PREFIX}prompt eval time = {self.t_p_eval_ms:10.2f} ms / {self.n_p_eval:5d} tokens "
            + rate(self.t_p_eval_ms, self.n_p_eval),
            f"{PREFIX}       eval time = {self.t_eval_ms:10.2f} ms / {self.n_eval:5d} runs   "
            + rate(self.t_eval_ms, self.n_eval),
            f"{PREFIX}      total time = {total_ms:10.2f} ms / {self.n_p_eval + self.n_eval:5d} tokens",
        ])


def print_timings(perf: PerfCounters, out: Optional[TextIO] = None) -> None:
    print(perf.report(), file=out or sys.stderr, flush=True)


# ------------------------------------------------------------------ load report
def _short(value: Any, limit: int = 72) -> str:
    if hasattr(value, "elem_type") or isinstance(value, (list, tuple)):
        if len(value) > 8:  # a vocabulary: its size, not its values
            return f"[{len(value)} values]"
        value = list(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value).replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def placement_lines(ctx: Any, format_bytes: Any) -> List[str]:
    """Where the layers run and what each device holds (Context.placement)."""
    by_device: Dict[str, int] = {}
    for part in ctx.placement():
        if part["layer"] >= 0:
            by_device[part["device"]] = by_device.get(part["device"], 0) + 1
    lines = ["layers      = " + ", ".join(f"{n} on {d}" for d, n in by_device.items())]
    for d in ctx.device_memory():
        lines.append(f"{d['device']} buffers = {format_bytes(d['total_bytes'])} (weights "
                     f"{format_bytes(d['weight_bytes'])}, KV {format_bytes(d['kv_bytes'])}, "
                     f"activations {format_bytes(d['activation_bytes'])})")
    return lines


def load_report(llama: Any) -> str:
    """The load summary ``Llama(verbose=True)`` prints."""
    gguf = llama._gguf
    md: Dict[str, Any] = gguf.metadata
    tensors = gguf.tensors
    lines: List[str] = [f"loaded meta data with {len(md)} key-value pairs and {len(tensors)} tensors from "
                        f"{llama.model_path} (GGUF V{gguf.version})"]
    for i, (key, value) in enumerate(md.items()):
        lines.append(f"- kv {i:3d}: {key:<42} {gguf.metadata_type(key):<8} = {_short(value)}")
    for name, count, size in quantization_mix(tensors):
        lines.append(f"- type {name:>6}: {count:4d} tensors ({format_bytes(size)})")
    n_params = sum(t.n_elements for t in tensors)
    n_bytes = sum(t.nbytes for t in tensors)
    bpw = n_bytes * 8 / n_params if n_params else 0.0
    model = llama.model
    lines += [
        f"file size   = {format_bytes(n_bytes)} ({bpw:.2f} BPW), {format_count(n_params)} parameters",
        "weights     = " + model.weights_placement,
        f"arch        = {model.arch}",
        f"n_layer     = {model.n_layer}",
        f"n_embd      = {model.n_embd}",
        f"n_vocab     = {llama.n_vocab()}",
        f"n_ctx_train = {model.n_ctx_train}",
    ]
    ex = expert_summary(llama.model_path, gguf)
    if ex is not None:
        lines += [
            f"n_expert    = {ex.n_expert}, {ex.n_expert_used} per token, width {ex.n_ff_exp}"
            + (f", shared width {ex.n_ff_shared}" if ex.n_ff_shared else "")
            + (f", {ex.n_dense_layers} dense layers first" if ex.n_dense_layers else ""),
            f"active      = {format_count(ex.params_active)} of {format_count(ex.params_total)} parameters per "
            f"token; weights read per token {format_bytes(ex.bytes_read_per_token)}",
        ]
    if llama._seq.ctx is not None:
        cp = llama.context_params
        lines += [
            f"n_ctx       = {llama.n_ctx()}",
            f"n_batch     = {llama.n_batch}",
            f"n_ubatch    = {llama.n_ubatch}",
            f"flash_attn  = {({-1: 'auto', 0: 'off', 1: 'on'}[cp.flash_attn])} -> {llama._ctx.attention_path}",
            f"type_k      = {cp.type_k}, type_v = {cp.type_v}",
            f"n_threads   = {llama.n_threads} (batch {llama.n_threads_batch})",
        ]
        lines += placement_lines(llama._ctx, format_bytes)
        if llama.n_ctx() < int(model.n_ctx_train):
            lines.append(f"n_ctx ({llama.n_ctx()}) < n_ctx_train ({model.n_ctx_train}): "
                         "the full capacity of the model will not be used")
    info = system_info()
    features = " | ".join(f"{k.upper()} = {int(bool(v))}" for k, v in info.get("cpu_features", {}).items())
    lines.append(f"system info: build = {info.get('build')} | active ISA = {info.get('active_isa')} | {features}")
    return "\n".join(PREFIX + line for line in lines)
