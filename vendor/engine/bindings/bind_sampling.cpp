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

}  // namespace

void bind_sampling(py::module_& m) {
    py::class_<sampler>(m, "Sampler")
        .def(py::init([](int32_t n_vocab, float temperature, int32_t top_k, float top_p, float min_p, float typical_p,
                         float repeat_penalty, float frequency_penalty, float presence_penalty,
                         int32_t penalty_last_n, int32_t mirostat, float mirostat_tau, float mirostat_eta,
                         int32_t min_keep, uint64_t seed) {
                 if (mirostat < 0 || mirostat > 2) throw value_error("mirostat_mode must be 0, 1 or 2");
                 if (penalty_last_n < -1) throw value_error("penalty_last_n must be >= -1");
                 sampler_params p;
                 p.temperature = temperature; p.top_k = top_k; p.top_p = top_p; p.min_p = min_p;
                 p.typical_p = typical_p; p.repeat_penalty = repeat_penalty;
                 p.frequency_penalty = frequency_penalty; p.presence_penalty = presence_penalty;
                 p.penalty_last_n = penalty_last_n; p.mirostat = mirostat; p.mirostat_tau = mirostat_tau;
                 p.mirostat_eta = mirostat_eta; p.min_keep = min_keep; p.seed = seed;
                 return new sampler(p, n_vocab);
             }),
             py::arg("n_vocab"), py::arg("temperature") = 0.8f, py::arg("top_k") = 40, py::arg("top_p") = 0.95f,
             py::arg("min_p") = 0.05f, py::arg("typical_p") = 1.0f, py::arg("repeat_penalty") = 1.0f,
             py::arg("frequency_penalty") = 0.0f, py::arg("presence_penalty") = 0.0f,
             py::arg("penalty_last_n") = 64, py::arg("mirostat") = 0, py::arg("mirostat_tau") = 5.0f,
             py::arg("mirostat_eta") = 0.1f, py::arg("min_keep") = 1, py::arg("seed") = 0xFFFFFFFFu)
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
