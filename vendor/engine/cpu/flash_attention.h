// flash_attention.h — the fused, tiled path of attention() (attention.h,
// attention_path::flash) and the small kernel table it runs on.
//
// Why it is shaped this way:
//   - No row of scores over all cells: a block of query rows walks the cells
//     in tiles of kFlashTile (one 64-bit mask word), keeping per query a
//     running max, a running sum and an F32 output accumulator that is
//     rescaled when the max grows (online softmax). Work memory is per thread
//     and independent of the context length.
//   - Keys and values are read from the cache bytes: F32 / F16 / BF16 by SIMD
//     kernels that convert on load, block-quantized keys through the type's
//     vec_dot against the queries in the type's activation format (as
//     llama.cpp's CPU flash attention does), quantized values dequantized once
//     per tile. Every tile is shared by all queries of the block (rows × the
//     heads of a GQA group).
//   - Cells are grouped in chunks of kFlashChunk; each chunk yields a partial
//     (max, sum, acc) that is merged into the row's total in chunk order. A
//     block on one thread and a block whose chunks are spread over threads
//     (token generation: split-K) therefore do the same arithmetic, and so do
//     a row alone and a row inside a block (cells only its neighbours see
//     add exact zeros in fixed slots). Results depend on neither the thread
//     count nor the row grouping.
//   - Tiles and chunks are aligned to cell indices, so the result depends on
//     the cache's cell order, in rounding only.
// Not here: the explicit path (attention.cpp), masks (kv_cache.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention.h"

namespace lp {

void flash_attention(const attention_args& a, thread_pool& pool, attention_scratch& scratch);

// Element formats the float kernels read straight from the cache.
enum class flash_elem : int { f32 = 0, f16 = 1, bf16 = 2 };

// s[qi * s_stride + i] = q[qi] · key(i) for qi < nq, i < n: key(i) has d
// elements of format e at k + cells[i] * k_row_bytes; q is nq rows of d
// floats. Each query's dot product is the same sequence of operations
// whatever nq and n are (results do not depend on the block's shape).
using flash_dots_fn = void (*)(const uint8_t* k, size_t k_row_bytes, const int32_t* cells, int n, const float* q,
                               int nq, int d, float* s, int s_stride);
// acc[qi * acc_stride + e] += sum_i p[qi * p_stride + i] * value(i)[e] for
// qi < nq, e < d, cells i in ascending order (one FMA chain per element).
using flash_pv_fn = void (*)(const uint8_t* v, size_t v_row_bytes, const int32_t* cells, int n, const float* p,
                             int p_stride, int nq, int d, float* acc, int acc_stride);
// x[i] = exp(x[i] - m) for i < kFlashTile (exactly 0 where x[i] is -inf);
// returns their sum, added in double and rounded once, so it does not depend
// on which slots hold the nonzero values (the other rows' cells in a tile).
using flash_exp_sum_fn = float (*)(float* x, float m);

// max of x[i], i < kFlashTile (-inf when all are).
using flash_max_fn = float (*)(const float* x);

struct flash_kernels {
    flash_dots_fn dots[3] = {};  // by flash_elem
    flash_pv_fn pv[3] = {};
    flash_exp_sum_fn exp_sum = nullptr;
    flash_max_fn max_tile = nullptr;
};

// The table for an ISA level (capped to what the CPU and the build support):
// the scalar references, with SIMD entries where compiled in.
const flash_kernels& flash_kernels_for(isa level);
// Fills the SIMD entries for x86 levels (flash_kernels_x86.cpp).
void flash_kernels_x86(flash_kernels& k, isa level);

}  // namespace lp
