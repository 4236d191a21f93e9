// weighted.cpp — importance-weighted reference quantization: what llama.cpp's
// quantizer does when it is given an importance matrix (per-column mean
// squared activations). Each element's weight is its importance times
// sqrt(σ² + x²) (σ² over the row for the 32-element types, over the
// super-block for the K types), and the block fits minimize the weighted
// error; the Q4_K / Q5_K super-block scales are fitted with the blocks' weight
// sums. Same float operations in the same order as llama.cpp, so the blocks
// are the ones it writes (tests/test_quantize_llama_cpp.py).
//
// Not here: quantization without weights (kquants.cpp, legacy.cpp), the
// importance matrix files (llamapy/imatrix.py), the IQ4 ones (iquants.cpp,
// which share its search), the grid i-quants (iq_lattice_write_iq2.cpp,
// iq_lattice_write_iq3.cpp).
#include "weighted.h"

#include <cmath>
#include <cstring>

#include "blocks.h"
#include "kquants_fit.h"

namespace lp {

namespace {

using namespace qfit;

// weights[j] = qw[j]·sqrt(σ² + x[j]²) for one block.
void block_weights(int n, const float* x, const float* qw, float sigma2, float* w) {
    for (int j = 0; j < n; ++j) w[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

float row_sigma2(const float* x, int64_t n) {
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
    return sum_x2 / n;
}

// Q4_0 / Q5_0: symmetric 4- or 5-bit levels around 8 / 16.
template <typename Block, int NMAX>
void quantize_symmetric_32(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<Block*>(dst);
    const float sigma2 = row_sigma2(x, n);
    float w[32];
    int8_t L[32];
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        const float* xb = x + 32 * ib;
        block_weights(32, xb, qw + 32 * ib, sigma2, w);
        y[ib].d = fp32_to_fp16(fit_symmetric(32, NMAX, xb, w, L));
        if constexpr (NMAX == 8) {
            for (int j = 0; j < 16; ++j) y[ib].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
        } else {
            uint32_t qh = 0;
            for (int j = 0; j < 16; ++j) {
                y[ib].qs[j] = (uint8_t)((L[j] & 0xF) | ((L[j + 16] & 0xF) << 4));
                qh |= (uint32_t)((L[j] >> 4) & 1) << j;
                qh |= (uint32_t)((L[j + 16] >> 4) & 1) << (j + 16);
            }
            std::memcpy(y[ib].qh, &qh, 4);
        }
    }
}

// Q4_1 / Q5_1: levels 0..NMAX with a scale and a min.
template <typename Block, int NMAX>
void quantize_affine_32(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<Block*>(dst);
    const float sigma2 = row_sigma2(x, n);
    float w[32];
    uint8_t L[32];
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        const float* xb = x + 32 * ib;
        block_weights(32, xb, qw + 32 * ib, sigma2, w);
        float neg_min;
        const float d = fit_scale_min(32, NMAX, xb, w, L, &neg_min, -0.9f, 0.05f, 36, false);
        y[ib].d = fp32_to_fp16(d);
        y[ib].m = fp32_to_fp16(-neg_min);
        if constexpr (NMAX == 15) {
            for (int j = 0; j < 16; ++j) y[ib].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
        } else {
            uint32_t qh = 0;
            for (int j = 0; j < 16; ++j) {
                y[ib].qs[j] = (uint8_t)((L[j] & 0xF) | ((L[j + 16] & 0xF) << 4));
                qh |= (uint32_t)(L[j] >> 4) << j;
                qh |= (uint32_t)(L[j + 16] >> 4) << (j + 16);
            }
            std::memcpy(y[ib].qh, &qh, 4);
        }
    }
}

// Q4_K / Q5_K super-block: eight 32-element fits, then their scales and mins
// as 6-bit levels of two fp16 super-scales, fitted with the blocks' weight sums.
void quantize_k4_weighted(const float* x, const float* qw, int nmax, uint16_t* d_out, uint16_t* dmin_out,
                          uint8_t* scales_out, uint8_t L[QK_K]) {
    float sum_x2 = 0;
    for (int l = 0; l < QK_K; ++l) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / QK_K;
    float w[32], sw[8], mins[8], scales[8];
    for (int j = 0; j < 8; ++j) {
        block_weights(32, x + 32 * j, qw + 32 * j, sigma2, w);
        float sumw = 0;
        for (int l = 0; l < 32; ++l) sumw += w[l];
        sw[j] = sumw;
        scales[j] = fit_scale_min(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], -0.9f, 0.05f, 36, false);
    }
    uint8_t ls[8], lm[8];
    const float d_block = fit_levels(8, 63, scales, sw, ls);
    const float m_block = fit_levels(8, 63, mins, sw, lm);
    for (int j = 0; j < 8; ++j) {
        ls[j] = std::min<uint8_t>(63, ls[j]);
        lm[j] = std::min<uint8_t>(63, lm[j]);
    }
    k4_pack_scales(ls, lm, scales_out);
    *d_out = fp32_to_fp16(d_block);
    *dmin_out = fp32_to_fp16(m_block);
    for (int j = 0; j < 8; ++j) {
        const float d = fp16_to_fp32(*d_out) * ls[j];
        if (!d) continue;
        const float dm = fp16_to_fp32(*dmin_out) * lm[j];
        for (int l = 0; l < 32; ++l) L[32 * j + l] = (uint8_t)clamp_int(nearest_int((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

void quantize_q4_k_weighted(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<block_q4_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, qw += QK_K) {
        uint8_t L[QK_K];
        quantize_k4_weighted(x, qw, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int c = 0; c < 4; ++c)
            for (int k = 0; k < 32; ++k) y[i].qs[32 * c + k] = (uint8_t)(L[64 * c + k] | (L[64 * c + 32 + k] << 4));
    }
}

void quantize_q5_k_weighted(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<block_q5_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, qw += QK_K) {
        uint8_t L[QK_K];
        quantize_k4_weighted(x, qw, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
        std::memset(y[i].qh, 0, QK_K / 8);
        for (int e = 0; e < QK_K; ++e)
            if (L[e] > 15) y[i].qh[e % 32] |= (uint8_t)(1 << (e / 32));
        for (int c = 0; c < 4; ++c)
            for (int k = 0; k < 32; ++k)
                y[i].qs[32 * c + k] = (uint8_t)((L[64 * c + k] & 0xF) | ((L[64 * c + 32 + k] & 0xF) << 4));
    }
}

// Q6_K: as the reference, but each 16-element fit weighted by the importance
// alone (llama.cpp leaves out the σ² term here).
void quantize_q6_k_weighted(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<block_q6_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, qw += QK_K) {
        int8_t L[QK_K];
        float scales[16];
        float max_scale = 0, max_abs_scale = 0;
        for (int j = 0; j < 16; ++j) {
            scales[j] = fit_symmetric(16, 32, x + 16 * j, qw + 16 * j, L + 16 * j);
            const float a = std::fabs(scales[j]);
            if (a > max_abs_scale) { max_abs_scale = a; max_scale = scales[j]; }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            std::memset(&y[i], 0, sizeof(block_q6_K));
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = fp32_to_fp16(1 / iscale);
        for (int j = 0; j < 16; ++j) y[i].scales[j] = (int8_t)std::min(127, nearest_int(iscale * scales[j]));
        for (int j = 0; j < 16; ++j) {
            const float d = fp16_to_fp32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int l = 0; l < 16; ++l)
                L[16 * j + l] = (int8_t)(clamp_int(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
        }
        std::memset(y[i].ql, 0, sizeof(y[i].ql));
        std::memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int e = 0; e < QK_K; ++e) {
            const int h = e / 128, k = e % 64;
            y[i].ql[64 * h + k] |= (uint8_t)((L[e] & 0xF) << (e % 128 < 64 ? 0 : 4));
            y[i].qh[32 * h + e % 32] |= (uint8_t)((L[e] >> 4) << (2 * ((e % 128) / 32)));
        }
    }
}

// Q2_K: 16-element scale-min fits with weights qw·sqrt(σ² + x²) (σ² the
// super-block's mean square, without the factor 2 of the others), their
// scales and mins as 4-bit levels fitted with the blocks' weight sums.
void quantize_q2_k_weighted(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<block_q2_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, qw += QK_K) {
        uint8_t L[QK_K];
        float w[16], sw[16], mins[16], scales[16];
        float sum_x2 = 0;
        for (int j = 0; j < QK_K; ++j) sum_x2 += x[j] * x[j];
        const float sigma2 = sum_x2 / QK_K;
        for (int j = 0; j < 16; ++j) {
            block_weights(16, x + 16 * j, qw + 16 * j, sigma2, w);
            sw[j] = 0;
            for (int l = 0; l < 16; ++l) sw[j] += w[l];
            scales[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.9f, 0.05f, 36, false);
        }
        uint8_t ls[16], lm[16];
        const float dm = fit_levels(16, 15, scales, sw, ls);
        const float mm = fit_levels(16, 15, mins, sw, lm);
        y[i].d = fp32_to_fp16(dm);
        y[i].dmin = fp32_to_fp16(mm);
        for (int j = 0; j < 16; ++j) y[i].scales[j] = (uint8_t)(ls[j] | (lm[j] << 4));
        store_q2_k_quants(x, L, y[i]);
    }
}

// Q3_K: 16-element symmetric fits weighted by qw·sqrt(σ² + x²), their scales
// as 6-bit levels of one fp16 scale fitted with the blocks' weight sums.
void quantize_q3_k_weighted(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<block_q3_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, qw += QK_K) {
        int8_t L[QK_K];
        float w[16], sw[16], scales[16];
        float sum_x2 = 0;
        for (int j = 0; j < QK_K; ++j) sum_x2 += x[j] * x[j];
        const float sigma2 = 2 * sum_x2 / QK_K;
        for (int j = 0; j < 16; ++j) {
            block_weights(16, x + 16 * j, qw + 16 * j, sigma2, w);
            float sumw = 0;
            for (int l = 0; l < 16; ++l) sumw += w[l];
            sw[j] = sumw;
            scales[j] = fit_symmetric(16, 4, x + 16 * j, w, L + 16 * j);
        }
        int8_t ls8[16];
        const float d_block = fit_symmetric(16, 32, scales, sw, ls8);
        int ls[16];
        for (int j = 0; j < 16; ++j) ls[j] = ls8[j];
        q3k_pack_scales(ls, y[i].scales);
        y[i].d = fp32_to_fp16(d_block);
        store_q3_k_quants(x, L, y[i]);
    }
}

using weighted_fn = void (*)(const float*, void*, int64_t, const float*);

weighted_fn weighted_for(ggml_type t) {
    switch (t) {
        case ggml_type::Q4_0: return quantize_symmetric_32<block_q4_0, 8>;
        case ggml_type::Q5_0: return quantize_symmetric_32<block_q5_0, 16>;
        case ggml_type::Q4_1: return quantize_affine_32<block_q4_1, 15>;
        case ggml_type::Q5_1: return quantize_affine_32<block_q5_1, 31>;
        case ggml_type::Q2_K: return quantize_q2_k_weighted;
        case ggml_type::Q3_K: return quantize_q3_k_weighted;
        case ggml_type::Q4_K: return quantize_q4_k_weighted;
        case ggml_type::Q5_K: return quantize_q5_k_weighted;
        case ggml_type::Q6_K: return quantize_q6_k_weighted;
        case ggml_type::IQ4_NL: return quantize_row_iq4_nl_weighted;
        case ggml_type::IQ4_XS: return quantize_row_iq4_xs_weighted;
        case ggml_type::IQ2_XXS: return quantize_row_iq2_xxs_weighted;
        case ggml_type::IQ2_XS: return quantize_row_iq2_xs_weighted;
        case ggml_type::IQ2_S: return quantize_row_iq2_s_weighted;
        case ggml_type::IQ1_S: return quantize_row_iq1_s_weighted;
        case ggml_type::IQ1_M: return quantize_row_iq1_m_weighted;
        case ggml_type::IQ3_XXS: return quantize_row_iq3_xxs_weighted;
        case ggml_type::IQ3_S: return quantize_row_iq3_s_weighted;
        default: return nullptr;
    }
}

}  // namespace

bool has_weighted_quantizer(ggml_type t) { return weighted_for(t) != nullptr; }

bool quantize_row_weighted(ggml_type t, const float* x, void* dst, int64_t n, const float* qw) {
    const weighted_fn fn = weighted_for(t);
    if (!fn) return false;
    fn(x, dst, n, qw);
    return true;
}

}  // namespace lp
