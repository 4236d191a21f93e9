"""Continuous batching: the slots' sequences post rows, one thread decodes them together.

A slot's generation runs the library's own loop (``Llama.generate`` under
``create_completion``) on the slot's thread; its ``Sequence`` evaluates through a
``BatchDecoder``, which posts the rows (``Rows``) and waits. The step thread gathers
what every busy slot posted and makes ONE ``Context.decode`` of it: the generating
slots' single tokens first, then chunks of prompts within the n_batch budget, so a long
prompt is evaluated a chunk per step while the others keep generating. The logits rows
each slot asked for are handed out as views of the context's logits, not copies (4 MB per step of
copies was 0.8 ms of a Gemma 4-slot step, with the GIL held): the engine never writes a decode's
logits into a buffer an array still views (context.cpp, ``unshared_logits``), so a slow slot can
still be sampling from its rows while the next step runs.

The KV cells are one pool (n_ctx of the context). When a step needs more than are free,
idle slots' cached prefixes are dropped first; then a prompt waits while others
generate; a sequence that still cannot grow gets ContextFull (its request ends with
finish_reason "length" and a message saying so).

Image rows (embeddings) are decoded in a step of their own: a decode takes token ids or
embeddings, and a non-causal image chunk needs the whole batch causal=False.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .._sequence import ContextFull, Sequence

logger = logging.getLogger("llamapy.server")

GATHER_S = 0.02  # how long a step waits for busy slots still computing their next rows


class Rows:
    """One sequence's rows waiting for (and then holding the logits of) batched steps."""

    def __init__(self, seq: Sequence, tokens: Optional[np.ndarray], embd: Optional[np.ndarray], pos: np.ndarray,
                 want: np.ndarray, causal: bool) -> None:
        self.seq = seq
        self.tokens = tokens          # (n,) int32, or None with embd (n, n_embd)
        self.embd = embd
        self.pos = pos                # (n,) or (4, n)
        self.want = want              # (n,) bool: rows whose logits to keep
        self.causal = causal
        self.n = len(want)
        self.done = 0                 # rows decoded so far
        self.out: List[np.ndarray] = []  # (n_vocab,) logits per wanted row (views of the context's output)
        self.error: Optional[BaseException] = None
        self.finished = threading.Event()
        self.t_posted = time.monotonic()

    @property
    def remaining(self) -> int:
        return self.n - self.done

    # the interface Sequence reads logits through (as Context's)
    def get_logits(self, i: int = -1) -> np.ndarray:
        return self.out[i]

    def get_logits_all(self) -> np.ndarray:
        return np.stack(self.out) if self.out else np.zeros((0, 0), dtype=np.single)


class BatchDecoder:
    """A Sequence's decoder inside the slot scheduler: posts rows, returns once decoded."""

    def __init__(self, stepper: "Stepper") -> None:
        self.stepper = stepper
        self.lock = stepper.ctx_lock

    def decode(self, seq: Sequence, tokens: Optional[np.ndarray], embd: Optional[np.ndarray], pos: np.ndarray,
               want: np.ndarray, causal: bool = True) -> Rows:
        rows = Rows(seq, tokens, embd, pos, want, causal)
        self.stepper.post(rows)
        rows.finished.wait()
        if rows.error is not None:
            raise rows.error
        return rows

    def remove_from(self, seq: Sequence, pos: int) -> bool:
        with self.lock:
            return bool(seq.ctx.kv_seq_rm(seq.seq_id, pos, -1))

    def resume_pos(self, seq: Sequence, pos: int) -> int:
        with self.lock:
            return int(seq.ctx.kv_seq_resume_pos(seq.seq_id, pos))

    def swa_resumable(self, seq: Sequence, n: int) -> bool:
        with self.lock:
            return bool(seq.ctx.kv_swa_resumable(seq.seq_id, n))


