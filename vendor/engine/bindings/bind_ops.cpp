// bind_ops.cpp — single engine ops on caller-given arrays, for the op tests
// (tests/test_attention_ops.py, run against a numpy reference on every
// backend) and the kernel benchmarks:
//   _engine.ops.attention(q, k, v, ...)   attention of query rows over a cache
//   _engine.ops.rope_table(pos, ...)      RoPE cos/sin tables (plain or M-RoPE)
// Not here: models and contexts (bind_model.cpp), matmul (bind_quants.cpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"
#include "cpu/attention.h"
#include "cpu/ops.h"
#include "cpu/threadpool.h"
#include "ggml_type.h"
#include "backend/registry.h"
#include "kv_cache.h"

namespace py = pybind11;
using namespace lp;

namespace {

using u8_array = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;
using f32_array = py::array_t<float, py::array::c_style | py::array::forcecast>;

thread_pool& ops_pool(int n_threads) {
    static std::mutex mu;
    static std::map<int, std::unique_ptr<thread_pool>> pools;
    std::lock_guard<std::mutex> lock(mu);
    std::unique_ptr<thread_pool>& p = pools[n_threads];
    if (!p) p.reset(new thread_pool(n_threads));
    return *p;
}

ggml_type cache_type_arg(const std::string& name, const char* what) {
    std::string s = name;
    for (char& c : s) c = (char)std::toupper((unsigned char)c);
    for (int v = 0; v < (int)ggml_type::COUNT; ++v)
        if (type_is_valid(v) && kv_cache_type_ok((ggml_type)v) && s == type_name((ggml_type)v)) return (ggml_type)v;
    throw value_error(std::string(what) + " '" + name + "' is not a KV cache type (" + kv_cache_type_names() + ")");
}

attention_path path_arg(const std::string& s) {
    if (s == "flash") return attention_path::flash;
    if (s == "explicit") return attention_path::explicit_softmax;
    throw value_error("path must be 'flash' or 'explicit', got '" + s + "'");
}

// Head size of a cache row of row_bytes bytes holding n_head_kv heads of type t.
int head_dim_of(ggml_type t, size_t row_bytes, int n_head_kv, const char* what) {
    const type_traits& tr = traits(t);
    const int64_t n = (int64_t)(row_bytes / tr.type_size) * tr.block_size;
    if (n_head_kv < 1 || n % n_head_kv != 0 || row_size(t, n) != row_bytes || n == 0)
        throw value_error(std::string(what) + ": rows of " + std::to_string(row_bytes) + " bytes are not " +
                          std::to_string(n_head_kv) + " whole heads of " + type_name(t));
    return (int)(n / n_head_kv);
}

// out (n_tok, n_head, head_dim_v) = attention(q, cache k / v, visible).
py::array_t<float> attention_op(f32_array q, u8_array k, u8_array v, const std::string& type_k,
                                const std::string& type_v, int n_head_kv, py::array_t<bool, py::array::c_style | py::array::forcecast> visible,
                                const std::string& path, float scale, float softcap, int n_threads,
                                const py::object& cell_pos, int n_repeat, const std::string& backend_name,
                                const py::object& sinks) {
    // The CPU runs the kernel directly (with scratch sized here); another
    // backend is asked for through the registry.
    const backend_factory* other = backend_name == "cpu" ? nullptr : find_backend(backend_name);
    if (backend_name != "cpu" && !other)
        throw value_error("attention: backend '" + backend_name + "' is not compiled in");
    if (q.ndim() != 3) throw value_error("attention: q must have shape (n_tok, n_head, head_dim_k)");
    if (k.ndim() != 2 || v.ndim() != 2 || k.shape(0) != v.shape(0))
        throw value_error("attention: k and v must be (n_cells, row bytes) uint8 arrays with the same n_cells");
    const int n_tok = (int)q.shape(0), n_head = (int)q.shape(1), dk = (int)q.shape(2);
    const int64_t n_cells = k.shape(0);
    if (visible.ndim() != 2 || visible.shape(0) != n_tok || visible.shape(1) != n_cells)
        throw value_error("attention: visible must be a (n_tok, n_cells) boolean array");
    if (n_threads < 1 || n_threads > 256) throw value_error("attention: n_threads must be in [1, 256]");
    if (n_repeat < 1) throw value_error("attention: n_repeat must be >= 1");
    if (n_head_kv < 1 || n_head % n_head_kv != 0)
        throw value_error("attention: n_head (" + std::to_string(n_head) + ") must be a multiple of n_head_kv (" +
                          std::to_string(n_head_kv) + ")");
    const ggml_type tk = cache_type_arg(type_k, "type_k"), tv = cache_type_arg(type_v, "type_v");
    if (head_dim_of(tk, (size_t)k.shape(1), n_head_kv, "k") != dk)
        throw value_error("attention: k rows do not hold n_head_kv heads of q's head size " + std::to_string(dk));
    const int dv = head_dim_of(tv, (size_t)v.shape(1), n_head_kv, "v");
    std::vector<int32_t> pos;
    if (!cell_pos.is_none()) {
        py::array_t<int32_t, py::array::c_style | py::array::forcecast> cp(cell_pos);
        if (cp.ndim() != 1 || cp.shape(0) != n_cells) throw value_error("attention: cell_pos must have n_cells entries");
        pos.assign(cp.data(), cp.data() + n_cells);
    }
    std::vector<float> sink;
    if (!sinks.is_none()) {
        f32_array sk(sinks);
        if (sk.ndim() != 1 || sk.shape(0) != n_head) throw value_error("attention: sinks must have n_head entries");
        sink.assign(sk.data(), sk.data() + n_head);
    }
    // Mask words and bounds, as kv_cache::build_mask lays them out.
    const int64_t words = (n_cells + 63) / 64;
    std::vector<uint64_t> mask((size_t)(n_tok * words), 0);
    std::vector<int32_t> lo((size_t)n_tok, 0), hi((size_t)n_tok, 0);
    const bool* vis = visible.data();
    for (int t = 0; t < n_tok; ++t) {
        int32_t first = -1, last = -1;
        for (int64_t j = 0; j < n_cells; ++j)
            if (vis[(int64_t)t * n_cells + j]) {
                mask[(size_t)(t * words + (j >> 6))] |= 1ull << (j & 63);
                if (first < 0) first = (int32_t)j;
                last = (int32_t)j;
            }
        lo[(size_t)t] = first < 0 ? 0 : first;
        hi[(size_t)t] = first < 0 ? 0 : last + 1;
    }
    py::array_t<float> out({(py::ssize_t)n_tok, (py::ssize_t)n_head, (py::ssize_t)dv});
    attention_args a;
    a.n_tok = n_tok;
    a.n_head = n_head;
    a.n_head_kv = n_head_kv;
    a.head_dim_k = dk;
    a.head_dim_v = dv;
    a.q = q.data();
    a.q_stride = (int64_t)n_head * dk;
    a.out = out.mutable_data();
    a.out_stride = (int64_t)n_head * dv;
    a.type_k = tk;
    a.type_v = tv;
    a.k = k.data();
    a.k_row_bytes = (size_t)k.shape(1);
    a.v = v.data();
    a.v_row_bytes = (size_t)v.shape(1);
    a.mask = mask.data();
    a.mask_words = words;
    a.lo = lo.data();
    a.hi = hi.data();
    a.cell_pos = pos.empty() ? nullptr : pos.data();
    a.scale = scale;
    a.softcap = softcap;
    a.sinks = sink.empty() ? nullptr : sink.data();
    a.path = path_arg(path);
    {
        py::gil_scoped_release nogil;
        thread_pool& pool = ops_pool(n_threads);
        attention_scratch scratch;
        if (other) {
            std::unique_ptr<backend> be = other->create(0, &pool);
            for (int r = 0; r < n_repeat; ++r) be->attention(a);
            be->sync();
        } else {
            scratch.reserve(a.path, n_threads, n_cells, n_head / n_head_kv, dk, dv, n_head_kv);
            for (int r = 0; r < n_repeat; ++r) attention(a, pool, scratch);
        }
    }
    return out;
}

// The cos/sin table of each row: pos (n,) plain, or (4, n) with M-RoPE sections.
py::array_t<float> rope_table_op(const py::array_t<int32_t, py::array::c_style | py::array::forcecast>& pos, int n_rot,
                                 float freq_base, const std::vector<int>& sections) {
    if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > 1024) throw value_error("rope_table: n_rot must be even, in [2, 1024]");
    if (!(freq_base > 0)) throw value_error("rope_table: freq_base must be > 0");
    rope_params p;
    p.n_rot = n_rot;
    p.freq_base = freq_base;
    if (!sections.empty()) {
        if (sections.size() != 4) throw value_error("rope_table: sections must have 4 entries");
        for (int i = 0; i < 4; ++i) {
            if (sections[(size_t)i] < 0) throw value_error("rope_table: sections must be >= 0");
            p.sections[i] = sections[(size_t)i];
        }
    }
    const bool mrope = p.mrope();
    if (mrope ? (pos.ndim() != 2 || pos.shape(0) != 4) : pos.ndim() != 1)
        throw value_error(mrope ? "rope_table: M-RoPE positions must have shape (4, n)"
                                : "rope_table: positions must have shape (n,)");
    const int64_t n = mrope ? pos.shape(1) : pos.shape(0);
    py::array_t<float> out({(py::ssize_t)n, (py::ssize_t)(n_rot / 2), (py::ssize_t)2});
    const int32_t* ps = pos.data();
    float* o = out.mutable_data();
    for (int64_t t = 0; t < n; ++t) {
        if (mrope) {
            const int32_t p4[4] = {ps[t], ps[n + t], ps[2 * n + t], ps[3 * n + t]};
            rope_cos_sin_mrope(p, p4, o + t * n_rot);
        } else {
            rope_cos_sin(p, ps[t], o + t * n_rot);
        }
    }
    return out;
}

}  // namespace

