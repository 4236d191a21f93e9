// py_common.h — helpers the binding files share (defined in bind_quants.cpp,
// the registry's in bind_backend.cpp, raise_os_error in bind_gguf.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "cpu/threadpool.h"
#include "ggml_type.h"

namespace lp { struct gguf_os_error; }
// Raises the OSError (FileNotFoundError, ...) for a file that could not be
// opened, naming the file it concerns (defined in bind_gguf.cpp).
[[noreturn]] void raise_os_error(const lp::gguf_os_error& e);
// A ggml type from its name ("Q4_K", case-insensitive) or number (an int or
// gguf.GGMLQuantizationType); ValueError when there is none.
lp::ggml_type parse_type(const pybind11::object& t);
// An ISA level by name (scalar, avx2, avx512, neon, neon_dot, best); ValueError otherwise.
lp::isa parse_isa(const std::string& s);
// One pool per thread count (0: the default), created on first use and kept.
lp::thread_pool& pool_for(int n_threads);
// The compiled backends' names, and the GPU devices as dicts (system_info).
pybind11::tuple backend_name_tuple();
pybind11::list gpu_device_list();
