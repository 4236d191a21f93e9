// kquants.cpp — the k-quant family of GGUF weight types: Q2_K, Q3_K, Q4_K,
// Q5_K and Q6_K (super-blocks of 256 weights whose 16- or 32-weight sub-block
// scales are themselves quantized against one or two fp16 block scales), and
// Q8_K, the 8-bit activation format all their dot products take.
//
// Per type: exact dequantization (bit for bit what gguf-py computes), the
// reference quantization llama.cpp applies when it has no importance matrix,
// a scalar reference dot product, and the registration of all of it with the
// type table. The AVX2 / AVX-512 VNNI kernels, under the same names with an
// _avx2 / _avx512 suffix, are in kquants_x86.cpp. Not here: importance-matrix
// quantization, the matrix drivers (cpu/matmul.cpp).
//
// Every dot product has the same shape. With q the weight quants, a the Q8_K
// quants and g the sub-blocks of a super-block:
//   block = d·d_a·Σ_g scale_g·Σ_{k∈g} q_k·a_k  −  dmin·d_a·Σ_g min_g·Σ_{k∈g} a_k
// The quants are kept unsigned so u8×s8 instructions (maddubs, VNNI)
// apply; the per-16 sums of the activations (Q8_K.bsums) give the second term
// without reading the activations again. Q3_K and Q6_K have signed quants: we
// add 4 resp. 32 to make them unsigned and take offset·scale_g as their "min".
#include <algorithm>
#include <cmath>
#include <cstring>

#include "../common.h"
#include "../ggml_type.h"
#include "blocks.h"
#include "kquants_x86.h"
#include "kquants_fit.h"
#include "neon_kernels.h"

