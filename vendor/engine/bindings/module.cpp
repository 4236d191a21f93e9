// module.cpp — the pybind11 module llamapy._engine: exceptions, system
// information and the registration of each binding area (bind_*.cpp).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "common.h"
#include "context.h"
#include "cpu/probes.h"
#include "cpu/features.h"
#include "cpu/threadpool.h"
#include "ggml_type.h"
#include "model/model.h"
#include "placement.h"
#include "py_common.h"

#ifndef LLAMAPY_VERSION
#define LLAMAPY_VERSION "0.0.0"
#endif

namespace py = pybind11;

void bind_gguf(py::module_& m);
void bind_quants(py::module_& m);
void bind_sampling(py::module_& m);
void bind_grammar(py::module_& m);
void bind_vocab(py::module_& m);
void bind_params(py::module_& m);
void bind_model(py::module_& m);
void bind_backend(py::module_& m);
void bind_ops(py::module_& m);
void bind_moe(py::module_& m);
void bind_vision(py::module_& m);
void bind_logprobs(py::module_& m);

namespace {

py::dict system_info() {
    const lp::cpu_features& c = lp::cpu();
    py::dict d;
    d["version"] = LLAMAPY_VERSION;
    d["backends"] = backend_name_tuple();
    d["devices"] = gpu_device_list();
    py::list compiled, supported;
    for (lp::isa level : lp::compiled_isas()) {
        compiled.append(lp::isa_name(level));
        if (lp::isa_at_least(lp::cpu_best_isa(), level)) supported.append(lp::isa_name(level));
    }
    d["compiled_isas"] = compiled;   // kernel levels built into this module
    d["cpu_isas"] = supported;       // of those, the ones this CPU can run
    d["active_isa"] = lp::isa_name(lp::best_isa());  // cpu_isas' best, or lower under LLAMAPY_ISA
    d["isa_cap"] = lp::isa_cap_name();               // the LLAMAPY_ISA cap, "" when unset
#if defined(LP_BUILD_NATIVE)
    d["build"] = "native";
#else
    d["build"] = "portable";
#endif
    py::dict f;
    f["avx"] = c.avx; f["avx2"] = c.avx2; f["fma"] = c.fma; f["f16c"] = c.f16c; f["bmi2"] = c.bmi2;
    f["avx512f"] = c.avx512f; f["avx512bw"] = c.avx512bw; f["avx512vl"] = c.avx512vl;
    f["avx512dq"] = c.avx512dq; f["avx512_vnni"] = c.avx512vnni; f["avx512_bf16"] = c.avx512bf16;
    f["avx_vnni"] = c.avx_vnni; f["neon"] = c.neon; f["dotprod"] = c.dotprod;
    d["cpu_features"] = f;
    d["n_physical_cores"] = c.n_physical_cores;
    d["n_logical_cpus"] = c.n_logical_cpus;
    d["default_n_threads"] = lp::default_n_threads();
    return d;
}

}  // namespace

PYBIND11_MODULE(_engine, m) {
    m.doc() = "llamapy native engine";
    py::register_exception<lp::gguf_error>(m, "GGUFError", PyExc_ValueError);
    // what a backend or model does not support yet: NotImplementedError, with its message
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const lp::not_implemented_error& e) {
            PyErr_SetString(PyExc_NotImplementedError, e.what());
        }
    });
    // lp::value_error derives from std::invalid_argument, which pybind11
    // already translates to ValueError.
    m.def("isa_cap_error", []() { return lp::isa_cap_error(); },
          "Why LLAMAPY_ISA's value was refused, or an empty string.");
    m.def("planned_part_devices", [](int64_t n_layer, int n_gpu_layers, int main_gpu, int split_mode,
                                     const std::vector<float>& tensor_split) {
              lp::context_params p;
              p.n_gpu_layers = n_gpu_layers;
              p.main_gpu = main_gpu;
              p.split_mode = split_mode;
              p.tensor_split = tensor_split;
              py::list out;
              for (const lp::device& d : lp::planned_part_devices(n_layer, p)) out.append(d.name());
              return out;
          }, py::arg("n_layer"), py::arg("n_gpu_layers"), py::arg("main_gpu") = 0, py::arg("split_mode") = 1,
          py::arg("tensor_split") = std::vector<float>{},
          "Device names ('cpu', 'gpu0', ...) of the parts input, blk.0 .. blk.<n_layer-1>, output that a context "
          "would place (context.h planned_part_devices).");
    m.def("system_info", &system_info, "Version, compiled backends and kernels, CPU features, default threads.");
    m.def("read_bandwidth", [](size_t nbytes, int n_reps, int n_threads) {
        if (n_threads < 1) n_threads = lp::default_n_threads();
        lp::thread_pool pool(n_threads);
        py::gil_scoped_release nogil;
        return lp::measure_read_bandwidth(nbytes, n_reps, pool);
    }, py::arg("nbytes") = (size_t)1 << 30, py::arg("n_reps") = 5, py::arg("n_threads") = 0,
       "Median memory read bandwidth in GB/s over n_reps passes over an nbytes buffer.");
    m.def("peak_gflops", [](const std::string& kind, int n_threads) {
        if (n_threads < 1) n_threads = lp::default_n_threads();
        lp::thread_pool pool(n_threads);
        py::gil_scoped_release nogil;
        return lp::measure_peak_gflops(kind.c_str(), pool);
    }, py::arg("kind") = "f32_fma", py::arg("n_threads") = 0,
       "Peak GFLOP/s of vector FMA ('f32_fma') or int8 dot products ('i8_dot'), all threads.");
    bind_gguf(m);
    bind_quants(m);
    bind_sampling(m);
    bind_grammar(m);
    bind_vocab(m);
    bind_params(m);
    bind_model(m);
    bind_backend(m);
    bind_ops(m);
    bind_moe(m);
    bind_vision(m);
    bind_logprobs(m);
}
