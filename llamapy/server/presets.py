"""Router mode's model list: what ``--models-dir`` holds and what a
``--models-preset`` INI file says, merged into one ``ModelEntry`` per name.

A models dir holds single GGUFs (the name is the file's stem) or one
subfolder per model (the name is the folder's) with the model file and
optionally an ``mmproj*.gguf``. A split GGUF (``name-00001-of-00003.gguf``,
...) is one model, listed once as ``name`` and loaded from its first part;
with a part missing it is "failed" with a reason naming the missing file.

A preset file has a ``[*]`` section applied to every model, then one section
per model name. Keys: ``model`` (a path, relative to the preset file),
``load-on-startup``, and the server's own setting names (``ctx-size``/``c``,
``n-gpu-layers``/``ngl``, ``parallel``/``np``, ``mmproj``, ``chat-template``,
``alias``, ``embedding``, ...). Precedence: the router's command line (or
its environment / --config) > the model's section > ``[*]``. A key that
is not a per-model setting is an error naming it.
Not here: loading, evicting, proxying (router.py).
"""
from __future__ import annotations

import configparser
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ..gguf_file import split_name, split_part_paths
from .config import OPTIONS, ConfigError, Opt, Settings, _convert

# Settings a model's child server takes (the rest are the router's own).
MODEL_SETTINGS = ("ctx_size", "parallel", "n_gpu_layers", "n_cpu_moe", "cpu_moe", "override_tensor", "flash_attn", "cache_type_k", "cache_type_v", "batch_size",
                  "ubatch_size", "threads", "alias", "embedding", "pooling", "reranking", "mmproj", "chat_template", "jinja",
                  "metrics", "slots", "timeout", "queue_max", "max_body", "max_tokens_limit", "n_probs_max",
                  "media_path", "seed", "reasoning_format")
_PATH_SETTINGS = ("mmproj", "media_path")


@dataclass
class ModelEntry:
    name: str
    path: Optional[str]
    settings: Dict[str, Any] = field(default_factory=dict)  # dest -> value, MODEL_SETTINGS only
    load_on_startup: bool = False
    aliases: List[str] = field(default_factory=list)
    problem: Optional[str] = None  # why it cannot load at all (a split GGUF's part missing, no model file)


def _option_names() -> Dict[str, Opt]:
    by_name: Dict[str, Opt] = {}
    for opt in OPTIONS:
        if opt.dest not in MODEL_SETTINGS:
            continue
        by_name[opt.dest] = opt
        for f in opt.flags:
            by_name[f.lstrip("-").replace("-", "_")] = opt
    return by_name


def scan_models_dir(root: str) -> Dict[str, ModelEntry]:
    if not os.path.isdir(root):
        raise ConfigError(f"--models-dir {root}: not a folder")
    out: Dict[str, ModelEntry] = {}
    for name in sorted(os.listdir(root)):
        full = os.path.join(root, name)
        if os.path.isdir(full):
            entry = _scan_folder(name, full)
            if entry is not None:
                out[entry.name] = entry
        elif name.lower().endswith(".gguf") and not name.lower().startswith("mmproj"):
            split = split_name(name)
            if split and split[1] != 1:
                continue  # a later part of a split model: listed with its first part
            stem = split[0] if split else name[:-5]
            out[stem] = ModelEntry(stem, full, problem=_missing_part(full))
    return out


def _is_later_part(name: str) -> bool:
    split = split_name(name)
    return split is not None and split[1] != 1


def _missing_part(path: str) -> Optional[str]:
    """Why a split model (by its first part's name) cannot load: a part missing. None when all are there."""
    parts = split_part_paths(path)
    for i, p in enumerate(parts):
        if not os.path.isfile(p):
            return f"model is split into {len(parts)} files; part {i + 1} is missing: {p}"
    return None


def _scan_folder(name: str, folder: str) -> Optional[ModelEntry]:
    files = sorted(f for f in os.listdir(folder) if f.lower().endswith(".gguf"))
    mmproj = [f for f in files if f.lower().startswith("mmproj")]
    models = [f for f in files if not f.lower().startswith("mmproj")]
    if not models:
        return None
    firsts = [f for f in models if not _is_later_part(f)]
    entry = ModelEntry(name, os.path.join(folder, firsts[0]) if firsts else None)
    if len(firsts) != 1:
        entry.problem = f"folder {folder} holds {len(firsts)} model files ({', '.join(firsts)}); put one per folder"
    else:
        entry.problem = _missing_part(entry.path or "")
    if len(mmproj) == 1:
        entry.settings["mmproj"] = os.path.join(folder, mmproj[0])
    elif len(mmproj) > 1:
        entry.problem = entry.problem or f"folder {folder} holds {len(mmproj)} mmproj files; keep one"
    return entry