namespace lp {

namespace {

using namespace qfit;  // nearest_int, the scale fits (kquants_fit.h)

// ===========================================================================
// Shared helpers
// ===========================================================================


// Q4_K / Q5_K pack eight 6-bit scales and eight 6-bit mins into 12 bytes:
// bytes 0-3 (4-7) hold scales (mins) 0-3 in their low 6 bits and the top 2 bits
// of scales (mins) 4-7 in their top 2; bytes 8-11 hold the low 4 bits of scale
// 4-7 (low nibble) and min 4-7 (high nibble).
inline void k4_unpack_scales(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; ++j) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 0xF) | ((s[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}


// Q3_K packs sixteen 6-bit scales (stored +32) into 12 bytes: the low nibbles
// of scales 0-7 in the low halves of bytes 0-7, of scales 8-15 in the high
// halves; the top 2 bits of scale j in byte 8 + j%4 at bit 2·(j/4).


// The 2-bit fields of Q2_K and Q3_K: weight h·128 + j·32 + k sits in bits 2j
// of byte h·32 + k. Q6_K's upper 2 bits use the same pattern.
inline int crumb(const uint8_t* qs, int e) { return (qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

// ===========================================================================
// Decoding: one super-block to its integer quants (in weight order) and
// sub-block scales. Dequantization and the reference dot products share these,
// so each layout is written down once.
// ===========================================================================

// q in [0, 3]; w = d·sc[g]·q − dmin·mn[g], g = e/16.
void decode_q2_k(const block_q2_K& b, int8_t q[QK_K], int sc[16], int mn[16]) {
    for (int e = 0; e < QK_K; ++e) q[e] = (int8_t)crumb(b.qs, e);
    for (int g = 0; g < 16; ++g) { sc[g] = b.scales[g] & 0xF; mn[g] = b.scales[g] >> 4; }
}

// q in [-4, 3]: 2 low bits, minus 4 unless the weight's bit in hmask (bit
// e/32 of byte e%32) is set; w = d·sc[g]·q, g = e/16, sc in [-32, 31].
void decode_q3_k(const block_q3_K& b, int8_t q[QK_K], int sc[16]) {
    for (int e = 0; e < QK_K; ++e) {
        const int high = (b.hmask[e % 32] >> (e / 32)) & 1;
        q[e] = (int8_t)(crumb(b.qs, e) - (high ? 0 : 4));
    }
    int8_t s[16];
    q3k_unpack_scales(b.scales, s);
    for (int g = 0; g < 16; ++g) sc[g] = s[g];
}

// q in [0, 15]: byte c·32 + k holds weight c·64 + k (low nibble) and
// c·64 + 32 + k (high nibble); w = d·sc[g]·q − dmin·mn[g], g = e/32.
void decode_q4_k(const block_q4_K& b, int8_t q[QK_K], int sc[8], int mn[8]) {
    for (int c = 0; c < 4; ++c)
        for (int k = 0; k < 32; ++k) {
            q[64 * c + k] = (int8_t)(b.qs[32 * c + k] & 0xF);
            q[64 * c + 32 + k] = (int8_t)(b.qs[32 * c + k] >> 4);
        }
    uint8_t s[8], m[8];
    k4_unpack_scales(b.scales, s, m);
    for (int g = 0; g < 8; ++g) { sc[g] = s[g]; mn[g] = m[g]; }
}

// q in [0, 31]: Q4_K's nibbles plus a fifth bit, bit e/32 of qh[e%32].
void decode_q5_k(const block_q5_K& b, int8_t q[QK_K], int sc[8], int mn[8]) {
    for (int c = 0; c < 4; ++c)
        for (int k = 0; k < 32; ++k) {
            q[64 * c + k] = (int8_t)(b.qs[32 * c + k] & 0xF);
            q[64 * c + 32 + k] = (int8_t)(b.qs[32 * c + k] >> 4);
        }
    for (int e = 0; e < QK_K; ++e) q[e] = (int8_t)(q[e] | (((b.qh[e % 32] >> (e / 32)) & 1) << 4));
    uint8_t s[8], m[8];
    k4_unpack_scales(b.scales, s, m);
    for (int g = 0; g < 8; ++g) { sc[g] = s[g]; mn[g] = m[g]; }
}

// q in [-32, 31]: the low 4 bits of weight h·128 + k (k < 64) are the low
// nibble of ql[h·64 + k], those of h·128 + 64 + k its high nibble; the top 2
// bits are crumbs of qh; w = d·sc[g]·q, g = e/16, sc int8.
void decode_q6_k(const block_q6_K& b, int8_t q[QK_K], int sc[16]) {
    for (int e = 0; e < QK_K; ++e) {
        const int h = e / 128, k = e % 64;
        const int low = (b.ql[64 * h + k] >> (e % 128 < 64 ? 0 : 4)) & 0xF;
        q[e] = (int8_t)((low | (crumb(b.qh, e) << 4)) - 32);
    }
    for (int g = 0; g < 16; ++g) sc[g] = b.scales[g];
}

// ===========================================================================
// Dequantization. The float operations and their order are gguf-py's
// (sub-block scale and min first, then scale·q − min), so results match it
// bit for bit; the build compiles with -ffp-contract=off so nothing is fused.
// ===========================================================================

void dequantize_q2_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const block_q2_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
        int8_t q[QK_K];
        int sc[16], mn[16];
        decode_q2_k(b[i], q, sc, mn);
        const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
        for (int e = 0; e < QK_K; ++e) {
            const float dl = d * (float)sc[e / 16], ml = dmin * (float)mn[e / 16];
            dst[e] = dl * (float)q[e] - ml;
        }
    }
}

void dequantize_q3_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const block_q3_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
        int8_t q[QK_K];
        int sc[16];
        decode_q3_k(b[i], q, sc);
        const float d = fp16_to_fp32(b[i].d);
        for (int e = 0; e < QK_K; ++e) dst[e] = (d * (float)sc[e / 16]) * (float)q[e];
    }
}

void dequantize_q4_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const block_q4_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
        int8_t q[QK_K];
        int sc[8], mn[8];
        decode_q4_k(b[i], q, sc, mn);
        const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
        for (int e = 0; e < QK_K; ++e) {
            const float dl = d * (float)sc[e / 32], ml = dmin * (float)mn[e / 32];
            dst[e] = dl * (float)q[e] - ml;
        }
    }
}

