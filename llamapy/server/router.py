"""Router mode's model manager: each model runs in its own child process
(the single-model server, ``python -m llamapy.server -m PATH`` on a free
loopback port with an internal API key), loaded on first use and unloaded
to make room.

States: unloaded -> loading -> loaded; failed (with the reason) when a load
fails or a loaded child dies. A child that crashes takes nothing else down;
the next request for it loads it again. A model that failed to *load* stays
failed until ``POST /models/load`` retries it (a request would only fail the
same way again).

Room, checked before every load under one lock:
- ``--models-max``: at most that many children (loading or loaded);
- memory: the new model's footprint (``llamapy.plan_memory`` at its
  settings, plus one interpreter with the server's libraries, estimated as
  this process's own RSS at start) plus ``--models-memory-margin`` must fit
  in what is available: /proc/meminfo MemAvailable, less what children
  still loading have yet to allocate.
The least recently used idle model (no request in flight) is unloaded until
both hold. If the model could not fit even with every model unloaded: 507
naming the numbers; if only busy models are in the way: 503 + Retry-After.

Test hook: ``LLAMAPY_ROUTER_FAKE_MEMORY="TOTAL_MIB,AVAILABLE_MIB[,PROCESS_MIB]"``
replaces /proc/meminfo: AVAILABLE is what is free with no model loaded, each
child then counts as its predicted footprint, and PROCESS (default: this
process's RSS) is what a child costs beyond its model.
Not here: the HTTP routes and the proxying (router_routes.py), the model
list (presets.py).
"""
from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import errors
from .config import OPTIONS, Settings
from .presets import MODEL_SETTINGS, ModelEntry, model_entries

logger = logging.getLogger("llamapy.server.router")