void bind_ops(py::module_& m) {
    py::module_ ops = m.def_submodule("ops", "Single engine ops on arrays (tests, kernel benchmarks).");
    ops.def("attention", &attention_op, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("type_k"),
            py::arg("type_v"), py::arg("n_head_kv"), py::arg("visible"), py::arg("path") = "flash",
            py::arg("scale") = 1.0f, py::arg("softcap") = 0.0f, py::arg("n_threads") = 1,
            py::arg("cell_pos") = py::none(), py::arg("n_repeat") = 1, py::arg("backend") = "cpu",
            py::arg("sinks") = py::none(),
            "Attention of q (n_tok, n_head, head_dim_k) float32 over a cache: k / v (n_cells, row bytes) uint8 rows of\n"
            "n_head_kv heads of type_k / type_v (as _engine.quantize writes them), visible (n_tok, n_cells) bools.\n"
            "Scores are soft-capped (softcap > 0), then scaled. path: 'flash' or 'explicit'. n_repeat runs it that\n"
            "many times (benchmarks). backend: 'cpu' or another compiled backend (_engine.backends()).\n"
            "sinks: (n_head) float32 attention-sink logits (gpt-oss), or None.\n"
            "Returns (n_tok, n_head, head_dim_v) float32.");
    ops.def("attention_scratch_bytes", [](const std::string& path, int n_threads, int64_t n_cells, int n_gqa,
                                          int head_dim_k, int head_dim_v, int n_head_kv,
                                          const std::vector<std::tuple<int, int, int, int>>& shapes) {
        attention_scratch s;
        std::vector<attention_shape> all{attention_shape{n_gqa, head_dim_k, head_dim_v, n_head_kv}};
        if (!shapes.empty()) all.clear();
        for (const auto& [g, dk, dv, kv] : shapes) all.push_back(attention_shape{g, dk, dv, kv});
        s.reserve(path_arg(path), n_threads, n_cells, all);
        return s.bytes();
    }, py::arg("path"), py::arg("n_threads"), py::arg("n_cells"), py::arg("n_gqa"), py::arg("head_dim_k"),
       py::arg("head_dim_v"), py::arg("n_head_kv") = 1,
       py::arg("shapes") = std::vector<std::tuple<int, int, int, int>>{},
       "Work memory the attention path reserves for these sizes; shapes: (n_gqa, head_dim_k, head_dim_v, "
       "n_head_kv) tuples of a model whose layers differ (model_shape's attention_shapes), which replace the "
       "single shape.");
    ops.def("rope_table", &rope_table_op, py::arg("pos"), py::arg("n_rot"), py::arg("freq_base") = 10000.0f,
            py::arg("sections") = std::vector<int>{},
            "RoPE angles' cos/sin (n, n_rot/2, 2) of positions pos (n,), or with M-RoPE sections (4 ints) of\n"
            "pos (4, n): temporal, height, width, extra per row.");
}
