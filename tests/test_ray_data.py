"""llamapy.ray's batch inference on Ray Data, on a local Ray instance (``ray.init(num_cpus=2)``,
once for the module): each job's rows equal the same calls made row by row in this process,
failing rows included (their ``error`` says why, the job goes on); the ``batch`` command reads
and writes Parquet / JSONL, keeps the input's columns and resumes per input file; and the
import guards (``import llamapy`` never loads Ray; ``llamapy.ray`` without Ray names the
extra)."""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs

ROOT = Path(__file__).resolve().parent.parent
VLM = ROOT / "tests" / "data" / "vlm"
RERANK = ROOT / "tests" / "data" / "rerank"


# ------------------------------------------------------------------------ import guards
def _python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_import_llamapy_does_not_import_ray():
    r = _python("import sys, llamapy, llamapy.cli; llamapy.cli.build_parser(); print('ray' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_llamapy_ray_without_ray_names_the_extra():
    # sys.modules[name] = None makes that import fail, as where Ray is not installed.
    r = _python("import sys; sys.modules['ray'] = None\n"
                "try:\n    import llamapy.ray\nexcept ImportError as e:\n    print(e)\n")
    assert r.returncode == 0, r.stderr
    assert 'pip install "llamapy-engine[ray]"' in r.stdout


# -------------------------------------------------------------------------- the jobs
@pytest.fixture(scope="module")
def ray_local():
    ray = needs("ray")
    needs("ray.data")
    needs("pandas")
    # Workers import llamapy from this checkout (it need not be installed).
    env = {"PYTHONPATH": os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


def by_id(ds):
    return sorted(ds.take_all(), key=lambda r: r["id"])


def direct(fn, *args):
    """(result, None) or (None, the error as the actors write it)."""
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001 - the row's error, as batch.py records it
        return None, f"{type(e).__name__}: {e}"


def same_error(a, b):
    """Equal error texts, but for object addresses (Pillow names its BytesIO by address)."""
    strip = functools.partial(re.sub, r" at 0x[0-9a-f]+", "")
    return a == b if a is None or b is None else strip(a) == strip(b)


def test_embeddings_equal_direct_calls(ray_local):
    import minilm_ref as M

    import llamapy.ray as lr
    from llamapy import Llama
    from llamapy.ray.batch import row_embedding

    model = M.gguf_path("f32")
    sentences = M.reference()["sentences"]
    rows = [{"id": i, "text": f"{sentences[i % len(sentences)]} ({i})"} for i in range(200)]
    rows[5]["text"] = None                  # not a string
    rows[17]["text"] = "word " * 600        # over the model's 512 positions, with truncate=False
    ds = lr.embed(ray_local.data.from_items(rows), model=model, truncate=False, actors=2, cpus_per_actor=0.5,
                  batch_size=32).materialize()
    import pyarrow as pa

    # The vectors stay float32 through Ray Data (a list<float32> column, not float64 lists).
    assert ds.schema().base_schema.field("embedding").type == pa.list_(pa.float32())
    out = by_id(ds)
    assert [r["id"] for r in out] == list(range(200))
    llm = Llama(model, embedding=True, n_threads=1, verbose=False)
    try:
        for row, got in zip(rows, out):
            want, err = direct(row_embedding, llm, row["text"], False, False)
            assert got["error"] == err, row["id"]
            if err is None:
                assert got["embedding"] == pytest.approx(list(llm.embed(row["text"]))), row["id"]
                assert got["embedding"] == want, row["id"]  # the same floats: one process, one thread
            else:
                assert got["embedding"] is None
            assert got["text"] == row["text"]  # the input's columns are kept
    finally:
        llm.close()
    assert out[5]["error"].startswith("TypeError") and "exceed" in out[17]["error"]


PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time", "1, 2, 3, 4,",
           "The opposite of hot is", "Water boils at"]


@pytest.mark.model
def test_completions_and_chats_equal_direct_calls(ray_local, gemma_path):
    import llamapy.ray as lr
    from llamapy import Llama

    params = {"max_tokens": 6, "temperature": 0.0, "seed": 0}
    kw = {"n_ctx": 128}
    prompts = [{"id": i, "prompt": f"{PROMPTS[i % len(PROMPTS)]}"} for i in range(36)]
    prompts[9]["prompt"] = "word " * 300  # longer than the context
    chats = [{"id": i, "messages": [{"role": "user", "content": f"{PROMPTS[i % len(PROMPTS)]} ({i})"}]}
             for i in range(12)]
    chats[4]["messages"] = [{"role": "user", "content": "word " * 300}]
    got_p = by_id(lr.complete(ray_local.data.from_items(prompts), model=gemma_path, params=params, llama_kwargs=kw,
                              actors=1, cpus_per_actor=1, batch_size=8))
    got_c = by_id(lr.complete(ray_local.data.from_items(chats), model=gemma_path, column="messages", params=params,
                              llama_kwargs=kw, actors=1, cpus_per_actor=1, batch_size=8))
    llm = Llama(gemma_path, n_threads=1, verbose=False, **kw)
    try:
        for row, got in zip(prompts, got_p):
            ref, err = direct(lambda p: llm.create_completion(p, **params), row["prompt"])
            assert got["error"] == err, row["id"]
            if err is None:
                assert got["text"] == ref["choices"][0]["text"], row["id"]
                assert got["finish_reason"] == ref["choices"][0]["finish_reason"]
                assert got["prompt_tokens"] == ref["usage"]["prompt_tokens"]
                assert got["completion_tokens"] == ref["usage"]["completion_tokens"]
            else:
                assert got["text"] is None and got["finish_reason"] is None
        for row, got in zip(chats, got_c):
            ref, err = direct(lambda m: llm.create_chat_completion(m, **params), row["messages"])
            assert got["error"] == err, row["id"]
            if err is None:
                assert got["text"] == ref["choices"][0]["message"]["content"], row["id"]
                assert got["completion_tokens"] == ref["usage"]["completion_tokens"]
    finally:
        llm.close()
    assert "exceed context window" in got_p[9]["error"] and "exceed context window" in got_c[4]["error"]
    assert sum(r["error"] is None for r in got_p) == 35 and sum(r["error"] is None for r in got_c) == 11


def test_captions_equal_direct_calls(ray_local, tmp_path):
    needs("PIL")
    import llamapy.ray as lr
    from llamapy import Llama
    from llamapy.caption import caption_messages
    from llamapy.ray.batch import image_url

    text, proj = str(VLM / "gemma3" / "gemma3-text-f16.gguf"), str(VLM / "gemma3" / "gemma3-mmproj-f16.gguf")
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    images = sorted(str(p) for p in (VLM / "images").iterdir() if p.name != "huge_1536x1152.jpg")
    cells = images + [str(broken), str(tmp_path / "missing.png"), (VLM / "images" / "tall_37x91.png").read_bytes(),
                      b"not an image"]
    # An Arrow column has one type: the paths and the bytes are two datasets, one job.
    paths = ray_local.data.from_items([{"id": i, "image": c} for i, c in enumerate(cells) if isinstance(c, str)])
    blobs = ray_local.data.from_items([{"id": i, "image": c} for i, c in enumerate(cells) if isinstance(c, bytes)])
    ds = paths.union(blobs)
    params = {"max_tokens": 5}
    out = by_id(lr.caption(ds, model=text, mmproj=proj, params=params, llama_kwargs={"n_ctx": 256}, actors=1,
                           batch_size=4))
    llm = Llama(text, mmproj=proj, n_ctx=256, n_threads=1, verbose=False)
    try:
        for i, (cell, got) in enumerate(zip(cells, out)):
            ref, err = direct(lambda c: llm.create_chat_completion(
                caption_messages(image_url(c), "Describe this image."), temperature=0.0, seed=0, **params), cell)
            assert same_error(got["error"], err), i
            if err is None:
                assert got["caption"] == ref["choices"][0]["message"]["content"], i
                assert got["prompt_tokens"] == ref["usage"]["prompt_tokens"], i
    finally:
        llm.close()
    assert [r["error"] is None for r in out] == [True] * len(images) + [False, False, True, False]


def test_rerank_equals_direct_calls(ray_local):
    import llamapy.ray as lr
    from llamapy import Llama
    from llamapy.llama_cpp import LLAMA_POOLING_TYPE_RANK

    record = json.loads((RERANK / "record.json").read_text())
    model = str(RERANK / record["families"]["bert"]["file"])
    rows = [{"id": i, "query": record["query"], "document": d} for i, d in enumerate(record["documents"])]
    rows.append({"id": len(rows), "query": record["query"], "document": None})
    rows += [{"id": len(rows) + i, "query": "another query", "document": d}
             for i, d in enumerate(record["documents"])]
    out = by_id(lr.rerank(ray_local.data.from_items(rows), model=model, actors=1, batch_size=4,
                          llama_kwargs={"n_ctx": 512}))
    llm = Llama(model, embedding=True, pooling_type=LLAMA_POOLING_TYPE_RANK, n_ctx=512, n_threads=1, verbose=False)
    try:
        for row, got in zip(rows, out):
            ref, err = direct(lambda q, d: llm.rerank(q, [d])[0]["relevance_score"], row["query"], row["document"])
            if row["document"] is None:
                assert got["score"] is None and got["error"].startswith("TypeError")
            else:
                assert got["error"] is None and got["score"] == ref
    finally:
        llm.close()


def test_embedder_outside_ray_and_unpooled_models():
    """The actor classes are plain callables (a batch in, a table out) without Ray running;
    a model whose embeddings are not pooled is refused when the actor starts."""
    needs("ray")
    pd = needs("pandas")
    import minilm_ref as M

    from llamapy.ray import Embedder

    model = M.gguf_path("f32")
    with pytest.raises(ValueError, match="not pooled"):
        Embedder(model, llama_kwargs={"pooling_type": 0})
    emb = Embedder(model)
    # Both thread counts follow the actor's CPUs (1 outside Ray): the batches run on
    # n_threads_batch, which would otherwise take every core beside the other actors.
    assert (emb.llm.n_threads, emb.llm.n_threads_batch) == (1, 1)
    two = Embedder(model, llama_kwargs={"n_threads": 2})
    assert (two.llm.n_threads, two.llm.n_threads_batch) == (2, 2)
    two.llm.close()
    out = emb(pd.DataFrame({"text": ["a cat", None, "a dog"], "k": [1, 2, 3]})).to_pydict()
    assert out["k"] == [1, 2, 3] and out["embedding"][1] is None and out["error"][1].startswith("TypeError")
    assert out["embedding"][2] == [float(x) for x in emb.llm.embed("a dog")]
    with pytest.raises(ValueError, match="already has column"):
        emb(pd.DataFrame({"text": ["x"], "error": [None]}))
    with pytest.raises(ValueError, match="no column 'text'"):
        emb(pd.DataFrame({"body": ["x"]}))
    emb.llm.close()


def test_embedder_arrow_batches():
    """The Embedder takes and gives Arrow tables (its batch_format): the input columns pass
    through as they are, the vectors are a list<float32> column whose values are the engine's
    float32 numbers (equal to Llama.embed's), a failed row is null there, and an empty batch
    gives an empty table with the same columns."""
    needs("ray")
    pa = needs("pyarrow")
    import minilm_ref as M

    from llamapy.ray import Embedder
    from llamapy.ray.batch import float32_lists

    emb = Embedder(M.gguf_path("f32"), output_column="vec", normalize=True)
    assert Embedder.batch_format == "pyarrow"
    texts = ["a red fox", "a blue sky", "word " * 600, 7]
    ids = pa.array([10, 11, 12, 13], type=pa.int16())
    out = emb(pa.table({"id": ids, "text": pa.array(texts[:3] + ["x"])}))
    assert out.column_names == ["id", "text", "vec", "error"]
    assert out.column("id").combine_chunks().equals(ids)  # untouched, its type kept
    assert out.schema.field("vec").type == pa.list_(pa.float32())
    vec = out.column("vec").to_pylist()
    want = emb.llm.embed(texts[:3] + ["x"], normalize=True)
    assert vec == [[float(x) for x in w] for w in want] and out.column("error").null_count == 4

    # One bad row: the others keep their vectors, the bad one is null with its reason.
    bad = emb(pa.table({"text": pa.array(["a red fox", None, "a blue sky"])}))
    assert bad.column("vec").to_pylist()[0] == vec[0] and bad.column("vec").to_pylist()[2] == vec[1]
    assert bad.column("vec").null_count == 1 and bad.column("error").to_pylist()[1].startswith("TypeError")

    empty = emb(pa.table({"text": pa.array([], type=pa.string())}))
    assert empty.num_rows == 0 and empty.column_names == ["text", "vec", "error"]
    emb.llm.close()

    # The column's values buffer is the array's own memory (no copy on the way into Arrow).
    import numpy as np

    rows = np.arange(6, dtype=np.float32).reshape(3, 2)
    col = float32_lists(rows, [None, None, None])
    assert col.values.buffers()[1].address == rows.ctypes.data
    assert float32_lists(rows[:2], [None, "ValueError: x", None]).to_pylist() == [[0.0, 1.0], None, [2.0, 3.0]]


def test_embed_batches_default_to_256_rows(monkeypatch):
    """embed's batches are 256 rows unless told (each batch is a Ray Data task; embed packs any
    number of rows per decode); the other helpers keep map_with's 32."""
    needs("ray")
    import llamapy.ray.batch as b

    seen = {}
    monkeypatch.setattr(b, "map_with", lambda ds, actor, kwargs, **pool: seen.update(actor=actor, pool=pool))
    b.embed(None, model="m.gguf")
    assert seen["actor"] is b.Embedder and seen["pool"]["batch_size"] == b.EMBED_BATCH_SIZE == 256
    b.embed(None, model="m.gguf", batch_size=16, actors=2)
    assert seen["pool"] == {"batch_size": 16, "actors": 2}
    b.complete(None, model="m.gguf")
    assert "batch_size" not in seen["pool"]


def test_llamapy_ray_without_the_server_stack():
    """An actor needs neither the server (FastAPI, Starlette, uvicorn) nor Pillow: llamapy.ray and
    its Embedder import and run with those blocked (the Serve app loads them on first use)."""
    code = ("import sys\n"
            "for name in ('fastapi', 'starlette', 'uvicorn', 'PIL'):\n    sys.modules[name] = None\n"
            "import minilm_ref as M\n"
            "from llamapy.ray import Embedder\n"
            "e = Embedder(M.gguf_path('f32'))\n"
            "import pyarrow as pa\n"
            "print(e(pa.table({'text': ['hello']})).column('error').null_count)\n")
    paths = [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    if "No module named 'ray'" in r.stderr:
        pytest.skip("ray is not installed")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "1"


def test_batch_command_keeps_columns_and_resumes(ray_local, tmp_path, capsys):
    import minilm_ref as M
    import pandas as pd

    from llamapy.cli import main

    model = M.gguf_path("f32")
    src = tmp_path / "in"
    src.mkdir()
    a = pd.DataFrame({"id": range(30), "text": [f"first file, sentence {i}" for i in range(30)]})
    a.to_parquet(src / "a.parquet")
    with open(src / "b.jsonl", "w") as f:
        for i in range(30, 50):
            f.write(json.dumps({"id": i, "text": f"second file, sentence {i}", "lang": "en"}) + "\n")
    out = tmp_path / "out"
    argv = ["batch", "embed", "-m", str(model), "--input", str(src), "--output", str(out), "--cpus-per-actor", "1"]
    assert main(argv) == 0
    got_a = pd.read_parquet(out / "a.parquet").sort_values("id")
    got_b = pd.concat(pd.read_json(p, lines=True) for p in sorted((out / "b.jsonl").glob("*.json*")))
    assert list(got_a["id"]) == list(range(30)) and set(got_a.columns) == {"id", "text", "embedding", "error"}
    assert sorted(got_b["id"]) == list(range(30, 50)) and {"lang", "embedding", "error"} <= set(got_b.columns)
    assert json.loads((out / "b.jsonl" / "_SUCCESS").read_text())["rows"] == 20
    assert got_a["error"].isna().all()

    from llamapy import Llama

    llm = Llama(str(model), embedding=True, n_threads=1, verbose=False)
    assert list(got_a.iloc[3]["embedding"]) == list(llm.embed(a.iloc[3]["text"]))
    llm.close()

    # Rerun: both files are done, nothing is redone. Then one file's output removed, and an
    # interrupted run's partial folder left behind: only that file is redone.
    capsys.readouterr()
    assert main(argv) == 0
    assert "2 of 2 input files already done" in capsys.readouterr().err
    before = (out / "a.parquet" / "_SUCCESS").stat().st_mtime_ns
    import shutil

    shutil.rmtree(out / "b.jsonl")
    (out / ".b.jsonl.partial").mkdir()
    (out / ".b.jsonl.partial" / "half.json").write_text("{")
    assert main(argv) == 0
    assert "1 of 2 input files already done" in capsys.readouterr().err
    assert (out / "a.parquet" / "_SUCCESS").stat().st_mtime_ns == before
    assert not (out / ".b.jsonl.partial").exists() and (out / "b.jsonl" / "_SUCCESS").exists()
    again = pd.concat(pd.read_json(p, lines=True) for p in sorted((out / "b.jsonl").glob("*.json*")))
    assert sorted(again["id"]) == list(range(30, 50))


def test_batch_command_refuses_bad_input(ray_local, tmp_path, capsys):
    from llamapy.cli import main

    (tmp_path / "x.csv").write_text("a\n1\n")
    assert main(["batch", "embed", "-m", "m.gguf", "--input", str(tmp_path / "x.csv"), "--output",
                 str(tmp_path / "o")]) == 1
    assert "not a .parquet, .jsonl or .json file" in capsys.readouterr().err
    assert main(["batch", "caption", "-m", "m.gguf", "--input", str(tmp_path), "--output", str(tmp_path / "o")]) == 1
    assert "no .parquet, .jsonl or .json files" in capsys.readouterr().err
