// bind_sampling.cpp — Python access to the native sampler chain and the
// log-probability helper. Logits come in as float32 numpy arrays (usually
// zero-copy views of a context's output), so nothing is copied per token.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "common.h"
#include "sampling/grammar_state.h"
#include "sampling/sampler.h"

namespace py = pybind11;
using namespace lp;

namespace {

using farray = py::array_t<float, py::array::c_style | py::array::forcecast>;

const float* logits_ptr(const farray& logits, int32_t n_vocab) {
    if (logits.ndim() != 1 || logits.shape(0) != n_vocab)
        throw value_error("logits must be a 1-D array of n_vocab (" + std::to_string(n_vocab) + ") floats");
    return logits.data();
}

// One sampler_params field: its keyword, the attribute it is read from on an
// options object (llamapy's SamplingParams says mirostat_mode), and the member
// (a float or an int32 one; the seed is read on its own).
struct sampler_field {
    const char* name;
    const char* attr;
    float sampler_params::*real;
    int32_t sampler_params::*integer;
};

const sampler_field kSamplerFields[] = {
    {"temperature", "temperature", &sampler_params::temperature, nullptr},
    {"top_k", "top_k", nullptr, &sampler_params::top_k},
    {"top_p", "top_p", &sampler_params::top_p, nullptr},
    {"min_p", "min_p", &sampler_params::min_p, nullptr},
    {"typical_p", "typical_p", &sampler_params::typical_p, nullptr},
    {"repeat_penalty", "repeat_penalty", &sampler_params::repeat_penalty, nullptr},
    {"frequency_penalty", "frequency_penalty", &sampler_params::frequency_penalty, nullptr},
    {"presence_penalty", "presence_penalty", &sampler_params::presence_penalty, nullptr},
    {"penalty_last_n", "penalty_last_n", nullptr, &sampler_params::penalty_last_n},
    {"mirostat", "mirostat_mode", nullptr, &sampler_params::mirostat},
    {"mirostat_tau", "mirostat_tau", &sampler_params::mirostat_tau, nullptr},
    {"mirostat_eta", "mirostat_eta", &sampler_params::mirostat_eta, nullptr},
    {"min_keep", "min_keep", nullptr, &sampler_params::min_keep},
};

template <class T>
T as(const py::handle& v, const char* name) {
    try {
        return v.cast<T>();
    } catch (const py::cast_error&) {
        throw py::type_error(std::string("Sampler: ") + name + " must be a number, got " +
                             std::string(py::str(py::type::of(v).attr("__name__"))));
    }
}

void set_field(sampler_params& p, const sampler_field& f, const py::handle& v) {
    if (f.real) p.*f.real = as<float>(v, f.name);
    else p.*f.integer = as<int32_t>(v, f.name);
}

sampler_params sampler_params_from(const py::object& options, const py::kwargs& kw) {
    for (auto item : kw) {
        const std::string name = py::str(item.first);
        bool known = name == "seed";
        for (const sampler_field& f : kSamplerFields) known |= name == f.name;
        if (!known) throw py::type_error("Sampler has no option '" + name + "'");
    }
    sampler_params p;
    for (const sampler_field& f : kSamplerFields) {
        if (kw.contains(f.name)) set_field(p, f, kw[f.name]);
        else if (!options.is_none() && py::hasattr(options, f.attr)) set_field(p, f, options.attr(f.attr));
    }
    if (kw.contains("seed")) p.seed = as<uint64_t>(kw["seed"], "seed");
    else if (!options.is_none() && py::hasattr(options, "seed")) p.seed = as<uint64_t>(options.attr("seed"), "seed");
    if (p.mirostat < 0 || p.mirostat > 2) throw value_error("mirostat_mode must be 0, 1 or 2");
    if (p.penalty_last_n < -1) throw value_error("penalty_last_n must be >= -1");
    return p;
}

}  // namespace

void bind_sampling(py::module_& m) {
    py::class_<sampler>(m, "Sampler")
        .def(py::init([](int32_t n_vocab, const py::object& options, const py::kwargs& kw) {
                 return new sampler(sampler_params_from(options, kw), n_vocab);
             }),
             py::arg("n_vocab"), py::arg("options") = py::none(),
             "Sampler(n_vocab, options=None, **fields): the chain for sampler_params (sampling/sampler.h). Each "
             "field is read by name from the keywords, else from options (any object with those attributes, such "
             "as llamapy's SamplingParams), else keeps its default: temperature, top_k, top_p, min_p, typical_p, "
             "repeat_penalty, frequency_penalty, presence_penalty, penalty_last_n, mirostat (an options object's "
             "mirostat_mode), mirostat_tau, mirostat_eta, min_keep, seed")
        .def("sample", [](sampler& s, const farray& logits) {
                 const float* p = logits_ptr(logits, s.n_vocab());
                 py::gil_scoped_release nogil;
                 return s.sample(p);
             }, py::arg("logits"))
        .def("accept", &sampler::accept, py::arg("token"))
        .def("set_history", &sampler::set_history, py::arg("tokens"))
        .def("set_logit_bias", &sampler::set_logit_bias, py::arg("bias"))
        .def("reseed", &sampler::reseed, py::arg("seed"))
        // Grammar constraint: Grammar and GrammarVocab come from bind_grammar.cpp.
        .def("set_grammar", [](sampler& s, std::shared_ptr<grammar> g, std::shared_ptr<grammar_vocab> v) {
                 if (!g) { s.set_grammar(nullptr); return; }
                 if (!v) throw value_error("set_grammar: a GrammarVocab is needed with a grammar");
                 std::unique_ptr<grammar_state> st;
                 {
                     py::gil_scoped_release nogil;  // the first use of a vocabulary builds its index
                     st = std::make_unique<grammar_state>(g, v);
                 }
                 s.set_grammar(std::move(st));
             }, py::arg("grammar"), py::arg("vocab") = nullptr,
             "Constrain sampling to `grammar` (None: no constraint); accept() then advances it.")
        .def("reset_grammar", [](sampler& s) { if (s.grammar_constraint()) s.grammar_constraint()->reset(); },
             "Restart the grammar from its start rule.")
        .def_property_readonly("grammar_can_end", [](sampler& s) {
                 return s.grammar_constraint() != nullptr && s.grammar_constraint()->can_end();
             }, "True when a grammar is set and the text so far is a whole sentence of it.")
        .def_property_readonly("grammar_fallbacks", &sampler::n_grammar_fallbacks,
             "Greedy steps whose best token the grammar rejected, so the vocabulary was filtered.");

    m.def("logprobs", [](const farray& logits, int32_t chosen, int32_t n_top) {
        if (logits.ndim() != 1) throw value_error("logits must be 1-D");
        const int32_t n = (int32_t)logits.shape(0);
        const float* p = logits.data();
        logprob_result r;
        {
            py::gil_scoped_release nogil;
            r = compute_logprobs(p, n, chosen, n_top);
        }
        return py::make_tuple(r.chosen_logprob, r.top);
    }, py::arg("logits"), py::arg("chosen"), py::arg("n_top"),
       "(log-softmax at `chosen`, [(id, logprob)] of the n_top largest), computed natively.");
    m.def("argmax", [](const farray& logits) {
        if (logits.ndim() != 1 || logits.shape(0) == 0) throw value_error("logits must be a non-empty 1-D array");
        return argmax(logits.data(), (int32_t)logits.shape(0));
    });
}
