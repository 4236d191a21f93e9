// matmul.h — products of a (possibly quantized) weight matrix with float
// activations, on the thread pool. The weight type's kernels come from the
// trait table (ggml_type.h); this file never switches on a type.
#pragma once

#include <cstdint>
#include <vector>

#include "../backend/op_args.h"
#include "../ggml_type.h"
#include "threadpool.h"

namespace lp {

// Reusable scratch memory for the quantized or packed activations.
struct matmul_scratch {
    std::vector<uint8_t> act;
};

// y[t, r] = sum_k w[r, k] * x[t, k]   for t < n_tok, r < n_rows
//   x: (n_tok, n_cols) float32, row stride x_stride floats
//   y: (n_tok, n_rows) float32, row stride y_stride floats
// Activations are converted to the weight type's vec_dot_type first (as
// llama.cpp does). `level` picks the kernel table (tests use lower levels).
void matmul(const weight_view& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride,
            thread_pool& pool, matmul_scratch& scratch, isa level);

// Same with the scalar reference kernels for everything (reference path).
void matmul_ref(const weight_view& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride);

}  // namespace lp
