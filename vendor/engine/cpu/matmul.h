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

// Which kernels a product may take.
//   consistent: a row's result is the same bits whatever the batch and the
//     thread count (mat-vec, tiles, panels and packed products agree): what
//     prefill == step-by-step decoding, speculative decoding and prompt reuse
//     rely on. The default.
//   throughput: also the type's throughput_panel or throughput_packed where
//     it has one (Q8_0 at the AVX-512 level: ~2.4x the 4x4 tiles on MiniLM's
//     shapes; F32 / F16 at the AVX-512 level: the packed product without its
//     lane tree, ~1.2x on MiniLM end to end), for every batch
//     size, so the batch still does not change a row's bits, but they differ
//     from consistent's in the last bits. For callers that never hold one
//     against the other: encoders (whole sequences per pass, no cache).
enum class matmul_kernels { consistent, throughput };

// y[t, r] = sum_k w[r, k] * x[t, k]   for t < n_tok, r < n_rows
//   x: (n_tok, n_cols) float32, row stride x_stride floats
//   y: (n_tok, n_rows) float32, row stride y_stride floats
// Activations are converted to the weight type's vec_dot_type first (as
// llama.cpp does). `level` picks the kernel table (tests use lower levels).
void matmul(const weight_view& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride,
            thread_pool& pool, matmul_scratch& scratch, isa level,
            matmul_kernels kernels = matmul_kernels::consistent);

// Same with the scalar reference kernels for everything (reference path).
void matmul_ref(const weight_view& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride);

}  // namespace lp
