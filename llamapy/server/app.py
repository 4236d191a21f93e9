"""The app factory: settings -> a FastAPI app with its runner, middleware
(CORS, body limit, API keys, access log) and the OpenAI and Ollama routes."""
from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Tuple

from fastapi import FastAPI

from .._params import random_seed
from . import errors, security
from .config import Settings
from .runner import Cancelled, Job, QueueFull
from .slots import SlotScheduler
from .work import Meta

logger = logging.getLogger("llamapy.server")
access_log = logging.getLogger("llamapy.server.access")

_FLASH = {"on": True, "off": False, "auto": "auto"}


def llama_kwargs(s: Settings) -> Dict[str, Any]:
    """Llama(...) keywords for the settings. ``--threads`` is the prompt threads too (as
    llama-server's ``-tb`` defaults to ``-t``): a replica given N CPUs by Ray Serve runs N."""
    kw: Dict[str, Any] = dict(n_ctx=s.ctx_size, n_batch=s.batch_size, n_ubatch=min(s.ubatch_size, s.batch_size),
                              n_threads=s.threads, n_threads_batch=s.threads, n_gpu_layers=s.n_gpu_layers,
                              flash_attn=_FLASH[s.flash_attn],
                              type_k=s.cache_type_k, type_v=s.cache_type_v, embedding=bool(s.embedding),
                              n_seq_max=max(1, s.parallel), spm_infill=bool(s.spm_infill), verbose=False)
    if s.cpu_moe or s.n_cpu_moe:
        kw["n_cpu_moe"] = (1 << 30) if s.cpu_moe else s.n_cpu_moe  # every layer's, or the first N
    if s.override_tensor:
        kw["override_tensor"] = s.override_tensor
    if s.pooling is not None:
        kw["pooling_type"] = ["none", "mean", "cls", "last", "rank"].index(s.pooling)
    # Without --seed, each server start draws its own base seed (llama-server samples
    # with random seeds); Llama()'s default would make every start repeat the
    # same "random" answers, as llama-cpp-python's create_completion does.
    kw["seed"] = s.seed if s.seed is not None else random_seed()
    if s.mmproj:
        kw["mmproj"] = s.mmproj
    if s.chat_template:
        from ..chat.formats import FORMATS

        if s.chat_template in FORMATS:
            kw["chat_format"] = s.chat_template
        else:  # a Jinja template string, as llama-server's --chat-template takes
            kw["kv_overrides"] = {"tokenizer.chat_template": s.chat_template}
    return kw


