"""LLaVA projector files with ``clip.vision.feature_layer`` (issue 31, item 8).

llama.cpp's legacy LLaVA converter (tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py)
turns the checkpoint's ``vision_feature_layer`` (an int or, for Granite Vision, a list) into
non-negative hidden-state indices, writes them as ``clip.vision.feature_layer`` (an i32 array),
sets ``block_count`` to the deepest one and keeps only that many blocks. llama.cpp's llava
graph (tools/mtmd/models/llava.cpp) then reads layer k as the input of block k (0: the
embeddings after the pre-LayerNorm), runs blocks up to the deepest listed layer, applies the
post-LayerNorm (when the file has one) to that deepest state only, and concatenates the
selected states along the features in ascending layer order before ``mm.0``.

Here:
- ``write_legacy_mmproj`` writes a tiny random CLIP tower + MLP projector with the
  converter's keys, tensor names, dtypes and order (checked against the llava15 fixture the
  real converter wrote), and ``reference`` is an independent numpy forward pass of llama.cpp's
  graph; the engine must match it for one layer, several, layer 0, an unsorted list with a
  repeat, and a file with a post-LayerNorm, and must not match the nearby wrong conventions;
- the llava15 fixture with ``feature_layer = [block_count - 1]`` added gives exactly
  llama.cpp's recorded embeddings (the same blocks run without the key), and other layers
  give something else;
- an ``mm.0.weight`` whose input width is not n_embd x (number of layers), a layer above
  block_count and a key of the wrong type are clear ``ValueError``s; other projector types
  ignore the key, as llama.cpp does.
"""
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from llamapy.multimodal import VisionEncoder, read_mmproj  # noqa: E402

VLM = Path(__file__).parent / "data" / "vlm"

E, N_HEAD, N_FF, IMAGE, PATCH = 32, 4, 64, 28, 7   # tower: 4 x 4 patches + the class token
N_HIDDEN = 5                                       # blocks of the "checkpoint" before conversion
N_MID, N_OUT = 48, 40                              # projector widths
EPS = 1e-5
# Engine against the float64 reference: F16 activations in the F16 matmuls and F16 keys /
# values in attention (as llama.cpp's CPU path), relative to the largest |value|.
TOL = 2.5e-3


def rel_err(got, ref):
    return float(np.abs(got - ref).max() / np.abs(ref).max())


# -- a checkpoint and the legacy converter's file ---------------------------------------------

