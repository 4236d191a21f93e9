// kquants_fit.h — what the reference quantizers (kquants.cpp) and the
// importance-weighted ones (weighted.cpp) share: llama.cpp's rounding, its
// searches for block scales (step for step and in the same float operation
// order, so that the quants are the ones llama.cpp writes) and the K-quant
// scale and quant packing.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>

#include "../common.h"
#include "blocks.h"

namespace lp {
namespace qfit {

// Round to nearest, ties to even, the way llama.cpp's quantizers round: adding
// 1.5·2^23 leaves the integer in the low mantissa bits. Exactly llama.cpp's
// arithmetic for every input, including those outside ±2^22 (which the scale
// searches never produce from finite rows: every caller clamps the result),
// NaN (0) and ±inf (−2^22): no test or branch of its own, which cost the
// searches 10-60 % of their time (Q6_K's most: 0.361 against llama.cpp's 0.220
// CPU seconds for 2048 × 4096 Gaussian rows, 2026-12-07).
inline int nearest_int(float v) {
    return (int)(fp32_to_bits(v + 12582912.f) & 0x007fffffu) - 0x00400000;
}

inline int clamp_int(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

constexpr float GROUP_MAX_EPS = 1e-15f;

// The value of largest magnitude (the first one, on ties), with its sign.
inline float signed_absmax(int n, const float* x, float* amax) {
    float mx = 0, am = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > am) { am = ax; mx = x[i]; }
    }
    *amax = am;
    return mx;
}

// Q4_K / Q5_K scale and min packing (see k4_unpack_scales in kquants.cpp).
inline void k4_pack_scales(const uint8_t sc[8], const uint8_t mn[8], uint8_t* s) {
    for (int j = 0; j < 4; ++j) {
        s[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
    }
}

// Asymmetric fit x ≈ scale·L + min, L in [0, nmax], min <= 0 (used by Q2_K,
// Q4_K, Q5_K). Starts from the plain range fit, then tries nstep+1 slightly
// different inverse scales (nmax + rmin + rdelta·is)/(max − min); for each
// rounding it solves the weighted least-squares scale and min and keeps the
// candidate with the smallest weighted error (absolute if use_mad, else
// squared). Note that an accepted candidate's min feeds the next candidates,
// as in llama.cpp. Returns the scale and stores −min in *neg_min.
inline float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                    float rdelta, int nstep, bool use_mad) {
    float lo = x[0], hi = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *neg_min = -lo;
        return 0.f;
    }
    auto error_of = [&](float diff) { return use_mad ? std::fabs(diff) : diff * diff; };
    float iscale = nmax / (hi - lo);
    float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; ++i) {
        L[i] = (uint8_t)clamp_int(nearest_int(iscale * (x[i] - lo)), 0, nmax);
        best += w[i] * error_of(scale * L[i] + lo - x[i]);
    }
    uint8_t Laux[32];
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_int(nearest_int(iscale * (x[i] - lo)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; ++i) err += w[i] * error_of(this_scale * Laux[i] + this_min - x[i]);
            if (err < best) {
                std::memcpy(L, Laux, (size_t)n);
                best = err;
                scale = this_scale;
                lo = this_min;
            }
        }
    }
    *neg_min = -lo;
    return scale;
}

