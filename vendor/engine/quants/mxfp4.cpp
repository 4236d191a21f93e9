// mxfp4.cpp — MXFP4, the 4-bit microscaling float format gpt-oss ships its
// experts in (layout and value table: mxfp4.h). Here: exact dequantization,
// the reference quantizer (llama.cpp's: the same bytes, float operation for
// float operation), the scalar dot product against Q8_0 activations, and the
// registration that adds the SIMD kernels (mxfp4_x86.cpp: AVX2 / AVX-512,
// mxfp4_neon.cpp: neon / neon_dot).
//
// The dot product follows llama.cpp's arithmetic: per block the exact integer
// dot of the doubled codes with the Q8_0 ints, times (d_a · 2^(e - 128)),
// added to one float sum, blocks in order.
// Not here: a faster quantizer (MXFP4 is a weight format; activations are
// Q8_0, legacy.cpp's).
#include "mxfp4.h"

#include <cmath>

#include "../common.h"
#include "../ggml_type.h"
#include "blocks.h"

namespace lp {

namespace {

// The exponent llama.cpp gives a block whose largest magnitude is amax > 0:
// floor(log2(amax)) - 2 + 127, so amax lands in [4, 8) times the scale
// 2^(e - 127) and the largest code, 6, covers the top of the block (values
// in (6, 8) scale units round down to it). Computed as llama.cpp computes
// it: log2f's result, which for amax just below a power of two rounds up to
// that power's exponent (so floor gives one more than amax's binary
// exponent), then a float -> int conversion taken modulo 256, as x86
// converts (for amax < 2^-125 the value is negative and wraps to 232..255;
// gguf-py's numpy cast does the same).
uint8_t block_exponent(float amax) {
    if (!(amax > 0.0f)) return 0;
    const float e = std::floor(std::log2(amax)) - 2.0f + 127.0f;
    return (uint8_t)(int)e;
}

// The code whose value (grid[i] = kvalues_mxfp4[i] · scale) is nearest to x
// by the float error |grid[i] - x|, the lowest index on ties: code 0 (+0)
// before code 8 (-0), and between two magnitudes the smaller one.
int nearest_code(float x, const float* grid) {
    int best = 0;
    float best_err = std::fabs(grid[0] - x);
    for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(grid[i] - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

void quantize_row_mxfp4_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_mxfp4*>(dst);
    for (int64_t ib = 0; ib < n / QK_MXFP4; ++ib, x += QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; ++j) amax = std::fabs(x[j]) > amax ? std::fabs(x[j]) : amax;
        const uint8_t e = block_exponent(amax);
        const float d = e8m0_half(e);
        float grid[16];  // exact: small integers times a power of two
        for (int i = 0; i < 16; ++i) grid[i] = (float)kvalues_mxfp4[i] * d;
        y[ib].e = e;
        for (int j = 0; j < QK_MXFP4 / 2; ++j) {
            const int lo = nearest_code(x[j], grid), hi = nearest_code(x[j + QK_MXFP4 / 2], grid);
            y[ib].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void dequantize_row_mxfp4(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const block_mxfp4*>(src);
    for (int64_t ib = 0; ib < n / QK_MXFP4; ++ib, y += QK_MXFP4) {
        const float d = e8m0_half(x[ib].e);
        for (int j = 0; j < QK_MXFP4 / 2; ++j) {
            y[j] = (float)kvalues_mxfp4[x[ib].qs[j] & 0xf] * d;
            y[j + QK_MXFP4 / 2] = (float)kvalues_mxfp4[x[ib].qs[j] >> 4] * d;
        }
    }
}

void vec_dot_mxfp4_q8_0_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_mxfp4*>(w_row);
    const auto* y = static_cast<const block_q8_0*>(a_row);
    float sum = 0;
    for (int64_t ib = 0; ib < n / QK_MXFP4; ++ib) {
        int sumi = 0;
        for (int j = 0; j < QK_MXFP4 / 2; ++j) {
            sumi += kvalues_mxfp4[x[ib].qs[j] & 0xf] * y[ib].qs[j];
            sumi += kvalues_mxfp4[x[ib].qs[j] >> 4] * y[ib].qs[j + QK_MXFP4 / 2];
        }
        const float d = fp16_to_fp32(y[ib].d) * e8m0_half(x[ib].e);
        sum += d * (float)sumi;
    }
    *out = sum;
}

}  // namespace

void register_mxfp4_types(type_traits* table, isa level) {
    type_traits& t = table[(int)ggml_type::MXFP4];
    t.to_float = dequantize_row_mxfp4;
    t.from_float_ref = quantize_row_mxfp4_ref;
    t.vec_dot_type = ggml_type::Q8_0;
    t.vec_dot_ref = vec_dot_mxfp4_q8_0_ref;
    register_mxfp4_x86(table, level);
    register_mxfp4_neon(table, level);
}

}  // namespace lp
