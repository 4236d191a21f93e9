// bind_params.cpp — _engine.ModelParams and _engine.ContextParams: the options
// of model::load and of a context (model/model.h, context.h) as Python
// objects, and the one parser of each option. Llama(...) sets its keywords on
// these directly, so a field is parsed here only, as users pass it (an int
// or a numpy integer; None where it means "the default"; a KV cache type by
// name or ggml id; flash_attn as a bool, "auto" or -1/0/1; n_gpu_layers as
// an int, "all" or "auto"; kv_overrides as a dict), and a bad value is an
// error that names the option. The checks that need the model (n_ctx 0, head
// sizes against a quantized cache, ...) are context.h's resolve_params,
// reachable as ContextParams.resolved(model). Model(...) and Context(...)
// take one of these, or keyword arguments with the same names (params_from).
// _engine.kv_cache_types(): the KV cache types ({ggml id: name}, kv_cache.h's
// one list), which Python's memory planner and reports read, and
// _engine.max_sequences (kv_cache.h kMaxSequences).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cctype>
#include <cmath>
#include <regex>
#include <string>

#include "common.h"
#include "ggml_type.h"
#include "kv_cache.h"
#include "overrides.h"
#include "params.h"

namespace py = pybind11;

namespace lp {

namespace {

std::string type_of(const py::handle& v) { return py::str(py::type::of(v).attr("__name__")); }

// An int option: Python ints, IntEnums and numpy integers (not bools or
// floats, which would hide a mistake).
long long int_value(const char* name, const py::handle& v) {
    if (py::isinstance<py::bool_>(v)) throw py::type_error(std::string(name) + " must be an int, got bool");
    PyObject* i = PyNumber_Index(v.ptr());
    if (!i) {
        PyErr_Clear();
        throw py::type_error(std::string(name) + " must be an int, got " + type_of(v));
    }
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (overflow) throw value_error(std::string(name) + " is out of range, got " + std::string(py::repr(v)));
    return x;
}

long long int_at_least(const char* name, const py::handle& v, long long lo) {
    const long long x = int_value(name, v);
    if (x < lo)
        throw value_error(std::string(name) + (lo == 1 ? " must be a positive int" : " must be >= " + std::to_string(lo)) +
                          ", got " + std::to_string(x));
    return x;
}

// A number option: ints and floats (numpy scalars too); not bools or strings.
double number_value(const char* name, const py::handle& v) {
    if (py::isinstance<py::bool_>(v) || py::isinstance<py::str>(v) || !PyNumber_Check(v.ptr()))
        throw py::type_error(std::string(name) + " must be a number, got " + type_of(v));
    const double x = PyFloat_AsDouble(v.ptr());
    if (x == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        throw py::type_error(std::string(name) + " must be a number, got " + type_of(v));
    }
    if (!std::isfinite(x)) throw value_error(std::string(name) + " must be a finite number, got " + std::to_string(x));
    return x;
}

bool truth(const py::handle& v) {
    const int t = PyObject_IsTrue(v.ptr());
    if (t < 0) throw py::error_already_set();
    return t != 0;
}

// Thread counts: None, 0 and -1 mean the physical cores (0 here).
int threads_value(const char* name, const py::handle& v) {
    if (v.is_none()) return 0;
    const long long x = int_value(name, v);
    if (x == 0 || x == -1) return 0;
    if (x < 1) throw value_error(std::string(name) + " must be >= 1, got " + std::to_string(x));
    if (x > 1024) throw value_error(std::string(name) + " must be at most 1024, got " + std::to_string(x));
    return (int)x;
}

// RoPE scaling as llama.cpp numbers it; None: the model's.
int rope_scaling_value(const py::handle& v) {
    if (v.is_none()) return -1;
    const long long x = int_value("rope_scaling_type", v);
    if (x == 3)
        throw not_implemented_error("rope_scaling_type=3 (LongRoPE) is not supported; Phi-3 files with long/short "
                                    "factors use them automatically");
    if (x < -1 || x > 2)
        throw value_error("rope_scaling_type must be -1 (model), 0 (none), 1 (linear) or 2 (yarn), got " +
                          std::to_string(x));
    return (int)x;
}

// yarn_attn_factor / yarn_beta_fast / yarn_beta_slow: > 0, where
// llama-cpp-python's default (1, 32, 1) means "the model's" (stored as 0).
float yarn_value(const char* name, const py::handle& v, double python_default) {
    const double x = number_value(name, v);
    if (!(x > 0)) throw value_error(std::string(name) + " must be > 0, got " + std::to_string(x));
    return x == python_default ? 0.0f : (float)x;
}

// n_gpu_layers: 0 none, N the last N, -1 or "all" all, -2 or "auto" as many as
// fit (resolve_params refuses other negatives; Llama maps llama-cpp-python's
// "any negative means all" before it gets here).
int gpu_layers_value(const py::handle& v) {
    if (py::isinstance<py::str>(v)) {
        std::string s = v.cast<std::string>();
        for (char& c : s) c = (char)std::tolower((unsigned char)c);
        if (s == "all") return -1;
        if (s == "auto") return -2;
        throw value_error("n_gpu_layers must be an int, 'all' or 'auto', got " + std::string(py::repr(v)));
    }
    long long x = 0;
    try {
        x = int_value("n_gpu_layers", v);
    } catch (const py::type_error&) {
        throw py::type_error("n_gpu_layers must be an int, 'all' or 'auto', got " + type_of(v));
    }
    return (int)std::max<long long>(std::min<long long>(x, 1 << 20), -(1 << 20));
}

// split_mode: 0 none, 1 layer, 2 row as llama.cpp numbers them; a context
// refuses 2 (rows are not split: resolve_params), which Llama notes and maps to 1.
int split_mode_value(const py::handle& v) {
    const long long x = int_value("split_mode", v);
    if (x < 0 || x > 2) throw value_error("split_mode must be 0 (none), 1 (layer) or 2 (row), got " + std::to_string(x));
    return (int)x;
}

// tensor_split: at most 16 finite shares >= 0, one per device; None: by free memory.
std::vector<float> tensor_split_value(const py::handle& v) {
    std::vector<float> out;
    if (v.is_none()) return out;
    if (py::isinstance<py::str>(v) || !py::isinstance<py::iterable>(v))
        throw py::type_error("tensor_split must be a sequence of numbers, got " + std::string(py::repr(v)));
    for (const py::handle item : py::reinterpret_borrow<py::iterable>(v)) {
        double x = 0;
        try {
            x = number_value("tensor_split", item);
        } catch (const py::type_error&) {
            throw py::type_error("tensor_split must be a sequence of numbers, got " + std::string(py::repr(v)));
        } catch (const value_error&) {
            x = -1;
        }
        if (x < 0 || out.size() == 16)
            throw value_error("tensor_split must hold at most 16 finite shares >= 0 (one per device), got " +
                              std::string(py::repr(v)));
        out.push_back((float)x);
    }
    return out;
}

// override_tensor: llama.cpp's --override-tensor entries "<regex>=<buffer
// type>", as one comma-separated string (its command-line form), a sequence
// of such strings, or a mapping {regex: buffer type}. The buffer type must
// be CPU (the host): the patterns kept. Each regex must compile.
std::vector<std::string> override_tensor_value(const py::handle& v) {
    std::vector<std::pair<std::string, std::string>> items;
    auto split_one = [&](const std::string& e) {
        const size_t eq = e.rfind('=');
        if (eq == std::string::npos || eq == 0)
            throw value_error("override_tensor entry '" + e + "' is not <tensor name regex>=<buffer type>");
        items.emplace_back(e.substr(0, eq), e.substr(eq + 1));
    };
    if (v.is_none()) return {};
    if (py::isinstance<py::str>(v)) {
        const std::string all = v.cast<std::string>();
        size_t at = 0;
        while (at <= all.size()) {
            const size_t comma = all.find(',', at);
            const std::string e = all.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
            if (!e.empty()) split_one(e);
            if (comma == std::string::npos) break;
            at = comma + 1;
        }
    } else if (py::isinstance<py::dict>(v)) {
        for (auto kv : py::reinterpret_borrow<py::dict>(v)) {
            if (!py::isinstance<py::str>(kv.first) || !py::isinstance<py::str>(kv.second))
                throw py::type_error("override_tensor as a dict maps regex strings to buffer type strings");
            items.emplace_back(kv.first.cast<std::string>(), kv.second.cast<std::string>());
        }
    } else if (py::isinstance<py::iterable>(v)) {
        for (const py::handle e : py::reinterpret_borrow<py::iterable>(v)) {
            if (!py::isinstance<py::str>(e))
                throw py::type_error("override_tensor entries must be strings '<regex>=<buffer type>', got " +
                                     std::string(py::repr(e)));
            split_one(e.cast<std::string>());
        }
    } else {
        throw py::type_error("override_tensor must be a string, a list of strings or a dict, got " + type_of(v));
    }
    std::vector<std::string> out;
    for (const auto& [pat, target] : items) {
        std::string t = target;
        for (char& c : t) c = (char)std::toupper((unsigned char)c);
        if (t != "CPU")
            throw value_error("override_tensor '" + pat + "=" + target + "': the buffer type must be CPU (weights "
                              "kept in host memory); placing tensors on a chosen GPU is not supported");
        try {
            std::regex r(pat, std::regex::ECMAScript);
        } catch (const std::regex_error& e) {
            throw value_error("override_tensor pattern '" + pat + "' is not a valid regular expression: " + e.what());
        }
        out.push_back(pat);
    }
    return out;
}

// A field whose setter parses what Python users pass (parse(value) -> T).
template <class P, class T, class Parse>
void option(py::class_<P>& c, const char* name, T P::*m, Parse parse, const char* doc) {
    c.def_property(name, [m](const P& p) { return p.*m; },
                   [m, parse](P& p, const py::object& v) { p.*m = (T)parse(v); }, doc);
}

// A KV cache type by name ('q8_0', 'Q8_0', ' f16 ', 'GGML_TYPE_Q4_0') or by
// ggml type id (an int, IntEnum or numpy integer); None: f16. Errors name the
// option (type_k / type_v).
ggml_type cache_type(const char* what, const py::object& t) {
    if (t.is_none()) return ggml_type::F16;
    if (py::isinstance<py::str>(t)) {
        std::string s = t.cast<std::string>();
        const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
        s = a == std::string::npos ? "" : s.substr(a, b - a + 1);
        for (char& c : s) c = (char)std::toupper((unsigned char)c);
        if (s.rfind("GGML_TYPE_", 0) == 0) s = s.substr(10);
        for (int v = 0; v < (int)ggml_type::COUNT; ++v)
            if (type_is_valid(v) && kv_cache_type_ok((ggml_type)v) && s == type_name((ggml_type)v)) return (ggml_type)v;
        throw value_error(std::string(what) + "=" + std::string(py::repr(t)) +
                          " is not supported as a KV cache type (supported: " + kv_cache_type_names() + ")");
    }
    int v = -1;
    try {
        if (py::isinstance<py::bool_>(t) || py::isinstance<py::float_>(t)) throw py::cast_error();
        v = t.cast<int>();  // ints, IntEnums, numpy integers
    } catch (const py::cast_error&) {
        throw py::type_error(std::string(what) + " must be a ggml type id or a type name such as 'q8_0', got " +
                             type_of(t));
    }
    if (!type_is_valid(v) || !kv_cache_type_ok((ggml_type)v))
        throw value_error(std::string(what) + "=" + std::to_string(v) +
                          " is not supported as a KV cache type (supported: " + kv_cache_type_names() +
                          "; ggml type ids " + kv_cache_type_ids() + ")");
    return (ggml_type)v;
}

// A KV cache type as the ContextParams fields read back: equal to its ggml
// type id (llama-cpp-python's context_params.type_k is an int) and to its
// name ('q8_0', in any case), usable as an int index and printed as the name.
struct cache_type_value {
    ggml_type t;
};

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
            // Say where: the field, the value, then what the field's parser said.
            throw py::type_error(std::string(cls) + "." + name + ": " + type_of(item.second) + " is not accepted (" +
                                 std::string(py::repr(item.second)) + "): " + std::string(py::str(e.value())));
        }
    }
    return obj.cast<P>();
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

    py::class_<cache_type_value>(m, "CacheType", "A KV cache type: equal to its ggml type id and to its name")
        .def("__int__", [](const cache_type_value& v) { return (int)v.t; })
        .def("__index__", [](const cache_type_value& v) { return (int)v.t; })
        .def("__hash__", [](const cache_type_value& v) { return py::hash(py::int_((int)v.t)); })
        .def("__eq__", [](const cache_type_value& v, const py::object& o) -> py::object {
            if (py::isinstance<cache_type_value>(o)) return py::bool_(o.cast<cache_type_value>().t == v.t);
            if (py::isinstance<py::str>(o) || (!py::isinstance<py::bool_>(o) && PyIndex_Check(o.ptr()))) {
                try {
                    return py::bool_(cache_type("type", o) == v.t);
                } catch (const std::exception&) {
                    return py::bool_(false);  // not a cache type at all: unequal
                }
            }
            return py::reinterpret_borrow<py::object>(Py_NotImplemented);
        })
        .def_property_readonly("name", [](const cache_type_value& v) { return lower_type_name(v.t); })
        .def("__str__", [](const cache_type_value& v) { return lower_type_name(v.t); })
        .def("__repr__", [](const cache_type_value& v) { return "'" + lower_type_name(v.t) + "'"; });

    py::class_<model_params> mp(m, "ModelParams", "Options of Model(path, params): model/model.h's model_params.");
    mp.def(py::init([](const py::kwargs& kw) { return model_params_from(py::none(), kw); }),
           "ModelParams(**options): the defaults with the options given")
        .def_property("kv_overrides", [](const model_params& p) { return overrides_to_python(p.kv_overrides); },
                      [](model_params& p, const py::object& v) { p.kv_overrides = overrides_from_python(v); },
                      "metadata values that replace the file's: {key: bool | int | float | str}");
    option(mp, "vocab_only", &model_params::vocab_only, truth, "metadata and vocabulary only, no weights");
    option(mp, "use_mmap", &model_params::use_mmap, truth,
           "map the file (False: read it into anonymous memory up front)");
    option(mp, "huge_pages", &model_params::huge_pages, truth,
           "map the file in 2 MiB pages where the kernel can (Linux transparent huge pages); with "
           "use_mmap=False, keep such a mapping, read in, instead of a copy when the kernel gave it 2 MiB pages");

    py::class_<context_params> cp(m, "ContextParams",
                                  "Options of Context(model, params): context.h's context_params. Zero / -1 "
                                  "values mean 'the model's' or 'auto'; resolved(model) fills them in.");
    cp.def(py::init([](const py::kwargs& kw) { return context_params_from(py::none(), kw); }),
           "ContextParams(**options): the defaults with the options given")
        .def("resolved", [](const context_params& p, const std::shared_ptr<model>& mdl) {
                 if (!mdl) throw value_error("resolved() needs a Model");
                 return resolve_params(*mdl, p);
             }, py::arg("model"), "these options as a context on model would run them (ValueError if they cannot)")
        .def_property("type_k", [](const context_params& p) { return cache_type_value{p.type_k}; },
                      [](context_params& p, const py::object& v) { p.type_k = cache_type("type_k", v); },
                      "key cache type: 'f16', 'q8_0', ... or a ggml type id (None: f16)")
        .def_property("type_v", [](const context_params& p) { return cache_type_value{p.type_v}; },
                      [](context_params& p, const py::object& v) { p.type_v = cache_type("type_v", v); },
                      "value cache type: 'f16', 'q8_0', ... or a ggml type id (None: f16)")
        .def_property("flash_attn", [](const context_params& p) { return p.flash_attn; },
                      [](context_params& p, const py::object& v) { p.flash_attn = flash_attn_mode(v); },
                      "-1 auto, 0 the explicit path, 1 flash (set as True / False / 'auto' / None / -1 / 0 / 1)")
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
    auto at_least = [](const char* name, long long lo) {
        return [name, lo](const py::object& v) { return int_at_least(name, v, lo); };
    };
    auto threads = [](const char* name) { return [name](const py::object& v) { return threads_value(name, v); }; };
    auto number = [](const char* name) { return [name](const py::object& v) { return number_value(name, v); }; };
    auto yarn = [](const char* name, double python_default) {
        return [name, python_default](const py::object& v) { return yarn_value(name, v, python_default); };
    };
    option(cp, "n_ctx", &context_params::n_ctx, at_least("n_ctx", 0), "KV cells (0: the model's training context)");
    option(cp, "n_batch", &context_params::n_batch, at_least("n_batch", 0), "most rows one decode() accepts (0: 512)");
    option(cp, "n_ubatch", &context_params::n_ubatch, at_least("n_ubatch", 0), "rows evaluated at once (0: 512)");
    option(cp, "n_seq_max", &context_params::n_seq_max, at_least("n_seq_max", 1), "sequence ids are below this");
    option(cp, "n_threads", &context_params::n_threads, threads("n_threads"),
           "threads for single-row decodes (None, 0 or -1: physical cores)");
    option(cp, "n_threads_batch", &context_params::n_threads_batch, threads("n_threads_batch"),
           "threads for larger batches (None, 0 or -1: physical cores)");
    option(cp, "embeddings", &context_params::embeddings, truth, "keep final hidden states of output rows");
    option(cp, "pooling_type", &context_params::pooling, at_least("pooling_type", -1),
           "with embeddings: -1 the model's, 0 none, 1 mean, 2 cls, 3 last");
    option(cp, "rope_freq_base", &context_params::rope_freq_base, number("rope_freq_base"), "0: from the model");
    option(cp, "rope_freq_scale", &context_params::rope_freq_scale, number("rope_freq_scale"), "0: from the model");
    option(cp, "rope_scaling_type", &context_params::rope_scaling_type, rope_scaling_value,
           "-1 or None the model's, 0 none, 1 linear, 2 YaRN");
    option(cp, "yarn_ext_factor", &context_params::yarn_ext_factor,
           [](const py::object& v) { const double x = number_value("yarn_ext_factor", v); return x < 0 ? -1.0 : x; },
           "< 0: 1 with YaRN, else 0");
    option(cp, "yarn_attn_factor", &context_params::yarn_attn_factor, yarn("yarn_attn_factor", 1.0),
           "0 or 1: the model's");
    option(cp, "yarn_beta_fast", &context_params::yarn_beta_fast, yarn("yarn_beta_fast", 32.0),
           "0 or 32: the model's (32)");
    option(cp, "yarn_beta_slow", &context_params::yarn_beta_slow, yarn("yarn_beta_slow", 1.0),
           "0 or 1: the model's (1)");
    option(cp, "yarn_orig_ctx", &context_params::yarn_orig_ctx, at_least("yarn_orig_ctx", 0),
           "0: the model's original context length");
    option(cp, "swa_full", &context_params::swa_full,
           [](const py::object& v) {
               if (v.is_none()) return false;
               if (!py::isinstance<py::bool_>(v)) throw py::type_error("swa_full must be a bool or None, got " + type_of(v));
               return v.cast<bool>();
           },
           "full-size caches for sliding-window layers (None: window-sized)");
    option(cp, "kv_rotation", &context_params::kv_rotation, truth, "Hadamard rotation of a quantized cache");
    option(cp, "n_state_checkpoints", &context_params::n_state_checkpoints, at_least("n_state_checkpoints", 0),
           "recurrent-state copies kept per sequence (hybrid models: suffix removal without re-evaluation)");
    option(cp, "n_gpu_layers", &context_params::n_gpu_layers, gpu_layers_value,
           "layers on the GPU as llama.cpp counts them: 0 none, N the last N, > n_layer the output too, -1 or "
           "'all': all, -2 or 'auto': as many as fit");
    option(cp, "main_gpu", &context_params::main_gpu, at_least("main_gpu", 0), "the device of the GPU layers");
    option(cp, "split_mode", &context_params::split_mode, split_mode_value,
           "0: every GPU layer on main_gpu; 1: layers split across the devices (tensor_split); 2 (row) is "
           "refused by a context");
    option(cp, "tensor_split", &context_params::tensor_split, tensor_split_value,
           "each device's share of the GPU layers (None, empty or all zero: in proportion to free memory)");
    option(cp, "offload_kqv", &context_params::offload_kqv, truth,
           "False: the KV cache and the attention over it stay on the CPU while layers run on the GPU");
    option(cp, "override_tensor", &context_params::override_tensor, override_tensor_value,
           "weights kept in host memory (their products on the CPU) although their layer is on a GPU: llama.cpp's "
           "--override-tensor '<regex>=CPU' entries (a comma-separated string, a list, or a dict {regex: 'CPU'}); "
           "reads back as the list of regexes");
    option(cp, "n_cpu_moe", &context_params::n_cpu_moe, at_least("n_cpu_moe", 0),
           "keep the expert tensors of the first n_cpu_moe layers in host memory (llama.cpp's --n-cpu-moe)");
}
