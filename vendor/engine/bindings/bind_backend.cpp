// bind_backend.cpp — the backend registry (backend/registry.h) and single
// backend ops from Python. The registry's answers: which backends this build
// has and which GPU devices they find, why no layer can go to a GPU, which
// weight types a device multiplies with kernels of its own. The single ops
// serve the cross-backend op test (tests/test_backend_ops.py): every op of
// every compiled backend against numpy and against the CPU backend, the
// reference. Nothing here names a backend but the CPU (the reference).
//   _engine.backends()                      names of the compiled backends
//   _engine.gpu_devices()                   the GPU devices, one dict each
//   _engine.gpu_unavailable()               why no GPU can be used, or ""
//   _engine.matmul_types(device)            weight types with a kernel on "cpu" / "gpu<i>"
//   _engine.<backend>_error(), _engine.<backend>_matmul_types()
//                                           per GPU backend, for its own tests
//   _engine.backend_row_op(backend, kind, y, x=None, ...) -> y after the op
//   _engine.backend_matmul(backend, raw, type, n_rows, n_cols, x) -> x · wᵀ
//   _engine.backend_get_rows(backend, raw, type, n_rows, n_cols, ids) -> rows
//   _engine.backend_kv_store(backend, type, x, cells, n_cells) -> cache bytes
//   _engine.backend_gather_rows(backend, data, idx) -> data after the gather
// Not here: the forward pass (bind_model.cpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "common.h"
#include "cpu/delta_net.h"
#include "py_common.h"

namespace py = pybind11;
using namespace lp;