void dequantize_q5_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const block_q5_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
        int8_t q[QK_K];
        int sc[8], mn[8];
        decode_q5_k(b[i], q, sc, mn);
        const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
        for (int e = 0; e < QK_K; ++e) {
            const float dl = d * (float)sc[e / 32], ml = dmin * (float)mn[e / 32];
            dst[e] = dl * (float)q[e] - ml;
        }
    }
}

void dequantize_q6_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const block_q6_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
        int8_t q[QK_K];
        int sc[16];
        decode_q6_k(b[i], q, sc);
        const float d = fp16_to_fp32(b[i].d);
        for (int e = 0; e < QK_K; ++e) dst[e] = (d * (float)sc[e / 16]) * (float)q[e];
    }
}

void dequantize_q8_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const block_q8_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K)
        for (int e = 0; e < QK_K; ++e) dst[e] = b[i].d * (float)b[i].qs[e];
}

// ===========================================================================
// Reference quantization: llama.cpp's algorithms without an importance matrix,
// step for step and in the same float operation order, so that files we write
// carry the quants llama.cpp would write.
// ===========================================================================





// Symmetric fit for Q3_K (nmax 4): round against the largest-magnitude value,
// then up to 5 passes of coordinate descent, moving one quant at a time to
// the level the least-squares scale of the others suggests when that raises
// (Σwxl)²/Σwl², w = x². Returns the scale; L gets values + nmax.
float fit_q3(int n, int nmax, const float* x, int8_t* L) {
    float amax;
    const float mx = signed_absmax(n, x, &amax);
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    const float iscale = -nmax / mx;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                const int new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}


void quantize_q2_k_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q2_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        uint8_t L[QK_K];
        float weights[16], mins[16], scales[16];
        float max_scale = 0, max_min = 0;  // scales are >= 0 since the min is taken out
        for (int j = 0; j < 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
            scales[j] = fit_scale_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        const float q4scale = 15.f;
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; ++j) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = fp32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < 16; ++j) y[i].scales[j] = 0;
            y[i].d = fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < 16; ++j) y[i].scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = fp32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = fp32_to_fp16(0.f);
        }
        store_q2_k_quants(x, L, y[i]);
    }
}

void quantize_q3_k_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q3_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        int8_t L[QK_K];
        float scales[16];
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; ++j) {
            scales[j] = fit_q3(16, 4, x + 16 * j, L + 16 * j);
            const float a = std::fabs(scales[j]);
            if (a > amax) { amax = a; max_scale = scales[j]; }
        }
        std::memset(y[i].scales, 0, 12);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            int ls[16];
            for (int j = 0; j < 16; ++j) {
                const int8_t l = (int8_t)nearest_int(iscale * scales[j]);
                ls[j] = clamp_int(l, -32, 31) + 32;
            }
            q3k_pack_scales(ls, y[i].scales);
            y[i].d = fp32_to_fp16(1 / iscale);
        } else {
            y[i].d = fp32_to_fp16(0.f);
        }
        store_q3_k_quants(x, L, y[i]);
    }
}

