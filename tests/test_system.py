"""llamapy.system_info() and the machine probes."""
from __future__ import annotations

import json
import subprocess
import sys

import llamapy
from llamapy import _engine


def test_system_info_shape():
    info = llamapy.system_info()
    assert info["version"] == llamapy.__version__
    assert "cpu" in info["backends"]
    assert info["compiled_isas"][0] == "scalar"
    # what the CPU supports is a prefix of what was compiled
    assert info["cpu_isas"] == info["compiled_isas"][: len(info["cpu_isas"])]
    if info["isa_cap"]:  # LLAMAPY_ISA caps the level in use
        assert info["active_isa"] in info["cpu_isas"]
        assert info["compiled_isas"].index(info["active_isa"]) <= info["compiled_isas"].index(info["isa_cap"])
    else:
        assert info["active_isa"] == info["cpu_isas"][-1]
    assert info["default_n_threads"] >= 1
    assert info["n_physical_cores"] <= info["n_logical_cpus"]
    assert info["build"] in ("native", "portable")
    assert isinstance(info["cpu_features"]["avx2"], bool)


def test_kernel_levels_follow_cpu_features():
    info = llamapy.system_info()
    f = info["cpu_features"]
    if "avx512" in info["cpu_isas"]:
        assert f["avx512f"] and f["avx512bw"] and f["avx512vl"] and f["avx512_vnni"]
    if "avx2" in info["cpu_isas"]:
        assert f["avx2"] and f["fma"] and f["f16c"]


def test_info_command_prints_json(tmp_path):
    # cwd outside the source tree, so `-m llamapy` finds the package under test
    out = subprocess.run([sys.executable, "-m", "llamapy", "info"], capture_output=True, text=True, check=True,
                         cwd=tmp_path, env=_env_with_package())
    assert json.loads(out.stdout)["version"] == llamapy.__version__


def _env_with_package() -> dict:
    import os
    from pathlib import Path

    # abspath, not resolve(): a side build's package folder symlinks the
    # checkout's sources, and resolving would load the checkout's module
    return dict(os.environ, PYTHONPATH=str(Path(os.path.abspath(llamapy.__file__)).parents[1]))


def _info_under(isa_value: str) -> subprocess.CompletedProcess:
    import os

    env = dict(_env_with_package(), LLAMAPY_ISA=isa_value)
    return subprocess.run([sys.executable, "-c", "import json, llamapy; print(json.dumps(llamapy.system_info()))"],
                          capture_output=True, text=True, env=env, cwd=os.path.dirname(__file__))


def test_llamapy_isa_caps_the_level_in_use():
    info = llamapy.system_info()
    for level in info["compiled_isas"]:
        out = _info_under(level)
        assert out.returncode == 0, out.stderr
        capped = json.loads(out.stdout)
        assert capped["isa_cap"] == level
        assert capped["cpu_isas"] == info["cpu_isas"]  # what the CPU runs does not change
        # the lower of the cap and the best the CPU runs; never above the CPU
        expect = level if level in info["cpu_isas"] else info["cpu_isas"][-1]
        assert capped["active_isa"] == expect
    assert json.loads(_info_under("native").stdout)["active_isa"] == info["cpu_isas"][-1]


def test_llamapy_isa_of_the_other_architecture_leaves_scalar():
    # x86 and aarch64 levels form two chains above scalar: a cap from the
    # other chain is a valid name, and only scalar is below it
    info = llamapy.system_info()
    other = "avx2" if "neon" in info["compiled_isas"] else "neon"
    out = _info_under(other)
    assert out.returncode == 0, out.stderr
    capped = json.loads(out.stdout)
    assert capped["isa_cap"] == other and capped["active_isa"] == "scalar"


def test_llamapy_isa_with_a_wrong_value_fails_at_import_naming_it():
    out = _info_under("avx9000")
    assert out.returncode != 0
    assert "LLAMAPY_ISA='avx9000'" in out.stderr and "scalar, avx2, avx512" in out.stderr


def test_probes_return_plausible_numbers():
    bw = _engine.read_bandwidth(1 << 24, 2, 1)  # small: just checks the probe runs
    assert 0.1 < bw < 10000
    assert _engine.peak_gflops("f32_fma", 1) > 0.1


def test_type_table_geometry_matches_gguf():
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    for t, (block, size) in GGML_QUANT_SIZES.items():
        if t.name in ("Q8_1", "NVFP4", "Q1_0") or int(t) >= 40:
            continue  # activation-only or types newer than this engine
        ti = _engine.type_info(int(t))
        assert ti["name"] == t.name
        assert (ti["block_size"], ti["type_size"]) == (block, size)
    assert _engine.type_info(GGMLQuantizationType.Q4_K)["name"] == "Q4_K"


def test_module_runs_from_the_source_checkout_root():
    # `pip install . && python -m llamapy ...` typed at the checkout's root:
    # the unbuilt source package comes first on sys.path and must defer to
    # the installed one (or, in a developer build, use its own module).
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "llamapy", "info"], capture_output=True, text=True, cwd=root,
                         env=_env_with_package())
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["version"] == llamapy.__version__
