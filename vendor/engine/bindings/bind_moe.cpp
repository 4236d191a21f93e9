// bind_moe.cpp — the mixture-of-experts ops on caller-given arrays, for the
// op tests (tests/test_moe_ops.py, against numpy and the scalar reference, on
// every backend) and kernel benchmarks:
//   _engine.ops.moe_route(logits, k, ...)       each row's experts and weights
//   _engine.ops.moe_matmul(w, type, ..., x, ids) the expert products
// Not here: the layer that uses them (model/blocks.cpp moe_ffn_block).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "backend/registry.h"
#include "common.h"
#include "cpu/moe.h"
#include "py_common.h"

namespace py = pybind11;
using namespace lp;

namespace {

using f32_array = py::array_t<float, py::array::c_style | py::array::forcecast>;
using i32_array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

moe_gating gating_arg(const std::string& s) {
    if (s == "softmax") return moe_gating::softmax;
    if (s == "sigmoid") return moe_gating::sigmoid;
    if (s == "softmax_weight") return moe_gating::softmax_weight;
    throw value_error("gating must be 'softmax', 'sigmoid' or 'softmax_weight', got '" + s + "'");
}

// A backend other than the CPU from the registry ("cpu": null).
const backend_factory* other_backend(const std::string& name, const char* op) {
    if (name == "cpu") return nullptr;
    const backend_factory* f = find_backend(name);
    if (!f) throw value_error(std::string(op) + ": backend '" + name + "' is not compiled in");
    return f;
}

py::tuple moe_route_op(f32_array logits, int k, const std::string& gating, const py::object& bias, int n_group,
                       int n_group_used, bool norm, float scale, const py::object& expert_scale, int n_threads,
                       const std::string& backend_name) {
    if (logits.ndim() != 2) throw value_error("moe_route: logits must have shape (n_tok, n_expert)");
    const int64_t n = logits.shape(0), n_exp = logits.shape(1);
    if (k < 1 || k > n_exp) throw value_error("moe_route: k must be in 1..n_expert");
    f32_array b;
    if (!bias.is_none()) {
        b = f32_array(bias);
        if (b.ndim() != 1 || b.shape(0) != n_exp) throw value_error("moe_route: bias must have n_expert entries");
    }
    f32_array es;
    if (!expert_scale.is_none()) {
        es = f32_array(expert_scale);
        if (es.ndim() != 1 || es.shape(0) != n_exp)
            throw value_error("moe_route: expert_scale must have n_expert entries");
    }
    py::array_t<int32_t> ids({(py::ssize_t)n, (py::ssize_t)k});
    py::array_t<float> w({(py::ssize_t)n, (py::ssize_t)k});
    moe_route_args a;
    a.n_tok = n;
    a.n_expert = n_exp;
    a.k = k;
    a.logits = logits.data();
    a.logits_stride = n_exp;
    a.bias = bias.is_none() ? nullptr : b.data();
    a.gating = gating_arg(gating);
    a.n_group = n_group;
    a.n_group_used = n_group_used;
    a.norm = norm;
    a.scale = scale;
    a.expert_scale = expert_scale.is_none() ? nullptr : es.data();
    a.ids = ids.mutable_data();
    a.weights = w.mutable_data();
    const backend_factory* other = other_backend(backend_name, "moe_route");
    {
        py::gil_scoped_release nogil;
        thread_pool& pool = pool_for(n_threads);
        if (other) {
            std::unique_ptr<backend> be = other->create(0, &pool);
            be->moe_route(a);
            be->sync();
        } else {
            moe_route(a, pool);
        }
    }
    return py::make_tuple(ids, w);
}

py::array_t<float> moe_matmul_op(py::array w, const py::object& type, int64_t n_expert, int64_t n_rows,
                                 int64_t n_cols, f32_array x, i32_array ids, const py::object& bias, int n_threads,
                                 const std::string& level, const std::string& backend_name) {
    const ggml_type t = parse_type(type);
    if (n_expert <= 0 || n_rows <= 0 || n_cols <= 0) throw value_error("moe_matmul: bad expert shape");
    const size_t rs = row_size(t, n_cols);
    if (rs == 0) throw value_error("moe_matmul: n_cols is not a multiple of the block size");
    py::buffer_info wi = py::array::ensure(w, py::array::c_style).request();
    if ((size_t)wi.size * (size_t)wi.itemsize != rs * (size_t)(n_rows * n_expert))
        throw value_error("moe_matmul: weight data size does not match (n_expert, n_rows, n_cols)");
    if (x.ndim() != 2 || x.shape(1) != n_cols) throw value_error("moe_matmul: x must have shape (n, n_cols)");
    // ids (n_tok, k): every slot of a token reads its x row (x_div k); ids (n_slots,): one x row per slot.
    if (ids.ndim() != 1 && ids.ndim() != 2) throw value_error("moe_matmul: ids must have shape (n_tok, k) or (n_slots,)");
    const int x_div = ids.ndim() == 2 ? (int)ids.shape(1) : 1;
    const int64_t n_slots = ids.ndim() == 2 ? ids.shape(0) * ids.shape(1) : ids.shape(0);
    if (x.shape(0) * x_div != n_slots) throw value_error("moe_matmul: x has the wrong number of rows for ids");
    f32_array b;
    if (!bias.is_none()) {
        b = f32_array(bias);
        if (b.ndim() != 2 || b.shape(0) != n_expert || b.shape(1) != n_rows)
            throw value_error("moe_matmul: bias must have shape (n_expert, n_rows)");
    }
    experts_view ev;
    ev.all = weight_view{t, n_rows * n_expert, n_cols, wi.ptr, rs};
    ev.n_expert = n_expert;
    py::array_t<float> y({(py::ssize_t)n_slots, (py::ssize_t)n_rows});
    const float* bp = bias.is_none() ? nullptr : b.data();
    const backend_factory* other = other_backend(backend_name, "moe_matmul");
    {
        py::gil_scoped_release nogil;
        if (level == "ref") {
            moe_matmul_ref(ev, x.data(), n_cols, x_div, ids.data(), n_slots, y.mutable_data(), n_rows, bp);
        } else {
            thread_pool& pool = pool_for(n_threads);
            if (other) {
                std::unique_ptr<backend> be = other->create(0, &pool);
                be->moe_matmul(ev, x.data(), n_cols, x_div, ids.data(), n_slots, y.mutable_data(), n_rows, bp);
                be->sync();
            } else {
                moe_scratch scratch;
                moe_matmul(ev, x.data(), n_cols, x_div, ids.data(), n_slots, y.mutable_data(), n_rows, bp, pool,
                           scratch, parse_isa(level));
            }
        }
    }
    return y;
}

}  // namespace

