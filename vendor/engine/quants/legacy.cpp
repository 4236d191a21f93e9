// legacy.cpp — the original ggml block formats Q4_0, Q4_1, Q5_0, Q5_1 and
// Q8_0 (32 weights per block, one fp16 scale, Q4_1/Q5_1 also an fp16 min),
// plus the activation formats Q8_0 and Q8_1 their dot products take.
//
// Per type: reference quantization (bit for bit gguf-py's / ggml's
// reference: same float operations in the same order), exact dequantization,
// and the dot product against quantized activations as a scalar reference,
// an AVX2 and an AVX-512 (VNNI) kernel (those in legacy_x86.cpp).
//
// Activation formats:
//   Q4_0, Q5_0, Q8_0 weights  x  Q8_0 activations (d, 32 int8)
//   Q4_1, Q5_1 weights        x  Q8_1 activations (d, s = d * sum(q), 32 int8)
// The min term of Q4_1/Q5_1 is m * sum(activation), which Q8_1 carries
// precomputed (as llama.cpp does). The offset of Q4_0/Q5_0 (q - 8, q - 16) is
// instead applied in integers: the AVX-512 kernels multiply the unsigned
// quants with vpdpbusd and subtract 8 (16) times the activation sum, which is
// one more vpdpbusd against a constant — exact, unlike an fp16 s.
//
// Not here: k-quants (kquants.cpp), IQ4 (iquants.cpp), fp types (float.cpp).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "../common.h"
#include "../ggml_type.h"
#include "blocks.h"
#include "legacy_x86.h"
#include "neon_kernels.h"

namespace lp {

namespace {

// ===========================================================================
// Scalar reference
// ===========================================================================

// The element of largest magnitude, the first one on ties (as numpy's argmax
// and ggml's strict `<` loop pick it), with its sign.
float signed_absmax(const float* x, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; ++j) {
        const float ax = std::fabs(x[j]);
        if (amax < ax) { amax = ax; max = x[j]; }
    }
    return max;
}

void min_max(const float* x, int n, float* mn, float* mx) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < n; ++j) { lo = std::min(lo, x[j]); hi = std::max(hi, x[j]); }
    *mn = lo;
    *mx = hi;
}

// 1/d, or 0 for an all-zero block (gguf-py: np.where(d == 0, 0, 1 / d)).
inline float inverse_or_zero(float d) { return d != 0 ? 1.0f / d : 0.0f; }

// Truncation of a non-negative value, clamped to [0, top] (gguf-py:
// np.trunc(v).astype(uint8).clip(0, top)).
inline uint8_t trunc_clamp(float v, int top) { return (uint8_t)std::min(top, (int)v); }

void quantize_row_q4_0_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q4_0*>(dst);
    for (int64_t ib = 0; ib < n / QK4_0; ++ib, x += QK4_0) {
        const float d = signed_absmax(x, QK4_0) / -8;
        const float id = inverse_or_zero(d);
        y[ib].d = fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            const uint8_t q0 = trunc_clamp(x[j] * id + 8.5f, 15);
            const uint8_t q1 = trunc_clamp(x[j + QK4_0 / 2] * id + 8.5f, 15);
            y[ib].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void quantize_row_q4_1_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q4_1*>(dst);
    for (int64_t ib = 0; ib < n / QK4_1; ++ib, x += QK4_1) {
        float mn, mx;
        min_max(x, QK4_1, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = inverse_or_zero(d);
        y[ib].d = fp32_to_fp16(d);
        y[ib].m = fp32_to_fp16(mn);
        for (int j = 0; j < QK4_1 / 2; ++j) {
            const uint8_t q0 = trunc_clamp((x[j] - mn) * id + 0.5f, 15);
            const uint8_t q1 = trunc_clamp((x[j + QK4_1 / 2] - mn) * id + 0.5f, 15);
            y[ib].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

// 5-bit quants: low nibbles packed as in Q4, bit 4 of element j in bit j of qh.
void pack_q5(const uint8_t* q, uint8_t* qs, uint8_t* qh_bytes) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
        qh |= (uint32_t)(q[j] >> 4) << j;
        qh |= (uint32_t)(q[j + 16] >> 4) << (j + 16);
    }
    std::memcpy(qh_bytes, &qh, 4);
}

void quantize_row_q5_0_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q5_0*>(dst);
    for (int64_t ib = 0; ib < n / QK5_0; ++ib, x += QK5_0) {
        const float d = signed_absmax(x, QK5_0) / -16;
        const float id = inverse_or_zero(d);
        uint8_t q[QK5_0];
        for (int j = 0; j < QK5_0; ++j) q[j] = trunc_clamp(x[j] * id + 16.5f, 31);
        y[ib].d = fp32_to_fp16(d);
        pack_q5(q, y[ib].qs, y[ib].qh);
    }
}

void quantize_row_q5_1_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q5_1*>(dst);
    for (int64_t ib = 0; ib < n / QK5_1; ++ib, x += QK5_1) {
        float mn, mx;
        min_max(x, QK5_1, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = inverse_or_zero(d);
        uint8_t q[QK5_1];
        for (int j = 0; j < QK5_1; ++j) q[j] = trunc_clamp((x[j] - mn) * id + 0.5f, 31);
        y[ib].d = fp32_to_fp16(d);
        y[ib].m = fp32_to_fp16(mn);
        pack_q5(q, y[ib].qs, y[ib].qh);
    }
}

// One Q8 block: d = amax / 127, q = round-half-away-from-zero(x * (1/d))
// (gguf-py's np_roundf is C's roundf). Returns d before fp16 rounding.
float quantize_block_q8(const float* x, int8_t* q) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = inverse_or_zero(d);
    for (int j = 0; j < 32; ++j) q[j] = (int8_t)std::roundf(x[j] * id);
    return d;
}