def read_preset(path: str) -> "tuple[Dict[str, Any], Dict[str, Dict[str, Any]]]":
    """(globals, {section: values}) of a preset file, every value converted
    and checked: (dest -> value); "model" and "load_on_startup" kept apart."""
    cp = configparser.ConfigParser(interpolation=None, default_section="\0no-default")
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        with open(path, encoding="utf-8") as f:
            cp.read_file(f)
    except OSError as e:
        raise ConfigError(f"--models-preset {path}: {e.strerror}") from None
    except configparser.Error as e:
        raise ConfigError(f"--models-preset {path}: not a valid INI file: {e}") from None
    base = os.path.dirname(os.path.abspath(path))
    names = _option_names()
    globals_: Dict[str, Any] = {}
    sections: Dict[str, Dict[str, Any]] = {}
    for section in cp.sections():
        values: Dict[str, Any] = {}
        for key, raw in cp.items(section):
            where = f"--models-preset {path} [{section}]"
            k = key.strip().lstrip("-").lower().replace("-", "_")
            if k == "model":
                values["model"] = os.path.join(base, os.path.expanduser(raw.strip()))
                continue
            if k == "load_on_startup":
                values["load_on_startup"] = _convert(Opt(("load-on-startup",), k, "", "bool"), raw, where)
                continue
            opt = names.get(k)
            if opt is None:
                raise ConfigError(f"{where}: unknown key {key!r} (keys: model, load-on-startup, "
                                  f"{', '.join(o.flags[-1].lstrip('-') for o in OPTIONS if o.dest in MODEL_SETTINGS)})")
            value = _convert(opt, raw.strip(), where)
            if opt.dest in _PATH_SETTINGS and value:
                value = os.path.join(base, os.path.expanduser(value))
            values[opt.dest] = value
        if section == "*":
            if "model" in values:
                raise ConfigError(f"--models-preset {path} [*]: 'model' names one model's file; put it in its section")
            globals_ = values
        else:
            sections[section] = values
    return globals_, sections


def model_entries(settings: Settings) -> Dict[str, ModelEntry]:
    """Every model the router serves, with its settings resolved:
    command line > section > [*] > the models dir's findings > defaults."""
    entries: Dict[str, ModelEntry] = {}
    if settings.models_dir:
        entries = scan_models_dir(settings.models_dir)
    globals_: Dict[str, Any] = {}
    sections: Dict[str, Dict[str, Any]] = {}
    if settings.models_preset:
        globals_, sections = read_preset(settings.models_preset)
    for name, values in sections.items():
        entry = entries.get(name)
        if "model" in values:
            p = values["model"]
            entry = ModelEntry(name, p, dict(entry.settings) if entry else {},
                               problem=None if os.path.isfile(p) else f"model file {p} does not exist")
        elif entry is None:
            where = f" or in --models-dir {settings.models_dir}" if settings.models_dir else ""
            raise ConfigError(f"--models-preset {settings.models_preset} [{name}]: no 'model =' path{where}")
        entries[name] = entry
    if not entries:
        raise ConfigError("router mode found no models (--models-dir holds no .gguf, and no preset section names one)")
    defaults = {opt.dest: opt.default for opt in OPTIONS if opt.dest in MODEL_SETTINGS}
    for name, entry in entries.items():
        section = sections.get(name, {})
        merged = dict(defaults)
        merged.update({k: v for k, v in entry.settings.items()})
        for layer in (globals_, section):
            merged.update({k: v for k, v in layer.items() if k in MODEL_SETTINGS})
        merged.update({k: settings.values[k] for k in MODEL_SETTINGS if k in settings.explicit})
        entry.settings = merged
        entry.load_on_startup = bool(section.get("load_on_startup", globals_.get("load_on_startup", False)))
        alias = merged.get("alias")
        entry.aliases = [alias] if alias and alias != name else []
    seen: Dict[str, str] = {}
    for name, entry in entries.items():
        for n in [name, *entry.aliases]:
            if n in seen and seen[n] != name:
                raise ConfigError(f"router mode: the name {n!r} is used by two models ({seen[n]} and {name})")
            seen[n] = name
    return entries