// Symmetric fit x ≈ scale·(L − nmax), L in [0, 2·nmax), weighted by w, or by x²
// where w is null (Q6_K; with an importance matrix also Q4_0 / Q5_0):
// the scale that maps the largest-magnitude value to −nmax, then 18 nearby
// scales −(nmax ± 0.1·is)/max, keeping the rounding whose least-squares scale
// explains most of Σw·x² (max of (Σwxl)²/Σwl²). Returns the scale.
inline float fit_symmetric(int n, int nmax, const float* x, const float* w_or_null, int8_t* L) {
    float amax;
    const float mx = signed_absmax(n, x, &amax);
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / mx;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = w_or_null ? w_or_null[i] : x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / mx;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = w_or_null ? w_or_null[i] : x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) L[i] = (int8_t)(nmax + clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// Non-negative values x ≈ scale·L, L in [0, nmax], weighted by w (the 6-bit
// super-block scales and mins of Q4_K / Q5_K with an importance matrix): the
// plain fit and 8 nearby inverse scales (nmax ± 0.1·is)/max by weighted squared
// error, then up to 5 passes that move single levels while that raises
// (Σwxl)²/Σwl². Returns the least-squares scale of the final levels.
inline float fit_levels(int n, int nmax, const float* x, const float* w, uint8_t* L) {
    float mx = 0;
    for (int i = 0; i < n; ++i) mx = mx > x[i] ? mx : x[i];
    if (mx < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = nmax / mx;
    for (int i = 0; i < n; ++i) L[i] = (uint8_t)nearest_int(iscale * x[i]);
    const float scale0 = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale0 * L[i];
        best += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * is + nmax) / mx;
        const float scale_is = 1 / iscale_is;
        float err = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
            const float diff = x[i] - scale_is * l;
            err += w[i] * diff * diff;
        }
        if (err < best) {
            best = err;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::min(nmax, nearest_int(iscale * x[i]));
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * l;
        suml2 += w[i] * l * l;
    }
    for (int pass = 0; pass < 5; ++pass) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float slx = sumlx - w[i] * x[i] * L[i];
            float sl2 = suml2 - w[i] * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    slx += w[i] * x[i] * new_l;
                    sl2 += w[i] * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Q3_K's sixteen 6-bit scales (stored + 32) in 12 bytes: low nibbles in bytes
// 0-7 (scales 8-15 in the high nibble), top 2 bits in bytes 8-11.
inline void q3k_unpack_scales(const uint8_t* s, int8_t out[16]) {
    for (int j = 0; j < 16; ++j) {
        const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
        const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

inline void q3k_pack_scales(const int l[16], uint8_t* s) {  // l in [0, 63]
    std::memset(s, 0, 12);
    for (int j = 0; j < 16; ++j) {
        s[j % 8] |= (uint8_t)((l[j] & 0xF) << (j < 8 ? 0 : 4));
        s[8 + j % 4] |= (uint8_t)((l[j] >> 4) << (2 * (j / 4)));
    }
}

// Packs 2-bit values L[0..255] (weight order) into the crumb layout of Q2_K/Q3_K.
inline void pack_crumbs(const uint8_t* L, uint8_t* qs) {
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 32; ++k) {
            const uint8_t* l = L + 128 * h + k;
            qs[32 * h + k] = (uint8_t)(l[0] | (l[32] << 2) | (l[64] << 4) | (l[96] << 6));
        }
}

// Q2_K's quants against the scales as stored (4-bit, fp16 d and dmin), not the
// fitted ones; L (QK_K) is the scratch for them.
inline void store_q2_k_quants(const float* x, uint8_t* L, block_q2_K& b) {
    for (int j = 0; j < 16; ++j) {
        const float d = fp16_to_fp32(b.d) * (b.scales[j] & 0xF);
        if (!d) continue;
        const float dm = fp16_to_fp32(b.dmin) * (b.scales[j] >> 4);
        for (int l = 0; l < 16; ++l) L[16 * j + l] = (uint8_t)clamp_int(nearest_int((x[16 * j + l] + dm) / d), 0, 3);
    }
    pack_crumbs(L, b.qs);
}

// Q3_K's quants against the scales as stored; L in [0, 7]: bit 2 goes to
// hmask (bit e/32 of byte e%32), the rest to qs. Blocks whose stored scale is
// 0 keep the levels of their fit, which L holds on entry (as in llama.cpp).
inline void store_q3_k_quants(const float* x, int8_t* L, block_q3_K& b) {
    int8_t sc[16];
    q3k_unpack_scales(b.scales, sc);
    for (int j = 0; j < 16; ++j) {
        const float d = fp16_to_fp32(b.d) * sc[j];
        if (!d) continue;
        for (int l = 0; l < 16; ++l) L[16 * j + l] = (int8_t)(clamp_int(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
    }
    std::memset(b.hmask, 0, QK_K / 8);
    uint8_t low[QK_K];
    for (int e = 0; e < QK_K; ++e) {
        if (L[e] > 3) b.hmask[e % 32] |= (uint8_t)(1 << (e / 32));
        low[e] = (uint8_t)(L[e] & 3);
    }
    pack_crumbs(low, b.qs);
}

}  // namespace qfit
}  // namespace lp