void quantize_row_q8_0_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_0*>(dst);
    for (int64_t ib = 0; ib < n / QK8_0; ++ib, x += QK8_0) y[ib].d = fp32_to_fp16(quantize_block_q8(x, y[ib].qs));
}

// s = d * sum(q) with d before its fp16 rounding, as ggml computes it.
void quantize_row_q8_1_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_1*>(dst);
    for (int64_t ib = 0; ib < n / QK8_1; ++ib, x += QK8_1) {
        const float d = quantize_block_q8(x, y[ib].qs);
        int sum = 0;
        for (int j = 0; j < QK8_1; ++j) sum += y[ib].qs[j];
        y[ib].d = fp32_to_fp16(d);
        y[ib].s = fp32_to_fp16((float)sum * d);
    }
}

// --- dequantization (gguf-py's operation order: d * q, or d * q + m) -------

void dequantize_row_q4_0(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const block_q4_0*>(src);
    for (int64_t ib = 0; ib < n / QK4_0; ++ib, y += QK4_0) {
        const float d = fp16_to_fp32(x[ib].d);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * (float)((x[ib].qs[j] & 0x0f) - 8);
            y[j + 16] = d * (float)((x[ib].qs[j] >> 4) - 8);
        }
    }
}

void dequantize_row_q4_1(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const block_q4_1*>(src);
    for (int64_t ib = 0; ib < n / QK4_1; ++ib, y += QK4_1) {
        const float d = fp16_to_fp32(x[ib].d), m = fp16_to_fp32(x[ib].m);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * (float)(x[ib].qs[j] & 0x0f) + m;
            y[j + 16] = d * (float)(x[ib].qs[j] >> 4) + m;
        }
    }
}

// The 5-bit quants of one block, 0..31.
void unpack_q5(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
    uint32_t qh;
    std::memcpy(&qh, qh_bytes, 4);
    for (int j = 0; j < 16; ++j) {
        q[j] = (qs[j] & 0x0f) | (int)(((qh >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
    }
}

void dequantize_row_q5_0(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const block_q5_0*>(src);
    for (int64_t ib = 0; ib < n / QK5_0; ++ib, y += QK5_0) {
        const float d = fp16_to_fp32(x[ib].d);
        int q[32];
        unpack_q5(x[ib].qs, x[ib].qh, q);
        for (int j = 0; j < 32; ++j) y[j] = d * (float)(q[j] - 16);
    }
}

void dequantize_row_q5_1(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const block_q5_1*>(src);
    for (int64_t ib = 0; ib < n / QK5_1; ++ib, y += QK5_1) {
        const float d = fp16_to_fp32(x[ib].d), m = fp16_to_fp32(x[ib].m);
        int q[32];
        unpack_q5(x[ib].qs, x[ib].qh, q);
        for (int j = 0; j < 32; ++j) y[j] = d * (float)q[j] + m;
    }
}

void dequantize_row_q8_0(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const block_q8_0*>(src);
    for (int64_t ib = 0; ib < n / QK8_0; ++ib, y += QK8_0) {
        const float d = fp16_to_fp32(x[ib].d);
        for (int j = 0; j < 32; ++j) y[j] = (float)x[ib].qs[j] * d;
    }
}

void dequantize_row_q8_1(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const block_q8_1*>(src);
    for (int64_t ib = 0; ib < n / QK8_1; ++ib, y += QK8_1) {
        const float d = fp16_to_fp32(x[ib].d);
        for (int j = 0; j < 32; ++j) y[j] = (float)x[ib].qs[j] * d;
    }
}

// --- dot products: integer sums per block, float across blocks -------------

void vec_dot_q4_0_q8_0_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_q4_0*>(w_row);
    const auto* y = static_cast<const block_q8_0*>(a_row);
    float sum = 0;
    for (int64_t ib = 0; ib < n / QK4_0; ++ib) {
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            sumi += ((x[ib].qs[j] & 0x0f) - 8) * y[ib].qs[j];
            sumi += ((x[ib].qs[j] >> 4) - 8) * y[ib].qs[j + 16];
        }
        sum += (float)sumi * (fp16_to_fp32(x[ib].d) * fp16_to_fp32(y[ib].d));
    }
    *out = sum;
}

void vec_dot_q4_1_q8_1_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_q4_1*>(w_row);
    const auto* y = static_cast<const block_q8_1*>(a_row);
    float sum = 0;
    for (int64_t ib = 0; ib < n / QK4_1; ++ib) {
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            sumi += (x[ib].qs[j] & 0x0f) * y[ib].qs[j];
            sumi += (x[ib].qs[j] >> 4) * y[ib].qs[j + 16];
        }
        sum += (float)sumi * (fp16_to_fp32(x[ib].d) * fp16_to_fp32(y[ib].d)) +
               fp16_to_fp32(x[ib].m) * fp16_to_fp32(y[ib].s);
    }
    *out = sum;
}

