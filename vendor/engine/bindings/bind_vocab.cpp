// bind_vocab.cpp — llamapy._engine.Vocab: a model's tokenizer (vocab/).
// Built from a GGUF file (Vocab.from_file) or from plain lists. The GIL is
// released while tokenizing and detokenizing.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "overrides.h"
#include "gguf/gguf.h"
#include "vocab/pretokenize.h"
#include "vocab/unicode.h"
#include "vocab/vocab.h"
#include "vocab/vocab_gguf.h"

namespace py = pybind11;
using namespace lp;

namespace {

struct py_vocab {
    std::shared_ptr<const vocab> v;
    std::vector<std::string> warnings;  // emitted while building
    std::vector<std::string> unread_overrides;  // from_file: kv_overrides keys the tokenizer did not read
};

py_vocab build(vocab_data d) {
    py_vocab out;
    std::vector<std::string>& w = out.warnings;
    {
        py::gil_scoped_release nogil;
        out.v = std::make_shared<const vocab>(std::move(d), [&w](const std::string& m) { w.push_back(m); });
    }
    return out;
}

// str -> its UTF-8 bytes; bytes-like -> as is.
std::string bytes_of(py::handle h, const char* what) {
    PyObject* o = h.ptr();
    if (PyUnicode_Check(o)) {
        Py_ssize_t n = 0;
        const char* s = PyUnicode_AsUTF8AndSize(o, &n);
        if (s) return std::string(s, (size_t)n);
        // Lone surrogates (e.g. from errors="surrogateescape"): take the raw bytes back.
        PyErr_Clear();
        PyObject* b = PyUnicode_AsEncodedString(o, "utf-8", "surrogateescape");
        if (!b) throw py::error_already_set();
        std::string r(PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b));
        Py_DECREF(b);
        return r;
    }
    if (PyBytes_Check(o)) return std::string(PyBytes_AS_STRING(o), (size_t)PyBytes_GET_SIZE(o));
    if (PyByteArray_Check(o)) return std::string(PyByteArray_AS_STRING(o), (size_t)PyByteArray_GET_SIZE(o));
    throw py::type_error(std::string(what) + " must be str or bytes");
}

std::string text_arg(py::handle h) {
    PyObject* o = h.ptr();
    if (PyUnicode_Check(o)) {  // like text.encode("utf-8"): lone surrogates raise
        Py_ssize_t n = 0;
        const char* s = PyUnicode_AsUTF8AndSize(o, &n);
        if (!s) throw py::error_already_set();
        return std::string(s, (size_t)n);
    }
    return bytes_of(h, "text");
}

std::vector<std::string> string_list(py::handle seq, const char* what) {
    std::vector<std::string> out;
    if (seq.is_none()) return out;
    py::sequence s = py::reinterpret_borrow<py::sequence>(seq);
    const size_t n = (size_t)py::len(s);
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) out.push_back(bytes_of(s[i], what));
    return out;
}

template <class T>
std::vector<T> number_list(py::handle seq) {
    if (seq.is_none()) return {};
    auto a = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(seq);
    if (!a) throw py::error_already_set();
    if (a.ndim() != 1) throw value_error("expected a 1-D sequence of numbers");
    return std::vector<T>(a.data(), a.data() + a.size());
}

int tri(py::handle h) { return h.is_none() ? -1 : (h.cast<bool>() ? 1 : 0); }

py::list to_list(const std::vector<token_id>& ids) {
    PyObject* l = PyList_New((Py_ssize_t)ids.size());
    if (!l) throw py::error_already_set();
    for (size_t i = 0; i < ids.size(); ++i) PyList_SET_ITEM(l, (Py_ssize_t)i, PyLong_FromLong(ids[i]));
    return py::reinterpret_steal<py::list>(l);
}

std::vector<token_id> id_list(py::handle seq) {
    std::vector<token_id> ids;
    py::sequence s = py::reinterpret_borrow<py::sequence>(seq);
    const size_t n = (size_t)py::len(s);
    ids.reserve(n);
    for (size_t i = 0; i < n; ++i) ids.push_back(s[i].cast<token_id>());
    return ids;
}

py::bytes as_bytes(const std::string& s) { return py::bytes(s.data(), s.size()); }

}  // namespace

