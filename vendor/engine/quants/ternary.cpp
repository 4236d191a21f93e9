// ternary.cpp — the ternary formats TQ1_0 and TQ2_0 (layouts: ternary.h).
// Here: exact dequantization, the reference quantizers (llama.cpp's: the same
// bytes; the scale is the block's largest magnitude, each weight rounds to
// the nearest of -d, 0, d), the scalar dot products against Q8_K activations,
// and the registration that adds the SIMD kernels (ternary_x86.cpp: AVX2 /
// AVX-512, ternary_neon.cpp: neon / neon_dot).
//
// The dot products follow llama.cpp's arithmetic: per super-block the exact
// integer sum of (t - 1) * a, times (d_w * d_a), added to one float sum,
// blocks in order.
// Not here: a faster quantizer (these are weight formats; activations are
// Q8_K, kquants.cpp's), importance-matrix quantization (llama.cpp ignores the
// matrix for these types too).
#include "ternary.h"

#include <cmath>

#include "../common.h"
#include "../ggml_type.h"
#include "blocks.h"

namespace lp {

namespace {

// The trits (0..2) of one TQ1_0 block in element order (the one statement of
// the layout the scalar code reads; the SIMD kernels build the same order).
void tq1_0_trits(const block_tq1_0& b, int8_t* t /* (QK_K) */) {
    for (int n = 0; n < 5; ++n)
        for (int m = 0; m < 32; ++m) t[32 * n + m] = (int8_t)tq1_trit(b.qs[m], n);
    for (int n = 0; n < 5; ++n)
        for (int m = 0; m < 16; ++m) t[160 + 16 * n + m] = (int8_t)tq1_trit(b.qs[32 + m], n);
    for (int n = 0; n < 4; ++n)
        for (int j = 0; j < 4; ++j) t[240 + 4 * n + j] = (int8_t)tq1_trit(b.qh[j], n);
}

void tq2_0_trits(const block_tq2_0& b, int8_t* t /* (QK_K) */) {
    for (int j = 0; j < 64; j += 32)
        for (int l = 0; l < 4; ++l)
            for (int m = 0; m < 32; ++m) t[4 * j + 32 * l + m] = (int8_t)((b.qs[j + m] >> (2 * l)) & 3);
}

// The block scale: the largest magnitude, and its inverse (0 for a zero block).
// The comparison is written as llama.cpp's MAX(amax, |x|) so that NaN inputs
// give its bytes too (a NaN replaces amax until a later value compares larger).
float block_scale(const float* x, float* inv) {
    float amax = 0.0f;
    for (int j = 0; j < QK_K; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
    *inv = amax != 0.0f ? 1.0f / amax : 0.0f;
    return amax;
}

// The trit of x at inverse scale inv: round(x / d) + 1, halves away from zero
// (lround), as llama.cpp rounds.
inline int trit_of(float x, float inv) { return (int)std::lround(x * inv) + 1; }

// Packs `count` trits (most significant first), then appends zero digits up
// to five, as the base-3 fraction ceil(256 * value / 3^5) of the format.
uint8_t pack_trits(const int* t, int count) {
    uint8_t q = 0;  // uint8 arithmetic as the reference's (the value stays < 243)
    for (int i = 0; i < count; ++i) q = (uint8_t)(q * 3 + t[i]);
    for (int i = count; i < 5; ++i) q = (uint8_t)(q * 3);
    return (uint8_t)(((uint16_t)q * 256 + 242) / 243);
}

void quantize_row_tq1_0_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_tq1_0*>(dst);
    for (int64_t ib = 0; ib < n / QK_K; ++ib, x += QK_K) {
        float inv;
        y[ib].d = fp32_to_fp16(block_scale(x, &inv));
        int t[5];
        for (int m = 0; m < 32; ++m) {
            for (int k = 0; k < 5; ++k) t[k] = trit_of(x[32 * k + m], inv);
            y[ib].qs[m] = pack_trits(t, 5);
        }
        for (int m = 0; m < 16; ++m) {
            for (int k = 0; k < 5; ++k) t[k] = trit_of(x[160 + 16 * k + m], inv);
            y[ib].qs[32 + m] = pack_trits(t, 5);
        }
        for (int j = 0; j < 4; ++j) {
            for (int k = 0; k < 4; ++k) t[k] = trit_of(x[240 + 4 * k + j], inv);
            y[ib].qh[j] = pack_trits(t, 4);
        }
    }
}

void quantize_row_tq2_0_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_tq2_0*>(dst);
    for (int64_t ib = 0; ib < n / QK_K; ++ib, x += QK_K) {
        float inv;
        y[ib].d = fp32_to_fp16(block_scale(x, &inv));
        for (int j = 0; j < 64; j += 32) {
            for (int m = 0; m < 32; ++m) {
                unsigned q = 0;
                for (int l = 0; l < 4; ++l) q |= (unsigned)(trit_of(x[4 * j + 32 * l + m], inv) & 3) << (2 * l);
                y[ib].qs[j + m] = (uint8_t)q;
            }
        }
    }
}

template <class Block, void (*Trits)(const Block&, int8_t*)>
void dequantize_row_ternary(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const Block*>(src);
    int8_t t[QK_K];
    for (int64_t ib = 0; ib < n / QK_K; ++ib, y += QK_K) {
        Trits(x[ib], t);
        const float d = fp16_to_fp32(x[ib].d);
        for (int j = 0; j < QK_K; ++j) y[j] = (float)(t[j] - 1) * d;
    }
}

template <class Block, void (*Trits)(const Block&, int8_t*)>
void vec_dot_ternary_q8_k_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const Block*>(w_row);
    const auto* y = static_cast<const block_q8_K*>(a_row);
    int8_t t[QK_K];
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK_K; ++ib) {
        Trits(x[ib], t);
        int sumi = 0;
        for (int j = 0; j < QK_K; ++j) sumi += (t[j] - 1) * y[ib].qs[j];
        sum += (float)sumi * (fp16_to_fp32(x[ib].d) * y[ib].d);
    }
    *out = sum;
}

}  // namespace

void register_ternary_types(type_traits* table, isa level) {
    type_traits& t1 = table[(int)ggml_type::TQ1_0];
    t1.to_float = dequantize_row_ternary<block_tq1_0, tq1_0_trits>;
    t1.from_float_ref = quantize_row_tq1_0_ref;
    t1.vec_dot_type = ggml_type::Q8_K;
    t1.vec_dot_ref = vec_dot_ternary_q8_k_ref<block_tq1_0, tq1_0_trits>;

    type_traits& t2 = table[(int)ggml_type::TQ2_0];
    t2.to_float = dequantize_row_ternary<block_tq2_0, tq2_0_trits>;
    t2.from_float_ref = quantize_row_tq2_0_ref;
    t2.vec_dot_type = ggml_type::Q8_K;
    t2.vec_dot_ref = vec_dot_ternary_q8_k_ref<block_tq2_0, tq2_0_trits>;

    register_ternary_x86(table, level);
    register_ternary_neon(table, level);
}

}  // namespace lp