namespace {

using farray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using i32array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

std::string backend_names() {
    std::string out;
    for (const backend_factory* f : backend_factories()) out += std::string(out.empty() ? "" : ", ") + f->name();
    return out;
}

// A backend for single ops: the CPU's on a pool of n_threads, a GPU
// backend on its first device.
std::unique_ptr<backend> make_backend(const std::string& name, int n_threads) {
    const backend_factory* f = find_backend(name);
    if (!f) throw value_error("backend '" + name + "' is not compiled in (backends: " + backend_names() + ")");
    return f->create(0, &pool_for(n_threads));
}

// The weight types (names) that factory f multiplies with kernels of its own.
std::vector<std::string> matmul_type_names(const backend_factory& f) {
    std::vector<std::string> out;
    for (int t = 0; t < (int)ggml_type::COUNT; ++t)
        if (type_is_valid(t) && f.has_matmul((ggml_type)t)) out.push_back(type_name((ggml_type)t));
    return out;
}

row_op::kind parse_kind(const std::string& k) {
    static const std::pair<const char*, row_op::kind> kinds[] = {
        {"rms_norm", row_op::kind::rms_norm}, {"layer_norm", row_op::kind::layer_norm},
        {"add", row_op::kind::add},           {"mul", row_op::kind::mul},
        {"scale", row_op::kind::scale},       {"softcap", row_op::kind::softcap},
        {"gelu_mul", row_op::kind::gelu_mul}, {"silu_mul", row_op::kind::silu_mul},
        {"rope", row_op::kind::rope},         {"hadamard", row_op::kind::hadamard},
        {"copy", row_op::kind::copy},         {"gelu_quick_mul", row_op::kind::gelu_quick_mul},
        {"weighted_sum", row_op::kind::weighted_sum}, {"swiglu_oai", row_op::kind::swiglu_oai},
        {"sigmoid_mul", row_op::kind::sigmoid_mul},   {"softplus_mul", row_op::kind::softplus_mul},
        {"scale_by", row_op::kind::scale_by},
    };
    for (const auto& [name, kind] : kinds)
        if (k == name) return kind;
    throw value_error("unknown row op '" + k + "'");
}

// A weight matrix over a Python buffer of raw rows.
weight_view raw_matrix(const py::array& raw, const py::object& type, int64_t n_rows, int64_t n_cols) {
    const ggml_type t = parse_type(type);
    const size_t rs = row_size(t, n_cols);
    if (n_rows <= 0 || n_cols <= 0 || rs == 0) throw value_error("bad matrix shape for its type");
    if (!(raw.flags() & py::array::c_style) || (size_t)raw.nbytes() != rs * (size_t)n_rows)
        throw value_error("raw data must be C-contiguous with n_rows rows of the type's row size");
    return weight_view{t, n_rows, n_cols, raw.data(), rs};
}

// y (n, cols) after one row op. x: None, (n, k) rows or (k,) shared by every
// row; per kind: norms work on `groups` groups of cols / groups; rope on
// `groups` heads of cols / groups with x the (n, a) cos/sin tables;
// weighted_sum sums `groups` parts of x (n, groups * cols) weighted by w (n, groups).
farray row_op_py(const std::string& be_name, const std::string& kind, farray y_in, const py::object& x_in,
                 const py::object& w_in, const py::object& b_in, float f, float f2, int64_t groups, int a, bool neox,
                 int n_threads) {
    if (y_in.ndim() != 2) throw value_error("y must be 2-D (rows, cols)");
    const int64_t n = y_in.shape(0), cols = y_in.shape(1);
    const bool wsum = parse_kind(kind) == row_op::kind::weighted_sum;
    if (groups < 1 || (!wsum && cols % groups != 0)) throw value_error("groups must divide the columns");
    farray y({(py::ssize_t)n, (py::ssize_t)cols});
    std::memcpy(y.mutable_data(), y_in.data(), sizeof(float) * (size_t)(n * cols));
    row_op o;
    o.k = parse_kind(kind);
    o.y = y.mutable_data();
    o.y_stride = cols;
    const bool grouped = o.k == row_op::kind::rms_norm || o.k == row_op::kind::rope;
    o.n = grouped ? cols / groups : cols;
    o.groups = grouped || wsum ? groups : 1;
    o.f = f;
    o.f2 = f2;
    o.a = a;
    o.style = neox ? rope_style::neox : rope_style::normal;
    if (o.k == row_op::kind::rope && (a < 0 || a % 2 || a > o.n)) throw value_error("rope: bad number of rotated dims");
    if (o.k == row_op::kind::hadamard && (a <= 0 || (a & (a - 1)) || cols % a))
        throw value_error("hadamard: the block must be a power of two dividing the columns");
    farray x, w, b;
    const int64_t x_need = o.k == row_op::kind::rope       ? a
                           : o.k == row_op::kind::scale_by ? 1
                                                           : o.n * o.groups;  // weighted_sum: groups * cols
    if (!x_in.is_none()) {
        x = farray::ensure(x_in);
        if (!x) throw py::type_error("x must be a float array");
        const bool shared = x.ndim() == 1;
        if (!(shared || (x.ndim() == 2 && x.shape(0) == n)) || x.shape(x.ndim() - 1) != x_need)
            throw value_error("x must have shape (rows, " + std::to_string(x_need) + ") or (" +
                              std::to_string(x_need) + ",)");
        o.x = x.data();
        o.x_stride = shared ? 0 : x_need;
    } else if (o.k != row_op::kind::scale && o.k != row_op::kind::softcap && o.k != row_op::kind::hadamard &&
               o.k != row_op::kind::gelu_mul && o.k != row_op::kind::silu_mul &&
               o.k != row_op::kind::gelu_quick_mul && o.k != row_op::kind::sigmoid_mul &&
               o.k != row_op::kind::softplus_mul) {
        if (!(o.k == row_op::kind::rms_norm || o.k == row_op::kind::layer_norm))
            throw value_error("row op '" + kind + "' needs x");
        o.x = o.y;  // norms in place
        o.x_stride = cols;
    }
    auto vec = [&](const py::object& in, farray& keep, int64_t len, const char* what) -> const float* {
        if (in.is_none()) return nullptr;
        keep = farray::ensure(in);
        if (!keep || keep.ndim() != 1 || keep.shape(0) != len)
            throw value_error(std::string(what) + " must have " + std::to_string(len) + " values");
        return keep.data();
    };
    if (wsum) {  // per-row weights: (n, groups)
        w = farray::ensure(w_in);
        if (!w || w.ndim() != 2 || w.shape(0) != n || w.shape(1) != groups)
            throw value_error("weighted_sum: w must have shape (rows, groups)");
        if (!o.x || o.x == o.y) throw value_error("weighted_sum needs x");
        o.w = w.data();
    } else {
        o.w = vec(w_in, w, o.n, "w");
    }
    o.b = vec(b_in, b, o.n, "b");
    std::unique_ptr<backend> be = make_backend(be_name, n_threads);
    py::gil_scoped_release nogil;
    be->run_rows(&o, 1, n);
    be->sync();
    return y;
}

farray matmul_py(const std::string& be_name, py::array raw, const py::object& type, int64_t n_rows, int64_t n_cols,
                 farray x, int n_threads) {
    const weight_view w = raw_matrix(raw, type, n_rows, n_cols);
    if (x.ndim() != 2 || x.shape(1) != n_cols) throw value_error("x must have shape (n, n_cols)");
    const int64_t n = x.shape(0);
    farray y({(py::ssize_t)n, (py::ssize_t)n_rows});
    std::unique_ptr<backend> be = make_backend(be_name, n_threads);
    float* yp = y.mutable_data();
    py::gil_scoped_release nogil;
    be->matmul(w, x.data(), n_cols, yp, n_rows, n, lora_work{});
    be->sync();
    return y;
}

farray get_rows_py(const std::string& be_name, py::array raw, const py::object& type, int64_t n_rows, int64_t n_cols,
                   const std::vector<int32_t>& ids, int n_threads) {
    const weight_view w = raw_matrix(raw, type, n_rows, n_cols);
    for (int32_t id : ids)
        if (id < 0 || id >= n_rows) throw value_error("row id " + std::to_string(id) + " is out of range");
    if (!traits(w.type).to_float) throw value_error("this type cannot be read as floats");
    farray y({(py::ssize_t)ids.size(), (py::ssize_t)n_cols});
    std::unique_ptr<backend> be = make_backend(be_name, n_threads);
    float* yp = y.mutable_data();
    py::gil_scoped_release nogil;
    be->get_rows(w, ids.data(), yp, n_cols, (int64_t)ids.size());
    be->sync();
    return y;
}

// The KV cache store: rows x (n, n_cols) into a fresh cache of n_cells rows
// of `type` (zero bytes elsewhere), row t at cell cells[t]; the cache bytes.
py::bytes kv_store_py(const std::string& be_name, const py::object& type, farray x, const std::vector<int32_t>& cells,
                      int64_t n_cells, int n_threads) {
    const ggml_type t = parse_type(type);
    if (x.ndim() != 2) throw value_error("x must have shape (n, n_cols)");
    const int64_t n = x.shape(0), n_cols = x.shape(1);
    if ((int64_t)cells.size() != n) throw value_error("cells must have one entry per row of x");
    for (int32_t c : cells)
        if (c < 0 || c >= n_cells) throw value_error("cell " + std::to_string(c) + " is out of range");
    const size_t rb = row_size(t, n_cols);
    if (rb == 0) throw value_error("n_cols does not fit the type's blocks");
    std::unique_ptr<backend> be = make_backend(be_name, n_threads);
    device_buffer cache(be->dev(), rb * (size_t)n_cells);
    std::memset(cache.data(), 0, cache.bytes());
    row_op o;
    o.k = row_op::kind::kv_store;
    o.x = x.data();
    o.x_stride = n_cols;
    o.n = n_cols;
    o.dst = cache.u8();
    o.dst_row_bytes = rb;
    o.type = t;
    o.cells = cells.data();
    {
        py::gil_scoped_release nogil;
        be->run_rows(&o, 1, n);
        be->sync();
    }
    return py::bytes(reinterpret_cast<const char*>(cache.u8()), cache.bytes());
}

// gather_rows in place on a copy of data (rows, cols): row i becomes row idx[i].
farray gather_rows_py(const std::string& be_name, farray data, const std::vector<int32_t>& idx, int n_threads) {
    if (data.ndim() != 2) throw value_error("data must have shape (rows, cols)");
    const int64_t rows = data.shape(0), cols = data.shape(1);
    for (size_t i = 0; i < idx.size(); ++i)
        if (idx[i] < (int32_t)i || idx[i] >= rows || (i && idx[i] <= idx[i - 1]))
            throw value_error("idx must be ascending, with i <= idx[i] < rows");
    farray out({(py::ssize_t)rows, (py::ssize_t)cols});
    std::memcpy(out.mutable_data(), data.data(), sizeof(float) * (size_t)(rows * cols));
    std::unique_ptr<backend> be = make_backend(be_name, n_threads);
    float* p = out.mutable_data();
    py::gil_scoped_release nogil;
    be->gather_rows(p, cols, cols, idx.data(), (int64_t)idx.size());
    be->sync();
    return out;
}

// The short causal convolution (backend.h ssm_conv) of rows x (n, C) with
// kernel w (C, d_conv), each row on state slot slot[t] of `state` (n_slot,
// C, d_conv - 1): returns (y (n, C), the states after).
py::tuple ssm_conv_py(const std::string& be_name, farray x, farray w, farray state, const i32array& slot,
                      int n_threads) {
    if (x.ndim() != 2 || w.ndim() != 2 || state.ndim() != 3 || slot.ndim() != 1)
        throw value_error("ssm_conv: x (n, C), w (C, d_conv), state (n_slot, C, d_conv - 1), slot (n,)");
    const int64_t n = x.shape(0), C = x.shape(1), d = w.shape(1), n_slot = state.shape(0);
    if (w.shape(0) != C || state.shape(1) != C || state.shape(2) != d - 1 || d < 2 || d > 64 || slot.shape(0) != n)
        throw value_error("ssm_conv: shapes do not match");
    for (int64_t t = 0; t < n; ++t)
        if (slot.data()[t] < 0 || slot.data()[t] >= n_slot) throw value_error("ssm_conv: slot out of range");
    farray y({(py::ssize_t)n, (py::ssize_t)C});
    farray st({(py::ssize_t)n_slot, (py::ssize_t)C, (py::ssize_t)(d - 1)});
    std::memcpy(st.mutable_data(), state.data(), sizeof(float) * (size_t)st.size());
    ssm_conv_args a;
    a.n_tok = n;
    a.n_ch = C;
    a.d_conv = (int)d;
    a.x = x.data();
    a.x_stride = C;
    a.y = y.mutable_data();
    a.y_stride = C;
    a.w = w.data();
    a.state = st.mutable_data();
    a.state_stride = C * (d - 1);
    a.slot = slot.data();
    std::unique_ptr<backend> be = make_backend(be_name, n_threads);
    {
        py::gil_scoped_release nogil;
        be->ssm_conv(a);
        be->sync();
    }
    return py::make_tuple(y, st);
}

// The gated delta rule (backend.h gated_delta): q, k (n, Hk * S), v (n, Hv * S),
// g, beta (n, Hv), state (n_slot, Hv, S, S) in the engine's layout, slot (n,):
// returns (out (n, Hv * S), the states after). kernel: "backend" (what the
// backend runs), or on the CPU's kernels directly (one thread): "ref"
// (gated_delta_ref), "step" (the step form only), "chunked" (the chunked form
// for every run, in chunks of `chunk` rows).
py::tuple gated_delta_py(const std::string& be_name, farray q, farray k, farray v, farray g, farray beta,
                         farray state, const i32array& slot, int n_head_k, int n_threads, const std::string& kernel,
                         int chunk) {
    if (kernel != "backend" && kernel != "ref" && kernel != "step" && kernel != "chunked")
        throw value_error("gated_delta: kernel must be 'backend', 'ref', 'step' or 'chunked', got '" + kernel + "'");
    if (kernel != "backend" && be_name != "cpu")
        throw value_error("gated_delta: kernel '" + kernel + "' runs the CPU's kernels; the backend must be 'cpu'");
    if (chunk < 1 || chunk > gated_delta_plan::max_chunk)
        throw value_error("gated_delta: chunk must be 1 .. " + std::to_string(gated_delta_plan::max_chunk));
    if (q.ndim() != 2 || k.ndim() != 2 || v.ndim() != 2 || g.ndim() != 2 || beta.ndim() != 2 || state.ndim() != 4)
        throw value_error("gated_delta: q, k, v, g, beta are (n, ...), state (n_slot, Hv, S, S)");
    const int64_t n = q.shape(0), n_slot = state.shape(0), Hv = state.shape(1), S = state.shape(2);
    if (n_head_k <= 0 || Hv % n_head_k != 0 || state.shape(3) != S || q.shape(1) != n_head_k * S ||
        k.shape(0) != n || k.shape(1) != q.shape(1) || v.shape(0) != n || v.shape(1) != Hv * S || g.shape(0) != n ||
        g.shape(1) != Hv || beta.shape(0) != n || beta.shape(1) != Hv || slot.ndim() != 1 || slot.shape(0) != n)
        throw value_error("gated_delta: shapes do not match");
    for (int64_t t = 0; t < n; ++t)
        if (slot.data()[t] < 0 || slot.data()[t] >= n_slot) throw value_error("gated_delta: slot out of range");
    farray out({(py::ssize_t)n, (py::ssize_t)(Hv * S)});
    farray st({(py::ssize_t)n_slot, (py::ssize_t)Hv, (py::ssize_t)S, (py::ssize_t)S});
    std::memcpy(st.mutable_data(), state.data(), sizeof(float) * (size_t)st.size());
    gated_delta_args a;
    a.n_tok = n;
    a.n_head_k = n_head_k;
    a.n_head_v = (int)Hv;
    a.head_dim = (int)S;
    a.q = q.data();
    a.k = k.data();
    a.qk_stride = q.shape(1);
    a.v = v.data();
    a.v_stride = Hv * S;
    a.g = g.data();
    a.beta = beta.data();
    a.gb_stride = Hv;
    a.out = out.mutable_data();
    a.out_stride = Hv * S;
    a.state = st.mutable_data();
    a.state_stride = Hv * S * S;
    a.slot = slot.data();
    a.scale = 1.0f / std::sqrt((float)S);
    if (kernel != "backend") {
        {
            py::gil_scoped_release nogil;
            gated_delta_plan plan;
            plan.chunk = chunk;
            plan.min_run = kernel == "chunked" ? 1 : gated_delta_plan::never();
            std::vector<float> work;
            if (kernel == "ref")
                gated_delta_ref(a, 0, a.n_head_v);
            else
                lp::gated_delta(a, 0, a.n_head_v, plan, work);
        }
        return py::make_tuple(out, st);
    }
    std::unique_ptr<backend> be = make_backend(be_name, n_threads);
    {
        py::gil_scoped_release nogil;
        be->gated_delta(a);
        be->sync();
    }
    return py::make_tuple(out, st);
}

// Mamba-2's selective scan (backend.h ssm_scan): x (n, H * P), dt (n, H), A (H),
// B, C (n, G * N), D (H) or None, state (n_slot, H, P, N), slot (n,): returns
// (y (n, H * P), the states after).
py::tuple ssm_scan_py(const std::string& be_name, farray x, farray dt, farray A, farray B, farray C,
                      const py::object& D, farray state, const i32array& slot, int n_group, int n_threads) {
    if (x.ndim() != 2 || dt.ndim() != 2 || A.ndim() != 1 || B.ndim() != 2 || C.ndim() != 2 || state.ndim() != 4 ||
        slot.ndim() != 1)
        throw value_error("ssm_scan: x (n, H*P), dt (n, H), A (H), B, C (n, G*N), state (n_slot, H, P, N), slot (n,)");
    const int64_t n = x.shape(0), n_slot = state.shape(0), H = state.shape(1), P = state.shape(2), N = state.shape(3);
    if (n_group <= 0 || H % n_group != 0 || x.shape(1) != H * P || dt.shape(0) != n || dt.shape(1) != H ||
        A.shape(0) != H || B.shape(0) != n || B.shape(1) != n_group * N || C.shape(0) != n ||
        C.shape(1) != B.shape(1) || slot.shape(0) != n)
        throw value_error("ssm_scan: shapes do not match");
    for (int64_t t = 0; t < n; ++t)
        if (slot.data()[t] < 0 || slot.data()[t] >= n_slot) throw value_error("ssm_scan: slot out of range");
    farray d;
    if (!D.is_none()) {
        d = farray(D);
        if (d.ndim() != 1 || d.shape(0) != H) throw value_error("ssm_scan: D must have H entries");
    }
    farray y({(py::ssize_t)n, (py::ssize_t)(H * P)});
    farray st({(py::ssize_t)n_slot, (py::ssize_t)H, (py::ssize_t)P, (py::ssize_t)N});
    std::memcpy(st.mutable_data(), state.data(), sizeof(float) * (size_t)st.size());
    ssm_scan_args a;
    a.n_tok = n;
    a.n_head = (int)H;
    a.head_dim = (int)P;
    a.d_state = (int)N;
    a.n_group = n_group;
    a.x = x.data();
    a.x_stride = H * P;
    a.dt = dt.data();
    a.dt_stride = H;
    a.A = A.data();
    a.B = B.data();
    a.C = C.data();
    a.bc_stride = n_group * N;
    a.D = D.is_none() ? nullptr : d.data();
    a.y = y.mutable_data();
    a.y_stride = H * P;
    a.state = st.mutable_data();
    a.state_stride = H * P * N;
    a.slot = slot.data();
    std::unique_ptr<backend> be = make_backend(be_name, n_threads);
    {
        py::gil_scoped_release nogil;
        be->ssm_scan(a);
        be->sync();
    }
    return py::make_tuple(y, st);
}

}  // namespace

