// bind_quants.cpp — Python access to the type table: dequantize, quantize,
// the dot kernels per ISA level (for tests) and the matrix drivers.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "common.h"
#include "cpu/features.h"
#include "cpu/matmul.h"
#include "ggml_type.h"
#include "py_common.h"
#include "quants/weighted.h"

namespace py = pybind11;
using namespace lp;

// Shared with the other bindings (py_common.h).
ggml_type parse_type(const py::object& t) {
    if (py::isinstance<py::str>(t)) {
        std::string s = t.cast<std::string>();
        for (auto& ch : s) ch = (char)toupper((unsigned char)ch);
        for (int i = 0; i < (int)ggml_type::COUNT; ++i)
            if (type_is_valid(i) && s == type_name((ggml_type)i)) return (ggml_type)i;
        throw value_error("unknown ggml type name '" + t.cast<std::string>() + "'");
    }
    // ints and IntEnums (gguf.GGMLQuantizationType)
    const int v = py::int_(t).cast<int>();
    if (!type_is_valid(v)) throw value_error("unknown ggml type id " + std::to_string(v));
    return (ggml_type)v;
}

isa parse_isa(const std::string& s) {
    if (s == "scalar") return isa::scalar;
    if (s == "avx2") return isa::avx2;
    if (s == "avx512") return isa::avx512;
    if (s == "neon") return isa::neon;
    if (s == "neon_dot") return isa::neon_dot;
    if (s == "best") return best_isa();
    throw value_error("unknown ISA level '" + s + "' (scalar, avx2, avx512, neon, neon_dot, best)");
}

namespace {

int64_t count_elements(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) {
        if (d < 0) throw value_error("negative dimension in shape");
        if (d != 0 && n > INT64_MAX / d) throw value_error("shape too large");
        n *= d;
    }
    return n;
}

py::array_t<float> dequantize(py::array raw, py::object type, std::vector<int64_t> shape) {
    const ggml_type t = parse_type(type);
    const type_traits& tr = traits(t);
    if (!tr.to_float) throw value_error(std::string("dequantize: type ") + type_name(t) + " is not supported");
    if (shape.empty()) throw value_error("dequantize: shape must have at least one dimension");
    const int64_t n = count_elements(shape);
    if (shape.back() % tr.block_size != 0)
        throw value_error("dequantize: last dimension " + std::to_string(shape.back()) + " is not a multiple of the " +
                          type_name(t) + " block size " + std::to_string(tr.block_size));
    const size_t need = (size_t)(n / tr.block_size) * tr.type_size;
    py::buffer_info info = py::array::ensure(raw, py::array::c_style).request();
    const size_t have = (size_t)info.size * (size_t)info.itemsize;
    if (have != need)
        throw value_error("dequantize: " + std::string(type_name(t)) + " data for " + std::to_string(n) +
                          " elements is " + std::to_string(need) + " bytes, got " + std::to_string(have));
    py::array_t<float> out(shape);
    const void* src = info.ptr;
    float* dst = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        tr.to_float(src, dst, n);
    }
    return out;
}

py::array quantize_impl(py::array_t<float, py::array::c_style | py::array::forcecast> x, py::object type, bool ref) {
    const ggml_type t = parse_type(type);
    const type_traits& tr = traits(t);
    const from_float_fn fn = ref ? tr.from_float_ref : tr.from_float;
    if (!fn && has_weighted_quantizer(t))
        throw value_error(std::string("quantize: ") + type_name(t) + " needs an importance matrix (llama.cpp refuses "
                          "it without one): use quantize_weighted with one weight per column");
    if (!fn) throw value_error(std::string("quantize: llamapy cannot produce type ") + type_name(t));
    if (x.ndim() < 1) throw value_error("quantize: input must have at least one dimension");
    const int64_t last = x.shape(x.ndim() - 1);
    if (last % tr.block_size != 0)
        throw value_error("quantize: last dimension " + std::to_string(last) + " is not a multiple of the " +
                          type_name(t) + " block size " + std::to_string(tr.block_size));
    std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
    const int64_t n = x.size();
    const int64_t n_rows = last == 0 ? 0 : n / last;
    const size_t rs = row_size(t, last);
    shape.back() = (py::ssize_t)rs;
    py::array_t<uint8_t> out(shape);
    const float* src = x.data();
    uint8_t* dst = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        for (int64_t r = 0; r < n_rows; ++r) fn(src + r * last, dst + r * rs, last);
    }
    return out;
}