// Q4_K and Q5_K share everything but the number of levels and the search
// parameters; nmax = 15 or 31.
void quantize_k4_superblock(const float* x, int nmax, float rmin, int nstep, uint16_t* d_out, uint16_t* dmin_out,
                            uint8_t* scales_out, uint8_t L[QK_K]) {
    float weights[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        const float* xj = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += xj[l] * xj[l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xj[l]);
        scales[j] = fit_scale_min(32, nmax, xj, weights, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; ++j) {
        ls[j] = std::min<uint8_t>(63, (uint8_t)nearest_int(inv_scale * scales[j]));
        lm[j] = std::min<uint8_t>(63, (uint8_t)nearest_int(inv_min * mins[j]));
    }
    k4_pack_scales(ls, lm, scales_out);
    *d_out = fp32_to_fp16(max_scale / 63.f);
    *dmin_out = fp32_to_fp16(max_min / 63.f);
    for (int j = 0; j < 8; ++j) {
        const float d = fp16_to_fp32(*d_out) * ls[j];
        if (!d) continue;
        const float dm = fp16_to_fp32(*dmin_out) * lm[j];
        for (int l = 0; l < 32; ++l) L[32 * j + l] = (uint8_t)clamp_int(nearest_int((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

void quantize_q4_k_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q4_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        uint8_t L[QK_K];
        quantize_k4_superblock(x, 15, -1.f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int c = 0; c < 4; ++c)
            for (int k = 0; k < 32; ++k) y[i].qs[32 * c + k] = (uint8_t)(L[64 * c + k] | (L[64 * c + 32 + k] << 4));
    }
}

void quantize_q5_k_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q5_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        uint8_t L[QK_K];
        quantize_k4_superblock(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        std::memset(y[i].qh, 0, QK_K / 8);
        for (int e = 0; e < QK_K; ++e)
            if (L[e] > 15) y[i].qh[e % 32] |= (uint8_t)(1 << (e / 32));
        for (int c = 0; c < 4; ++c)
            for (int k = 0; k < 32; ++k)
                y[i].qs[32 * c + k] = (uint8_t)((L[64 * c + k] & 0xF) | ((L[64 * c + 32 + k] & 0xF) << 4));
    }
}

void quantize_q6_k_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q6_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        int8_t L[QK_K];
        float scales[16];
        float max_scale = 0, max_abs_scale = 0;
        for (int j = 0; j < 16; ++j) {
            scales[j] = fit_symmetric(16, 32, x + 16 * j, nullptr, L + 16 * j);
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
            for (int l = 0; l < 16; ++l) L[16 * j + l] = (int8_t)(clamp_int(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
        }
        // L in [0, 63]: low nibbles to ql, top 2 bits to qh (see decode_q6_k).
        std::memset(y[i].ql, 0, sizeof(y[i].ql));
        std::memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int e = 0; e < QK_K; ++e) {
            const int h = e / 128, k = e % 64;
            y[i].ql[64 * h + k] |= (uint8_t)((L[e] & 0xF) << (e % 128 < 64 ? 0 : 4));
            y[i].qh[32 * h + e % 32] |= (uint8_t)((L[e] >> 4) << (2 * ((e % 128) / 32)));
        }
    }
}

// Q8_K activations: d = −max/127 with max the signed value of largest
// magnitude, so that value maps to exactly −127; quants clamped to <= 127.
void quantize_q8_k_ref(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        float amax;
        const float mx = signed_absmax(QK_K, x, &amax);
        if (!amax) {
            std::memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        const float iscale = -127.f / mx;
        for (int e = 0; e < QK_K; ++e) y[i].qs[e] = (int8_t)std::min(127, nearest_int(iscale * x[e]));
        for (int g = 0; g < 16; ++g) {
            int s = 0;
            for (int l = 0; l < 16; ++l) s += y[i].qs[16 * g + l];
            y[i].bsums[g] = (int16_t)s;
        }
        y[i].d = 1 / iscale;
    }
}

// ===========================================================================
// Reference dot products: decode, integer dot per sub-block, then the block
// formula from the file header. Activation sums are taken from the quants
// themselves (not bsums) so a wrong bsums shows up as a kernel mismatch.
// ===========================================================================

inline int32_t dot_range(const int8_t* q, const int8_t* a, int len) {
    int32_t s = 0;
    for (int k = 0; k < len; ++k) s += q[k] * a[k];
    return s;
}

inline int32_t sum_range(const int8_t* a, int len) {
    int32_t s = 0;
    for (int k = 0; k < len; ++k) s += a[k];
    return s;
}

void vec_dot_q2_k_q8_k_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const block_q2_K*>(w_row);
    const auto* a = static_cast<const block_q8_K*>(a_row);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int8_t q[QK_K];
        int sc[16], mn[16];
        decode_q2_k(w[i], q, sc, mn);
        int32_t dot = 0, msum = 0;
        for (int g = 0; g < 16; ++g) {
            dot += sc[g] * dot_range(q + 16 * g, a[i].qs + 16 * g, 16);
            msum += mn[g] * sum_range(a[i].qs + 16 * g, 16);
        }
        sum += fp16_to_fp32(w[i].d) * a[i].d * dot - fp16_to_fp32(w[i].dmin) * a[i].d * msum;
    }
    *out = sum;
}

