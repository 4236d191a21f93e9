// overrides.h — Python's kv_overrides dict ({key: bool | int | float | str})
// as the engine's metadata overrides (gguf/gguf.h). Shared by the Model and
// Vocab bindings so both read the same effective metadata.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace lp {

inline std::vector<gguf_override> overrides_from_python(const pybind11::object& obj) {
    namespace py = pybind11;
    std::vector<gguf_override> out;
    if (obj.is_none()) return out;
    if (!py::isinstance<py::dict>(obj)) throw py::type_error("kv_overrides must be a dict of metadata key -> value");
    for (auto item : py::reinterpret_borrow<py::dict>(obj)) {
        if (!py::isinstance<py::str>(item.first)) throw py::type_error("kv_overrides keys must be str");
        gguf_override o;
        o.key = item.first.cast<std::string>();
        const py::handle v = item.second;
        // bool first: Python's bool is an int.
        if (py::isinstance<py::bool_>(v)) { o.k = gguf_override::kind::boolean; o.b = v.cast<bool>(); }
        else if (py::isinstance<py::int_>(v)) { o.k = gguf_override::kind::integer; o.i = v.cast<int64_t>(); }
        else if (py::isinstance<py::float_>(v)) { o.k = gguf_override::kind::floating; o.f = v.cast<double>(); }
        else if (py::isinstance<py::str>(v)) { o.k = gguf_override::kind::string; o.s = v.cast<std::string>(); }
        else throw py::type_error("kv_overrides[" + o.key + "] must be a bool, int, float or str");
        out.push_back(std::move(o));
    }
    return out;
}

}  // namespace lp