// Rows quantized with importance weights (one weight per column), as llama.cpp's
// quantizer does with an imatrix.
py::array quantize_weighted(py::array_t<float, py::array::c_style | py::array::forcecast> x, py::object type,
                            py::array_t<float, py::array::c_style | py::array::forcecast> weights) {
    const ggml_type t = parse_type(type);
    if (!has_weighted_quantizer(t))
        throw value_error(std::string("quantize_weighted: no importance-weighted quantizer for ") + type_name(t));
    if (x.ndim() != 2) throw value_error("quantize_weighted: x must be (rows, columns)");
    const int64_t n_rows = x.shape(0), n = x.shape(1);
    if (weights.ndim() != 1 || weights.shape(0) != n)
        throw value_error("quantize_weighted: weights must be one value per column (" + std::to_string(n) + ")");
    const size_t rs = row_size(t, n);
    if (rs == 0)
        throw value_error("quantize_weighted: " + std::to_string(n) + " columns are not a multiple of the " +
                          type_name(t) + " block size");
    py::array_t<uint8_t> out({(py::ssize_t)n_rows, (py::ssize_t)rs});
    const float* src = x.data();
    const float* qw = weights.data();
    uint8_t* dst = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        for (int64_t r = 0; r < n_rows; ++r) quantize_row_weighted(t, src + r * n, dst + r * rs, n, qw);
    }
    return out;
}

// Dot products of every row of a quantized matrix with one activation vector,
// through one ISA level's vec_dot (or the reference), for kernel tests.
py::array_t<float> vec_dot_rows(py::array w, py::object type, int64_t n_cols,
                                py::array_t<float, py::array::c_style | py::array::forcecast> a,
                                const std::string& level) {
    const ggml_type t = parse_type(type);
    const bool ref = level == "ref";
    const isa lv = ref ? isa::scalar : parse_isa(level);
    const type_traits& tr = traits(t, lv);
    const vec_dot_fn dot = ref ? tr.vec_dot_ref : tr.vec_dot;
    if (!dot) throw value_error(std::string("no dot kernel for ") + type_name(t));
    if (a.size() != n_cols) throw value_error("activation length does not match n_cols");
    const size_t rs = row_size(t, n_cols);
    if (rs == 0) throw value_error("n_cols is not a multiple of the block size");
    py::buffer_info wi = py::array::ensure(w, py::array::c_style).request();
    const size_t nbytes = (size_t)wi.size * (size_t)wi.itemsize;
    if (nbytes % rs != 0) throw value_error("weight bytes are not a whole number of rows");
    const int64_t n_rows = (int64_t)(nbytes / rs);
    py::array_t<float> out(n_rows);
    std::vector<uint8_t> act;
    const void* ap = a.data();
    if (tr.vec_dot_type != ggml_type::F32) {
        const type_traits& at = traits(tr.vec_dot_type, lv);
        const from_float_fn conv = ref ? at.from_float_ref : at.from_float;
        if (!conv) throw value_error("no activation conversion");
        act.resize(row_size(tr.vec_dot_type, n_cols));
        conv(a.data(), act.data(), n_cols);
        ap = act.data();
    }
    for (int64_t r = 0; r < n_rows; ++r) dot(n_cols, out.mutable_data() + r, (const uint8_t*)wi.ptr + r * rs, ap);
    return out;
}

}  // namespace

// One pool per thread count, created on first use and kept (pools are cheap
// while idle: workers sleep after a short spin). Shared (py_common.h).
thread_pool& pool_for(int n_threads) {
    static std::mutex m;
    static std::vector<std::unique_ptr<thread_pool>> pools(257);
    if (n_threads < 1) n_threads = default_n_threads();
    if (n_threads > 256) throw value_error("n_threads must be at most 256");
    std::lock_guard<std::mutex> lock(m);
    if (!pools[n_threads]) pools[n_threads] = std::make_unique<thread_pool>(n_threads);
    return *pools[n_threads];
}

