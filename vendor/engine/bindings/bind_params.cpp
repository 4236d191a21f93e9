// bind_params.cpp — _engine.ModelParams and _engine.ContextParams: the options
// of model::load and of a context (model/model.h, context.h) as Python
// objects. Each field is typed and checked as it is set (a KV cache type by
// name or ggml id, flash_attn as a bool, "auto" or -1/0/1, kv_overrides as a
// dict); the checks that need the model (n_ctx 0, head sizes against a
// quantized cache, ...) are context.h's resolve_params, reachable as
// ContextParams.resolved(model). Model(...) and Context(...) take one of
// these, or keyword arguments with the same names (params_from below).
// _engine.kv_cache_types(): the KV cache types ({ggml id: name}, kv_cache.h's
// one list), which Python's option parsing and memory planner read, and
// _engine.max_sequences (kv_cache.h kMaxSequences).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cctype>
#include <string>

#include "common.h"
#include "ggml_type.h"
#include "kv_cache.h"
#include "overrides.h"
#include "params.h"

namespace py = pybind11;

namespace lp {

namespace {

ggml_type cache_type(const py::object& t) {
    if (py::isinstance<py::str>(t)) {
        std::string s = t.cast<std::string>();
        for (char& c : s) c = (char)std::toupper((unsigned char)c);
        for (int v = 0; v < (int)ggml_type::COUNT; ++v)
            if (type_is_valid(v) && kv_cache_type_ok((ggml_type)v) && s == type_name((ggml_type)v)) return (ggml_type)v;
        throw value_error("KV cache type '" + t.cast<std::string>() + "' is not supported (" + kv_cache_type_names() + ")");
    }
    int v = -1;
    try {
        if (py::isinstance<py::bool_>(t) || py::isinstance<py::float_>(t)) throw py::cast_error();
        v = t.cast<int>();  // ints, IntEnums, numpy integers
    } catch (const py::cast_error&) {
        throw py::type_error("a KV cache type is a name ('f16', 'q8_0', ...) or a ggml type id, not " +
                             std::string(py::str(py::type::of(t).attr("__name__"))));
    }
    if (!type_is_valid(v) || !kv_cache_type_ok((ggml_type)v))
        throw value_error("KV cache type " + std::to_string(v) + " is not supported (" + kv_cache_type_names() +
                          ": ggml type ids " + kv_cache_type_ids() + ")");
    return (ggml_type)v;
}

std::string lower_type_name(ggml_type t) {
    std::string s = type_name(t);
    for (char& c : s) c = (char)std::tolower((unsigned char)c);
    return s;
}

// flash_attn as llama-cpp-python users pass it: a bool, "auto", or one of
// llama_cpp's LLAMA_FLASH_ATTN_TYPE_* values (-1 auto, 0 disabled, 1 enabled).
int flash_attn_mode(const py::object& v) {
    if (v.is_none()) return -1;
    if (py::isinstance<py::bool_>(v)) return v.cast<bool>() ? 1 : 0;
    if (py::isinstance<py::str>(v)) {
        std::string s = v.cast<std::string>();
        for (char& c : s) c = (char)std::tolower((unsigned char)c);
        if (s == "auto") return -1;
    } else if (py::isinstance<py::int_>(v)) {
        const long long i = v.cast<long long>();
        if (i >= -1 && i <= 1) return (int)i;
    }
    throw value_error("flash_attn must be True, False or 'auto' (or LLAMA_FLASH_ATTN_TYPE_* -1/0/1), got " +
                      std::string(py::repr(v)));
}

py::dict overrides_to_python(const std::vector<gguf_override>& ov) {
    py::dict d;
    for (const gguf_override& o : ov) {
        switch (o.k) {
            case gguf_override::kind::boolean: d[py::str(o.key)] = py::bool_(o.b); break;
            case gguf_override::kind::integer: d[py::str(o.key)] = py::int_(o.i); break;
            case gguf_override::kind::floating: d[py::str(o.key)] = py::float_(o.f); break;
            case gguf_override::kind::string: d[py::str(o.key)] = py::str(o.s); break;
        }
    }
    return d;
}

// A copy of params (or the defaults) with kw set attribute by attribute, so
// each field's own setter checks its value.
template <class P>
P params_from(const py::object& params, const py::kwargs& kw, const char* cls) {
    py::object obj = params.is_none() ? py::cast(P{}) : py::cast(params.cast<P>());
    for (auto item : kw) {
        const std::string name = item.first.cast<std::string>();
        if (name.empty() || name[0] == '_' || !py::hasattr(obj, name.c_str()) ||
            PyCallable_Check(obj.attr(name.c_str()).ptr()))
            throw py::type_error(std::string(cls) + " has no option '" + name + "'");
        try {
            obj.attr(name.c_str()) = item.second;
        } catch (py::error_already_set& e) {
            if (!e.matches(PyExc_TypeError)) throw;
            // pybind11's message lists overloads; name the option instead.
            throw py::type_error(std::string(cls) + "." + name + ": " +
                                 std::string(py::str(py::type::of(item.second).attr("__name__"))) +
                                 " is not accepted (" + std::string(py::repr(item.second)) + ")");
        }
    }
    return obj.cast<P>();
}

template <class P, class T>
void field(py::class_<P>& c, const char* name, T P::*m, const char* doc) {
    c.def_readwrite(name, m, doc);
}

}  // namespace

model_params model_params_from(const py::object& params, const py::kwargs& kw) {
    return params_from<model_params>(params, kw, "ModelParams");
}

context_params context_params_from(const py::object& params, const py::kwargs& kw) {
    return params_from<context_params>(params, kw, "ContextParams");
}

}  // namespace lp

