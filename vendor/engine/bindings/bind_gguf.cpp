// bind_gguf.cpp — Python access to the GGUF reader (gguf/gguf.h):
//   _engine.GGUFReader  one validated, mapped file (a split model: all its
//                       parts): metadata, tensor table, tensor bytes as
//                       read-only numpy views
//   _engine.GGUFArray   a lazy view of one (big) metadata array
// Every object handed to Python (arrays, views) holds a reference to the
// mapping, so close() only drops the reader's own reference and nothing
// handed out earlier ever points at unmapped memory.
// Not here: the user-facing API (llamapy/gguf_file.py wraps these classes).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "common.h"
#include "gguf/gguf.h"
#include "py_common.h"

namespace py = pybind11;
using namespace lp;

namespace {

using file_ptr = std::shared_ptr<const gguf_file>;

// Strings in GGUF files are meant to be UTF-8; bad bytes become U+FFFD.
py::str decode_utf8(const uint8_t* p, uint64_t n) {
    PyObject* s = PyUnicode_DecodeUTF8((const char*)p, (Py_ssize_t)n, "replace");
    if (!s) throw py::error_already_set();
    return py::reinterpret_steal<py::str>(s);
}

py::str decode_utf8(const std::string& s) { return decode_utf8((const uint8_t*)s.data(), s.size()); }

// An object that keeps the mapping alive, to serve as a numpy array's base.
py::capsule keep_alive(const file_ptr& f) {
    return py::capsule(new file_ptr(f), [](void* p) { delete static_cast<file_ptr*>(p); });
}

// A read-only numpy view of `count` elements of `dtype` at `p`, memory that
// f (or, for a split model, one of the parts f holds) maps.
py::array readonly_view(const file_ptr& f, const uint8_t* p, py::dtype dtype, uint64_t count) {
    py::array a(dtype, {(py::ssize_t)count}, {(py::ssize_t)dtype.itemsize()}, p, keep_alive(f));
    a.attr("setflags")(py::arg("write") = false);
    return a;
}

py::dtype dtype_of(gguf_type t) {
    switch (t) {
        case gguf_type::U8: return py::dtype::of<uint8_t>();
        case gguf_type::I8: return py::dtype::of<int8_t>();
        case gguf_type::U16: return py::dtype::of<uint16_t>();
        case gguf_type::I16: return py::dtype::of<int16_t>();
        case gguf_type::U32: return py::dtype::of<uint32_t>();
        case gguf_type::I32: return py::dtype::of<int32_t>();
        case gguf_type::F32: return py::dtype::of<float>();
        case gguf_type::BOOL: return py::dtype::of<bool>();
        case gguf_type::U64: return py::dtype::of<uint64_t>();
        case gguf_type::I64: return py::dtype::of<int64_t>();
        case gguf_type::F64: return py::dtype::of<double>();
        default: throw value_error(std::string("no numpy dtype for GGUF ") + gguf_type_name(t) + " values");
    }
}

std::string type_label(const gguf_kv& kv) {
    if (kv.type != gguf_type::ARRAY) return gguf_type_name(kv.type);
    return std::string("array[") + gguf_type_name(kv.array.elem_type) + "]";
}

// A lazy metadata array. `array` points either into the file's own table
// (top-level values, sharing the file's ownership) or at a re-read nested one.
struct array_view {
    file_ptr file;
    std::shared_ptr<const gguf_array> array;
};

py::object value_to_py(const file_ptr& f, gguf_type t, uint64_t pos, const gguf_array* top, uint64_t lazy_threshold);

py::list elements_to_py(const file_ptr& f, const gguf_array& a, uint64_t begin, uint64_t end, uint64_t lazy_threshold) {
    py::list out(end - begin);
    for (uint64_t i = begin; i < end; ++i) {
        py::object v = value_to_py(f, a.elem_type, f->array_elem_pos(a, i), nullptr, lazy_threshold);
        PyList_SET_ITEM(out.ptr(), (Py_ssize_t)(i - begin), v.release().ptr());
    }
    return out;
}

py::object array_to_py(const file_ptr& f, uint64_t pos, const gguf_array* top, uint64_t lazy_threshold) {
    std::shared_ptr<const gguf_array> a;
    if (top) a = std::shared_ptr<const gguf_array>(f, top);  // aliasing: lives as long as the file
    else a = std::make_shared<const gguf_array>(f->array_at(pos));
    if (a->count > lazy_threshold) return py::cast(array_view{f, a});
    return elements_to_py(f, *a, 0, a->count, lazy_threshold);
}

py::object value_to_py(const file_ptr& f, gguf_type t, uint64_t pos, const gguf_array* top, uint64_t lazy_threshold) {
    switch (t) {
        case gguf_type::U8: return py::int_(f->scalar_at<uint8_t>(pos));
        case gguf_type::I8: return py::int_(f->scalar_at<int8_t>(pos));
        case gguf_type::U16: return py::int_(f->scalar_at<uint16_t>(pos));
        case gguf_type::I16: return py::int_(f->scalar_at<int16_t>(pos));
        case gguf_type::U32: return py::int_(f->scalar_at<uint32_t>(pos));
        case gguf_type::I32: return py::int_(f->scalar_at<int32_t>(pos));
        case gguf_type::U64: return py::int_(f->scalar_at<uint64_t>(pos));
        case gguf_type::I64: return py::int_(f->scalar_at<int64_t>(pos));
        case gguf_type::F32: return py::float_(f->scalar_at<float>(pos));
        case gguf_type::F64: return py::float_(f->scalar_at<double>(pos));
        case gguf_type::BOOL: return py::bool_(f->scalar_at<uint8_t>(pos) != 0);
        case gguf_type::STRING: {
            const gguf_str s = f->string_at(pos);
            return decode_utf8(f->bytes() + s.pos, s.len);
        }
        case gguf_type::ARRAY: return array_to_py(f, pos, top, lazy_threshold);
        default: throw value_error("unknown GGUF value type");
    }
}

// ---------------------------------------------------------------------------
// GGUFReader
// ---------------------------------------------------------------------------
struct reader {
    file_ptr file;  // null once closed