void vec_dot_q3_k_q8_k_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const block_q3_K*>(w_row);
    const auto* a = static_cast<const block_q8_K*>(a_row);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int8_t q[QK_K];
        int sc[16];
        decode_q3_k(w[i], q, sc);
        int32_t dot = 0;
        for (int g = 0; g < 16; ++g) dot += sc[g] * dot_range(q + 16 * g, a[i].qs + 16 * g, 16);
        sum += fp16_to_fp32(w[i].d) * a[i].d * dot;
    }
    *out = sum;
}

void vec_dot_q4_k_q8_k_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const block_q4_K*>(w_row);
    const auto* a = static_cast<const block_q8_K*>(a_row);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int8_t q[QK_K];
        int sc[8], mn[8];
        decode_q4_k(w[i], q, sc, mn);
        int32_t dot = 0, msum = 0;
        for (int g = 0; g < 8; ++g) {
            dot += sc[g] * dot_range(q + 32 * g, a[i].qs + 32 * g, 32);
            msum += mn[g] * sum_range(a[i].qs + 32 * g, 32);
        }
        sum += fp16_to_fp32(w[i].d) * a[i].d * dot - fp16_to_fp32(w[i].dmin) * a[i].d * msum;
    }
    *out = sum;
}

void vec_dot_q5_k_q8_k_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const block_q5_K*>(w_row);
    const auto* a = static_cast<const block_q8_K*>(a_row);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int8_t q[QK_K];
        int sc[8], mn[8];
        decode_q5_k(w[i], q, sc, mn);
        int32_t dot = 0, msum = 0;
        for (int g = 0; g < 8; ++g) {
            dot += sc[g] * dot_range(q + 32 * g, a[i].qs + 32 * g, 32);
            msum += mn[g] * sum_range(a[i].qs + 32 * g, 32);
        }
        sum += fp16_to_fp32(w[i].d) * a[i].d * dot - fp16_to_fp32(w[i].dmin) * a[i].d * msum;
    }
    *out = sum;
}

void vec_dot_q6_k_q8_k_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const block_q6_K*>(w_row);
    const auto* a = static_cast<const block_q8_K*>(a_row);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int8_t q[QK_K];
        int sc[16];
        decode_q6_k(w[i], q, sc);
        int32_t dot = 0;
        for (int g = 0; g < 16; ++g) dot += sc[g] * dot_range(q + 16 * g, a[i].qs + 16 * g, 16);
        sum += fp16_to_fp32(w[i].d) * a[i].d * dot;
    }
    *out = sum;
}

}  // namespace

// ===========================================================================
// Registration
// ===========================================================================

#if defined(LP_HAVE_AVX2)
#define LP_AVX2_ONLY(f) f
#else
#define LP_AVX2_ONLY(f) nullptr
#endif
#if defined(LP_HAVE_AVX512)
#define LP_AVX512_ONLY(f) f
#else
#define LP_AVX512_ONLY(f) nullptr
#endif