using namespace lp;

void bind_params(py::module_& m) {
    m.def("kv_cache_types", []() {
        py::dict out;  // in kv_cache.h's order (messages list them so)
        for (ggml_type t : kKvCacheTypes) out[py::int_((int)t)] = type_name(t);
        return out;
    }, "The KV cache element types, {ggml type id: name}, in the engine's order.");
    m.attr("max_sequences") = kMaxSequences;  // sequence ids a context takes are below it (n_seq_max <= it)
    py::class_<model_params> mp(m, "ModelParams", "Options of Model(path, params): model/model.h's model_params.");
    mp.def(py::init([](const py::kwargs& kw) { return model_params_from(py::none(), kw); }),
           "ModelParams(**options): the defaults with the options given")
        .def_property("kv_overrides", [](const model_params& p) { return overrides_to_python(p.kv_overrides); },
                      [](model_params& p, const py::object& v) { p.kv_overrides = overrides_from_python(v); },
                      "metadata values that replace the file's: {key: bool | int | float | str}");
    field(mp, "vocab_only", &model_params::vocab_only, "metadata and vocabulary only, no weights");
    field(mp, "use_mmap", &model_params::use_mmap, "map the file (False: read it into anonymous memory up front)");

    py::class_<context_params> cp(m, "ContextParams",
                                  "Options of Context(model, params): context.h's context_params. Zero / -1 "
                                  "values mean 'the model's' or 'auto'; resolved(model) fills them in.");
    cp.def(py::init([](const py::kwargs& kw) { return context_params_from(py::none(), kw); }),
           "ContextParams(**options): the defaults with the options given")
        .def("resolved", [](const context_params& p, const std::shared_ptr<model>& mdl) {
                 if (!mdl) throw value_error("resolved() needs a Model");
                 return resolve_params(*mdl, p);
             }, py::arg("model"), "these options as a context on model would run them (ValueError if they cannot)")
        .def_property("type_k", [](const context_params& p) { return lower_type_name(p.type_k); },
                      [](context_params& p, const py::object& v) { p.type_k = cache_type(v); },
                      "key cache type: 'f16', 'q8_0', ... or a ggml type id")
        .def_property("type_v", [](const context_params& p) { return lower_type_name(p.type_v); },
                      [](context_params& p, const py::object& v) { p.type_v = cache_type(v); },
                      "value cache type: 'f16', 'q8_0', ... or a ggml type id")
        .def_property("flash_attn", [](const context_params& p) { return p.flash_attn; },
                      [](context_params& p, const py::object& v) { p.flash_attn = flash_attn_mode(v); },
                      "-1 auto, 0 the explicit path, 1 flash (set as True / False / 'auto' / -1 / 0 / 1)")
        .def_property("pooling_type", [](const context_params& p) { return p.pooling; },
                      [](context_params& p, int v) { p.pooling = v; },
                      "with embeddings: -1 the model's, 0 none, 1 mean, 2 cls, 3 last")
        .def("__repr__", [](const py::object& self) {
            std::string s = "ContextParams(";
            bool first = true;
            for (const char* k : {"n_ctx", "n_batch", "n_ubatch", "n_seq_max", "n_threads", "n_threads_batch", "type_k",
                                  "type_v", "flash_attn", "embeddings", "pooling_type"}) {
                s += (first ? "" : ", ") + std::string(k) + "=" + std::string(py::repr(self.attr(k)));
                first = false;
            }
            return s + ", ...)";
        });
    field(cp, "n_ctx", &context_params::n_ctx, "KV cells (0: the model's training context)");
    field(cp, "n_batch", &context_params::n_batch, "most rows one decode() accepts");
    field(cp, "n_ubatch", &context_params::n_ubatch, "rows evaluated at once");
    field(cp, "n_seq_max", &context_params::n_seq_max, "sequence ids are below this");
    field(cp, "n_threads", &context_params::n_threads, "threads for single-row decodes (0: physical cores)");
    field(cp, "n_threads_batch", &context_params::n_threads_batch, "threads for larger batches (0: physical cores)");
    field(cp, "embeddings", &context_params::embeddings, "keep final hidden states of output rows");
    field(cp, "rope_freq_base", &context_params::rope_freq_base, "0: from the model");
    field(cp, "rope_freq_scale", &context_params::rope_freq_scale, "0: from the model");
    field(cp, "rope_scaling_type", &context_params::rope_scaling_type, "-1 the model's, 0 none, 1 linear, 2 YaRN");
    field(cp, "yarn_ext_factor", &context_params::yarn_ext_factor, "< 0: 1 with YaRN, else 0");
    field(cp, "yarn_attn_factor", &context_params::yarn_attn_factor, "0: the model's");
    field(cp, "yarn_beta_fast", &context_params::yarn_beta_fast, "0: the model's (32)");
    field(cp, "yarn_beta_slow", &context_params::yarn_beta_slow, "0: the model's (1)");
    field(cp, "yarn_orig_ctx", &context_params::yarn_orig_ctx, "0: the model's original context length");
    field(cp, "swa_full", &context_params::swa_full, "full-size caches for sliding-window layers");
    field(cp, "kv_rotation", &context_params::kv_rotation, "Hadamard rotation of a quantized cache");
    field(cp, "n_gpu_layers", &context_params::n_gpu_layers,
          "layers on the GPU as llama.cpp counts them: 0 none, N the last N, > n_layer the output too, -1 all, "
          "-2 as many as fit (resolved to a count)");
    field(cp, "main_gpu", &context_params::main_gpu, "the Vulkan device of the GPU layers");
    field(cp, "split_mode", &context_params::split_mode,
          "0: every GPU layer on main_gpu; 1: layers split across the Vulkan devices (tensor_split)");
    field(cp, "tensor_split", &context_params::tensor_split,
          "each Vulkan device's share of the GPU layers (empty or all zero: in proportion to free memory)");
    field(cp, "offload_kqv", &context_params::offload_kqv,
          "False: the KV cache and the attention over it stay on the CPU while layers run on the GPU");
}
