"""Jobs: how a request's work runs on a worker thread and its results come back
to the event loop as items.

The event loop never waits on generation. A job is a function run on a
worker thread (a slot's, see slots.py), ``work(llama, job) -> value or iterator``;
each value an iterator yields is handed to the loop as it is made
(``loop.call_soon_threadsafe`` into the job's asyncio queue). Cancelling a job
(client gone, timeout, shutdown) stops its generation at the next token:
``job.check()`` raises Cancelled where the batch step takes the slot's next rows
(so a waiting prompt stops at once too) and before each item is handed on. It
is not a logits processor: the generation loop copies the logits (1 MB per
token for Gemma's vocabulary, with the GIL held) for any processor it is given.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional

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
        self.note: Optional[str] = None  # why the context ended the generation (a pool ran out)
        self.slot: Optional[int] = None  # the slot that runs it
        self.prompt: Optional[List[int]] = None  # its prompt's tokens, once prepared (slots.py picks a slot by them)
        self.stop_sequence: Optional[str] = None  # the stop string that ended the generation, if one did

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
        try:
            # an item already there needs no wait (wait_for makes a task per call: per token, per stream)
            item = self.items.get_nowait()
        except asyncio.QueueEmpty:
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


def run_job(job: Job, llama: Any, count: Callable[..., None]) -> None:
    """Run ``job.work(llama, job)`` on this thread, handing its items to the event
    loop; ``count(key, n)`` keeps the server's counters."""
    if job.cancelled.is_set():
        job.put(Cancelled(job.reason or "cancelled"))
        job.put(_END)
        return
    job.t_start = time.monotonic()
    count("requests_total")
    try:
        result = job.work(llama, job)
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
        count("requests_cancelled")
        logger.info("request cancelled (%s)", e)
        job.put(e)
    except Exception as e:
        count("requests_failed")
        job.put(e)
    finally:
        if job.usage:
            count("prompt_tokens_total", job.usage.get("prompt_tokens", 0))
            count("tokens_predicted_total", job.usage.get("completion_tokens", 0))
        job.put(_END)


def end_job(job: Job, error: BaseException) -> None:
    """Answer a job that will not run with ``error``."""
    job.put(error)
    job.put(_END)
