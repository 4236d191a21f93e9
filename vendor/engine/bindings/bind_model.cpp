// bind_model.cpp — Python access to models and inference contexts:
//   _engine.Model     a loaded GGUF model (hyperparameters, sizes)
//   _engine.Context   KV cache + decode(batch) + outputs + state
//   _engine.architectures()  the architectures and their facts (archs.def)
// Arguments are validated here or in the engine (ValueError / TypeError);
// an unsupported architecture or tensor type raises NotImplementedError.
// decode() releases the GIL. Logits come back as numpy views into the
// context's output storage, valid until the next decode.
// Not here: tokenization, sampling, the Llama class (llamapy/llama.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "context.h"
#include "backend/cpu_backend.h"
#include "cpu/moe.h"
#include "gguf/gguf.h"
#include "lora.h"
#include "model/model.h"
#include "overrides.h"
#include "params.h"
#include "placement.h"
#include "py_common.h"

namespace py = pybind11;
using namespace lp;

namespace {

std::shared_ptr<model> load_model(const std::string& path, const py::object& params, const py::kwargs& kw) {
    const model_params p = model_params_from(params, kw);
    std::shared_ptr<model> m;
    std::optional<gguf_os_error> os_error;
    {
        py::gil_scoped_release nogil;
        try {
            m = model::load(path, p);
        } catch (const gguf_os_error& e) {
            os_error = e;  // raised with the GIL held: the file it names (a split model's missing part, say)
        }
    }
    if (os_error) raise_os_error(*os_error);
    return m;
}

// A numpy array of integers (any int dtype, or a list of ints) as int32,
// checked to fit. Floats, strings and nested sequences are refused.
std::vector<int32_t> int_vector(const py::handle& obj, const char* what) {
    py::module_ np = py::module_::import("numpy");
    py::array a = np.attr("asarray")(obj);
    if (a.ndim() != 1) throw value_error(std::string(what) + " must be a 1-D sequence of integers");
    const char kind = a.dtype().kind();
    if (a.size() > 0 && kind != 'i' && kind != 'u' && kind != 'b')
        throw py::type_error(std::string(what) + " must hold integers, not " + std::string(py::str(a.dtype())));
    py::array_t<int64_t, py::array::c_style | py::array::forcecast> v(a);
    std::vector<int32_t> out((size_t)v.size());
    const int64_t* p = v.data();
    for (size_t i = 0; i < out.size(); ++i) {
        if (p[i] < INT32_MIN || p[i] > INT32_MAX)
            throw value_error(std::string(what) + " value " + std::to_string(p[i]) + " at index " + std::to_string(i) +
                              " does not fit in 32 bits");
        out[i] = (int32_t)p[i];
    }
    return out;
}

// A float32 view of `rows` rows of `cols` floats, keeping the storage alive.
py::array float_view(const std::shared_ptr<std::vector<float>>& store, const float* p, int64_t rows, int64_t cols,
                     bool two_d) {
    auto* holder = new std::shared_ptr<std::vector<float>>(store);
    py::capsule base(holder, [](void* h) { delete static_cast<std::shared_ptr<std::vector<float>>*>(h); });
    if (!two_d) return py::array(py::dtype::of<float>(), {(py::ssize_t)cols}, {(py::ssize_t)sizeof(float)}, p, base);
    return py::array(py::dtype::of<float>(), {(py::ssize_t)rows, (py::ssize_t)cols},
                     {(py::ssize_t)(cols * sizeof(float)), (py::ssize_t)sizeof(float)}, p, base);
}

void decode(context& c, const py::object& tokens, const py::object& embd, const py::object& pos,
            const py::object& seq_ids, const py::object& logits, bool causal) {
    const hparams& hp = c.mdl().hp();
    batch_view b;
    std::vector<int32_t> tok;
    py::array_t<float, py::array::c_style | py::array::forcecast> emb;
    if (!tokens.is_none() && !embd.is_none()) throw value_error("decode: give tokens or embd, not both");
    if (!tokens.is_none()) {
        tok = int_vector(tokens, "tokens");
        b.n = (int64_t)tok.size();
        b.tokens = tok.data();
    } else if (!embd.is_none()) {
        emb = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(embd);
        if (!emb) throw py::type_error("decode: embd must be a float32 array of shape (n, n_embd)");
        if (emb.ndim() != 2 || emb.shape(1) != hp.n_embd)
            throw value_error("decode: embd must have shape (n, " + std::to_string(hp.n_embd) + ")");
        b.n = (int64_t)emb.shape(0);
        b.embd = emb.data();
    } else {
        throw value_error("decode: give tokens or embd");
    }
    // Positions: (n,) one per row; M-RoPE models also take (4, n), the
    // components section-major (context.h), and expand (n,) as llama.cpp
    // expands a token batch's positions: all four components equal.
    const int npe = hp.n_pos_per_embd();
    py::array pa = py::module_::import("numpy").attr("asarray")(pos);
    std::vector<int32_t> ps;
    if (pa.ndim() == 2) {
        if (npe != 4)
            throw value_error("decode: pos of shape (k, n) is only for M-RoPE models (n_pos_per_embd 4); this " +
                              hp.arch + " model takes one position per row, shape (n,)");
        if (pa.shape(0) != 4 || pa.shape(1) != b.n)
            throw value_error("decode: M-RoPE pos must have shape (n,) or (4, " + std::to_string(b.n) + "), got (" +
                              std::to_string(pa.shape(0)) + ", " + std::to_string(pa.shape(1)) + ")");
        ps = int_vector(py::module_::import("numpy").attr("ravel")(pa), "pos");
    } else if (pa.ndim() == 1) {
        ps = int_vector(pa, "pos");
        if ((int64_t)ps.size() != b.n)
            throw value_error("decode: pos has " + std::to_string(ps.size()) + " entries for " + std::to_string(b.n) +
                              " rows");
        if (npe == 4) {
            ps.resize((size_t)(4 * b.n));
            for (int k = 1; k < 4; ++k) std::copy(ps.begin(), ps.begin() + b.n, ps.begin() + k * b.n);
        }
    } else {
        throw value_error(std::string("decode: pos must have shape (n,)") + (npe == 4 ? " or (4, n)" : "") + ", got " +
                          std::to_string(pa.ndim()) + " dimensions");
    }
    b.pos = ps.data();
    b.causal = causal;

    // Sequence ids: one int per row, or one list of ints per row.
    std::vector<int32_t> ids, begin;
    py::sequence rows = py::module_::import("builtins").attr("list")(seq_ids);
    bool nested = false;
    for (py::handle r : rows) nested = nested || py::isinstance<py::sequence>(r) || py::isinstance<py::array>(r);
    if ((int64_t)rows.size() != b.n)
        throw value_error("decode: seq_ids has " + std::to_string(rows.size()) + " entries for " + std::to_string(b.n) +
                          " rows");
    if (nested) {
        begin.push_back(0);
        for (py::handle r : rows) {
            std::vector<int32_t> v = int_vector(r, "seq_ids row");
            ids.insert(ids.end(), v.begin(), v.end());
            begin.push_back((int32_t)ids.size());
        }
        b.seq_begin = begin.data();
    } else {
        ids = int_vector(seq_ids, "seq_ids");
    }
    b.seq_ids = ids.data();

    std::vector<uint8_t> want;
    if (!logits.is_none()) {
        py::module_ np = py::module_::import("numpy");
        py::array a = np.attr("asarray")(logits);
        if (a.ndim() != 1 || (int64_t)a.size() != b.n)
            throw value_error("decode: logits must be a 1-D array of " + std::to_string(b.n) + " flags");
        py::array_t<uint8_t, py::array::c_style | py::array::forcecast> f(np.attr("not_equal")(a, 0));
        want.assign(f.data(), f.data() + f.size());
        b.want = want.data();
    }
    py::gil_scoped_release nogil;
    c.decode(b);
}

// The tensor-dump hook for Python: fn(name, array) with a (rows, cols)
// float32 copy of the intermediate (the engine's buffer is reused).
struct py_tensor_callback {
    py::function fn;
    void operator()(const tensor_dump& t) const {
        py::gil_scoped_acquire gil;
        py::array_t<float> a({(py::ssize_t)t.n_rows, (py::ssize_t)t.n_cols});
        float* out = a.mutable_data();
        for (int64_t r = 0; r < t.n_rows; ++r)
            std::memcpy(out + r * t.n_cols, t.data + r * t.stride, sizeof(float) * (size_t)t.n_cols);
        fn(py::str(t.name), a);
    }
};

void set_tensor_callback(context& c, const py::object& fn) {
    tensor_callback cb;
    if (!fn.is_none()) {
        if (!PyCallable_Check(fn.ptr())) throw py::type_error("set_tensor_callback: fn must be callable or None");
        cb = py_tensor_callback{py::reinterpret_borrow<py::function>(fn)};
    }
    tensor_callback old;
    {
        // A decode in another thread holds the context and may be waiting
        // for the GIL inside the old callback.
        py::gil_scoped_release nogil;
        old = c.set_tensor_callback(std::move(cb));
    }
    // old (and the Python function it holds) is released here, with the GIL.
}

py::list placement_parts(const placement_plan& plan) {
    py::list out;
    for (const placement_plan::part& p : plan.parts) {
        py::dict d;
        d["name"] = p.name;
        d["layer"] = p.layer;
        d["device"] = p.weights.name();
        d["kv_device"] = p.layer >= 0 ? py::object(py::str(p.kv.name())) : py::object(py::none());
        d["weight_bytes"] = p.weight_bytes;
        d["kv_bytes"] = p.kv_bytes;
        out.append(d);
    }
    return out;
}

py::list device_memory(const placement_plan& plan) {
    py::list out;
    for (const placement_plan::device_total& t : plan.totals()) {
        py::dict d;
        d["device"] = t.dev.name();
        d["weight_bytes"] = t.weight_bytes;
        d["kv_bytes"] = t.kv_bytes;
        d["activation_bytes"] = t.activation_bytes;
        d["total_bytes"] = t.total();
        out.append(d);
    }
    return out;
}

}  // namespace

