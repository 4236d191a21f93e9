"""``python -m llamapy batch embed|complete|caption|rerank``: a batch job over Parquet or JSONL
files on Ray Data (the actors of ``batch.py``), resumable.

Input: one file, or a folder of ``.parquet`` / ``.jsonl`` / ``.json`` files (not recursive).
Output: a folder with, per input file NAME, a folder ``NAME/`` of the parts Ray Data wrote
(Parquet or JSON lines: the input's format unless ``--format``) holding every input column
plus the results and ``error``; ``NAME/_SUCCESS`` (JSON: rows, failed rows) marks it done.

Resuming: a file is written into ``.NAME.partial/`` and renamed to ``NAME/`` once complete, so
an interrupted job leaves no half-written output under a final name. A rerun skips the
input files whose ``NAME/_SUCCESS`` exists and starts the others afresh: the unit of resuming
is the input file (a job over one huge file redoes it whole; split big inputs into many
files, as data lakes store them anyway). The output folder must be a local or shared
filesystem path (the markers are plain files), readable by every node writing to it.

Ray: ``--address`` joins a running cluster (``ray start --head`` / KubeRay); without it,
Ray's own rule applies (``RAY_ADDRESS``, else a local instance for this command).
Progress: Ray Data's progress bars, and a line per input file.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from typing import Any, Dict, List, Optional

from . import batch

logger = logging.getLogger("llamapy.ray")

FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl"}
DONE = "_SUCCESS"
TASKS = ("embed", "complete", "caption", "rerank")


def input_files(path: str) -> List[str]:
    """The input files: ``path`` itself, or the Parquet / JSONL files in the folder ``path``."""
    if os.path.isdir(path):
        files = [os.path.join(path, f) for f in sorted(os.listdir(path))
                 if os.path.splitext(f)[1].lower() in FORMATS and os.path.isfile(os.path.join(path, f))]
        if not files:
            raise ValueError(f"{path}: no .parquet, .jsonl or .json files in this folder")
        return files
    if not os.path.isfile(path):
        raise ValueError(f"--input {path}: no such file or folder")
    file_format(path)
    return [path]


def file_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise ValueError(f"{path}: not a .parquet, .jsonl or .json file")
    return FORMATS[ext]


def read(path: str) -> Any:
    import ray.data

    if file_format(path) == "parquet":
        return ray.data.read_parquet(path)
    return ray.data.read_json(path)  # Arrow's JSON reader: one object per line


def write(ds: Any, folder: str, fmt: str) -> None:
    if fmt == "parquet":
        ds.write_parquet(folder)
    else:
        ds.write_json(folder)


def init_ray(address: Optional[str]) -> None:
    """Join ``address``, or start Ray's local instance (its default rule). Started here,
    workers also find this llamapy (a source checkout that is not installed)."""
    import ray

    if ray.is_initialized():
        return
    runtime_env = None
    if address is None:
        import llamapy

        root = os.path.dirname(os.path.dirname(os.path.abspath(llamapy.__file__)))
        paths = [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}}
    ray.init(address=address, runtime_env=runtime_env)


def transform(args: argparse.Namespace, ds: Any) -> Any:
    """The task's map over ``ds``."""
    pool: Dict[str, Any] = dict(actors=args.actors, cpus_per_actor=args.cpus_per_actor)
    if args.batch_size is not None:  # else each task's own default (batch.py)
        pool["batch_size"] = args.batch_size
    llama_kwargs: Dict[str, Any] = {"n_ctx": args.ctx_size}
    params: Dict[str, Any] = {"max_tokens": args.n_predict, "temperature": args.temp, "seed": args.seed}
    if args.task == "embed":
        return batch.embed(ds, model=args.model, column=args.column or "text", normalize=args.normalize,
                           llama_kwargs=llama_kwargs, **pool)
    if args.task == "complete":
        return batch.complete(ds, model=args.model, column=args.column or "prompt", params=params,
                              llama_kwargs=llama_kwargs, **pool)
    if args.task == "caption":
        if not args.mmproj:
            raise ValueError("batch caption needs --mmproj PROJECTOR (the vision model's projector GGUF)")
        return batch.caption(ds, model=args.model, mmproj=args.mmproj, column=args.column or "image",
                             prompt=args.prompt, params=params, llama_kwargs=llama_kwargs, **pool)
    return batch.rerank(ds, model=args.model, query_column=args.column or "query",
                        document_column=args.document_column, llama_kwargs=llama_kwargs, **pool)


def run_file(args: argparse.Namespace, src: str, out_root: str, fmt: str) -> Dict[str, Any]:
    """One input file -> ``out_root/NAME/`` with its done marker; the marker's contents."""
    name = os.path.basename(src)
    final, partial = os.path.join(out_root, name), os.path.join(out_root, f".{name}.partial")
    if os.path.exists(partial):
        shutil.rmtree(partial)  # an earlier run stopped inside this file: it is redone whole
    if os.path.exists(final):  # no marker (checked by the caller): not ours to trust
        raise ValueError(f"{final} exists without {DONE}: not written by a finished run of this job; "
                         "move it away to redo that file")
    done = transform(args, read(src)).materialize()
    rows = done.count()
    failed = sum(int(b["error"].notna().sum())
                 for b in done.select_columns(["error"]).iter_batches(batch_format="pandas")) if rows else 0
    write(done, partial, fmt)
    summary = {"input": os.path.abspath(src), "rows": rows, "failed": failed, "task": args.task,
               "model": args.model, "format": fmt}
    with open(os.path.join(partial, DONE), "w", encoding="utf-8") as f:
        json.dump(summary, f)
    os.replace(partial, final)
    return summary


def run_batch(args: argparse.Namespace) -> int:
    files = input_files(args.input)
    os.makedirs(args.output, exist_ok=True)
    todo = [f for f in files if not os.path.exists(os.path.join(args.output, os.path.basename(f), DONE))]
    if len(todo) < len(files):
        sys.stderr.write(f"{args.output}: {len(files) - len(todo)} of {len(files)} input files already done\n")
    if not todo:
        return 0
    init_ray(args.address)
    failed = rows = 0
    for i, src in enumerate(todo, 1):
        sys.stderr.write(f"[{i}/{len(todo)}] {src}\n")
        summary = run_file(args, src, args.output, args.format or file_format(src))
        rows, failed = rows + summary["rows"], failed + summary["failed"]
    if failed:
        sys.stderr.write(f"{failed} of {rows} rows failed: see their error column\n")
    return 1 if failed else 0