    const file_ptr& get() const {
        if (!file) throw value_error("I/O operation on a closed GGUF file");
        return file;
    }
};

reader open_reader(const std::string& path) {
    file_ptr f;
    std::optional<gguf_os_error> os_error;
    {
        py::gil_scoped_release nogil;
        try {
            f = gguf_file::open(path);
        } catch (const gguf_os_error& e) {
            os_error = e;
        }
    }
    if (os_error) raise_os_error(*os_error);
    return reader{f};
}

reader reader_from_bytes(const py::buffer& data) {
    py::buffer_info info = data.request();
    if (info.itemsize != 1 || info.ndim != 1 || info.strides[0] != 1)
        throw value_error("from_bytes needs a contiguous 1-D bytes-like object");
    py::gil_scoped_release nogil;
    return reader{gguf_file::from_buffer(info.ptr, (size_t)info.size)};
}

py::list reader_metadata(const reader& r, uint64_t lazy_threshold) {
    const file_ptr& f = r.get();
    py::list out(f->kvs().size());
    for (size_t i = 0; i < f->kvs().size(); ++i) {
        const gguf_kv& kv = f->kvs()[i];
        py::object v = value_to_py(f, kv.type, kv.value_pos, &kv.array, lazy_threshold);
        py::tuple item = py::make_tuple(decode_utf8(kv.key), type_label(kv), v);
        PyList_SET_ITEM(out.ptr(), (Py_ssize_t)i, item.release().ptr());
    }
    return out;
}

// (name, ggml type id, ggml type name, ne tuple, absolute offset in its part's
// file, nbytes, row bytes, part) per tensor.
py::list reader_tensor_infos(const reader& r) {
    const file_ptr& f = r.get();
    py::list out(f->tensors().size());
    for (size_t i = 0; i < f->tensors().size(); ++i) {
        const gguf_tensor_info& t = f->tensors()[i];
        py::tuple ne(t.n_dims);
        for (uint32_t d = 0; d < t.n_dims; ++d) PyTuple_SET_ITEM(ne.ptr(), d, py::int_(t.ne[d]).release().ptr());
        py::tuple item = py::make_tuple(decode_utf8(t.name), (int)t.type, type_name(t.type), ne,
                                        f->part(t.part).data_offset() + t.offset, t.nbytes, row_size(t.type, t.ne[0]),
                                        t.part);
        PyList_SET_ITEM(out.ptr(), (Py_ssize_t)i, item.release().ptr());
    }
    return out;
}

// The bytes of tensor `index` as a read-only 1-D uint8 view into the mapping.
py::array reader_tensor_bytes(const reader& r, int64_t index) {
    const file_ptr& f = r.get();
    if (index < 0 || (uint64_t)index >= f->tensors().size()) throw py::index_error("tensor index out of range");
    const gguf_tensor_info& t = f->tensors()[(size_t)index];
    return readonly_view(f, (const uint8_t*)f->tensor_data(t), py::dtype::of<uint8_t>(), t.nbytes);
}

// [(path, file size, data section offset, tensor count)] per file of a split
// model, in order; one entry for a single file.
py::list reader_parts(const reader& r) {
    const file_ptr& f = r.get();
    std::vector<uint64_t> n_tensors(f->n_parts(), 0);
    for (const gguf_tensor_info& t : f->tensors()) ++n_tensors[t.part];
    py::list out;
    for (size_t i = 0; i < f->n_parts(); ++i) {
        const gguf_file& p = f->part(i);
        out.append(py::make_tuple(py::str(p.path()), p.size(), p.data_offset(), n_tensors[i]));
    }
    return out;
}

// ---------------------------------------------------------------------------
// GGUFArray
// ---------------------------------------------------------------------------
py::object array_get(const array_view& v, int64_t i) {
    if (i < 0 || (uint64_t)i >= v.array->count) throw py::index_error("GGUF array index out of range");
    return value_to_py(v.file, v.array->elem_type, v.file->array_elem_pos(*v.array, (uint64_t)i), nullptr,
                       UINT64_MAX);
}

// Elements [start, stop) as a list, both clamped to the array.
py::list array_slice(const array_view& v, int64_t start, int64_t stop) {
    const uint64_t n = v.array->count;
    const uint64_t b = start < 0 ? 0 : std::min<uint64_t>((uint64_t)start, n);
    const uint64_t e = stop < 0 ? 0 : std::min<uint64_t>((uint64_t)stop, n);
    return elements_to_py(v.file, *v.array, b, std::max(b, e), UINT64_MAX);
}

py::array array_numpy(const array_view& v) {
    return readonly_view(v.file, v.file->bytes() + v.array->data_pos, dtype_of(v.array->elem_type), v.array->count);
}

}  // namespace