def checkpoint(seed=0, n_in=None):
    """A CLIP vision tower of N_HIDDEN blocks with a LLaVA MLP projector taking ``n_in``
    features, already under the converter's GGUF names (float32; the writer rounds)."""
    rng = np.random.default_rng(seed)

    def normal(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def norm_weight():
        return 1.0 + normal(E, scale=0.1)

    ck = {
        "mm.0.weight": normal(N_MID, n_in or E), "mm.0.bias": normal(N_MID, scale=0.05),
        "mm.2.weight": normal(N_OUT, N_MID), "mm.2.bias": normal(N_OUT, scale=0.05),
        "v.class_embd": normal(E), "v.patch_embd.weight": normal(E, 3, PATCH, PATCH),
        "v.position_embd.weight": normal((IMAGE // PATCH) ** 2 + 1, E),
        "v.pre_ln.weight": norm_weight(), "v.pre_ln.bias": normal(E, scale=0.05),
    }
    for i in range(N_HIDDEN):
        b = f"v.blk.{i}."
        for name in ("attn_k", "attn_v", "attn_q", "attn_out"):
            ck[b + name + ".weight"] = normal(E, E)
            ck[b + name + ".bias"] = normal(E, scale=0.05)
        ck[b + "ln1.weight"], ck[b + "ln1.bias"] = norm_weight(), normal(E, scale=0.05)
        # the converter calls fc1 (n_embd -> n_ff) "ffn_down" and fc2 "ffn_up"
        ck[b + "ffn_down.weight"], ck[b + "ffn_down.bias"] = normal(N_FF, E), normal(N_FF, scale=0.05)
        ck[b + "ffn_up.weight"], ck[b + "ffn_up.bias"] = normal(E, N_FF), normal(E, scale=0.05)
        ck[b + "ln2.weight"], ck[b + "ln2.bias"] = norm_weight(), normal(E, scale=0.05)
    ck["v.post_ln.weight"], ck["v.post_ln.bias"] = norm_weight(), normal(E, scale=0.05)
    return ck


def non_negative_layers(vision_feature_layer):
    """The converter's get_non_negative_vision_feature_layers: HF hidden-state indices, -1 the last."""
    if vision_feature_layer is None:
        return None
    layers = [vision_feature_layer] if isinstance(vision_feature_layer, int) else list(vision_feature_layer)
    return [k if k >= 0 else N_HIDDEN + k + 1 for k in layers]


def write_legacy_mmproj(path, ck, vision_feature_layer=None, post_ln=False, feature_key=None):
    """The file convert_image_encoder_to_gguf.py --clip-model-is-vision --llava-projector
    writes (F16): its keys in its order, the projector's tensors first, then the tower's in
    state-dict order; 4-D and 2-D ``.weight`` tensors F16, the rest F32. Without feature
    layers it drops the last block; with them it keeps the blocks up to the deepest. It never
    writes the post-LayerNorm for LLaVA; ``post_ln=True`` adds it, as llama.cpp reads it when
    present. ``feature_key`` writes the key as given instead (wrong types).
    Returns the tensors as stored, for the reference."""
    layers = non_negative_layers(vision_feature_layer)
    n_blocks = max(layers) if layers else N_HIDDEN - 1
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_bool("clip.has_text_encoder", False)
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_llava_projector", True)
    w.add_file_type(1)
    w.add_name("vision")
    w.add_description("image encoder for LLaVA")
    w.add_string("clip.projector_type", "mlp")
    w.add_uint32("clip.vision.image_size", IMAGE)
    w.add_uint32("clip.vision.patch_size", PATCH)
    w.add_uint32("clip.vision.embedding_length", E)
    w.add_uint32("clip.vision.feed_forward_length", N_FF)
    w.add_uint32("clip.vision.projection_dim", 32)
    w.add_uint32("clip.vision.attention.head_count", N_HEAD)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", EPS)
    w.add_uint32("clip.vision.block_count", n_blocks)
    if feature_key is not None:
        w.add_key_value("clip.vision.feature_layer", *feature_key)
    elif layers:
        w.add_array("clip.vision.feature_layer", layers)
    w.add_array("clip.vision.image_mean", [0.48145466, 0.4578275, 0.40821073])
    w.add_array("clip.vision.image_std", [0.26862954, 0.26130258, 0.27577711])
    w.add_bool("clip.use_gelu", False)  # CLIP's quick_gelu
    stored = {}
    keep = [n for n in ck if not n.startswith("v.blk.") or int(n.split(".")[2]) < n_blocks]
    keep = [n for n in keep if post_ln or not n.startswith("v.post_ln")]
    for name in keep:
        a = ck[name]
        a = a.astype(np.float16 if a.ndim == 4 or (a.ndim == 2 and name.endswith(".weight")) else np.float32)
        stored[name] = a
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


# -- the reference: llama.cpp's llava graph in float64 ------------------------------------------

def _ln(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + EPS) * w + b


def _gelu(x):  # ggml_gelu: the tanh approximation
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def reference(stored, pixels, layers, order="ascending", post_ln_on="deepest"):
    """Image embeddings (n_patches, N_OUT) of ``pixels`` (3, IMAGE, IMAGE).

    ``layers``: the non-negative feature layers (None: no key, llama.cpp runs block_count - 1
    blocks and takes the output). The keyword arguments select llama.cpp's reading (the
    defaults) or a wrong one the engine must not match: ``order="listed"`` (concatenate in the
    listed order, repeats kept), ``post_ln_on="all"`` / ``"none"``.
    """
    f = {k: v.astype(np.float64) for k, v in stored.items()}
    n_side = IMAGE // PATCH
    n_patches = n_side * n_side
    kernel = f["v.patch_embd.weight"].reshape(E, -1)
    patches = np.stack([pixels[:, py * PATCH:(py + 1) * PATCH, px * PATCH:(px + 1) * PATCH].reshape(-1)
                        for py in range(n_side) for px in range(n_side)]).astype(np.float64)
    # llama.cpp appends the class token after the patches; positions follow the row order
    h = np.concatenate([patches @ kernel.T, f["v.class_embd"][None]]) + f["v.position_embd.weight"]
    h = _ln(h, f["v.pre_ln.weight"], f["v.pre_ln.bias"])
    hidden = [h]  # hidden[k]: the input of block k
    n_blocks = sum(1 for k in f if k.endswith(".ln1.weight"))
    deepest = (n_blocks - 1) if layers is None else max(layers)
    for i in range(deepest):
        b = f"v.blk.{i}."
        x = _ln(h, f[b + "ln1.weight"], f[b + "ln1.bias"])
        q, k, v = (x @ f[b + n + ".weight"].T + f[b + n + ".bias"] for n in ("attn_q", "attn_k", "attn_v"))
        d = E // N_HEAD
        att = np.empty_like(q)
        for hd in range(N_HEAD):
            s = slice(hd * d, (hd + 1) * d)
            scores = q[:, s] @ k[:, s].T / np.sqrt(d)
            p = np.exp(scores - scores.max(1, keepdims=True))
            att[:, s] = (p / p.sum(1, keepdims=True)) @ v[:, s]
        h = h + att @ f[b + "attn_out.weight"].T + f[b + "attn_out.bias"]
        x = _ln(h, f[b + "ln2.weight"], f[b + "ln2.bias"])
        up = x @ f[b + "ffn_down.weight"].T + f[b + "ffn_down.bias"]  # fc1, under the converter's name
        h = h + (up / (1.0 + np.exp(-1.702 * up))) @ f[b + "ffn_up.weight"].T + f[b + "ffn_up.bias"]
        hidden.append(h)
    post = "v.post_ln.weight" in f

    def state(k):
        s = hidden[k]
        if post and (post_ln_on == "all" or (post_ln_on == "deepest" and k == deepest)):
            s = _ln(s, f["v.post_ln.weight"], f["v.post_ln.bias"])
        return s

    if layers is None:
        feats = state(deepest)
    else:
        picked = sorted(set(layers)) if order == "ascending" else list(layers)
        feats = np.concatenate([state(k) for k in picked], axis=1)
    sel = feats[1:n_patches + 1]  # llama.cpp's "patches" rows: skip row 0 when there is a class token
    mid = _gelu(sel @ f["mm.0.weight"].T + f["mm.0.bias"])
    return mid @ f["mm.2.weight"].T + f["mm.2.bias"]


def pixels(seed=1):
    return np.random.default_rng(seed).standard_normal((3, IMAGE, IMAGE)).astype(np.float32)


# -- the tests ----------------------------------------------------------------------------------

def test_writer_lays_out_files_as_the_legacy_converter(tmp_path):
    """Without feature layers the writer's file has the llava15 fixture's layout (that one was
    written by the real converter): the same keys in the same order with the same types, and
    the same tensor names, order and types for one block."""
    write_legacy_mmproj(tmp_path / "p.gguf", checkpoint())
    ours, real = gguf.GGUFReader(tmp_path / "p.gguf"), gguf.GGUFReader(VLM / "llava15" / "llava15-mmproj-f16.gguf")

    def keys(r):
        return [(k, [t.name for t in f.types]) for k, f in r.fields.items() if not k.startswith("GGUF.")]

    def tensors(r):
        return [(t.name, t.tensor_type.name) for t in r.tensors if not t.name.startswith("v.blk.")
                or t.name.startswith("v.blk.0.")]
    assert keys(ours) == keys(real)
    assert tensors(ours) == tensors(real)


# (the checkpoint's vision_feature_layer, as in config.json) -> the layers the converter writes
CASES = {
    "single, llava's -2": (-2, [4]),
    "granite-like list": ([-4, -2, -1], [2, 4, 5]),
    "embeddings and a block": ([0, 3], [0, 3]),
    "unsorted with a repeat": ([3, 1, 3], [3, 1, 3]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_engine_matches_llama_cpp_reading(tmp_path, case):
    vfl, written = CASES[case]
    layers = non_negative_layers(vfl)
    assert layers == written
    n_stacked = len(set(layers))
    path = tmp_path / "p.gguf"
    stored = write_legacy_mmproj(path, checkpoint(n_in=E * n_stacked), vfl)
    info = read_mmproj(path)
    assert info.feature_layers == tuple(written) and info.n_layer == max(written)
    enc = VisionEncoder(path, n_threads=2)
    assert enc._model.feature_layers == sorted(set(written))
    assert enc._model.n_layer_run == max(written)  # every block the converter kept
    x = pixels()
    got = enc.encode(x)
    ref = reference(stored, x, layers)
    assert got.shape == ref.shape == (16, N_OUT)
    assert rel_err(got, ref) <= TOL
    # the states one block earlier (layer k read as the output of block k - 1, counted from 1)
    # are far off, so the match above pins the index convention
    if min(layers) >= 1:
        assert rel_err(got, reference(stored, x, [k - 1 for k in layers])) > 10 * TOL


def test_listed_order_and_repeats_do_not_matter(tmp_path):
    """llama.cpp asks "is layer k listed?" while walking the blocks: [3, 1] stacks 1 then 3,
    and [3, 1, 3] the same two states, bit for bit."""
    x = pixels(2)
    outs = []
    for n, vfl in enumerate(([1, 3], [3, 1], [3, 1, 3, 1])):
        path = tmp_path / f"p{n}.gguf"
        write_legacy_mmproj(path, checkpoint(seed=5, n_in=2 * E), vfl)
        outs.append(VisionEncoder(path, n_threads=1).encode(x))
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    stored = write_legacy_mmproj(tmp_path / "q.gguf", checkpoint(seed=5, n_in=2 * E), [3, 1])
    assert rel_err(outs[1], reference(stored, x, [3, 1])) <= TOL
    assert rel_err(outs[1], reference(stored, x, [3, 1], order="listed")) > 10 * TOL


def test_post_layernorm_applies_to_the_deepest_layer_only(tmp_path):
    """A file with v.post_ln: llama.cpp normalises the tower's output, which is the deepest
    feature layer; the shallower ones are stacked as the blocks left them."""
    path = tmp_path / "p.gguf"
    stored = write_legacy_mmproj(path, checkpoint(seed=3, n_in=3 * E), [1, 2, 4], post_ln=True)
    x = pixels(3)
    got = VisionEncoder(path, n_threads=2).encode(x)
    layers = [1, 2, 4]
    assert rel_err(got, reference(stored, x, layers)) <= TOL
    assert rel_err(got, reference(stored, x, layers, post_ln_on="all")) > 10 * TOL
    assert rel_err(got, reference(stored, x, layers, post_ln_on="none")) > 10 * TOL


def test_without_the_key_one_block_less_runs(tmp_path):
    """The older converter output (no feature_layer): llama.cpp runs block_count - 1 blocks."""
    path = tmp_path / "p.gguf"
    stored = write_legacy_mmproj(path, checkpoint(seed=4))
    enc = VisionEncoder(path, n_threads=2)
    assert (enc._model.feature_layers, enc._model.n_layer_run, enc.info.n_layer) == ([], N_HIDDEN - 2, N_HIDDEN - 1)
    x = pixels(4)
    assert rel_err(enc.encode(x), reference(stored, x, None)) <= TOL


def _copy_with_key(src, dst, key, value, vtype=None, sub_type=None):
    """``src`` rewritten with one more metadata key (values, tensors and their order kept)."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(dst), r.get_field("general.architecture").contents())
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), field.types[0], sub_type=sub)
    if vtype is None:
        w.add_array(key, value)
    else:
        w.add_key_value(key, value, vtype, sub_type=sub_type)
    for t in r.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def _recorded(kind, image):
    arrays = np.load(VLM / kind / "arrays.npz")
    base = f"{image}.mmproj_f16.chunk0"
    return arrays[f"{base}.pixels0"], arrays[f"{base}.embd"]


def test_llava15_fixture_with_the_key_matches_llama_cpp(tmp_path):
    """The llava15 fixture (block_count 2, no key) is recorded from llama.cpp, which ran one
    block. feature_layer = [1] names the input of block 1, the same state: the embeddings must
    be the recorded ones, exactly as without the key. [2] (after both blocks) and [0] (the
    embeddings) must differ."""
    src = VLM / "llava15" / "llava15-mmproj-f16.gguf"
    pix, ref = _recorded("llava15", "tall_37x91.png")
    plain = VisionEncoder(src, n_threads=1).encode(pix)
    one = VisionEncoder(_copy_with_key(src, tmp_path / "one.gguf", "clip.vision.feature_layer", [1]), n_threads=1)
    assert (one._model.feature_layers, one._model.n_layer_run) == ([1], 1)
    got = one.encode(pix)
    np.testing.assert_array_equal(got, plain)
    assert rel_err(got, ref) <= 2.5e-3  # test_vision_encoder's F16 tolerance against llama.cpp
    for layer in (0, 2):
        other = VisionEncoder(_copy_with_key(src, tmp_path / f"l{layer}.gguf", "clip.vision.feature_layer", [layer]))
        assert other._model.n_layer_run == layer
        assert rel_err(other.encode(pix), ref) > 0.05


def test_projector_width_mismatch_is_a_clear_error(tmp_path):
    """mm.0.weight must take n_embd features per stacked layer; llama.cpp would abort in a
    matmul, we name the tensor, both widths and the layers."""
    from llamapy import _engine
    path = tmp_path / "p.gguf"
    write_legacy_mmproj(path, checkpoint(n_in=E), [-4, -2, -1])   # a projector for one layer, three listed
    match = (r"mm\.0\.weight takes rows of 32 features, but the projector's input is 96 wide: "
             r"the hidden states of feature layers 2, 4, 5 \(clip\.vision\.feature_layer\) side by side, 32 each")
    with pytest.raises(ValueError, match=match):
        VisionEncoder(path)
    with pytest.raises(ValueError, match=match):
        _engine.VisionModel(str(path), 1)
    write_legacy_mmproj(path, checkpoint(n_in=2 * E), -2)          # the other way round
    with pytest.raises(ValueError, match=r"takes rows of 64 features, but the projector's input is 32 wide"):
        VisionEncoder(path)
    src = VLM / "llava15" / "llava15-mmproj-f16.gguf"                # a real file with two layers listed
    with pytest.raises(ValueError, match=r"input is 64 wide: the hidden states of feature layers 0, 1"):
        VisionEncoder(_copy_with_key(src, tmp_path / "two.gguf", "clip.vision.feature_layer", [0, 1]))


def test_bad_feature_layer_values(tmp_path):
    from llamapy import _engine
    T = gguf.GGUFValueType
    bad = {  # (value, type, element type) -> the message; block_count is 4 in these files
        "above": (([1, 5], T.ARRAY, T.INT32), r"feature_layer holds 5, above .*block_count"),
        "u32": (([1, 2], T.ARRAY, T.UINT32), r"feature_layer must be an array of i32"),
        "scalar": ((2, T.INT32, None), r"feature_layer must be an array of i32"),
    }
    for name, (key, match) in bad.items():
        path = tmp_path / f"{name}.gguf"
        write_legacy_mmproj(path, checkpoint(n_in=2 * E), [1, 4], feature_key=key)
        with pytest.raises(ValueError, match=match):
            read_mmproj(path)
        with pytest.raises(ValueError, match=match):
            _engine.VisionModel(str(path), 1)


def test_negative_layers_select_nothing(tmp_path):
    """llama.cpp keeps -1 as "unset": a negative entry is ignored; all negative is no key."""
    x = pixels(6)
    path = tmp_path / "mixed.gguf"
    stored = write_legacy_mmproj(path, checkpoint(seed=6, n_in=E), [3],
                                 feature_key=([-1, 3], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32))
    enc = VisionEncoder(path, n_threads=2)
    assert enc._model.feature_layers == [3] and enc.info.feature_layers == (-1, 3)
    assert rel_err(enc.encode(x), reference(stored, x, [3])) <= TOL
    path = tmp_path / "unset.gguf"
    stored = write_legacy_mmproj(path, checkpoint(seed=6, n_in=E), [3],
                                 feature_key=([-1], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32))
    enc = VisionEncoder(path, n_threads=2)
    assert (enc._model.feature_layers, enc._model.n_layer_run) == ([], 2)
    assert rel_err(enc.encode(x), reference(stored, x, None)) <= TOL


def test_other_projector_types_ignore_the_key(tmp_path):
    """llama.cpp reads the key for every type but only its llava graph uses it."""
    src = VLM / "gemma3" / "gemma3-mmproj-f16.gguf"
    pix, _ = _recorded("gemma3", "tall_37x91.png")
    with_key = VisionEncoder(_copy_with_key(src, tmp_path / "g.gguf", "clip.vision.feature_layer", [0, 1]))
    assert with_key._model.feature_layers == []
    np.testing.assert_array_equal(with_key.encode(pix), VisionEncoder(src).encode(pix))
    with pytest.raises(ValueError, match="feature_layer holds 7"):
        VisionEncoder(_copy_with_key(src, tmp_path / "h.gguf", "clip.vision.feature_layer", [7]))


def test_on_the_vulkan_device(tmp_path):
    """The stacked rows live in the device's memory there; same results as the CPU (lavapipe
    in tools/vulkan_check.sh; skipped in builds without the backend)."""
    from llamapy import _engine
    if "vulkan" not in _engine.backends() or not _engine.gpu_devices():
        pytest.skip("built without the Vulkan backend, or no Vulkan device")
    path = tmp_path / "p.gguf"
    stored = write_legacy_mmproj(path, checkpoint(seed=7, n_in=3 * E), [-4, -2, -1], post_ln=True)
    x = pixels(7)
    gpu = VisionEncoder(path, n_threads=2, gpu=0).encode(x)
    assert rel_err(gpu, VisionEncoder(path, n_threads=2).encode(x)) <= TOL
    assert rel_err(gpu, reference(stored, x, [2, 4, 5])) <= TOL
