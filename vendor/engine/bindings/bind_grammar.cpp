// bind_grammar.cpp — Python access to GBNF grammars (sampling/grammar*.h):
//   Grammar(gbnf, root="root")          parsed, immutable, shareable
//   GrammarVocab(token_texts, eog_ids)  a vocabulary prepared for matching,
//                                       built once per model and shared
//   GrammarMatcher(grammar, vocab=None) a recogniser, for tests and tools
// Samplers take a grammar with Sampler.set_grammar (bind_sampling.cpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "sampling/grammar.h"
#include "sampling/grammar_state.h"
#include "sampling/grammar_vocab.h"

namespace py = pybind11;
using namespace lp;

namespace {

// str -> its UTF-8 bytes; bytes-like -> as is.
std::string text_bytes(py::handle h) {
    if (py::isinstance<py::str>(h)) return h.cast<std::string>();
    if (py::isinstance<py::bytes>(h)) return h.cast<std::string>();
    if (py::isinstance<py::bytearray>(h) || py::isinstance<py::memoryview>(h))
        return py::bytes(py::reinterpret_borrow<py::object>(h)).cast<std::string>();
    throw py::type_error("expected str or bytes");
}

}  // namespace

void bind_grammar(py::module_& m) {
    py::register_exception<grammar_error>(m, "GrammarError", PyExc_ValueError);

    py::class_<grammar, std::shared_ptr<grammar>>(m, "Grammar",
        "A GBNF grammar, parsed and compiled. Raises GrammarError (a ValueError) naming line and column.")
        .def(py::init([](const std::string& text, const std::string& root) { return grammar::parse(text, root); }),
             py::arg("gbnf"), py::arg("root") = "root")
        .def_property_readonly("n_rules", &grammar::n_rules)
        .def_property_readonly("n_classes", &grammar::n_classes)
        .def_property_readonly("root", [](const grammar& g) { return g.rule_name(g.root_rule()); })
        .def("matches", [](std::shared_ptr<grammar> g, py::handle text) {
                 grammar_state st(g);
                 return st.accept_bytes(text_bytes(text)) && st.can_end();
             }, py::arg("text"), "Whether `text` (str or UTF-8 bytes) is a whole sentence of the grammar.")
        .def("matches_prefix", [](std::shared_ptr<grammar> g, py::handle text) {
                 grammar_state st(g);
                 return st.accept_bytes(text_bytes(text));
             }, py::arg("text"), "Whether `text` can be continued into a sentence of the grammar.")
        .def("random_string", [](const grammar& g, uint64_t seed, int32_t max_depth) {
                 return g.random_string(seed, max_depth);
             }, py::arg("seed"), py::arg("max_depth") = 12,
             "A random sentence: alternatives drawn uniformly, the shortest ones past max_depth nested rules.");

    py::class_<grammar_vocab, std::shared_ptr<grammar_vocab>>(m, "GrammarVocab",
        "Token texts prepared for grammar matching; build once per vocabulary and share.")
        .def(py::init([](const std::vector<std::string>& texts, const std::vector<int32_t>& eog_ids) {
                 py::gil_scoped_release nogil;
                 return std::make_shared<grammar_vocab>(texts, eog_ids);
             }), py::arg("token_texts"), py::arg("eog_ids"))
        .def_property_readonly("n_tokens", &grammar_vocab::n_tokens)
        .def_property_readonly("n_trie_nodes", &grammar_vocab::n_nodes);

    py::class_<grammar_state>(m, "GrammarMatcher", "Where a text stands in a grammar; which tokens may follow.")
        .def(py::init([](std::shared_ptr<grammar> g, std::shared_ptr<grammar_vocab> v) {
                 py::gil_scoped_release nogil;
                 return new grammar_state(g, v);
             }), py::arg("grammar"), py::arg("vocab") = nullptr)
        .def("reset", &grammar_state::reset)
        .def("accept_bytes", [](grammar_state& st, py::handle text) { return st.accept_bytes(text_bytes(text)); },
             py::arg("text"), "Append text if it keeps a prefix of a sentence; False (unchanged) otherwise.")
        .def_property_readonly("can_end", &grammar_state::can_end)
        .def_property_readonly("can_continue", &grammar_state::can_continue)
        .def("allows", &grammar_state::allows, py::arg("token"))
        .def("accept_token", &grammar_state::accept_token, py::arg("token"))
        .def("allowed_tokens", [](grammar_state& st) {
                 if (!st.vocab()) throw value_error("allowed_tokens: the matcher has no vocabulary");
                 std::vector<int32_t> ids;
                 {
                     py::gil_scoped_release nogil;
                     st.allowed_tokens(ids);
                     std::vector<char> mask(st.vocab()->n_tokens(), 0);  // sort by marking: O(n_vocab)
                     for (int32_t id : ids) mask[id] = 1;
                     ids.clear();
                     for (int32_t id = 0; id < (int32_t)mask.size(); ++id)
                         if (mask[id]) ids.push_back(id);
                 }
                 return py::array_t<int32_t>((py::ssize_t)ids.size(), ids.data());
             }, "Sorted ids of the tokens that may come next.");
}