void bind_vocab(py::module_& m) {
    py::class_<py_vocab>(m, "Vocab",
        "A model's tokenizer, matching llama.cpp's llama_tokenize / llama_token_to_piece.\n"
        "Build with Vocab.from_file(path) or Vocab(model, pre, tokens, ...) from tokenizer.ggml.* metadata.")
        .def(py::init([](const std::string& model, const std::string& pre, py::handle tokens, py::handle scores,
                         py::handle token_types, py::handle merges, token_id bos_id, token_id eos_id,
                         token_id unk_id, token_id sep_id, token_id pad_id, token_id eot_id, token_id eom_id,
                         token_id mask_id, py::handle add_bos, py::handle add_eos, py::handle add_sep,
                         py::handle add_space_prefix, py::handle remove_extra_whitespaces,
                         const std::string& general_name, const std::string& general_arch) {
                 vocab_data d;
                 d.model = model;
                 d.pre = pre;
                 d.tokens = string_list(tokens, "tokens");
                 d.scores = number_list<float>(scores);
                 d.token_types = number_list<int32_t>(token_types);
                 d.merges = string_list(merges, "merges");
                 d.bos_id = bos_id; d.eos_id = eos_id; d.unk_id = unk_id; d.sep_id = sep_id;
                 d.pad_id = pad_id; d.eot_id = eot_id; d.eom_id = eom_id; d.mask_id = mask_id;
                 d.add_bos = tri(add_bos); d.add_eos = tri(add_eos); d.add_sep = tri(add_sep);
                 d.add_space_prefix = tri(add_space_prefix);
                 d.remove_extra_whitespaces = tri(remove_extra_whitespaces);
                 d.general_name = general_name;
                 d.general_arch = general_arch;
                 return build(std::move(d));
             }),
             py::arg("model"), py::arg("pre"), py::arg("tokens"), py::arg("scores") = py::none(),
             py::arg("token_types") = py::none(), py::arg("merges") = py::none(), py::arg("bos_id") = -1,
             py::arg("eos_id") = -1, py::arg("unk_id") = -1, py::arg("sep_id") = -1, py::arg("pad_id") = -1,
             py::arg("eot_id") = -1, py::arg("eom_id") = -1, py::arg("mask_id") = -1,
             py::arg("add_bos") = py::none(), py::arg("add_eos") = py::none(), py::arg("add_sep") = py::none(),
             py::arg("add_space_prefix") = py::none(), py::arg("remove_extra_whitespaces") = py::none(),
             py::arg("general_name") = "", py::arg("general_arch") = "",
             "From tokenizer metadata. Ids of -1 and flags of None mean absent (llama.cpp's defaults apply).")
        .def_static("from_file", [](py::object path_like, py::object kv_overrides) {
                 const std::string path = py::str(py::module_::import("os").attr("fspath")(path_like));
                 std::vector<gguf_override> ov = overrides_from_python(kv_overrides);
                 std::shared_ptr<gguf_file> f;
                 vocab_data d;
                 {
                     py::gil_scoped_release nogil;
                     f = gguf_file::open(path);
                     if (!ov.empty()) f->set_overrides(std::move(ov));
                     d = vocab_data_from_gguf(*f);
                 }
                 py_vocab out = build(std::move(d));
                 out.unread_overrides = f->unread_overrides();
                 return out;
             }, py::arg("path"), py::arg("kv_overrides") = py::none(),
             "The tokenizer of a GGUF model file (metadata overridden by kv_overrides).")
        .def("tokenize", [](const py_vocab& self, py::handle text, bool add_special, bool parse_special) {
                 const std::string s = text_arg(text);
                 std::vector<token_id> ids;
                 {
                     py::gil_scoped_release nogil;
                     ids = self.v->tokenize(s, add_special, parse_special);
                 }
                 return to_list(ids);
             }, py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = false,
             "llama_tokenize: text (str or UTF-8 bytes) -> ids. add_special adds BOS/EOS as the model asks; "
             "parse_special maps control-token texts to their ids.")
        .def("token_to_piece", [](const py_vocab& self, token_id id, bool special) {
                 return as_bytes(self.v->token_to_piece(id, special));
             }, py::arg("id"), py::arg("special") = false,
             "llama_token_to_piece (lstrip 0): the token's bytes; control tokens empty unless special.")
        .def("detokenize", [](const py_vocab& self, py::handle ids_in, bool special) {
                 const std::vector<token_id> ids = id_list(ids_in);
                 std::string out;
                 {
                     py::gil_scoped_release nogil;
                     // Pieces are kept whole. llama-cpp-python reads each piece into a
                     // 32-byte buffer and silently loses longer ones (long whitespace
                     // runs in Gemma's vocabulary, for one); llamapy does not lose text.
                     for (token_id id : ids) out += self.v->token_to_piece(id, special);
                     // llama-cpp-python drops a leading space after a leading BOS.
                     if (!ids.empty() && ids[0] == self.v->bos() && !out.empty() && out[0] == ' ') out.erase(0, 1);
                 }
                 return as_bytes(out);
             }, py::arg("ids"), py::arg("special") = false,
             "Bytes of ids as llama-cpp-python's Llama.detokenize makes them: the pieces joined, "
             "less one leading space when the ids start with BOS (pieces over 32 bytes, which its "
             "32-byte buffer loses, are kept).")
        .def("llama_detokenize", [](const py_vocab& self, py::handle ids_in, bool remove_special,
                                    bool unparse_special) {
                 const std::vector<token_id> ids = id_list(ids_in);
                 std::string out;
                 {
                     py::gil_scoped_release nogil;
                     out = self.v->detokenize(ids, remove_special, unparse_special);
                 }
                 return as_bytes(out);
             }, py::arg("ids"), py::arg("remove_special") = false, py::arg("unparse_special") = false,
             "llama.cpp's llama_detokenize (leading-space removal and space clean-up included).")
        .def("token_text", [](const py_vocab& self, token_id id) { return as_bytes(self.v->token_text(id)); },
             py::arg("id"), "The token's text as stored in the vocabulary.")
        .def("token_score", [](const py_vocab& self, token_id id) { return self.v->token_score(id); }, py::arg("id"))
        .def("token_attr", [](const py_vocab& self, token_id id) { return self.v->token_attrs(id); }, py::arg("id"),
             "llama_token_attr bits (1 unknown, 2 unused, 4 normal, 8 control, 16 user-defined, 32 byte, ...).")
        .def("text_to_token", [](const py_vocab& self, py::handle text) {
                 return self.v->text_to_token(bytes_of(text, "text"));
             }, py::arg("text"), "Id of the token with exactly this text, or -1.")
        .def("is_eog", [](const py_vocab& self, token_id id) { return self.v->is_eog(id); }, py::arg("id"))
        .def_property_readonly("eog_ids", [](const py_vocab& self) { return self.v->eog_ids(); })
        .def_property_readonly("n_vocab", [](const py_vocab& self) { return self.v->n_tokens(); })
        .def_property_readonly("model", [](const py_vocab& self) { return self.v->model_name(); })
        .def_property_readonly("pre", [](const py_vocab& self) { return self.v->pre_name(); })
        .def_property_readonly("pre_known", [](const py_vocab& self) { return self.v->pre_known(); },
             "False when tokenizer.ggml.pre was not recognised and 'default' is used instead.")
        .def_property_readonly("warnings", [](const py_vocab& self) { return self.warnings; })
        .def_property_readonly("unread_overrides", [](const py_vocab& self) { return self.unread_overrides; })
        .def_property_readonly("bos", [](const py_vocab& self) { return self.v->bos(); })
        .def_property_readonly("eos", [](const py_vocab& self) { return self.v->eos(); })
        .def_property_readonly("eot", [](const py_vocab& self) { return self.v->eot(); })
        .def_property_readonly("eom", [](const py_vocab& self) { return self.v->eom(); })
        .def_property_readonly("unk", [](const py_vocab& self) { return self.v->unk(); })
        .def_property_readonly("sep", [](const py_vocab& self) { return self.v->sep(); })
        .def_property_readonly("pad", [](const py_vocab& self) { return self.v->pad(); })
        .def_property_readonly("mask", [](const py_vocab& self) { return self.v->mask(); })
        .def_property_readonly("nl", [](const py_vocab& self) { return self.v->nl(); })
        .def_property_readonly("fim_pre", [](const py_vocab& self) { return self.v->fim_pre(); })
        .def_property_readonly("fim_suf", [](const py_vocab& self) { return self.v->fim_suf(); })
        .def_property_readonly("fim_mid", [](const py_vocab& self) { return self.v->fim_mid(); })
        .def_property_readonly("fim_pad", [](const py_vocab& self) { return self.v->fim_pad(); })
        .def_property_readonly("fim_rep", [](const py_vocab& self) { return self.v->fim_rep(); })
        .def_property_readonly("fim_sep", [](const py_vocab& self) { return self.v->fim_sep(); })
        .def_property_readonly("add_bos", [](const py_vocab& self) { return self.v->add_bos(); })
        .def_property_readonly("add_eos", [](const py_vocab& self) { return self.v->add_eos(); })
        .def_property_readonly("add_sep", [](const py_vocab& self) { return self.v->add_sep(); })
        .def_property_readonly("add_space_prefix", [](const py_vocab& self) { return self.v->add_space_prefix(); })
        .def_property_readonly("n_merges", [](const py_vocab& self) { return self.v->n_merges(); });

    m.def("pretokenize", [](const std::string& pre, py::handle text) {
              bool known = true;
              auto pt = pre_tokenizer::for_name(pre, &known);
              if (!known) throw value_error("unknown pre-tokenizer '" + pre + "'");
              const std::string s = text_arg(text);
              const std::vector<uint32_t> cpts = utf8_decode(s);
              const std::vector<size_t> offsets = pt->split_offsets(cpts);
              py::list out;
              size_t start = 0;
              for (size_t len : offsets) {
                  std::string w;
                  for (size_t k = start; k < start + len; ++k) utf8_append(w, cpts[k]);
                  out.append(as_bytes(w));
                  start += len;
              }
              return out;
          }, py::arg("pre"), py::arg("text"),
          "The words a BPE pre-tokenizer (a tokenizer.ggml.pre name) splits text into, as UTF-8 bytes.");
    m.def("pre_tokenizer_names", &known_pre_tokenizer_names, "tokenizer.ggml.pre names with their own splitting rules.");
    m.def("pre_tokenizer_patterns", [](const std::string& pre) {
              bool known = true;
              auto pt = pre_tokenizer::for_name(pre, &known);
              if (!known) throw value_error("unknown pre-tokenizer '" + pre + "'");
              py::list out;
              for (const std::string& p : pt->patterns()) out.append(as_bytes(p));
              return out;
          }, py::arg("pre"), "The regexes (UTF-8 bytes) a pre-tokenizer applies, in order.");
}
