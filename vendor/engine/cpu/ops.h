// ops.h — the non-matmul operations of a transformer forward pass on the CPU:
// normalisation, rotary position embedding, activations and soft-capping. Each row operation works on one row; callers
// (model/decoder.cpp) spread rows over the thread pool. Numerics follow
// llama.cpp's CPU backend where it rounds (GELU through an F16 table, queries
// and attention weights rounded to F16 against an F16 cache), so outputs agree
// with it closely.
// Not here: matrix products with weights (matmul.h), attention (attention.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../backend/op_args.h"

namespace lp {

// ---------------------------------------------------------------------------
// Row operations (n elements each)
// ---------------------------------------------------------------------------

// y = x / sqrt(mean(x²) + eps) * w      (w may be null: no weight). y may be x.
void rms_norm_row(const float* x, const float* w, float* y, int64_t n, float eps);
// y = (x - mean) / sqrt(var + eps) * w + b   (w, b may be null). y may be x.
void layer_norm_row(const float* x, const float* w, const float* b, float* y, int64_t n, float eps);
// g = gelu(g) * u, GELU in its tanh form evaluated as llama.cpp does (input
// and result rounded to F16; |x| >= 10 taken exactly). u may be null (no gate).
void gelu_mul_row(float* g, const float* u, int64_t n);
// g = quick_gelu(g) * u with quick_gelu(x) = x * sigmoid(1.702 x) (CLIP's
// activation), through an F16 table as llama.cpp evaluates it (input and
// result rounded to F16). u may be null (no gate).
void gelu_quick_mul_row(float* g, const float* u, int64_t n);
// The tables behind them: for every F16 bit pattern h, gelu / quick_gelu of
// h rounded to F16, as floats (65536 each; the GPU backend uploads them).
const float* gelu_f16_table();
const float* gelu_quick_f16_table();
// g = silu(g) * u = g / (1 + exp(-g)) * u. u may be null.
void silu_mul_row(float* g, const float* u, int64_t n);
// x = tanh(x / cap) * cap
void softcap_row(float* x, int64_t n, float cap);
// y += x
void add_row(float* y, const float* x, int64_t n);
// x *= s
void scale_row(float* x, int64_t n, float s);
// In place softmax over n values; returns nothing, sums in double.
void softmax_row(float* x, int64_t n);
// The same with an attention sink: one more logit in the max and the sum,
// whose weight is dropped (the n weights sum to less than 1).
void softmax_row_sink(float* x, int64_t n, float sink);
// Each consecutive block of `block` values (a power of two dividing n) times
// the orthonormal Walsh-Hadamard matrix of that size (Sylvester order,
// scaled by 1/sqrt(block)). The matrix is symmetric and its own inverse.
// Used to spread outliers before values are stored in a quantized KV cache.
void hadamard_blocks(float* x, int64_t n, int block);

// ---------------------------------------------------------------------------
// Rotary position embedding
// ---------------------------------------------------------------------------

// cos_sin: (n_rot/2, 2) — the cosine and sine of each pair's angle at `pos`.
void rope_cos_sin(const rope_params& p, int32_t pos, float* cos_sin);
// The same for an M-RoPE row (p.mrope()): pos4 = its temporal, height,
// width and extra positions. With all four equal it gives rope_cos_sin's
// table bit for bit.
void rope_cos_sin_mrope(const rope_params& p, const int32_t pos4[4], float* cos_sin);
// Row t of a batch's table (backend.h: rope_table): rope_cos_sin of pos[t],
// or for M-RoPE of pos[t + k * pos_stride], k = 0..3.
void rope_table_row(const rope_params& p, const int32_t* pos, int64_t pos_stride, int64_t t, float* cos_sin);
// Rotates the first n_rot dims of each of n_head heads (head_dim apart) of one
// token's row x in place, with the table from rope_cos_sin.
void rope_apply(float* x, int n_head, int head_dim, int n_rot, rope_style style, const float* cos_sin);

}  // namespace lp
