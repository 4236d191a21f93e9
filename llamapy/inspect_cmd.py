"""``python -m llamapy inspect FILE``: a human-readable summary of a GGUF file.

Prints the header facts, the model's hyperparameters as stored in the
metadata, the files of a split model, the quantization mix and the tensor
table. Reads only metadata and the tensor table (never tensor data), so it is
instant even on big files.
Not here: argument parsing (llamapy/cli.py) or any validation beyond what
GGUFFile does.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from typing import Any, Dict, List, Optional, TextIO, Tuple

from ._engine import GGUFError
from .experts import expert_summary
from .gguf_file import GGUFFile, TensorInfo
from ._units import format_bytes, format_count
from .memory_plan import plan_memory


def _format_value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, (list, tuple)) or hasattr(v, "elem_type"):
        items = list(v[:8])
        more = f", ... ({len(v)} values)" if len(v) > 8 else ""
        return "[" + ", ".join(str(x) for x in items) + more + "]"
    return str(v)


def quantization_mix(tensors: List[TensorInfo]) -> List[Tuple[str, int, int]]:
    """[(type name, tensor count, bytes)], largest total first."""
    count: Dict[str, int] = defaultdict(int)
    size: Dict[str, int] = defaultdict(int)
    for t in tensors:
        count[t.type_name] += 1
        size[t.type_name] += t.nbytes
    return sorted(((name, count[name], size[name]) for name in count), key=lambda r: (-r[2], r[0]))


def _summary_rows(f: GGUFFile) -> List[Tuple[str, str]]:
    md = f.metadata
    arch = f.architecture
    tokens = md.get("tokenizer.ggml.tokens")

    def arch_key(suffix: str) -> Any:
        return md.get(f"{arch}.{suffix}") if arch else None

    n_params = sum(t.n_elements for t in f.tensors)
    return [
        ("file", f.path),
        ("size", f"{format_bytes(f.size)} ({f.size} bytes)"),
        ("GGUF version", str(f.version)),
        ("architecture", arch or "-"),
        ("name", _format_value(md.get("general.name"))),
        ("parameters", f"{format_count(n_params)} ({n_params})"),
        ("context length", _format_value(arch_key("context_length"))),
        ("embedding length", _format_value(arch_key("embedding_length"))),
        ("block count", _format_value(arch_key("block_count"))),
        ("attention heads", _format_value(arch_key("attention.head_count"))),
        ("KV heads", _format_value(arch_key("attention.head_count_kv"))),
        ("vocabulary size", str(len(tokens)) if tokens is not None and hasattr(tokens, "__len__") else "-"),
        ("tokenizer model", _format_value(md.get("tokenizer.ggml.model"))),
        ("chat template", "present" if md.get("tokenizer.chat_template") else "absent"),
        ("tensors", str(len(f.tensors))),
    ] + _expert_rows(f)


def _expert_rows(f: GGUFFile) -> List[Tuple[str, str]]:
    """A mixture of experts' experts, active parameters and bytes read per token."""
    try:
        ex = expert_summary(f.path, f)
    except (ValueError, NotImplementedError):  # an architecture or file the engine does not run
        return []
    if ex is None:
        return []
    experts = f"{ex.n_expert}, {ex.n_expert_used} per token, width {ex.n_ff_exp}"
    if ex.n_ff_shared:
        experts += f", shared width {ex.n_ff_shared}"
    if ex.n_dense_layers:
        experts += f", {ex.n_dense_layers} dense layers first"
    return [("experts", experts),
            ("active parameters", f"{format_count(ex.params_active)} of {format_count(ex.params_total)} per token"),
            ("read per token", f"{format_bytes(ex.bytes_read_per_token)} of weights")]


def _print_parts(f: GGUFFile, out: TextIO) -> None:
    parts = f.parts
    print(f"split into {len(parts)} files:", file=out)
    for p in parts:
        print(f"  {p.index + 1:>5}  {p.path}  {format_bytes(p.size):>12}  {p.n_tensors:>6} tensors", file=out)


def _print_mix(f: GGUFFile, out: TextIO) -> None:
    print("quantization mix:", file=out)
    total = sum(t.nbytes for t in f.tensors) or 1
    for name, n, nbytes in quantization_mix(f.tensors):
        print(f"  {name:<8} {n:>6} tensors  {format_bytes(nbytes):>12}  {100 * nbytes / total:5.1f}%", file=out)


def _print_tensors(f: GGUFFile, out: TextIO) -> None:
    width = max((len(t.name) for t in f.tensors), default=4)
    split = len(f.parts) > 1  # a column saying which file holds each tensor
    print(f"{'name':<{width}}  {'type':<8} {'shape':<22} {'size':>12}" + ("  part" if split else ""), file=out)
    for t in f.tensors:
        shape = "(" + ", ".join(str(d) for d in t.shape) + ")"
        print(f"{t.name:<{width}}  {t.type_name:<8} {shape:<22} {format_bytes(t.nbytes):>12}" +
              (f"  {t.part + 1:>4}" if split else ""), file=out)


def run_inspect(path: str, out: Optional[TextIO] = None, show_tensors: bool = True) -> int:
    """Print a summary of the GGUF file at `path` to `out`; return an exit status."""
    out = out if out is not None else sys.stdout
    try:
        with GGUFFile(path) as f:
            rows = _summary_rows(f)
            width = max(len(k) for k, _ in rows)
            for key, value in rows:
                print(f"{key + ':':<{width + 1}} {value}", file=out)
            if len(f.parts) > 1:
                _print_parts(f, out)
            _print_mix(f, out)
            if show_tensors:
                print(file=out)
                _print_tensors(f, out)
    except BrokenPipeError:
        raise  # the reader went away (| head): the CLI exits quietly
    except (GGUFError, OSError) as e:
        print(f"error: {e}", file=sys.stderr if out is sys.stdout else out)
        return 1
    return 0


def run_plan(path: str, out: Optional[TextIO] = None, **options: Any) -> int:
    """Print ``llamapy.plan_memory(path, **options)``; return an exit status."""

    out = out if out is not None else sys.stdout
    try:
        plan = plan_memory(path, **options)
    except (GGUFError, OSError, ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr if out is sys.stdout else out)
        return 1
    swa = f" + {plan.kv_swa_cells} sliding-window cells" if plan.kv_swa_cells else ""
    rows = [
        ("file", plan.model_path),
        ("context", f"n_ctx {plan.n_ctx}, {plan.n_parallel} sequence(s), n_batch {plan.n_batch}, "
                    f"n_ubatch {plan.n_ubatch}, flash attention {'on' if plan.flash_attn else 'off'}"),
        ("weights", format_bytes(plan.weights_bytes)),
        ("KV cache", f"{format_bytes(plan.kv_bytes)} ({plan.type_k}/{plan.type_v}, {plan.kv_cells} cells{swa})"),
        ("compute buffers", format_bytes(plan.compute_bytes)),
        ("runtime (vocab, metadata, outputs)", format_bytes(plan.runtime_bytes)),
    ]
    if plan.mmproj_bytes:
        rows.append(("mmproj", format_bytes(plan.mmproj_bytes)))
    rows.append(("total", f"{format_bytes(plan.total_bytes)} ({plan.total_bytes} bytes)"))
    for d in plan.devices:
        rows.append((f"device {d['device']}", format_bytes(d["total_bytes"])))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key + ':':<{width + 1}} {value}", file=out)
    return 0
