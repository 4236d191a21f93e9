// py_common.h — helpers the binding files share (defined in bind_quants.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include "cpu/threadpool.h"
#include "ggml_type.h"

// A ggml type from its name ("Q4_K", case-insensitive) or number (an int or
// gguf.GGMLQuantizationType); ValueError when there is none.
lp::ggml_type parse_type(const pybind11::object& t);
// One pool per thread count (0: the default), created on first use and kept.
lp::thread_pool& pool_for(int n_threads);