class Stepper:
    """The step thread: one decode per step over every slot's posted rows.

    ``busy()`` says which sequence ids have a request running (the step waits up to
    GATHER_S for those to post); ``check(seq_id)`` raises if that request was cancelled;
    ``make_room(n, free)`` drops idle sequences' cached rows until n cells are free;
    ``on_full(seq_id, message)`` hears of a sequence the pool could not grow."""

    def __init__(self, ctx: Any, n_batch: int, busy: Callable[[], List[int]], check: Callable[[int], None],
                 make_room: Callable[[int, Callable[[], int]], None],
                 on_full: Callable[[int, str], None]) -> None:
        self.ctx = ctx
        self.n_batch = int(n_batch)
        self.n_cells = int(ctx.n_ctx)
        self.busy = busy
        self.check = check
        self.make_room = make_room
        self.on_full = on_full
        self.ctx_lock = threading.RLock()
        self.cond = threading.Condition()
        self.pending: Dict[int, Rows] = {}  # seq id -> its posted rows
        self.stopping = False
        self._stop_reason: BaseException = RuntimeError("the scheduler has stopped")
        self.steps = 0
        self.rows_decoded = 0
        self.thread = threading.Thread(target=self._run, name="llamapy-batch", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, reason: BaseException) -> None:
        with self.cond:
            self.stopping = True
            self._stop_reason = reason
            self.cond.notify_all()
        if self.thread.is_alive():
            self.thread.join(10)

    def post(self, rows: Rows) -> None:
        with self.cond:
            if self.stopping:
                rows.error = self._stop_reason
                rows.finished.set()
                return
            self.pending[rows.seq.seq_id] = rows
            self.cond.notify_all()

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()

    # ---- the step thread
    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.stopping and not self.pending:
                    self.cond.wait()
                if self.stopping:
                    for rows in self.pending.values():
                        self._finish(rows, self._stop_reason)
                    self.pending.clear()
                    return
                deadline = time.monotonic() + GATHER_S
                while not self.stopping:
                    waiting_for = [i for i in self.busy() if i not in self.pending]
                    left = deadline - time.monotonic()
                    if not waiting_for or left <= 0:
                        break
                    self.cond.wait(left)
                posted = list(self.pending.values())
            try:
                self._step(posted)
            except Exception as e:  # a failed decode fails the rows in it, not the server
                logger.error("batched decode failed: %s", e)
                for rows in posted:
                    if not rows.finished.is_set():
                        self._finish(rows, e)

    def _finish(self, rows: Rows, error: Optional[BaseException] = None) -> None:
        rows.error = error
        with self.cond:
            if self.pending.get(rows.seq.seq_id) is rows:
                del self.pending[rows.seq.seq_id]
        rows.finished.set()

    def _step(self, posted: List[Rows]) -> None:
        live = []
        for rows in posted:
            try:
                self.check(rows.seq.seq_id)  # cancelled (client gone, timeout): freed now, not after its prompt
            except Exception as e:
                self._finish(rows, e)
                continue
            live.append(rows)
        if not live:
            return
        images = [r for r in live if r.embd is not None]
        if images:
            first = min(images, key=lambda r: r.t_posted)
            return self._decode([(first, 0, first.n)])
        return self._decode(self._plan(live))

    def _free_cells(self) -> int:
        return self.n_cells - int(self.ctx.kv_n_used)

    def _plan(self, live: List[Rows]) -> List[Tuple[Rows, int, int]]:
        """(rows, start, count) parts for this step: shortest first (generation), within
        n_batch and the free cells."""
        need = sum(min(r.remaining, self.n_batch) for r in live)
        with self.ctx_lock:
            free = self._free_cells()
            if free < need:
                self.make_room(need, self._free_cells)  # idle slots' cached prefixes give way first
                free = self._free_cells()
        budget = self.n_batch
        parts: List[Tuple[Rows, int, int]] = []
        starved: List[Rows] = []
        for rows in sorted(live, key=lambda r: (r.remaining, r.t_posted)):
            take = min(rows.remaining, budget, free)
            if take <= 0:
                if budget > 0:
                    starved.append(rows)
                continue
            parts.append((rows, rows.done, take))
            budget -= take
            free -= take
        posted = {r.seq.seq_id for r in live}
        finishing = any(i not in posted for i in self.busy())  # a request ending now frees its cells soon
        if not parts and not finishing and starved:
            # Nothing can grow: the longest sequence ends, the others wait for its cells.
            starved = [max(starved, key=lambda r: (r.seq.n_tokens + r.done, r.t_posted))]
        for rows in starved:
            if (parts and rows.remaining > 1) or finishing:
                continue  # waits for cells while others generate or finish (they end, or run out first)
            message = (f"the shared KV pool of {self.n_cells} tokens is full: slot {rows.seq.seq_id} holds "
                       f"{rows.seq.n_tokens} tokens and needs {rows.remaining} more, the other slots hold the rest")
            self.on_full(rows.seq.seq_id, message)
            self._finish(rows, ContextFull(message))
        return parts

    def _decode(self, parts: List[Tuple[Rows, int, int]]) -> None:
        if not parts:
            return
        toks, embds, poss, seqs, wants = [], [], [], [], []
        mrope = any(r.pos.ndim == 2 for r, _, _ in parts)
        for rows, start, count in parts:
            end = start + count
            if rows.embd is not None:
                embds.append(rows.embd[start:end])
            else:
                toks.append(rows.tokens[start:end])
            p = rows.pos[..., start:end]
            poss.append(np.broadcast_to(p, (4, count)) if mrope and p.ndim == 1 else p)
            seqs.append(np.full(count, rows.seq.seq_id, dtype=np.int32))
            wants.append(rows.want[start:end])
        want = np.concatenate(wants)
        kw: Dict[str, Any] = {}
        if not parts[0][0].causal:
            kw["causal"] = False
        with self.ctx_lock:
            self.ctx.decode(tokens=np.concatenate(toks) if toks else None,
                            embd=np.concatenate(embds) if embds else None,
                            pos=np.ascontiguousarray(np.concatenate(poss, axis=-1)),
                            seq_ids=np.concatenate(seqs), logits=want, **kw)
            self.steps += 1
            self.rows_decoded += len(want)
            if want.any():
                every = self.ctx.get_logits_all()  # one view of all output rows
                k = 0  # output row of the batch
                for rows, start, count in parts:
                    n = int(np.count_nonzero(rows.want[start:start + count]))
                    if n:
                        rows.out.extend(every[k:k + n])
                        k += n
        for rows, start, count in parts:
            rows.done += count
            if rows.remaining == 0:
                self._finish(rows)