MiB = 1024 * 1024
FAKE_MEMORY_ENV = "LLAMAPY_ROUTER_FAKE_MEMORY"
_CHILD_ENV_DROP = ("LLAMA_ARG_", "LLAMA_API_KEY")
_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _rss(pid: Optional[int] = None) -> int:
    try:
        with open(f"/proc/{pid or 'self'}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _meminfo() -> Tuple[int, int]:
    total = avail = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
            elif line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    return total, avail


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    # A router killed outright must not leave its children running (Linux prctl PR_SET_PDEATHSIG).
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except Exception:
        pass


def _mib(n: int) -> str:
    return f"{n / MiB:.0f} MiB"


def child_flags(settings: Dict[str, Any]) -> List[str]:
    """The child server's command-line flags for a model's settings."""
    out: List[str] = []
    for opt in OPTIONS:
        if opt.dest not in MODEL_SETTINGS or opt.dest == "alias":
            continue
        v = settings.get(opt.dest)
        if v is None:
            continue
        flag = next(f for f in opt.flags if f.startswith("--"))
        if opt.kind == "bool":
            out.append(flag if v else "--no-" + flag[2:])
        else:
            out += [flag, str(v)]
    return out


class ModelSlot:
    """One model: its entry, state and (while loading / loaded) its child."""

    def __init__(self, entry: ModelEntry) -> None:
        self.entry = entry
        self.name = entry.name
        self.state = "failed" if entry.problem else "unloaded"
        self.reason: Optional[str] = entry.problem
        self.load_failed = bool(entry.problem)  # failed while loading (sticky) vs crashed later
        self.proc: Optional[asyncio.subprocess.Process] = None
        self.port = 0
        self.in_flight = 0
        self.last_used = 0.0
        self.need: Optional[int] = None  # predicted bytes of the child
        self.plan: Optional[Dict[str, Any]] = None
        self.ready: Optional["asyncio.Future[None]"] = None
        self.stopping = False
        self.log_path: Optional[str] = None
        self.expires: Optional[float] = None  # time.monotonic() when Ollama's keep_alive unloads it; None: never

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.state in ("loading", "loaded")

    def describe(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"id": self.name, "object": "model", "owned_by": "llamapy", "path": self.entry.path,
                             "aliases": self.entry.aliases, "status": {"value": self.state},
                             "in_flight": self.in_flight}
        if self.reason and self.state in ("failed", "unloaded"):
            d["status"]["reason"] = self.reason
        if self.need is not None:
            d["memory"] = {"predicted_bytes": self.need, **(self.plan or {})}
        if self.proc is not None and self.alive:
            d["pid"] = self.proc.pid
        if self.expires is not None and self.state == "loaded":
            d["expires_in_s"] = round(max(0.0, self.expires - time.monotonic()), 1)
        return d


class Router:
    def __init__(self, settings: Settings, environ: Optional[Mapping[str, str]] = None) -> None:
        environ = os.environ if environ is None else environ
        self.settings = settings
        self.slots: Dict[str, ModelSlot] = {n: ModelSlot(e) for n, e in model_entries(settings).items()}
        self.names: Dict[str, str] = {}
        for slot in self.slots.values():
            for n in [slot.name, *slot.entry.aliases]:
                self.names[n] = slot.name
        self.key = secrets.token_hex(16)
        self.margin = int(settings.models_memory_margin or 0) * MiB
        self.models_max = int(settings.models_max)
        self.autoload = not settings.no_models_autoload
        fake = self._read_fake(environ.get(FAKE_MEMORY_ENV))
        self.fake_memory: Optional[Tuple[int, ...]] = fake[:2] if fake else None
        # One interpreter with the server's libraries: what a child costs beyond its model.
        self.process_bytes = fake[2] if fake and len(fake) > 2 else _rss()
        self.child_env = {k: v for k, v in environ.items() if not k.startswith(_CHILD_ENV_DROP)}
        self.child_env["LLAMA_API_KEY"] = self.key
        self.child_env["PYTHONPATH"] = os.pathsep.join(p for p in (_PKG_ROOT, environ.get("PYTHONPATH")) if p)
        self._log_dir: Optional[str] = None  # children's output, made on the first load, removed at shutdown
        self._lock: Optional[asyncio.Lock] = None

    @staticmethod
    def _read_fake(text: Optional[str]) -> Optional[Tuple[int, ...]]:
        if not text:
            return None
        try:
            values = tuple(int(float(x) * MiB) for x in text.split(","))
            if len(values) not in (2, 3) or min(values) < 0:
                raise ValueError
        except ValueError:
            raise ValueError(f"{FAKE_MEMORY_ENV}={text!r}: expected 'TOTAL_MIB,AVAILABLE_MIB[,PROCESS_MIB]'") from None
        return values

    @property
    def lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    # ------------------------------------------------------------ lookups
    def slot(self, name: Any) -> ModelSlot:
        if not isinstance(name, str) or not name:
            raise errors.bad_request(f"model: required in router mode, one of: {', '.join(self.slots)}")
        real = self.names.get(name)
        if real is None:
            raise errors.APIError(404, f"model {name!r} not found; this router serves: {', '.join(self.slots)}",
                                  "model_not_found")
        return self.slots[real]

    def memory(self) -> Dict[str, int]:
        """total, available now, and available with every model unloaded (bytes)."""
        alive = [s for s in self.slots.values() if s.alive and s.proc is not None]
        if self.fake_memory is not None:
            total, avail = self.fake_memory[0], self.fake_memory[1]
            used = sum(s.need or 0 for s in alive)
            return {"total": total, "available": avail - used, "available_unloaded": avail}
        total, avail = _meminfo()
        rss = {s.name: _rss(s.proc.pid) for s in alive if s.proc}
        pending = sum(max(0, (s.need or 0) - rss[s.name]) for s in alive if s.state == "loading")
        return {"total": total, "available": avail - pending, "available_unloaded": avail + sum(rss.values())}

    # ------------------------------------------------------------ loading
    async def _predict(self, slot: ModelSlot) -> int:
        if slot.need is None:
            from ..memory_plan import plan_memory

            s = slot.entry.settings
            fa = s.get("flash_attn") or "auto"
            plan = await asyncio.to_thread(
                plan_memory, slot.entry.path, n_ctx=s.get("ctx_size"), n_parallel=int(s.get("parallel") or 1),
                type_k=s.get("cache_type_k") or "f16", type_v=s.get("cache_type_v") or "f16",
                n_gpu_layers=int(s.get("n_gpu_layers") or 0), mmproj=s.get("mmproj"), n_batch=s.get("batch_size"),
                n_ubatch=s.get("ubatch_size"), flash_attn=fa, n_threads=s.get("threads"),
                embedding=bool(s.get("embedding")),
                n_cpu_moe=(1 << 30) if s.get("cpu_moe") else int(s.get("n_cpu_moe") or 0),
                override_tensor=s.get("override_tensor"))
            slot.plan = {k: getattr(plan, k) for k in ("weights_bytes", "kv_bytes", "compute_bytes",
                                                       "runtime_bytes", "mmproj_bytes")}
            slot.plan["process_bytes"] = self.process_bytes
            slot.need = plan.total_bytes + self.process_bytes
        return slot.need

    async def ensure_loaded(self, slot: ModelSlot, autoload: Optional[bool] = None) -> None:
        """Returns once the model's child serves; raises APIError otherwise."""
        autoload = self.autoload if autoload is None else autoload
        while True:
            if slot.state == "loaded" and slot.proc is not None and slot.proc.returncode is None:
                return
            if slot.state == "loading" and slot.ready is not None:
                await asyncio.shield(slot.ready)
                continue
            if slot.state == "failed" and slot.load_failed:
                raise errors.APIError(503, f"model {slot.name!r} failed to load: {slot.reason} "
                                      "(POST /models/load retries)", "model_load_failed")
            if not autoload:
                raise errors.APIError(503, f"model {slot.name!r} is not loaded and autoload is off "
                                      "(POST /models/load, or ?autoload=true)", "model_not_loaded")
            await self.load(slot)

    async def load(self, slot: ModelSlot) -> None:
        async with self.lock:
            if slot.alive:
                pass  # another request started it meanwhile
            else:
                if slot.entry.problem:
                    raise errors.APIError(503, f"model {slot.name!r} cannot load: {slot.entry.problem}",
                                          "model_load_failed")
                try:
                    need = await self._predict(slot)
                except (ValueError, TypeError, OSError) as e:
                    self._fail(slot, f"cannot plan its memory: {e}", load_failed=True)
                    raise errors.APIError(503, f"model {slot.name!r} failed to load: {slot.reason}",
                                          "model_load_failed") from None
                await self._make_room(slot, need)
                await self._spawn(slot)
        if slot.ready is not None:
            await asyncio.shield(slot.ready)

    async def _make_room(self, slot: ModelSlot, need: int) -> None:
        mem = self.memory()
        if need + self.margin > mem["available_unloaded"]:
            raise errors.APIError(
                507, f"model {slot.name!r} needs {_mib(need)} (weights {_mib(slot.plan['weights_bytes'])}, "
                f"KV cache {_mib(slot.plan['kv_bytes'])}, compute {_mib(slot.plan['compute_bytes'])}, "
                f"runtime and process {_mib(slot.plan['runtime_bytes'] + self.process_bytes)}) plus a margin of "
                f"{_mib(self.margin)}, but only {_mib(mem['available_unloaded'])} would be available with every "
                f"model unloaded (total {_mib(mem['total'])})", "insufficient_memory")
        while True:
            alive = [s for s in self.slots.values() if s.alive and s is not slot]
            mem = self.memory()
            over_count = len(alive) >= self.models_max
            over_memory = need + self.margin > mem["available"]
            if not over_count and not over_memory:
                return
            idle = [s for s in alive if s.state == "loaded" and s.in_flight == 0]
            if not idle:
                why = (f"{len(alive)} models are loaded (--models-max {self.models_max})" if over_count else
                       f"it needs {_mib(need)} + margin {_mib(self.margin)}, {_mib(mem['available'])} is available")
                raise errors.APIError(503, f"cannot load model {slot.name!r} now: {why}, and every loaded model "
                                      "has requests in flight", "models_busy", {"Retry-After": "5"})
            victim = min(idle, key=lambda s: s.last_used)
            logger.info("unloading %s (least recently used) to load %s: %s", victim.name, slot.name,
                        "--models-max" if over_count else "memory")
            await self.unload(victim, reason=f"unloaded to make room for {slot.name}")

    async def _spawn(self, slot: ModelSlot) -> None:
        slot.port = _free_port()
        if self._log_dir is None:
            self._log_dir = tempfile.mkdtemp(prefix="llamapy-router-")
        slot.log_path = os.path.join(self._log_dir, f"{slot.name.replace(os.sep, '_')}.log")
        argv = [sys.executable, "-m", "llamapy.server", "-m", slot.entry.path or "", "--host", "127.0.0.1",
                "--port", str(slot.port), "--alias", slot.name, *child_flags(slot.entry.settings)]
        slot.state, slot.reason, slot.load_failed, slot.stopping = "loading", None, False, False
        slot.expires = None
        slot.ready = asyncio.get_running_loop().create_future()
        slot.last_used = time.monotonic()
        logger.info("loading %s (predicted %s) on port %d", slot.name, _mib(slot.need or 0), slot.port)
        with open(slot.log_path, "wb") as log:
            slot.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.child_env,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        asyncio.ensure_future(self._watch(slot, slot.proc))

    async def _watch(self, slot: ModelSlot, proc: "asyncio.subprocess.Process") -> None:
        """Waits for the child to serve (then for it to exit)."""
        import httpx

        deadline = time.monotonic() + float(self.settings.timeout or 600)
        async with httpx.AsyncClient(timeout=2.0) as client:
            while proc.returncode is None and slot.proc is proc and slot.state == "loading":
                try:
                    r = await client.get(slot.url + "/health")
                    if r.status_code == 200:
                        slot.state = "loaded"
                        logger.info("loaded %s (pid %d)", slot.name, proc.pid)
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    await self._stop(proc)
                    self._fail(slot, "did not load within --timeout", load_failed=True)
                    break
                try:
                    await asyncio.wait_for(proc.wait(), 0.1)
                except asyncio.TimeoutError:
                    pass
        if slot.proc is proc and slot.state == "loading" and proc.returncode is not None and not slot.stopping:
            self._fail(slot, self.exit_reason(slot, proc.returncode, loading=True), load_failed=True)
        self._settle(slot)
        await proc.wait()
        if slot.proc is proc and not slot.stopping and slot.state == "loaded":
            self._fail(slot, self.exit_reason(slot, proc.returncode, loading=False), load_failed=False)
            logger.warning("model %s: %s", slot.name, slot.reason)

    def _settle(self, slot: ModelSlot) -> None:
        if slot.ready is not None and not slot.ready.done():
            slot.ready.set_result(None)

    def _fail(self, slot: ModelSlot, reason: str, load_failed: bool) -> None:
        slot.state, slot.reason, slot.load_failed = "failed", reason, load_failed
        self._settle(slot)

    def exit_reason(self, slot: ModelSlot, code: Optional[int], loading: bool) -> str:
        how = (f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exited with status {code}")
        tail = ""
        try:
            with open(slot.log_path or "", encoding="utf-8", errors="replace") as f:
                lines = [ln.strip() for ln in f if ln.strip()]
            errs = [ln for ln in lines if ln.startswith("error:")]
            tail = (errs or lines or [""])[-1][:500]
        except OSError:
            pass
        what = "its server process " + how + (" while loading" if loading else "")
        return f"{what}: {tail}" if tail and loading else what

    # ------------------------------------------------------------ unloading
    @staticmethod
    async def _stop(proc: "asyncio.subprocess.Process", grace: float = 10.0) -> None:
        if proc.returncode is not None:
            return
        try:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), grace)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
        except ProcessLookupError:
            pass

    async def unload(self, slot: ModelSlot, reason: Optional[str] = None) -> None:
        """Ends the model's child (open streams get its graceful shutdown) and
        waits until it has exited, so its memory is back."""
        proc = slot.proc
        slot.stopping = True
        if proc is not None:
            await self._stop(proc)
        if slot.proc is proc:
            slot.state = "failed" if slot.entry.problem else "unloaded"
            slot.reason = slot.entry.problem or reason
            slot.load_failed = bool(slot.entry.problem)
            slot.proc = None
        self._settle(slot)

    # ------------------------------------------------------------ keep_alive
    def keep_alive(self, slot: ModelSlot, seconds: Optional[float]) -> None:
        """Ollama's keep_alive: unload once idle for that long (0: as soon as
        idle; None: never)."""
        slot.expires = None if seconds is None else time.monotonic() + seconds

    async def reap_expired(self, every: float = 0.25) -> None:
        """Runs for the router's life: unloads idle models past keep_alive."""
        while True:
            await asyncio.sleep(every)
            now = time.monotonic()
            for slot in list(self.slots.values()):
                if (slot.state == "loaded" and slot.in_flight == 0 and slot.expires is not None
                        and slot.expires <= now):
                    logger.info("unloading %s: keep_alive expired", slot.name)
                    async with self.lock:
                        await self.unload(slot, reason="keep_alive expired")

    async def shutdown(self) -> None:
        await asyncio.gather(*(self.unload(s, "router shut down") for s in self.slots.values() if s.proc))
        if self._log_dir is not None:
            import shutil

            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None