void vec_dot_q5_0_q8_0_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_q5_0*>(w_row);
    const auto* y = static_cast<const block_q8_0*>(a_row);
    float sum = 0;
    for (int64_t ib = 0; ib < n / QK5_0; ++ib) {
        int q[32], sumi = 0;
        unpack_q5(x[ib].qs, x[ib].qh, q);
        for (int j = 0; j < 32; ++j) sumi += (q[j] - 16) * y[ib].qs[j];
        sum += (float)sumi * (fp16_to_fp32(x[ib].d) * fp16_to_fp32(y[ib].d));
    }
    *out = sum;
}

void vec_dot_q5_1_q8_1_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_q5_1*>(w_row);
    const auto* y = static_cast<const block_q8_1*>(a_row);
    float sum = 0;
    for (int64_t ib = 0; ib < n / QK5_1; ++ib) {
        int q[32], sumi = 0;
        unpack_q5(x[ib].qs, x[ib].qh, q);
        for (int j = 0; j < 32; ++j) sumi += q[j] * y[ib].qs[j];
        sum += (float)sumi * (fp16_to_fp32(x[ib].d) * fp16_to_fp32(y[ib].d)) +
               fp16_to_fp32(x[ib].m) * fp16_to_fp32(y[ib].s);
    }
    *out = sum;
}

void vec_dot_q8_0_q8_0_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_q8_0*>(w_row);
    const auto* y = static_cast<const block_q8_0*>(a_row);
    float sum = 0;
    for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
        int sumi = 0;
        for (int j = 0; j < 32; ++j) sumi += x[ib].qs[j] * y[ib].qs[j];
        sum += (float)sumi * (fp16_to_fp32(x[ib].d) * fp16_to_fp32(y[ib].d));
    }
    *out = sum;
}

}  // namespace

void register_legacy_types(type_traits* table, isa level) {
    struct entry { ggml_type type; to_float_fn to_float; from_float_fn quantize; ggml_type dot_type; vec_dot_fn dot_ref; };
    const entry entries[] = {
        {ggml_type::Q4_0, dequantize_row_q4_0, quantize_row_q4_0_ref, ggml_type::Q8_0, vec_dot_q4_0_q8_0_ref},
        {ggml_type::Q4_1, dequantize_row_q4_1, quantize_row_q4_1_ref, ggml_type::Q8_1, vec_dot_q4_1_q8_1_ref},
        {ggml_type::Q5_0, dequantize_row_q5_0, quantize_row_q5_0_ref, ggml_type::Q8_0, vec_dot_q5_0_q8_0_ref},
        {ggml_type::Q5_1, dequantize_row_q5_1, quantize_row_q5_1_ref, ggml_type::Q8_1, vec_dot_q5_1_q8_1_ref},
        {ggml_type::Q8_0, dequantize_row_q8_0, quantize_row_q8_0_ref, ggml_type::Q8_0, vec_dot_q8_0_q8_0_ref},
    };
    for (const entry& e : entries) {
        type_traits& t = table[(int)e.type];
        t.to_float = e.to_float;
        t.from_float_ref = e.quantize;
        t.vec_dot_type = e.dot_type;
        t.vec_dot_ref = e.dot_ref;
    }
    // Q8_1 exists only as an activation format: no dot product of its own.
    type_traits& q8_1 = table[(int)ggml_type::Q8_1];
    q8_1.to_float = dequantize_row_q8_1;
    q8_1.from_float_ref = quantize_row_q8_1_ref;

    register_legacy_x86(table, level);
    register_legacy_panels_x86(table, level);
    register_legacy_tiles_avx2(table, level);
#if defined(LP_HAVE_NEON)
    register_legacy_neon(table, level);
#endif
    (void)level;
}

}  // namespace lp