void bind_moe(py::module_& m) {
    py::module_ ops = m.attr("ops").cast<py::module_>();
    ops.def("moe_route", &moe_route_op, py::arg("logits"), py::arg("k"), py::arg("gating") = "softmax",
            py::arg("bias") = py::none(), py::arg("n_group") = 0, py::arg("n_group_used") = 0,
            py::arg("norm") = false, py::arg("scale") = 0.0f, py::arg("expert_scale") = py::none(),
            py::arg("n_threads") = 1, py::arg("backend") = "cpu",
            "Mixture-of-experts routing of logits (n_tok, n_expert): gating 'softmax' | 'sigmoid' |\n"
            "'softmax_weight', selection bias (n_expert), group-limited top-k (n_group, n_group_used), weights\n"
            "divided by their sum (norm), times scale (0 or 1: none), then each times its expert's entry of\n"
            "expert_scale (n_expert; Gemma 4). Returns (ids (n_tok, k) int32 best first, weights (n_tok, k) float32).");
    ops.def("moe_matmul", &moe_matmul_op, py::arg("w"), py::arg("ggml_type"), py::arg("n_expert"), py::arg("n_rows"),
            py::arg("n_cols"), py::arg("x"), py::arg("ids"), py::arg("bias") = py::none(), py::arg("n_threads") = 0,
            py::arg("level") = "best", py::arg("backend") = "cpu",
            "Expert products: w holds n_expert matrices (n_rows, n_cols) of ggml_type back to back (raw GGUF\n"
            "bytes); ids (n_tok, k) with x (n_tok, n_cols) (every slot reads its token's row) or ids (n_slots,)\n"
            "with x (n_slots, n_cols). Row s of the result = x row · (expert ids[s])ᵀ (+ bias[ids[s]]).\n"
            "level: an ISA level, 'best', or 'ref' (scalar reference, slot by slot).");
}
