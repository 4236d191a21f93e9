"""The engine's facts, each stated once and read by Python: the KV cache types
(kv_cache.h), the architectures and their facts (model/archs.def and each
model/<arch>.cpp's arch_def), and the backend registry (backend/registry.h):
which backends and GPU devices exist, and why no GPU can be used."""
import re
from pathlib import Path

import numpy as np
import pytest

from llamapy import _engine as E

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "vendor" / "engine"


def test_kv_cache_types_are_the_engines_list():
    types = E.kv_cache_types()
    assert list(types.items())[:3] == [(0, "F32"), (1, "F16"), (30, "BF16")]
    for tid, name in types.items():  # the option's one parser takes each by name and by id
        assert int(E.ContextParams(type_k=name.lower()).type_k) == tid
        assert E.ContextParams(type_k=tid).type_k == name.lower()
    with pytest.raises(ValueError, match=", ".join(types.values())):
        E.ContextParams(type_k="Q4_K")


def test_architectures_match_the_table_and_the_build():
    archs = E.architectures()
    assert list(archs) == E.Model.supported_archs
    stems = re.findall(r"^LP_ARCH\(([a-z0-9_]+)\)", (ENGINE / "model" / "archs.def").read_text(), re.M)
    assert len(stems) == len(archs)
    for stem in stems:  # one file per line, defining arch_<stem>
        assert f"arch_def arch_{stem} =" in (ENGINE / "model" / f"{stem}.cpp").read_text()
    assert archs["gemma3"]["swa_period"] == 6 and archs["gemma2"]["swa_period"] == 2
    assert archs["llama"]["swa_period"] is None
    assert {a for a, f in archs.items() if f["encoder"]} == {"bert", "nomic-bert"}


def test_every_declared_chat_format_exists():
    from llamapy.chat.formats import FORMATS, guess_format_name

    for arch, facts in E.architectures().items():
        if facts["chat_format"] is not None:
            assert facts["chat_format"] in FORMATS, arch
            assert guess_format_name({"general.architecture": arch}) == facts["chat_format"]
    assert guess_format_name({"general.architecture": "chatglm"}) == "chatglm3"  # not run, still guessed
    assert guess_format_name({"general.architecture": "llama"}) == "llama-2"


def test_the_registry_lists_backends_and_devices():
    from llamapy._params import gpu_unavailable

    names = E.backends()
    assert names[0] == "cpu" and len(set(names)) == len(names)
    assert tuple(names) == E.system_info()["backends"]
    devices = E.gpu_devices()
    assert all(d["backend"] in names[1:] for d in devices)
    assert (E.gpu_unavailable() == "") == bool(devices)
    assert gpu_unavailable() == (E.gpu_unavailable() or None)
    if len(names) == 1:
        assert "no GPU backend" in E.gpu_unavailable()
    assert "Q4_K" in E.matmul_types("cpu")
    for i, d in enumerate(devices):
        assert set(E.matmul_types(f"gpu{i}")) == set(getattr(E, d["backend"] + "_matmul_types")())
    with pytest.raises(ValueError, match="does not exist"):
        E.matmul_types(f"gpu{len(devices)}")
    with pytest.raises(ValueError, match="not compiled in"):
        E.backend_matmul("nosuch", np.zeros((1, 4), np.float32), "F32", 1, 4, np.zeros((1, 4), np.float32))


def test_only_the_backends_folder_names_its_build_flag():
    """A backend is its folder plus one registration line: its build flag
    appears nowhere else in the engine."""
    hits = [(p.relative_to(ENGINE).as_posix(), line) for p in ENGINE.rglob("*") if p.is_file()
            and p.suffix in (".h", ".cpp", ".inc") for line in p.read_text(errors="replace").splitlines()
            if "LP_ENABLE_VULKAN" in line]
    outside = [h for h in hits if not h[0].startswith("vulkan/")]
    assert [p for p, _ in outside] == ["backend/registry.cpp"], outside