py::tuple backend_name_tuple() {
    py::list out;
    for (const backend_factory* f : backend_factories()) out.append(f->name());
    return py::tuple(out);
}

py::list gpu_device_list() {
    py::list out;
    for (const gpu_slot& s : gpu_slots()) {
        const gpu_device_desc& v = *s.desc;
        py::dict d;
        d["backend"] = s.factory->name();
        d["index"] = s.index;
        d["name"] = v.name;
        d["type"] = v.type;
        d["driver"] = v.driver;
        d["api_version"] = v.api_version;
        d["memory"] = v.memory;
        d["fp16"] = v.fp16;
        d["int8"] = v.int8;
        d["subgroup_size"] = v.subgroup_size;
        d["subgroup_ops"] = v.subgroup_ops;  // the backend's subgroup kernels run on it
        out.append(d);
    }
    return out;
}

void bind_backend(py::module_& m) {
    m.def("backends", []() {
        std::vector<std::string> out;
        for (const backend_factory* f : backend_factories()) out.push_back(f->name());
        return out;
    }, "names of the compiled backends, the CPU first");
    m.def("gpu_devices", &gpu_device_list, "The GPU devices the compiled GPU backends find (a list of dicts).");
    m.def("gpu_unavailable", &no_gpu_reason,
          "Why no layer can go to a GPU in this process (no GPU backend in this build, or no device found), or "
          "an empty string.");
    m.def("matmul_types", [](const std::string& dev) {
        if (dev == "cpu") return matmul_type_names(*find_backend("cpu"));
        if (dev.compare(0, 3, "gpu") != 0 || dev.size() == 3 || dev.find_first_not_of("0123456789", 3) != std::string::npos)
            throw value_error("device must be 'cpu' or 'gpu<i>', got '" + dev + "'");
        return matmul_type_names(*gpu_slot_of(device{device::kind::gpu, std::stoi(dev.substr(3))}).factory);
    }, py::arg("device"),
       "Weight types device ('cpu', 'gpu0', ...) multiplies with kernels of its own (a GPU backend dequantizes "
       "the others to F16 on upload).");
    // Each GPU backend's own questions, named after it, for its own tests.
    for (const backend_factory* f : backend_factories()) {
        if (f == find_backend("cpu")) continue;
        m.def((std::string(f->name()) + "_error").c_str(), [f]() { return f->why_no_device(); },
              "Why this backend found no device, or an empty string.");
        m.def((std::string(f->name()) + "_matmul_types").c_str(), [f]() { return matmul_type_names(*f); },
              "Weight types this backend has matmul kernels for (others are dequantized to F16 on upload).");
        m.def((std::string(f->name()) + "_memory_used").c_str(), [f](int index) { return f->memory_used(index); },
              py::arg("index") = 0, "Bytes of device memory this process holds on the backend's device `index` now.");
    }
    m.def("backend_row_op", &row_op_py, py::arg("backend"), py::arg("kind"), py::arg("y"), py::arg("x") = py::none(),
          py::arg("w") = py::none(), py::arg("b") = py::none(), py::arg("f") = 0.0f, py::arg("f2") = 0.0f,
          py::arg("groups") = 1, py::arg("a") = 0, py::arg("neox") = false, py::arg("n_threads") = 1,
          "y (rows, cols) after one row op of the backend (backend.h: rms_norm, layer_norm, add, mul, scale, "
          "softcap, gelu_mul, silu_mul, gelu_quick_mul, rope, hadamard, copy, weighted_sum (x (rows, groups * "
          "cols), w (rows, groups)), swiglu_oai (f: limit, f2: alpha))");
    m.def("backend_matmul", &matmul_py, py::arg("backend"), py::arg("raw"), py::arg("type"), py::arg("n_rows"),
          py::arg("n_cols"), py::arg("x"), py::arg("n_threads") = 1, "x · wᵀ on the backend");
    m.def("backend_get_rows", &get_rows_py, py::arg("backend"), py::arg("raw"), py::arg("type"), py::arg("n_rows"),
          py::arg("n_cols"), py::arg("ids"), py::arg("n_threads") = 1, "rows ids of a table, as floats");
    m.def("backend_kv_store", &kv_store_py, py::arg("backend"), py::arg("type"), py::arg("x"), py::arg("cells"),
          py::arg("n_cells"), py::arg("n_threads") = 1,
          "the bytes of a cache of n_cells rows of `type` after storing row t of x at cells[t]");
    m.def("backend_ssm_conv", &ssm_conv_py, py::arg("backend"), py::arg("x"), py::arg("w"), py::arg("state"),
          py::arg("slot"), py::arg("n_threads") = 1,
          "(y, states after): the short causal convolution of rows x (n, C), kernel w (C, d_conv), each row on "
          "its slot of state (n_slot, C, d_conv - 1)");
    m.def("backend_ssm_scan", &ssm_scan_py, py::arg("backend"), py::arg("x"), py::arg("dt"), py::arg("A"), py::arg("B"),
          py::arg("C"), py::arg("D"), py::arg("state"), py::arg("slot"), py::arg("n_group"), py::arg("n_threads") = 1,
          "(y, states after): Mamba-2's selective scan over rows (op_args.h ssm_scan_args), state (n_slot, "
          "n_head, head_dim, d_state)");
    m.def("backend_gated_delta", &gated_delta_py, py::arg("backend"), py::arg("q"), py::arg("k"), py::arg("v"),
          py::arg("g"), py::arg("beta"), py::arg("state"), py::arg("slot"), py::arg("n_head_k"),
          py::arg("n_threads") = 1, py::arg("kernel") = "backend", py::arg("chunk") = gated_delta_plan{}.chunk,
          "(out, states after): the gated delta rule over rows (op_args.h gated_delta_args), state (n_slot, "
          "n_head_v, S, S) with element (i, j) of a head's matrix at [j][i]. kernel: 'backend' (what the backend "
          "runs), or the CPU kernels on one thread: 'ref', 'step' (the step form only), 'chunked' (the chunked "
          "form for every run of rows on one slot, in chunks of `chunk` rows)");
    m.def("backend_gather_rows", &gather_rows_py, py::arg("backend"), py::arg("data"), py::arg("idx"),
          py::arg("n_threads") = 1, "data with row i replaced by row idx[i] (in place on the backend)");
}
