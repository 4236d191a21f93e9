"""Server settings: llama-server's flag names, an environment variable for
each (llama-server's ``LLAMA_ARG_*`` names where it has one), and a JSON or
YAML ``--config`` file. Precedence: command line > environment > config
file > default.

Without ``-m``, ``--models-dir`` / ``--models-preset`` start router mode
(llamapy/server/router.py).
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ..chat.reasoning import REASONING_FORMATS

_UNSET = object()


@dataclass(frozen=True)
class Opt:
    flags: Sequence[str]
    dest: str
    env: str
    kind: Any = str  # str, int, float, "bool", "list"
    default: Any = None
    help: str = ""
    choices: Optional[Sequence[str]] = None


OPTIONS: List[Opt] = [
    Opt(("-m", "--model"), "model", "LLAMA_ARG_MODEL", help="GGUF model file"),
    Opt(("--host",), "host", "LLAMA_ARG_HOST", default="127.0.0.1", help="address to bind (default 127.0.0.1)"),
    Opt(("--port",), "port", "LLAMA_ARG_PORT", int, 8080, "port to listen on (default 8080)"),
    Opt(("-c", "--ctx-size"), "ctx_size", "LLAMA_ARG_CTX_SIZE", int, 4096, "context size; 0 = the model's"),
    Opt(("-np", "--parallel"), "parallel", "LLAMA_ARG_N_PARALLEL", int, 1,
        "number of slots, decoded together in one batch per step"),
    Opt(("--ctx-per-slot",), "ctx_per_slot", "LLAMA_ARG_CTX_PER_SLOT", "optint", None,
        "give each slot its own hard context limit: -c / -np tokens, or the size given (default: one KV pool of "
        "-c tokens that all slots share)"),
    Opt(("-ngl", "--n-gpu-layers", "--gpu-layers"), "n_gpu_layers", "LLAMA_ARG_N_GPU_LAYERS", int, 0,
        "layers to offload to the GPU"),
    Opt(("-ncmoe", "--n-cpu-moe"), "n_cpu_moe", "LLAMA_ARG_N_CPU_MOE", int, 0,
        "keep the expert weights of the first N layers in host memory, run on the CPU (a big mixture of experts "
        "on a small GPU)"),
    Opt(("-cmoe", "--cpu-moe"), "cpu_moe", "LLAMA_ARG_CPU_MOE", "bool", False,
        "keep every layer's expert weights in host memory, run on the CPU"),
    Opt(("-ot", "--override-tensor"), "override_tensor", "LLAMA_ARG_OVERRIDE_TENSOR", str, None,
        "<tensor name regex>=CPU,...: keep the matching weights in host memory, run on the CPU"),
    Opt(("-fa", "--flash-attn"), "flash_attn", "LLAMA_ARG_FLASH_ATTN", str, "auto", "flash attention",
        ("on", "off", "auto")),
    Opt(("-ctk", "--cache-type-k"), "cache_type_k", "LLAMA_ARG_CACHE_TYPE_K", default="f16", help="K cache type"),
    Opt(("-ctv", "--cache-type-v"), "cache_type_v", "LLAMA_ARG_CACHE_TYPE_V", default="f16", help="V cache type"),
    Opt(("-b", "--batch-size"), "batch_size", "LLAMA_ARG_BATCH", int, 2048, "logical batch size"),
    Opt(("-ub", "--ubatch-size"), "ubatch_size", "LLAMA_ARG_UBATCH", int, 512, "physical batch size"),
    Opt(("-t", "--threads"), "threads", "LLAMA_ARG_THREADS", int, None, "CPU threads (default: all cores)"),
    Opt(("-a", "--alias"), "alias", "LLAMA_ARG_ALIAS", help="model name shown by /v1/models (default: file name)"),
    Opt(("--api-key",), "api_key", "LLAMA_API_KEY", "list", None,
        "API key; repeat, or comma-separate, for several"),
    Opt(("--api-key-file",), "api_key_file", "LLAMA_ARG_API_KEY_FILE", help="file with one API key per line"),
    Opt(("--cors-origins",), "cors_origins", "LLAMA_ARG_CORS_ORIGINS", "list", None,
        "allowed CORS origins, comma-separated (default: http(s)://localhost and 127.0.0.1 on any port); a "
        "request from a web page of another origin is refused (403)"),
    Opt(("--allowed-hosts",), "allowed_hosts", "LLAMA_ARG_ALLOWED_HOSTS", "list", None,
        "Host header names to answer besides loopback ones (and, with a non-loopback --host, its address and this "
        "machine's name), comma-separated; '*' for any. Others get 403 (DNS rebinding)"),
    Opt(("--embedding", "--embeddings"), "embedding", "LLAMA_ARG_EMBEDDINGS", "bool", False,
        "serve /v1/embeddings"),
    Opt(("--pooling",), "pooling", "LLAMA_ARG_POOLING", str, None, "embedding pooling (default: the model's)",
        ("none", "mean", "cls", "last", "rank")),
    Opt(("--reranking", "--rerank"), "reranking", "LLAMA_ARG_RERANKING", "bool", False,
        "serve /v1/rerank with a reranker model (embeddings with --pooling rank, as llama-server's)"),
    Opt(("-mm", "--mmproj"), "mmproj", "LLAMA_ARG_MMPROJ", help="multimodal projector GGUF"),
    Opt(("--chat-template",), "chat_template", "LLAMA_ARG_CHAT_TEMPLATE",
        help="a chat format name (e.g. chatml) or a Jinja template string"),
    Opt(("--jinja",), "jinja", "LLAMA_ARG_JINJA", "bool", True,
        "use the model's Jinja chat template (always on: templates render in a sandbox)"),
    Opt(("--reasoning-format",), "reasoning_format", "LLAMA_ARG_THINK", str, "auto",
        "a reasoning model's thinking (<think> tags, gpt-oss's analysis channel): auto or deepseek put it into "
        "message.reasoning_content, none leaves it in message.content; a request's reasoning_format wins",
        REASONING_FORMATS),
    Opt(("--reasoning-budget",), "reasoning_budget", "LLAMA_ARG_THINK_BUDGET", int, -1,
        "tokens of thinking a reasoning model may write before its answer is forced (the template's closing "
        "marker is written for it); -1 no limit, 0 none; a request's reasoning_budget wins"),
    Opt(("--spm-infill",), "spm_infill", "LLAMA_ARG_SPM_INFILL", "bool", False,
        "/infill lays the prompt out suffix first (Suffix/Prefix/Middle), as some code models were trained"),
    Opt(("--metrics",), "metrics", "LLAMA_ARG_ENDPOINT_METRICS", "bool", False, "serve /metrics"),
    Opt(("--slots",), "slots", "LLAMA_ARG_ENDPOINT_SLOTS", "bool", True, "serve /slots (--no-slots: off)"),
    Opt(("-to", "--timeout"), "timeout", "LLAMA_ARG_TIMEOUT", float, 600.0,
        "seconds a request may take, queue wait included"),
    Opt(("--models-dir",), "models_dir", "LLAMA_ARG_MODELS_DIR",
        help="router mode: a folder of GGUFs (or one subfolder per model, with an mmproj*.gguf)"),
    Opt(("--models-preset",), "models_preset", "LLAMA_ARG_MODELS_PRESET",
        help="router mode: an INI file, [*] for every model, one [name] section per model"),
    Opt(("--models-max",), "models_max", "LLAMA_ARG_MODELS_MAX", int, 4,
        help="router mode: models loaded at once; the least recently used idle one is unloaded (default 4)"),
    Opt(("--models-memory-margin",), "models_memory_margin", "LLAMA_ARG_MODELS_MEMORY_MARGIN", int, 0,
        help="router mode: MiB of memory to keep free; idle models are unloaded to make room (default 0)"),
    Opt(("--no-models-autoload",), "no_models_autoload", "LLAMA_ARG_NO_MODELS_AUTOLOAD", "bool", False,
        help="router mode: load models only by POST /models/load (or a request's ?autoload=true)"),
    # Beyond llama-server: the limits that make the server safe to expose.
    Opt(("--queue-max",), "queue_max", "LLAMA_ARG_QUEUE_MAX", int, 16,
        "requests waiting for the slot before 503 + Retry-After"),
    Opt(("--max-body",), "max_body", "LLAMA_ARG_MAX_BODY", int, 8 * 1024 * 1024, "request body limit, bytes (413)"),
    Opt(("--max-tokens-limit",), "max_tokens_limit", "LLAMA_ARG_MAX_TOKENS_LIMIT", int, None,
        "largest max_tokens / num_predict a request may ask for (default: the context size)"),
    Opt(("--n-probs-max",), "n_probs_max", "LLAMA_ARG_N_PROBS_MAX", int, 20,
        "largest top_logprobs / logprobs a request may ask for"),
    Opt(("--media-path",), "media_path", "LLAMA_ARG_MEDIA_PATH",
        help="folder that file:// and path images may be read from (default: none)"),
    Opt(("--seed", "-s"), "seed", "LLAMA_ARG_SEED", int, None, "default RNG seed"),
]

ROUTER_OPTIONS = ("models_dir", "models_preset", "models_max", "models_memory_margin", "no_models_autoload")


class ConfigError(ValueError):
    """A setting that is wrong or names a feature not built yet."""


@dataclass
class Settings:
    values: Dict[str, Any] = field(default_factory=dict)
    # dests set by the command line, the environment or --config (not defaults):
    # router mode lets them win over a preset's sections.
    explicit: frozenset = frozenset()

    @property
    def router_mode(self) -> bool:
        return not self.values.get("model")

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


def _bool(text: Any) -> bool:
    if isinstance(text, bool):
        return text
    s = str(text).strip().lower()
    if s in ("1", "true", "on", "yes", "enabled"):
        return True
    if s in ("0", "false", "off", "no", "disabled"):
        return False
    raise ConfigError(f"not a boolean: {text!r}")


def _convert(opt: Opt, value: Any, where: str) -> Any:
    try:
        if value is None:
            return None
        if opt.kind == "bool":
            return _bool(value)
        if opt.kind == "optint":  # true or the bare flag: 0 (the default size); false: off
            if isinstance(value, bool) or str(value).lower() in ("true", "false", "on", "off"):
                return 0 if _bool(value) else None
            v = int(value)
            if v < 0:
                raise ValueError
            return v
        if opt.kind == "list":
            items = value if isinstance(value, list) else [value]
            out: List[str] = []
            for item in items:
                out.extend(s.strip() for s in str(item).split(",") if s.strip())
            return out
        if opt.kind in (int, float) and isinstance(value, bool):
            raise ValueError
        v = opt.kind(value)
    except (TypeError, ValueError, ConfigError):
        raise ConfigError(f"{where}: {opt.flags[-1]} needs a {getattr(opt.kind, '__name__', opt.kind)}, "
                          f"not {value!r}") from None
    if opt.choices and v not in opt.choices:
        raise ConfigError(f"{where}: {opt.flags[-1]} must be one of {', '.join(opt.choices)}, not {v!r}")
    return v


def build_parser(prog: str = "llamapy serve") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="OpenAI- and Ollama-compatible HTTP server",
                                argument_default=argparse.SUPPRESS)
    p.add_argument("--config", help="JSON or YAML file of settings (keys: the long flag names)")
    for opt in OPTIONS:
        helptext = f"{opt.help} [env {opt.env}]"
        if opt.kind == "bool":
            p.add_argument(*opt.flags, dest=opt.dest, action="store_const", const=True, help=helptext)
            negs = ["--no-" + f[2:] for f in opt.flags if f.startswith("--") and not f.startswith("--no-")]
            if negs:
                p.add_argument(*negs, dest=opt.dest, action="store_const", const=False, help=argparse.SUPPRESS)
        elif opt.kind == "list":
            p.add_argument(*opt.flags, dest=opt.dest, action="append", help=helptext)
        elif opt.kind == "optint":  # the flag alone, or the flag and a number
            p.add_argument(*opt.flags, dest=opt.dest, nargs="?", const="0", metavar="N", help=helptext)
        else:
            p.add_argument(*opt.flags, dest=opt.dest, help=helptext)
    return p


def read_config_file(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"--config {path}: {e.strerror}") from None
    if path.lower().endswith((".yaml", ".yml")):
        try:
            import yaml  # type: ignore
        except ImportError:
            raise ConfigError(f"--config {path}: a YAML config needs PyYAML (pip install pyyaml); "
                              "or write the file as JSON") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"--config {path}: not valid YAML: {e}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--config {path}: not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: the file must hold a mapping of settings")
    by_name: Dict[str, Opt] = {}
    for opt in OPTIONS:
        by_name[opt.dest] = opt
        for f in opt.flags:
            by_name[f.lstrip("-").replace("-", "_")] = opt
    out: Dict[str, Any] = {}
    for key, value in data.items():
        opt = by_name.get(str(key).lstrip("-").replace("-", "_"))
        if opt is None:
            raise ConfigError(f"--config {path}: unknown setting {key!r}")
        out[opt.dest] = _convert(opt, value, f"--config {path}")
    return out


def parse_settings(argv: Optional[Sequence[str]] = None, environ: Optional[Dict[str, str]] = None) -> Settings:
    """Settings from the command line, the environment and --config; raises
    ConfigError for bad values and for features not built yet."""
    environ = os.environ if environ is None else environ
    ns = vars(build_parser().parse_args(list(argv) if argv is not None else None))
    cfg = read_config_file(ns.pop("config")) if ns.get("config") else {}
    values: Dict[str, Any] = {}
    explicit = set()
    for opt in OPTIONS:
        explicit.add(opt.dest)
        if opt.dest in ns:
            values[opt.dest] = _convert(opt, ns[opt.dest], "command line")
        elif opt.env in environ:
            values[opt.dest] = _convert(opt, environ[opt.env], f"environment {opt.env}")
        elif opt.dest in cfg:
            values[opt.dest] = cfg[opt.dest]
        else:
            values[opt.dest] = opt.default
            explicit.discard(opt.dest)
    if values.get("model"):
        for opt in OPTIONS:
            if opt.dest in ROUTER_OPTIONS and opt.dest in explicit:
                raise ConfigError(f"{opt.flags[0]}: router mode only (several models, without -m); "
                                  "it does nothing with -m MODEL")
    apply_implied(values)
    check(values)
    return Settings(values, frozenset(explicit))


def apply_implied(values: Dict[str, Any]) -> None:
    """Settings that imply others (``values`` changed in place)."""
    if values.get("reranking"):  # llama-server: --reranking is embeddings pooled by rank
        if values.get("pooling") not in (None, "rank"):
            raise ConfigError(f"--reranking pools by rank; it cannot go with --pooling {values['pooling']}")
        values["embedding"], values["pooling"] = True, "rank"


def check(values: Dict[str, Any]) -> None:
    router = bool(values.get("models_dir") or values.get("models_preset"))
    if values.get("model") and router:
        raise ConfigError("-m MODEL serves one model; --models-dir / --models-preset start router mode: "
                          "pass one or the other")
    if not values.get("model") and not router:
        raise ConfigError("no model: pass -m MODEL, or --models-dir DIR / --models-preset FILE for router mode")
    if values["models_max"] is None or values["models_max"] < 1:
        raise ConfigError("--models-max must be at least 1")
    if values["models_memory_margin"] is None or values["models_memory_margin"] < 0:
        raise ConfigError("--models-memory-margin must be a non-negative number of MiB")
    if values.get("jinja") is False:
        raise ConfigError("--no-jinja is not supported: llamapy renders the GGUF's Jinja template in a sandbox; "
                          "pick a named format instead with --chat-template NAME (e.g. chatml)")
    if values["parallel"] is None or values["parallel"] < 1:
        raise ConfigError(f"-np/--parallel must be a positive integer, not {values['parallel']}")
    for dest in ("port", "queue_max", "max_body", "n_probs_max"):
        if values[dest] is None or values[dest] < 0:
            raise ConfigError(f"{dest.replace('_', '-')} must be a non-negative integer")
    if values["timeout"] is not None and values["timeout"] <= 0:
        raise ConfigError("--timeout must be positive")
    if values["max_tokens_limit"] is not None and values["max_tokens_limit"] <= 0:
        raise ConfigError("--max-tokens-limit must be positive")