namespace {

// y = x · wᵀ for a quantized weight matrix (n_rows, n_cols), x (n_tok, n_cols).
py::array_t<float> py_matmul(py::array w, py::object type, int64_t n_rows, int64_t n_cols,
                             py::array_t<float, py::array::c_style | py::array::forcecast> x, int n_threads,
                             const std::string& level, const std::string& kernels) {
    const ggml_type t = parse_type(type);
    if (n_rows < 0 || n_cols <= 0) throw value_error("bad matrix shape");
    if (kernels != "consistent" && kernels != "throughput")
        throw value_error("kernels must be 'consistent' or 'throughput', not '" + kernels + "'");
    const matmul_kernels mk = kernels == "throughput" ? matmul_kernels::throughput : matmul_kernels::consistent;
    const size_t rs = row_size(t, n_cols);
    if (rs == 0) throw value_error("n_cols is not a multiple of the block size");
    py::buffer_info wi = py::array::ensure(w, py::array::c_style).request();
    if ((size_t)wi.size * (size_t)wi.itemsize != rs * (size_t)n_rows)
        throw value_error("weight data size does not match (n_rows, n_cols)");
    if (x.ndim() != 2 || x.shape(1) != n_cols) throw value_error("x must have shape (n_tok, n_cols)");
    const int64_t n_tok = x.shape(0);
    py::array_t<float> y({(py::ssize_t)n_tok, (py::ssize_t)n_rows});
    weight_view wv{t, n_rows, n_cols, wi.ptr, rs};
    const float* xp = x.data();
    float* yp = y.mutable_data();
    if (level == "ref") {
        py::gil_scoped_release nogil;
        matmul_ref(wv, xp, n_cols, n_tok, yp, n_rows);
        return y;
    }
    const isa lv = parse_isa(level);
    thread_pool& pool = pool_for(n_threads);
    {
        py::gil_scoped_release nogil;
        matmul_scratch scratch;
        matmul(wv, xp, n_cols, n_tok, yp, n_rows, pool, scratch, lv, mk);
    }
    return y;
}

// Benchmark loop kept native so Python call overhead does not pollute kernel
// timings: one iteration multiplies every matrix once by n_tok activation rows.
// Returns the wall time of each iteration in seconds.
std::vector<double> bench_matmul(py::list mats, int64_t n_tok, int n_threads, int n_iters) {
    struct item { weight_view w; py::array keep; };
    std::vector<item> items;
    int64_t max_cols = 0, max_rows = 0;
    for (py::handle h : mats) {
        py::tuple t = py::reinterpret_borrow<py::tuple>(h);
        if (t.size() != 4) throw value_error("each matrix is (raw, type, n_rows, n_cols)");
        py::array raw = py::array::ensure(t[0], py::array::c_style);
        const ggml_type ty = parse_type(t[1]);
        const int64_t nr = t[2].cast<int64_t>(), nc = t[3].cast<int64_t>();
        const size_t rs = row_size(ty, nc);
        if (rs == 0 || (size_t)raw.nbytes() != rs * (size_t)nr) throw value_error("matrix data size mismatch");
        items.push_back({weight_view{ty, nr, nc, raw.data(), rs}, raw});
        max_cols = std::max(max_cols, nc);
        max_rows = std::max(max_rows, nr);
    }
    std::vector<float> x((size_t)(max_cols * n_tok)), y((size_t)(max_rows * n_tok));
    for (size_t i = 0; i < x.size(); ++i) x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    thread_pool& pool = pool_for(n_threads);
    std::vector<double> times;
    py::gil_scoped_release nogil;
    matmul_scratch scratch;
    for (int it = 0; it < n_iters; ++it) {
        auto t0 = std::chrono::steady_clock::now();
        for (const item& m : items)
            matmul(m.w, x.data(), m.w.n_cols, n_tok, y.data(), m.w.n_rows, pool, scratch, best_isa());
        times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return times;
}

}  // namespace

void bind_quants(py::module_& m) {
    m.def("dequantize", &dequantize, py::arg("raw"), py::arg("ggml_type"), py::arg("shape"),
          "Dequantize raw GGUF blocks of `ggml_type` to a float32 array of `shape`.");
    m.def("quantize", [](py::array_t<float, py::array::c_style | py::array::forcecast> x, py::object t) {
        return quantize_impl(x, t, false); }, py::arg("x"), py::arg("ggml_type"));
    m.def("quantize_ref", [](py::array_t<float, py::array::c_style | py::array::forcecast> x, py::object t) {
        return quantize_impl(x, t, true); }, py::arg("x"), py::arg("ggml_type"));
    m.def("quantize_weighted", &quantize_weighted, py::arg("x"), py::arg("ggml_type"), py::arg("weights"),
          "Quantize rows (rows, n) with importance weights (n,), as llama.cpp with an imatrix.");
    m.def("vec_dot_rows", &vec_dot_rows, py::arg("w"), py::arg("ggml_type"), py::arg("n_cols"), py::arg("a"),
          py::arg("level") = "best");
    m.def("matmul", &py_matmul, py::arg("w"), py::arg("ggml_type"), py::arg("n_rows"), py::arg("n_cols"),
          py::arg("x"), py::arg("n_threads") = 0, py::arg("level") = "best", py::arg("kernels") = "consistent");
    m.def("type_info", [](py::object type, const std::string& level) {
        const ggml_type t = parse_type(type);
        const type_traits& tr = traits(t, parse_isa(level));
        py::dict d;
        d["name"] = tr.name;
        d["id"] = (int)t;
        d["block_size"] = tr.block_size;
        d["type_size"] = tr.type_size;
        d["is_quantized"] = tr.is_quantized;
        d["can_dequantize"] = tr.to_float != nullptr;
        d["can_quantize"] = tr.from_float != nullptr;
        d["can_quantize_weighted"] = has_weighted_quantizer(t);
        d["has_matmul"] = tr.vec_dot != nullptr;
        d["vec_dot_type"] = type_name(tr.vec_dot_type);
        d["kernel_isa"] = isa_name(tr.vec_dot_isa);
        d["has_gemm_tile"] = tr.gemm_tile != nullptr;
        d["has_throughput_panel"] = tr.throughput_panel != nullptr;
        d["has_throughput_packed"] = tr.throughput_packed != nullptr;
        return d;
    }, py::arg("ggml_type"), py::arg("level") = "best");
    m.def("bench_matmul", &bench_matmul, py::arg("mats"), py::arg("n_tok"), py::arg("n_threads"),
          py::arg("n_iters"));
    m.def("row_size", [](py::object type, int64_t n) { return row_size(parse_type(type), n); });
    m.def("packed_act_bytes_max", &packed_act_bytes_max, py::arg("n_tok"), py::arg("n"),
          "Bytes the engine reserves for the converted or packed activations of n_tok rows of n elements.");
}
