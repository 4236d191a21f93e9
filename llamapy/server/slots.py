"""The slot scheduler: ``-np N`` slots over one context, decoded in one batch per step.

Each slot is a sequence of the context (``llamapy._sequence.Sequence``, id = slot id)
and a ``Llama.sequence_view`` of the loaded model, run by its own thread: a request's
work calls the library's ordinary API (chat handlers, ``create_completion``,
``Llama.generate``) on that view, so the server has no generation loop of its own.
The view's sequence evaluates through the batch step (batch.py): every step decodes
one token of each generating slot plus prompt chunks of new requests, in ONE decode.

Preparation: a request's work before a slot (the prompt rendered and tokenized, its fit
checked: work.py's ``prepare``), and all of a "call" job (/tokenize ...), run on a thread
of its own as the request arrives, never on the dispatcher: a prompt of megabytes
takes seconds to tokenize and holds up no other request, and one that cannot fit is
refused without waiting for a slot.

Dispatch: prepared requests wait in a bounded queue (``--queue-max``, counting those
being prepared: a full one is 503 with Retry-After); a request goes to the free slot
whose cached tokens share the longest prefix with its prompt (weighed against the
cached tokens it would overwrite), which then evaluates only the rest. Cancelled or
disconnected requests free their slot at once (the step drops their rows).

Context: by default the KV cells are one pool of ``-c`` that every slot draws from, and
a request may have up to ``-c`` tokens; ``--ctx-per-slot`` gives each slot its own hard
limit (``-c / -np``, or the given size). Requests that cannot fit are refused with 400
before work (work.py); a pool that runs out mid-generation ends that request with
finish_reason "length" and a note saying so.

The interface is the single-slot runner's: ``submit(work) -> Job``, ``job.next()``,
``job.cancel()``, ``state``, ``stats()``; plus ``slot_info()`` and ``limits()``.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional

from .._sequence import Sequence
from .batch import BatchDecoder, Stepper
from .runner import Cancelled, Job, QueueFull, end_job, run_job
from .work import max_token_bytes

logger = logging.getLogger("llamapy.server")


class Slot:
    def __init__(self, slot_id: int, seq: Sequence, llama: Any) -> None:
        self.id = slot_id
        self.seq = seq
        self.llama = llama              # the Llama view generating in seq
        self.job: Optional[Job] = None  # the request it runs
        self.task = ""                  # what the request is ("chat", "completion", ...)
        self.t_used = 0.0
        self.inbox: "queue.Queue[Optional[Job]]" = queue.Queue()
        self.thread: Optional[threading.Thread] = None


class SlotScheduler:
    """``n_slots`` slots; ``ctx_per_slot``: None = one shared pool, 0 = n_ctx / n_slots each,
    N = N tokens each (their sum must fit n_ctx)."""

    def __init__(self, load: Callable[[], Any], n_slots: int = 1, ctx_per_slot: Optional[int] = None,
                 queue_max: int = 16, timeout: Optional[float] = None) -> None:
        self._load = load
        self.n_slots = int(n_slots)
        self.ctx_per_slot = ctx_per_slot
        self.queue_max = queue_max
        self.timeout = timeout
        self.llama: Any = None
        self.state = "loading"  # loading | ready | failed | stopped
        self.error: Optional[str] = None
        self.slots: List[Slot] = []
        self.stepper: Optional[Stepper] = None
        self.request_limit = 0   # tokens (prompt + generated) one request may have
        self.n_cells = 0
        self.cond = threading.Condition()
        self._queue: Deque[Job] = deque()
        self._preparing: Dict[Job, threading.Thread] = {}  # jobs on their preparation thread (_prepare)
        self._stopping = False
        self._lock = threading.Lock()
        self.counters: Dict[str, float] = {"requests_total": 0, "requests_cancelled": 0, "requests_failed": 0,
                                           "tokens_predicted_total": 0, "prompt_tokens_total": 0,
                                           "queue_rejected_total": 0, "requests_context_full": 0}
        self.loaded = threading.Event()  # set once the load has succeeded or failed
        self._thread = threading.Thread(target=self._dispatch, name="llamapy-dispatch", daemon=True)

    # ------------------------------------------------------------ the loop's side
    def start(self) -> None:
        """Starts the load, on the dispatcher thread; a no-op once started (the
        command line loads before it serves, then the app's startup calls it)."""
        if self._thread.ident is None:
            self._thread.start()

    def count(self, key: str, n: float = 1) -> None:
        with self._lock:
            self.counters[key] = self.counters.get(key, 0) + n

    def submit(self, work: Callable[[Any, Job], Any]) -> Job:
        """Queue ``work``; raises QueueFull when --queue-max requests already wait."""
        loop = asyncio.get_running_loop()
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        job = Job(work, loop, deadline)
        prepared = hasattr(work, "prepare") or getattr(work, "kind", "slot") == "call"
        with self.cond:
            if self._stopping:  # nothing would run it
                job.cancel("shutdown")
                end_job(job, Cancelled("the server is shutting down"))
                return job
            n_free = sum(1 for s in self.slots if s.job is None) if self.slots else 1
            waiting = len(self._queue) + len(self._preparing)
            # A request an idle slot takes at once does not wait, even with --queue-max 0.
            if waiting >= self.queue_max and waiting >= n_free:
                self.count("queue_rejected_total")
                raise QueueFull(f"{waiting} requests are waiting (--queue-max {self.queue_max})")
            if not prepared:
                self._queue.append(job)
                self.cond.notify_all()
                return job
            thread = threading.Thread(target=self._prepare, args=(job,), name="llamapy-prepare", daemon=True)
            self._preparing[job] = thread
        thread.start()
        return job

    def stats(self) -> Dict[str, Any]:
        with self.cond:
            busy = sum(1 for s in self.slots if s.job is not None)
            waiting = len(self._queue) + len(self._preparing)
        used = int(self.llama.ctx.kv_n_used) if self.state == "ready" and self.llama is not None else 0
        with self._lock:
            return {"state": self.state, "waiting": waiting, "busy": busy, "slots": self.n_slots,
                    "kv_cells": self.n_cells, "kv_cells_used": used,
                    "batch_steps": self.stepper.steps if self.stepper else 0,
                    "batch_rows": self.stepper.rows_decoded if self.stepper else 0, **self.counters}

    def limits(self) -> Dict[str, Any]:
        shared = self.ctx_per_slot is None
        note = (f"{self.n_slots} slot(s) share one KV pool of {self.n_cells} tokens: a request may have up to "
                f"{self.request_limit} tokens, prompt and generated together, while the pool has room; a pool that "
                f"runs out ends a generation with finish_reason 'length'" if shared else
                f"{self.n_slots} slot(s) of {self.request_limit} tokens each (--ctx-per-slot): a request may have up "
                f"to {self.request_limit} tokens, prompt and generated together")
        return {"total_slots": self.n_slots, "kv_cells": self.n_cells, "ctx_mode": "shared" if shared else "per-slot",
                "max_request_tokens": self.request_limit, "context_note": note}

    def slot_info(self) -> List[Dict[str, Any]]:
        with self.cond:
            return [{"id": s.id, "state": "processing" if s.job is not None else "idle",
                     "is_processing": s.job is not None, "n_ctx": s.seq.n_ctx, "n_tokens_cached": s.seq.n_tokens,
                     "task": s.task if s.job is not None else None} for s in self.slots]

    def stop(self, wait: float = 5.0) -> None:
        """Cancel what runs and waits, end the threads, close the model."""
        reason = Cancelled("the server is shutting down")
        with self.cond:
            self._stopping = True
            pending = list(self._queue)
            self._queue.clear()
            running = [s.job for s in self.slots if s.job is not None] + list(self._preparing)
            self.cond.notify_all()
        for job in pending:
            job.cancel("shutdown")
            end_job(job, reason)
        for job in running:  # a job being prepared is ended by its thread once prepared
            job.cancel("shutdown")
        if self.stepper is not None:
            self.stepper.stop(reason)
        for s in self.slots:
            s.inbox.put(None)
        if self._thread.is_alive():
            self._thread.join(wait)

    # ------------------------------------------------------------- the threads
    def _setup(self) -> None:
        llama = self.llama
        ctx = llama.ctx
        if ctx is None:
            raise ValueError("the model has no context (vocab_only) to serve requests with")
        self.n_cells = n_cells = int(ctx.n_ctx)
        if int(ctx.n_seq_max) < self.n_slots:
            raise ValueError(f"-np {self.n_slots} needs a context with {self.n_slots} sequences; this one has "
                             f"n_seq_max={ctx.n_seq_max}")
        if self.ctx_per_slot is None:
            limit = n_cells
        else:
            limit = self.ctx_per_slot or n_cells // self.n_slots
            if limit * self.n_slots > n_cells or limit < 2:
                raise ValueError(f"--ctx-per-slot {limit} x -np {self.n_slots} = {limit * self.n_slots} tokens does "
                                 f"not fit the context of {n_cells} (-c)")
        self.request_limit = limit
        self.stepper = Stepper(ctx, llama.n_batch, busy=self._busy_ids, check=self._check, make_room=self._make_room,
                               on_full=self._on_full)
        decoder = BatchDecoder(self.stepper)
        seed = llama.sequence.seed
        for i in range(self.n_slots):
            seq = Sequence(ctx, i, limit, llama.n_batch, llama.n_vocab(), seed, decoder=decoder)
            slot = Slot(i, seq, llama.sequence_view(seq))
            slot.thread = threading.Thread(target=self._slot_loop, args=(slot,), name=f"llamapy-slot-{i}",
                                           daemon=True)
            self.slots.append(slot)
        self.stepper.start()
        for s in self.slots:
            s.thread.start()
        max_token_bytes(llama)  # a pass over the vocabulary: now, not in the first request

    def _dispatch(self) -> None:
        try:
            self.llama = self._load()
            self._setup()
            self.state = "ready"
            logger.info("model loaded; ready. %s", self.limits()["context_note"])
        except Exception as e:  # reported by /health and every request
            self.state, self.error = "failed", f"{type(e).__name__}: {e}"
            logger.error("model failed to load: %s", self.error)
        self.loaded.set()
        while True:
            job = self._next_job()
            if job is None:
                break
            try:
                if self.state != "ready":  # failed: every request hears why
                    end_job(job, self._not_loaded())
                elif getattr(job.work, "kind", "slot") == "exclusive":
                    self._run_exclusive(job)
                else:
                    self._assign(job)
            except Exception as e:  # that request's answer: the dispatcher serves the others on
                logger.exception("a request failed in the dispatcher")
                self.count("requests_failed")
                end_job(job, e)
        failed = self.state == "failed"
        with self.cond:
            preparing = list(self._preparing.values())
        for t in preparing:  # they may be tokenizing with the model about to close
            t.join(5)
        for s in self.slots:
            if s.thread is not None:
                s.thread.join(5)
            s.llama.close()
        if self.llama is not None:
            self.llama.close()
        self.state = "failed" if failed else "stopped"

    def _not_loaded(self) -> Exception:
        return RuntimeError(f"the model is not loaded: {self.error or self.state}")

    def _prepare(self, job: Job) -> None:
        """On the job's own thread: its work's ``prepare`` (then it joins the queue;
        what it raises is the request's answer, without a slot), or the whole of a
        "call" job."""
        work = job.work
        prepared = False
        try:
            self.loaded.wait()
            if self.state != "ready":
                end_job(job, self._not_loaded())
            elif getattr(work, "kind", "slot") == "call":  # tokenize, templates: no decoding, no slot
                run_job(job, self.llama, self.count)
            elif job.cancelled.is_set():
                end_job(job, Cancelled(job.reason or "cancelled"))
            else:
                try:
                    job.prompt = work.prepare(self.llama, self.request_limit)
                    prepared = True
                except Exception as e:  # too long, a template error ...: counted as run_job counts it
                    self.count("requests_total")
                    self.count("requests_failed")
                    end_job(job, e)
        finally:
            with self.cond:
                del self._preparing[job]
                if prepared and self._stopping:
                    end_job(job, Cancelled("the server is shutting down"))
                elif prepared:
                    self._queue.append(job)
                self.cond.notify_all()

    def _next_job(self) -> Optional[Job]:
        """The first queued job once it can run (a slot job needs a free slot)."""
        with self.cond:
            while not self._stopping:
                if self._queue:
                    head = self._queue[0]
                    kind = getattr(head.work, "kind", "slot")
                    idle = all(s.job is None for s in self.slots)
                    if (self.state != "ready" or (kind == "exclusive" and idle) or
                            (kind == "slot" and any(s.job is None for s in self.slots))):
                        return self._queue.popleft()
                self.cond.wait()
            return None

    def _assign(self, job: Job) -> None:
        tokens = job.prompt  # prepared: the dispatcher tokenizes nothing
        with self.cond:
            free = [s for s in self.slots if s.job is None]
            if tokens:
                # Reusable prefix minus the cache the request would overwrite (cached - prefix): the
                # longest shared prefix wins, but a stray match (a BOS) does not wipe a long cache
                # while an emptier slot is free; ties: the least recently used.
                slot = max(free, key=lambda s: (2 * s.seq.reusable_prefix(tokens) - s.seq.n_tokens, -s.t_used))
            else:
                slot = max(free, key=lambda s: (s.seq.n_tokens == 0, -s.t_used))
            slot.job = job
            slot.task = getattr(job.work, "task", "")
            job.slot = slot.id
        slot.inbox.put(job)

    def _run_exclusive(self, job: Job) -> None:
        """Embeddings use the whole context (and clear it): run with every slot idle,
        then the slots start empty."""
        with self.stepper.ctx_lock:
            try:
                run_job(job, self.llama, self.count)
            finally:
                self.llama.ctx.kv_clear()
                for s in self.slots:
                    s.seq.reset()

    def _slot_loop(self, slot: Slot) -> None:
        while True:
            job = slot.inbox.get()
            if job is None:
                return
            try:
                run_job(job, slot.llama, self.count)
            finally:
                with self.cond:
                    slot.job = None
                    slot.t_used = time.monotonic()
                    self.cond.notify_all()
                self.stepper.wake()

    # ---- called by the batch step
    def _busy_ids(self) -> List[int]:
        with self.cond:
            return [s.id for s in self.slots if s.job is not None]

    def _check(self, seq_id: int) -> None:
        job = self.slots[seq_id].job
        if job is not None:
            job.check()

    def _make_room(self, n_cells: int, free: Callable[[], int]) -> None:
        """Drop idle slots' cached prefixes, least recently used first, until ``n_cells`` are free."""
        with self.cond:
            for s in sorted(self.slots, key=lambda s: s.t_used):
                if free() >= n_cells:
                    return
                if s.job is None and s.seq.n_tokens > 0:
                    logger.info("KV pool: dropping the %d cached tokens of idle slot %d to make room",
                                s.seq.n_tokens, s.id)
                    s.seq.ctx.kv_seq_rm(s.id, 0, -1)
                    s.seq.reset()

    def _on_full(self, seq_id: int, message: str) -> None:
        job = self.slots[seq_id].job
        self.count("requests_context_full")
        logger.warning("slot %d: %s; the request ends with finish_reason 'length'", seq_id, message)
        if job is not None:
            job.note = message