class ServerState:
    """What the routes share: the settings, the runner, the model's name."""

    def __init__(self, settings: Settings, load: Optional[Callable[[], Any]] = None) -> None:
        self.settings = settings
        self.model_path = settings.model
        self.model_name = settings.alias or os.path.basename(settings.model)
        self.t_start = time.time()
        if load is None:
            def load() -> Any:
                from ..llama import Llama

                return Llama(model_path=settings.model, **llama_kwargs(settings))
        self.runner = SlotScheduler(load, n_slots=settings.parallel, ctx_per_slot=settings.ctx_per_slot,
                                    queue_max=settings.queue_max, timeout=settings.timeout)

    @property
    def llama(self) -> Any:
        return self.runner.llama

    def require_ready(self) -> None:
        state = self.runner.state
        if state == "loading":
            raise errors.APIError(503, "the model is loading", "loading_model", {"Retry-After": "1"})
        if state != "ready":
            raise errors.APIError(503, f"the model is not available: {self.runner.error or state}",
                                  "model_unavailable")

    def request_limit(self) -> int:
        """Tokens (prompt + generated) one request may have: a slot's limit, or the shared pool."""
        return self.runner.request_limit

    def max_tokens_limit(self) -> int:
        n_ctx = self.request_limit()
        lim = self.settings.max_tokens_limit
        return n_ctx if lim is None else min(lim, n_ctx)

    def require_generator(self) -> None:
        """400 unless the model can generate text: an encoder (BERT and the
        like) computes embeddings only. Run with --embedding, the library
        would otherwise sample from whatever its output rows hold."""
        llm = self.llama
        if llm is not None and bool(getattr(getattr(llm, "model", None), "is_encoder", False)):
            arch = (getattr(llm, "metadata", None) or {}).get("general.architecture")
            raise errors.bad_request(f"model {self.model_name!r} is an encoder{f' ({arch})' if arch else ''}: it "
                                     "computes embeddings only and cannot generate text; use /v1/embeddings or "
                                     "/api/embed", "model_is_encoder")

    def max_tokens(self, value: Any, field: str = "max_tokens", unlimited: Tuple[int, ...] = (-1, 0)) -> Optional[int]:
        """A request's generation limit: None for "until the context ends"
        (the field omitted, or one of the ``unlimited`` values: -1 and 0 as
        llama-cpp-python reads max_tokens; the Ollama routes add num_predict's
        -2), else the number, checked against --max-tokens-limit and the
        context. Other negative values are refused, as OpenAI refuses them.
        With --max-tokens-limit, None is capped by ``cap_generation``: no
        value escapes the limit."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise errors.bad_request(f"{field} must be an integer, not {value!r}")
        if value in unlimited:
            return None
        if value < 0:
            allowed = " or ".join(str(v) for v in unlimited)
            raise errors.bad_request(f"{field} is {value}; it must be positive (or {allowed}: until the context ends)")
        if value > self.max_tokens_limit():
            raise errors.bad_request(f"{field} is {value}; this server allows at most {self.max_tokens_limit()}")
        return value

    def check_n_probs(self, n_probs: Optional[int]) -> None:
        if n_probs is not None and (n_probs < 0 or n_probs > self.settings.n_probs_max):
            raise errors.bad_request(f"top_logprobs/logprobs is {n_probs}; this server allows 0 to "
                                     f"{self.settings.n_probs_max} (--n-probs-max)")

    def cap_generation(self, work_fn: Callable[[Any, Job], Any], params: Dict[str, Any]) -> Callable[[Any, Job], Any]:
        """``work_fn`` (work.py's chat or completion work, reading ``params``)
        with "until the context ends" (``params["max_tokens"]`` None) held to
        --max-tokens-limit: the limit, or the room the context has after the
        prompt where that is less (the client asked for no more than the
        context). The prompt's size is known once prepared, so the cap is set
        there, before the work reads ``params``."""
        lim = self.settings.max_tokens_limit
        if lim is None or params.get("max_tokens") is not None:
            return work_fn
        memo: List[Any] = []

        def prepare(llama: Any, n_ctx: int) -> Any:
            if not memo:
                tokens = work_fn.prepare(llama, n_ctx)  # type: ignore[attr-defined]
                params["max_tokens"] = lim if tokens is None else max(1, min(lim, n_ctx - len(tokens)))
                memo.append(tokens)
            return memo[0]

        def capped(llama: Any, job: Job) -> Any:
            prepare(llama, llama.n_ctx())  # a no-op once the scheduler has prepared it
            return work_fn(llama, job)
        capped.__dict__.update(work_fn.__dict__)  # kind, task
        capped.prepare = prepare  # type: ignore[attr-defined]
        return capped

    def embedding_work(self, inputs: Any, field: str = "input", truncate: bool = False) -> Callable[[Any, Job], Any]:
        """work.py's embedding work for this model (``field`` names the inputs in errors)."""
        from . import work

        return work.embedding_work(inputs, self.model_name, field, truncate)

    async def start_job(self, work: Callable[[Any, Job], Any]) -> "tuple[Job, Meta]":
        """Queue ``work`` and wait for its Meta: errors raised before any
        generation (prompt too long, bad template) come out here."""
        self.require_ready()
        try:
            job = self.runner.submit(work)
        except QueueFull as e:
            raise errors.APIError(503, f"the server is busy: {e}", "server_busy", {"Retry-After": "2"}) from None
        try:
            meta = await job.next()
        except Cancelled as e:
            raise self.cancel_error(job, e) from None
        except BaseException:
            job.cancel("client gone")
            raise
        return job, meta

    async def run_job(self, work: Callable[[Any, Job], Any]) -> Any:
        job, _ = await self.start_job(work)
        return await self.result(job)

    async def result(self, job: Job, request: Any = None) -> Any:
        """The job's one result item. A client that disconnects meanwhile
        cancels the job (polled: Starlette does not cancel a handler)."""
        import asyncio

        nxt = asyncio.ensure_future(job.next())
        try:
            while True:
                done, _ = await asyncio.wait({nxt}, timeout=0.25)
                if done:
                    return nxt.result()
                if request is not None and await request.is_disconnected():
                    job.cancel("client disconnected")
        except Cancelled as e:
            raise self.cancel_error(job, e) from None
        finally:
            if not nxt.done():
                nxt.cancel()
            job.cancel("client gone")  # a no-op once the job is done

    @staticmethod
    def cancel_error(job: Job, e: Exception) -> errors.APIError:
        if job.reason == "timeout":
            return errors.APIError(504, "the request took longer than --timeout", "timeout")
        if job.reason == "shutdown":
            return errors.APIError(503, "the server is shutting down", "shutting_down")
        return errors.APIError(503, f"the request was cancelled ({e})", "cancelled")

    @staticmethod
    async def until_done(job: Job, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """A route's stream of ``job``'s events, cancelling the job when the
        client goes away, also before the route has begun reading the job
        (events it sends first, such as Anthropic's message_start)."""
        try:
            async for event in events:
                yield event
        finally:
            job.cancel("client disconnected")  # a no-op once the job is done

    async def stream(self, job: Job) -> AsyncIterator[Any]:
        """The job's items; cancels the job when the consumer goes away."""
        try:
            while True:
                try:
                    yield await job.next()
                except StopAsyncIteration:
                    return
        finally:
            job.cancel("client disconnected")


class AccessLog:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = [0]

        async def send_status(msg: Any) -> None:
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, send_status)
        finally:
            client = scope.get("client") or ("-", 0)
            access_log.info("%s %s %s %d %.1fms", client[0], scope["method"], scope["path"], status[0],
                            (time.perf_counter() - t0) * 1e3)


def create_app(settings: Settings, load: Optional[Callable[[], Any]] = None) -> FastAPI:
    """The ASGI app. The model loads on the runner's thread when the app
    starts (``/health`` says 503 until it is ready)."""
    from . import anthropic_routes, infill_routes, ollama_routes, openai_routes, rerank_routes, responses_routes

    keys = security.load_keys(settings.api_key, settings.api_key_file)
    state = ServerState(settings, load)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.runner.start()
        # The exact limits are logged once the model is loaded (slots.py).
        logger.info("llamapy server: model %s; %d slot(s); -c %s (%s)", settings.model, settings.parallel,
                    settings.ctx_size, "shared KV pool" if settings.ctx_per_slot is None else "per-slot contexts")
        yield
        # uvicorn's graceful shutdown (SIGTERM) gets here once open streams end or
        # are cancelled: the runner cancels what still runs and closes the model.
        state.runner.stop()

    app = FastAPI(title="llamapy server", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = state
    errors.install(app)
    app.include_router(openai_routes.router)
    app.include_router(ollama_routes.router)
    app.include_router(infill_routes.router)
    app.include_router(anthropic_routes.router)
    app.include_router(responses_routes.router)
    app.include_router(rerank_routes.router)
    # Host, Origin/CORS, body limit, API key (security.py); the access log outermost.
    security.install_middleware(app, settings, keys)
    app.add_middleware(AccessLog)
    return app