void bind_model(py::module_& m) {
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const not_implemented_error& e) {
            PyErr_SetString(PyExc_NotImplementedError, e.what());
        }
    });

    py::class_<model, std::shared_ptr<model>>(m, "Model", "A GGUF model loaded for inference.")
        .def(py::init(&load_model), py::arg("path"), py::arg("params") = py::none(),
             "Model(path, params=None, **options): params a ModelParams; options set its fields by name "
             "(vocab_only, use_mmap, kv_overrides)")
        .def_property_readonly("unread_overrides", [](const model& x) { return x.file().unread_overrides(); },
                               "kv_overrides keys the loader never read (they had no effect)")
        .def_property_readonly("path", [](const model& x) { return x.file().path(); })
        .def_property_readonly("weights_in_memory", [](const model& x) { return x.file().in_memory(); },
                               "the file was read into memory (use_mmap=False), not mapped")
        .def_property_readonly("weights_placement", [](const model& x) {
                                   return std::string(x.file().in_memory()     ? "read into memory"
                                                      : x.file().huge_mapped() ? "mapped from the file in 2 MiB pages"
                                                                               : "mapped from the file");
                               }, "where the weights are: read into memory, mapped from the file in 2 MiB pages "
                                  "(read in), or mapped from the file (read as used)")
        .def_property_readonly("arch", [](const model& x) { return x.hp().arch; })
        .def_property_readonly("name", [](const model& x) { return x.hp().name; })
        .def_property_readonly("n_vocab", [](const model& x) { return x.hp().n_vocab; })
        .def_property_readonly("n_embd", [](const model& x) { return x.hp().n_embd; })
        .def_property_readonly("n_layer", [](const model& x) { return x.hp().n_layer; })
        .def_property_readonly("n_head", [](const model& x) { return x.hp().n_head; })
        .def_property_readonly("n_head_kv", [](const model& x) { return x.hp().n_head_kv; })
        .def_property_readonly("n_ff", [](const model& x) { return x.hp().n_ff; })
        .def_property_readonly("n_ctx_train", [](const model& x) { return x.hp().n_ctx_train; })
        .def_property_readonly("head_dim", [](const model& x) { return x.hp().head_dim_k; })
        .def_property_readonly("n_swa", [](const model& x) { return x.hp().n_swa; })
        .def_property_readonly("rope_freq_base", [](const model& x) { return x.hp().rope.freq_base; })
        .def_property_readonly("pooling_type", [](const model& x) { return x.hp().pooling; },
                               "pooling_type from the file (llama.cpp numbering), -1 when absent")
        .def_property_readonly("is_encoder", [](const model& x) { return x.hp().v.encoder; })
        .def_property_readonly("has_classifier", [](const model& x) { return x.weights().has_classifier(); },
                               "Whether the model is a reranker: a classifier head (cls.output) for pooling rank")
        .def_property_readonly("n_cls_out", [](const model& x) { return x.hp().n_cls_out; },
                               "Scores the classifier head gives per sequence (classifier.output_labels)")
        .def_property_readonly("causal", [](const model& x) { return x.hp().causal; })
        .def_property_readonly("recurrent_layers", [](const model& x) {
            std::vector<bool> r;
            for (int64_t il = 0; il < x.hp().n_layer; ++il) r.push_back(x.hp().is_recurrent(il));
            return r;
        }, "per layer, whether it keeps a recurrent state per sequence (delta-net, convolution or SSM "
           "layers) instead of KV cells")
        .def_property_readonly("n_pos_per_embd", [](const model& x) { return x.hp().n_pos_per_embd(); },
                               "Positions per row: 4 for M-RoPE (qwen2vl: decode takes pos of shape (4, n)), else 1.")
        .def_property_readonly("rope_sections", [](const model& x) {
                                   const int* s = x.hp().rope.sections;
                                   return py::make_tuple(s[0], s[1], s[2], s[3]);
                               }, "M-RoPE dims per position component (temporal, height, width, extra); zeros otherwise.")
        .def_property_readonly("mm_non_causal", [](const model& x) { return x.hp().mm_non_causal; },
                               "Whether image embeddings are decoded with causal=False (llama.cpp's\n"
                               "mtmd_decode_use_non_causal for this text model's projector: Gemma 3).")
        .def_property_readonly("n_pos_embd", [](const model& x) { return x.hp().n_pos_embd; },
                               "rows of learned position embeddings (0: none, positions are unbounded)")
        .def_property_readonly("size_bytes", &model::size_bytes)
        .def_property_readonly("n_params", &model::n_params)
        .def_property_readonly("vocab_only", &model::vocab_only)
        .def("desc", &model::desc)
        .def_property_readonly_static("supported_archs", [](py::object) {
            std::vector<std::string> v;
            for (const arch_def* a : supported_archs()) v.push_back(a->name);
            return v;
        });
    m.def("model_shape", [](const std::string& path) {
        hparams hp;
        std::optional<gguf_os_error> os_error;
        {
            py::gil_scoped_release unlocked;
            try {
                hp = model::read_hparams(*gguf_file::open(path, false));
            } catch (const gguf_os_error& e) {
                os_error = e;
            }
        }
        if (os_error) raise_os_error(*os_error);
        py::dict d;
        d["arch"] = hp.arch;
        d["n_embd"] = hp.n_embd;
        d["n_layer"] = hp.n_layer;
        d["n_ff"] = hp.n_ff;
        d["n_head"] = hp.n_head;
        d["n_head_kv"] = hp.n_head_kv;
        d["head_dim_k"] = hp.head_dim_k;
        d["head_dim_v"] = hp.head_dim_v;
        d["n_rot"] = std::max(hp.rope.n_rot, hp.rope_n_rot_swa);  // what the RoPE tables are sized for
        // Per layer (models whose layers differ, as Gemma 4's): head sizes and
        // the key / value elements a layer stores (0: it reuses another's cache).
        std::vector<int64_t> dk, dv, wk, wv;
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            dk.push_back(hp.layer_head_dim_k(il));
            dv.push_back(hp.layer_head_dim_v(il));
            wk.push_back(hp.kv_width_k(il));
            wv.push_back(hp.kv_width_v(il));
        }
        d["layer_head_dim_k"] = dk;
        d["layer_head_dim_v"] = dv;
        d["layer_kv_k"] = wk;
        d["layer_kv_v"] = wv;
        py::list shapes;  // the CPU backend's attention scratch is sized for these
        for (const attention_shape& a : attention_shapes(hp))
            shapes.append(py::make_tuple(a.n_gqa, a.head_dim_k, a.head_dim_v, a.n_head_kv));
        d["attention_shapes"] = shapes;
        // Recurrent layers (Qwen3.5's delta-net): no KV cells; a state per sequence instead.
        std::vector<bool> rec;
        for (int64_t il = 0; il < hp.n_layer; ++il) rec.push_back(hp.is_recurrent(il));
        d["recurrent_layers"] = rec;
        d["recurrent_bytes_per_seq"] = recurrent_state::bytes_for(hp, 1);
        d["n_swa"] = hp.n_swa;
        std::vector<bool> swa(hp.swa_layers.begin(), hp.swa_layers.end());
        d["swa_layers"] = swa;
        d["encoder"] = hp.v.encoder;
        d["n_expert"] = hp.moe.n_expert;
        d["n_expert_used"] = hp.moe.n_expert_used;
        d["n_ff_exp"] = hp.moe.n_ff_exp;
        d["n_ff_shexp"] = hp.moe.n_ff_shexp;
        d["n_layer_dense_lead"] = hp.moe.n_layer_dense_lead;
        d["activation_bytes_per_row"] = run_state::activation_bytes(hp, 1);
        d["kv_values_in_keys"] = hp.is_mla();  // the cache's values are the keys' first elements
        d["mla_kv_lora"] = hp.mla.kv_lora;
        return d;
    }, py::arg("path"),
       "The hyperparameters Model(path) would read (metadata only, no weights), as a dict: sizes, n_rot, "
       "the sliding window and its layers, the experts (n_expert 0: dense), and activation_bytes_per_row (the "
       "run_state bytes one micro-batch row takes).");
    m.def("host_kept", &host_kept, py::arg("names"), py::arg("n_layer"), py::arg("params"),
          "Which tensor names stay in host memory whatever their layer's device, for a ContextParams' "
          "override_tensor patterns and n_cpu_moe (placement.h host_kept): a list of bools.");
    m.def("moe_scratch_bytes", &moe_scratch::reserve_bytes, py::arg("n_slots"), py::arg("n_expert"),
          py::arg("widest"),
          "Bytes the CPU backend reserves for expert products of up to n_slots (token, expert) slots "
          "(cpu/moe.h moe_scratch::reserve).");
    m.def("architectures", []() {
        py::dict out;  // in the table's order (model/archs.def)
        for (const arch_def* a : supported_archs()) {
            py::dict d;
            d["swa_period"] = a->swa_period < 0 ? py::object(py::none()) : py::object(py::int_(a->swa_period));
            d["encoder"] = a->encoder;
            d["chat_format"] = *a->chat_format ? py::object(py::str(a->chat_format)) : py::object(py::none());
            out[py::str(a->name)] = d;
        }
        return out;
    }, "The architectures the engine runs and their facts (model/model.h arch_def): {name: {'swa_period': the "
       "default period of sliding-window layers (in every period layers all but the last use the window; 0: "
       "all), or None when the architecture ignores a window its files declare; 'encoder': bool; "
       "'chat_format': the named chat format of its models without a template, or None}}.");

    py::class_<lora_adapter, std::shared_ptr<lora_adapter>>(m, "LoraAdapter",
                                                          "A LoRA adapter (GGUF) for a model, applied by Context.set_adapters.")
        .def(py::init([](std::shared_ptr<model> base, const std::string& path) {
                 if (!base) throw value_error("LoraAdapter needs a Model");
                 std::shared_ptr<lora_adapter> ad;
                 std::optional<gguf_os_error> os_error;
                 {
                     py::gil_scoped_release nogil;
                     try {
                         ad = lora_adapter::load(path, *base);
                     } catch (const gguf_os_error& e) {
                         os_error = e;
                     }
                 }
                 if (os_error) raise_os_error(*os_error);
                 return ad;
             }),
             py::arg("model"), py::arg("path"))
        .def_property_readonly("path", &lora_adapter::path)
        .def_property_readonly("alpha", &lora_adapter::alpha)
        .def_property_readonly("tensors", [](const lora_adapter& a) {
                std::vector<std::string> names;
                for (const auto& e : a.pairs()) names.push_back(e.first);
                std::sort(names.begin(), names.end());
                return names;
            }, "base matrices the adapter changes");

    py::class_<context>(m, "Context", "KV cache, decode(batch) and outputs on a model.")
        .def(py::init([](std::shared_ptr<model> mdl, const py::object& params, const py::kwargs& kw) {
                 if (!mdl) throw value_error("Context needs a Model");
                 const context_params p = context_params_from(params, kw);
                 py::gil_scoped_release nogil;
                 return new context(mdl, p);
             }),
             py::arg("model"), py::arg("params") = py::none(),
             "Context(model, params=None, **options): params a ContextParams; options set its fields by name "
             "(n_ctx, n_batch, type_k, flash_attn, ...)")
        .def_property_readonly("params", [](const context& c) { return c.params(); },
                               "the ContextParams this context runs on, every default resolved")
        .def_property_readonly("kv_swa_cells", &context::kv_swa_cells,
                               "cells of the sliding-window layers' own cache (0: they share the main cache)")
        .def_property_readonly("kv_bytes", &context::kv_bytes, "bytes of keys and values held")
        .def_property_readonly("attention_path", [](const context& c) { return attention_path_name(c.attention_path()); },
                               "the attention path flash_attn resolved to: 'flash' or 'explicit'")
        .def_property_readonly("flash_attn", [](const context& c) { return c.attention_path() == attention_path::flash; },
                               "whether the flash attention path is active")
        .def_property_readonly("attention_scratch_bytes", &context::attention_scratch_bytes,
                               "attention work memory held (grows with n_ctx on the explicit path only)")
        .def("kv_swa_resumable", &context::kv_swa_resumable, py::arg("seq"), py::arg("pos"),
             "whether the sequence can continue at pos (the window cache still holds what that position sees)")
        .def_property_readonly("kv_rotation", [](const context& c) {
                return py::make_tuple(c.kv().rot_k(), c.kv().rot_v());
            }, "Hadamard rotation blocks of a quantized cache (keys, values); 0: none")
        .def("set_adapters", [](context& c, const std::vector<std::pair<std::shared_ptr<lora_adapter>, float>>& ads) {
                 std::vector<std::pair<std::shared_ptr<const lora_adapter>, float>> v(ads.begin(), ads.end());
                 c.set_adapters(v);
             }, py::arg("adapters"), "[(LoraAdapter, scale), ...]: adapters applied from the next decode on")
        .def("set_imatrix", [](context& c, bool on) {
                 py::gil_scoped_release nogil;
                 c.set_imatrix(on);
             }, py::arg("on"),
             "Importance-matrix statistics (llama-imatrix's): on, from the next decode the inputs of every layer's "
             "weight products are summed per column; off drops them. CPU contexts only.")
        .def_property_readonly("imatrix_on", &context::imatrix_on)
        .def_property_readonly("hooks", [](const context& c) {
                 std::vector<std::string> on;
                 if (c.has_adapters()) on.push_back("adapters");
                 if (c.has_tensor_callback()) on.push_back("tensor_callback");
                 if (c.imatrix_on()) on.push_back("imatrix");
                 return on;
             }, "what this context adds to the model's computation, by name: 'adapters' (LoRA), "
                "'tensor_callback', 'imatrix'; empty when it runs the model alone")
        .def("imatrix", [](const context& c) {
                 std::vector<imatrix_entry> es;
                 {
                     py::gil_scoped_release nogil;
                     es = c.imatrix_entries();
                 }
                 py::list out;
                 for (const imatrix_entry& e : es) {
                     py::array_t<float> sums({(py::ssize_t)e.n_mat, (py::ssize_t)e.n_cols});
                     float* d = sums.mutable_data();
                     for (size_t i = 0; i < e.sum2.size(); ++i) d[i] = (float)e.sum2[i];
                     py::array_t<int64_t> counts((py::ssize_t)e.n_mat);
                     std::memcpy(counts.mutable_data(), e.count.data(), sizeof(int64_t) * e.count.size());
                     py::dict item;
                     item["name"] = e.name;
                     item["sums"] = sums;
                     item["counts"] = counts;
                     out.append(item);
                 }
                 return out;
             }, "The statistics so far, sorted by weight name: [{'name', 'sums' (n_mat, n_cols) float32 sums of "
             "squared inputs, 'counts' (n_mat,) rows summed}] (n_mat: 1, or the experts of a 3-D tensor).")
        .def("set_tensor_callback", &set_tensor_callback, py::arg("fn"),
             "debug hook: fn(name, array) receives every named intermediate of each forward pass from the next "
             "decode on (llama.cpp's graph names: 'attn_norm-0', 'Qcur-0', ..., 'result_output'; a float32 "
             "(rows, cols) copy); None removes it")
        .def("placement", [](const context& c) { return placement_parts(c.placement()); },
             "which device holds each part: [{'name': 'input' | 'blk.<il>' | 'output', 'layer', 'device', "
             "'kv_device', 'weight_bytes', 'kv_bytes'}, ...]")
        .def("device_memory", [](const context& c) { return device_memory(c.placement()); },
             "bytes per device: [{'device', 'weight_bytes', 'kv_bytes', 'activation_bytes', 'total_bytes'}, ...]")
        .def_property_readonly("n_ctx", &context::n_ctx)
        // llama-cpp-python's Llama._ctx is a wrapper whose .ctx is the native
        // handle; code written for it reads llm._ctx.ctx, which here is the
        // context itself.
        .def_property_readonly("ctx", [](py::object self) { return self; }, "this context (llm._ctx.ctx)")
        .def_property_readonly("rope", [](const context& c) {
                const rope_params& r = c.rope(0);
                py::dict d;
                d["n_rot"] = r.n_rot;
                d["freq_base"] = r.freq_base;
                d["freq_scale"] = r.freq_scale;
                d["ext_factor"] = r.ext_factor;
                d["attn_factor"] = r.attn_factor;
                d["beta_fast"] = r.beta_fast;
                d["beta_slow"] = r.beta_slow;
                d["n_ctx_orig"] = r.n_ctx_orig;
                return d;
            }, "RoPE of the global layers as resolved from the model and the context options")
        .def_property_readonly("n_batch", [](const context& c) { return c.params().n_batch; })
        .def_property_readonly("n_ubatch", [](const context& c) { return c.params().n_ubatch; })
        .def_property_readonly("n_seq_max", [](const context& c) { return c.params().n_seq_max; })
        .def_property_readonly("n_threads", [](const context& c) { return c.params().n_threads; })
        .def_property_readonly("n_threads_batch", [](const context& c) { return c.params().n_threads_batch; })
        .def_property_readonly("embeddings", [](const context& c) { return c.params().embeddings; })
        .def_property_readonly("pooling_type", &context::pooling,
                               "Resolved pooling (0 none, 1 mean, 2 cls, 3 last, 4 rank); 0 without embeddings.")
        .def_property_readonly("n_embd_seq", &context::n_embd_seq,
                               "Floats per sequence of get_embeddings_seq: n_embd, or n_cls_out with pooling rank.")
        .def_property_readonly("n_outputs", &context::n_outputs)
        .def_property_readonly("kv_n_used", &context::kv_n_used)
        .def("decode", &decode, py::arg("tokens") = py::none(), py::arg("embd") = py::none(), py::arg("pos"),
             py::arg("seq_ids"), py::arg("logits") = py::none(), py::arg("causal") = true,
             "Evaluate a batch: tokens (n ints) or embd (n, n_embd float32), pos (n) or, for M-RoPE models\n"
             "(Model.n_pos_per_embd == 4), (4, n) temporal/height/width/extra positions ((n,) means all four\n"
             "equal), seq_ids (n ints or n lists), logits (n flags: rows whose outputs to keep; default the last\n"
             "row). causal=False: rows also attend to later positions of their sequence (llama_set_causal_attn;\n"
             "mtmd's image chunks where Model.mm_non_causal); the batch must fit n_ubatch.")
        .def("get_logits", [](const context& c, int64_t i) {
                 const float* p = c.logits(i);
                 return float_view(c.logits_storage(), p, 1, c.mdl().hp().n_vocab, false);
             }, py::arg("i") = -1, "Logits (n_vocab) of output row i of the last decode (a view).")
        .def("get_logits_all", [](const context& c) {
                 return float_view(c.logits_storage(), c.logits_storage()->data(), c.n_outputs(),
                                   c.mdl().hp().n_vocab, true);
             }, "Logits (n_outputs, n_vocab) of the last decode (a view).")
        .def("get_embeddings", [](const context& c, int64_t i) {
                 const float* p = c.embeddings(i);
                 return float_view(c.embd_storage(), p, 1, c.mdl().hp().n_embd, false);
             }, py::arg("i") = -1, "Final normalised hidden state (n_embd) of output row i (a view).")
        .def("get_embeddings_all", [](const context& c) {
                 if (!c.params().embeddings) throw value_error("the context was created without embeddings=True");
                 return float_view(c.embd_storage(), c.embd_storage()->data(), c.n_outputs(), c.mdl().hp().n_embd,
                                   true);
             }, "Final hidden states (n_outputs, n_embd) of the rows the last decode kept (a view).")
        .def("get_embeddings_seq", [](const context& c, int seq) {
                 const float* p = c.embeddings_seq(seq);
                 py::array_t<float> out((py::ssize_t)c.n_embd_seq());
                 std::memcpy(out.mutable_data(), p, sizeof(float) * (size_t)c.n_embd_seq());
                 return out;
             }, py::arg("seq_id"), "Pooled embedding (n_embd) of a sequence in the last decode (a copy); with "
             "pooling rank its classifier scores (n_cls_out).")
        .def("get_embeddings_seqs", [](const context& c, int64_t n_seq) {
                 const int64_t E = c.n_embd_seq();
                 if (n_seq < 0 || n_seq > c.params().n_seq_max)
                     throw value_error("get_embeddings_seqs: n_seq " + std::to_string(n_seq) + " is out of range");
                 py::array_t<float> out({(py::ssize_t)n_seq, (py::ssize_t)E});
                 for (int64_t s = 0; s < n_seq; ++s)
                     std::memcpy(out.mutable_data() + s * E, c.embeddings_seq((int)s), sizeof(float) * (size_t)E);
                 return out;
             }, py::arg("n_seq"), "Pooled embeddings (n_seq, n_embd) of sequences 0 .. n_seq-1 (a copy); with pooling "
             "rank their scores (n_seq, n_cls_out).")
        .def("kv_seq_rm", &context::kv_seq_rm, py::arg("seq_id"), py::arg("p0") = -1, py::arg("p1") = -1,
             "removes positions [p0, p1) of a sequence (-1: all of them); False, changing nothing, when a model "
             "with recurrent layers cannot (a suffix needs a state checkpoint at its start): evaluate again")
        .def("kv_seq_resume_pos", &context::kv_seq_resume_pos, py::arg("seq_id"), py::arg("n"),
             "the largest m <= n at which the sequence can continue keeping positions [0, m) (n unless the model "
             "has recurrent layers: where its state or a checkpoint ends)")
        .def_property_readonly("recurrent_bytes", &context::recurrent_bytes,
                               "bytes of the recurrent layers' per-sequence states (0: none)")
        .def_property_readonly("checkpoint_bytes", &context::checkpoint_bytes,
                               "bytes of the recurrent-state checkpoints held now")
        .def("n_state_checkpoints", [](const context& c, int seq) {
                if (seq < 0 || seq >= c.params().n_seq_max) throw value_error("sequence id is out of range");
                return c.rstate().n_checkpoints(seq);
            },
             py::arg("seq_id"), "recurrent-state checkpoints held for a sequence")
        .def("kv_seq_cp", &context::kv_seq_cp, py::arg("src"), py::arg("dst"), py::arg("p0") = -1, py::arg("p1") = -1)
        .def("kv_seq_keep", &context::kv_seq_keep, py::arg("seq_id"))
        .def("kv_seq_pos_max", &context::kv_seq_pos_max, py::arg("seq_id"))
        .def("kv_seq_pos_min", &context::kv_seq_pos_min, py::arg("seq_id"))
        .def("kv_clear", &context::kv_clear)
        .def("state_get", [](const context& c) {
                 std::vector<uint8_t> s;
                 {
                     py::gil_scoped_release nogil;
                     s = c.state_get();
                 }
                 return py::bytes((const char*)s.data(), s.size());
             })
        .def("state_set", [](context& c, const py::buffer& data) {
                 py::buffer_info info = data.request();
                 if (info.ndim != 1 || info.itemsize != 1 || info.strides[0] != 1)
                     throw value_error("state_set needs a contiguous bytes-like object");
                 py::gil_scoped_release nogil;
                 c.state_set((const uint8_t*)info.ptr, (size_t)info.size);
             }, py::arg("data"));
}