void register_kquant_types(type_traits* table, isa level) {
    struct kernels {
        ggml_type type;
        to_float_fn to_float;
        from_float_fn quantize;
        vec_dot_fn ref, avx2, avx512;
        gemm_tile_fn tile_avx512, cols_avx512;
    };
    const kernels all[] = {
        {ggml_type::Q2_K, dequantize_q2_k, quantize_q2_k_ref, vec_dot_q2_k_q8_k_ref, LP_AVX2_ONLY(vec_dot_q2_k_q8_k_avx2),
         LP_AVX512_ONLY(vec_dot_q2_k_q8_k_avx512), LP_AVX512_ONLY(gemm_tile_q2_k_q8_k_avx512),
         LP_AVX512_ONLY(matvec_cols_q2_k_q8_k_avx512)},
        {ggml_type::Q3_K, dequantize_q3_k, quantize_q3_k_ref, vec_dot_q3_k_q8_k_ref, LP_AVX2_ONLY(vec_dot_q3_k_q8_k_avx2),
         LP_AVX512_ONLY(vec_dot_q3_k_q8_k_avx512), LP_AVX512_ONLY(gemm_tile_q3_k_q8_k_avx512),
         LP_AVX512_ONLY(matvec_cols_q3_k_q8_k_avx512)},
        {ggml_type::Q4_K, dequantize_q4_k, quantize_q4_k_ref, vec_dot_q4_k_q8_k_ref, LP_AVX2_ONLY(vec_dot_q4_k_q8_k_avx2),
         LP_AVX512_ONLY(vec_dot_q4_k_q8_k_avx512), LP_AVX512_ONLY(gemm_tile_q4_k_q8_k_avx512),
         nullptr},  // the panels' (kquants_panels_x86.cpp)
        {ggml_type::Q5_K, dequantize_q5_k, quantize_q5_k_ref, vec_dot_q5_k_q8_k_ref, LP_AVX2_ONLY(vec_dot_q5_k_q8_k_avx2),
         LP_AVX512_ONLY(vec_dot_q5_k_q8_k_avx512), LP_AVX512_ONLY(gemm_tile_q5_k_q8_k_avx512),
         nullptr},  // the panels' (kquants_panels_x86.cpp)
        {ggml_type::Q6_K, dequantize_q6_k, quantize_q6_k_ref, vec_dot_q6_k_q8_k_ref, LP_AVX2_ONLY(vec_dot_q6_k_q8_k_avx2),
         LP_AVX512_ONLY(vec_dot_q6_k_q8_k_avx512), LP_AVX512_ONLY(gemm_tile_q6_k_q8_k_avx512),
         LP_AVX512_ONLY(matvec_cols_q6_k_q8_k_avx512)},
    };
    const bool use_avx2 = isa_at_least(level, isa::avx2), use_avx512 = isa_at_least(level, isa::avx512);
    for (const kernels& k : all) {
        type_traits& t = table[(int)k.type];
        t.to_float = k.to_float;
        t.from_float_ref = k.quantize;
        t.from_float = k.quantize;
        t.vec_dot_type = ggml_type::Q8_K;
        t.vec_dot_ref = k.ref;
        t.vec_dot = k.ref;
        t.vec_dot_isa = isa::scalar;
        t.gemm_tile = nullptr;
        if (use_avx2 && k.avx2) { t.vec_dot = k.avx2; t.vec_dot_isa = isa::avx2; }
        if (use_avx512 && k.avx512) {
            t.vec_dot = k.avx512;
            t.gemm_tile = k.tile_avx512;
            t.matvec_cols = k.cols_avx512;
            t.vec_dot_isa = isa::avx512;
        }
    }
    // Q6_K's 4-row tiles cost ~5x its mat-vec at two activation rows (Zen 4);
    // small batches up to 8 rows go row by row, 4 columns per pass over the
    // weights (matvec_cols; matmul.cpp: small batches).
    if (use_avx512) table[(int)ggml_type::Q6_K].matvec_batch_max = 8;
    type_traits& q8 = table[(int)ggml_type::Q8_K];
    q8.to_float = dequantize_q8_k;
    q8.from_float_ref = quantize_q8_k_ref;
    q8.from_float = quantize_q8_k_ref;
#if defined(LP_HAVE_AVX2)
    if (use_avx2) q8.from_float = quantize_q8_k_avx2;
#endif
#if defined(LP_HAVE_AVX512)
    if (use_avx512) q8.from_float = quantize_q8_k_avx512;
#endif
    register_kquant_tiles_avx2(table, level);
    register_kquant_panels_x86(table, level);
#if defined(LP_HAVE_NEON)
    register_kquant_neon(table, level);
#endif
}

#undef LP_AVX2_ONLY
#undef LP_AVX512_ONLY

}  // namespace lp
