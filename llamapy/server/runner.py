"""The runner: one worker thread owns the Llama; requests reach it through a
bounded queue and their results come back to the event loop as items.

The event loop never waits on generation. A job is a function run on the
worker thread, ``work(llama, job) -> value or iterator``; each value an
iterator yields is handed to the loop as it is made (``loop.call_soon_threadsafe``
into the job's asyncio queue). Cancelling a job (client gone, timeout,
shutdown) stops its generation at the next token: ``job.check()`` raises
Cancelled, and the server installs it as a logits processor.

This is the interface a slot scheduler (issue 12, continuous batching)
replaces: ``Runner.submit(work) -> Job``, ``await job.next()``,
``job.cancel()``, ``Runner.state``, ``Runner.stats()``.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from typing import Any, Callable, Dict, Optional

logger = logging.getLogger("llamapy.server")

_END = object()


class QueueFull(Exception):
    """Every place in the queue is taken (the server answers 503 + Retry-After)."""


class Cancelled(Exception):
    """The job was cancelled (disconnect, timeout or shutdown)."""


class Job:
    def __init__(self, work: Callable[[Any, "Job"], Any], loop: asyncio.AbstractEventLoop,
                 deadline: Optional[float]) -> None:
        self.work = work
        self.loop = loop
        self.deadline = deadline
        self.items: "asyncio.Queue[Any]" = asyncio.Queue()
        self.cancelled = threading.Event()
        self.reason = ""
        self.t_submit = time.monotonic()
        self.t_start: Optional[float] = None
        self.usage: Optional[Dict[str, Any]] = None  # set by the work function; counted by /metrics

    # ---- worker side
    def check(self) -> None:
        """Raise Cancelled if the job should stop (called once per token)."""
        if self.deadline is not None and time.monotonic() > self.deadline and not self.cancelled.is_set():
            self.reason = "timeout"
            self.cancelled.set()
        if self.cancelled.is_set():
            raise Cancelled(self.reason or "cancelled")

    def put(self, item: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.items.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is listening
            self.cancel("shutdown")

    # ---- loop side
    def cancel(self, reason: str = "cancelled") -> None:
        if not self.cancelled.is_set():
            self.reason = reason
            self.cancelled.set()

    async def next(self) -> Any:
        """The next item; raises StopAsyncIteration at the end, or the job's exception."""
        timeout = None if self.deadline is None else max(0.0, self.deadline - time.monotonic()) + 0.5
        try:
            item = await asyncio.wait_for(self.items.get(), timeout)
        except asyncio.TimeoutError:
            self.cancel("timeout")
            raise Cancelled("timeout") from None
        if item is _END:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def __aiter__(self) -> "Job":
        return self

    async def __anext__(self) -> Any:
        return await self.next()


class Runner:
    """One slot: a worker thread that loads the model, then runs jobs one at a time."""

    def __init__(self, load: Callable[[], Any], queue_max: int = 16, timeout: Optional[float] = None) -> None:
        self._load = load
        self._queue: "queue.Queue[Optional[Job]]" = queue.Queue()  # admission is bounded by _waiting
        self.queue_max = queue_max
        self.timeout = timeout
        self.llama: Any = None
        self.state = "loading"  # loading | ready | failed | stopped
        self.error: Optional[str] = None
        self.current: Optional[Job] = None
        self._waiting = 0
        self._lock = threading.Lock()
        self.counters: Dict[str, float] = {"requests_total": 0, "requests_cancelled": 0, "requests_failed": 0,
                                           "tokens_predicted_total": 0, "prompt_tokens_total": 0,
                                           "queue_rejected_total": 0}
        self.loaded = threading.Event()  # set once the load has succeeded or failed
        self._thread = threading.Thread(target=self._run, name="llamapy-runner", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stats(self) -> Dict[str, Any]:
        with self._lock:
            return {"state": self.state, "waiting": self._waiting, "busy": self.current is not None,
                    **self.counters}

    def count(self, key: str, n: float = 1) -> None:
        with self._lock:
            self.counters[key] = self.counters.get(key, 0) + n

    def submit(self, work: Callable[[Any, Job], Any]) -> Job:
        """Queue ``work``; raises QueueFull when --queue-max requests already wait."""
        loop = asyncio.get_running_loop()
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        job = Job(work, loop, deadline)
        with self._lock:
            # An idle slot takes a request even with --queue-max 0.
            if self._waiting >= self.queue_max and (self.current is not None or self._waiting > 0):
                self.counters["queue_rejected_total"] += 1
                raise QueueFull(f"{self._waiting} requests are waiting (--queue-max {self.queue_max})")
            self._waiting += 1
        self._queue.put_nowait(job)
        return job

    def stop(self, wait: float = 5.0) -> None:
        """Cancel what runs and waits, end the worker, close the model."""
        cur = self.current
        if cur is not None:
            cur.cancel("shutdown")
        pending = []
        while True:
            try:
                pending.append(self._queue.get_nowait())
            except queue.Empty:
                break
        for job in pending:
            if job is not None:
                job.cancel("shutdown")
                job.put(Cancelled("the server is shutting down"))
                job.put(_END)
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join(wait)

    # ---- the worker thread
    def _run(self) -> None:
        try:
            self.llama = self._load()
            self.state = "ready"
            logger.info("model loaded; ready")
        except Exception as e:  # reported by /health and every request
            self.state, self.error = "failed", f"{type(e).__name__}: {e}"
            logger.error("model failed to load: %s", self.error)
        self.loaded.set()
        while True:
            job = self._queue.get()
            if job is None:
                break
            with self._lock:
                self._waiting -= 1
            self._run_job(job)
        if self.llama is not None:
            self.llama.close()
        self.state = "stopped"

    def _run_job(self, job: Job) -> None:
        if job.cancelled.is_set():
            job.put(Cancelled(job.reason or "cancelled"))
            job.put(_END)
            return
        if self.state != "ready":
            job.put(RuntimeError(f"the model is not loaded: {self.error or self.state}"))
            job.put(_END)
            return
        self.current = job
        job.t_start = time.monotonic()
        self.count("requests_total")
        try:
            result = job.work(self.llama, job)
            if hasattr(result, "__next__"):
                try:
                    for item in result:
                        job.check()
                        job.put(item)
                finally:
                    result.close()  # stops the generation loop now
            else:
                job.put(result)
        except Cancelled as e:
            self.count("requests_cancelled")
            logger.info("request cancelled (%s)", e)
            job.put(e)
        except Exception as e:
            self.count("requests_failed")
            job.put(e)
        finally:
            if job.usage:
                self.count("prompt_tokens_total", job.usage.get("prompt_tokens", 0))
                self.count("tokens_predicted_total", job.usage.get("completion_tokens", 0))
            self.current = None
            job.put(_END)