void raise_os_error(const gguf_os_error& e) {
    const int err = e.err ? e.err : EIO;
    const std::string detail = e.detail.empty() ? std::strerror(err) : e.detail;
    // OSError(errno, ...) picks its subclass (FileNotFoundError for ENOENT, ...).
    py::object exc = py::reinterpret_borrow<py::object>(PyExc_OSError)(err, detail, py::str(e.path));
    PyErr_SetObject((PyObject*)Py_TYPE(exc.ptr()), exc.ptr());
    throw py::error_already_set();
}

void bind_gguf(py::module_& m) {
    py::class_<array_view>(m, "GGUFArray", "Lazy view of a GGUF metadata array (keeps the file mapped).")
        .def("__len__", [](const array_view& v) { return v.array->count; })
        .def_property_readonly("elem_type", [](const array_view& v) { return gguf_type_name(v.array->elem_type); })
        .def("get", &array_get, py::arg("index"), "Element `index` (0 <= index < len).")
        .def("slice", &array_slice, py::arg("start"), py::arg("stop"), "Elements [start, stop) as a list.")
        .def("numpy", &array_numpy, "Read-only zero-copy numpy view (numeric and bool arrays only).");

    py::class_<reader>(m, "GGUFReader", "A validated, memory-mapped GGUF file (use llamapy.GGUFFile).")
        .def(py::init(&open_reader), py::arg("path"))
        .def_static("from_bytes", &reader_from_bytes, py::arg("data"), "Validate a copy of an in-memory GGUF image.")
        .def_property_readonly("closed", [](const reader& r) { return !r.file; })
        .def_property_readonly("version", [](const reader& r) { return r.get()->version(); })
        .def_property_readonly("alignment", [](const reader& r) { return r.get()->alignment(); })
        .def_property_readonly("data_offset", [](const reader& r) { return r.get()->data_offset(); })
        .def_property_readonly("size", [](const reader& r) { return r.get()->total_size(); },
                               "Bytes of the file (of all its parts for a split model).")
        .def("parts", &reader_parts, "[(path, size, data offset, tensor count)] per file of a split model.")
        .def("metadata", &reader_metadata, py::arg("lazy_threshold") = 1024,
             "[(key, type label, value)]; arrays longer than lazy_threshold come as GGUFArray.")
        .def("tensor_infos", &reader_tensor_infos,
             "[(name, type id, type name, ne, byte offset in its part's file, nbytes, row bytes, part)] in file "
             "order (part order for a split model).")
        .def("tensor_bytes", &reader_tensor_bytes, py::arg("index"), "Read-only uint8 view of a tensor's bytes.")
        .def("close", [](reader& r) { r.file.reset(); }, "Drop this reader's reference to the mapping.");
}
