// iq_lattice_write_iq3.cpp — quantization to IQ3_XXS and IQ3_S (block layouts
// and decoders: iq_lattice.h): the blocks llama.cpp's quantizer writes, byte
// for byte, with an importance matrix or without one.
//
// Both types store each 32-weight sub-block as 8 groups of 4 magnitudes, every
// group one point of a grid (256 points for IQ3_XXS, 512 for IQ3_S) whose
// coordinates are odd levels 2l + 1 (l in 0..7), plus signs, plus a 4-bit
// sub-block scale of one fp16 super-block scale. Per sub-block:
//   1. weights: importance · sqrt(σ² + x²) with an importance matrix (σ² twice
//      the super-block's mean square), x² without one;
//   2. magnitudes |x| and their signs. IQ3_XXS keeps 7 signs per 8 and implies
//      the 8th by even parity, so where the count of negatives is odd the
//      element of least weight·x² is fitted with its sign flipped;
//   3. trial inverse scales (15 + 0.2 s) / max: every magnitude rounds to a
//      level; a group whose 4 levels are no grid point takes the best of the
//      grid points nearest to them (precomputed per level combination,
//      weighted by sqrt(weight)); the trial whose least-squares scale explains
//      most (sumqx² / sumq2 largest, the first on ties) is kept;
//   4. at that scale the groups that were off the grid (IQ3_S: all groups) are
//      rounded again and the scale refitted.
// Then the sub-block scales become 4-bit levels of max_scale / 31, stored
// with a small fudge factor on the super-block scale (llama.cpp's).
//
// Byte identity needs llama.cpp's float operations in its order: products
// grouped as there, sums accumulated element by element, no fused
// multiply-adds (the build compiles with -ffp-contract=off), and its ties.
// Also its quirk in IQ3_S: a sub-block of zeros does not advance the write
// position of the grid bytes and signs (their ninth index bits and the scales
// do go to the right sub-block), so the following sub-blocks' bytes land one
// sub-block early (readers then decode shifted values; we write what
// llama.cpp writes, tests/test_iq3_quantize.py's zero_sub_blocks case).
//
// Inputs llama.cpp aborts on (NaN, or magnitudes so large that every squared
// error overflows and no neighbour compares below FLT_MAX; its assertion that
// a scale is >= 0 fails for NaN) take the first neighbour here and keep a NaN
// scale as it comes: every block is written, the row's other super-blocks as
// without the bad values.
//
// Not here: reading these types (iq_lattice.cpp), the other grid i-quants.
#include <algorithm>
#include <array>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "../ggml_type.h"
#include "iq_lattice.h"
#include "kquants_fit.h"
#include "weighted.h"

namespace lp {
namespace iq {

namespace {

using qfit::nearest_int;

constexpr int kCodes = 8 * 8 * 8 * 8;  // level combinations of a group: 3 bits per coordinate
constexpr int kMaxLevel = 7;
constexpr int kSub = 32;               // weights per sub-block
constexpr int kGroups = kSub / 4;      // grid points per sub-block

LP_INLINE int group_code(const int8_t* l) { return l[0] | l[1] << 3 | l[2] << 6 | l[3] << 9; }

// A grid as the search sees it: each point's levels, and for each of the 4096
// level combinations either the point it is or the points nearest to it.
struct search_grid {
    // Most neighbours of one combination (36 and 38 on the two grids), padded.
    static constexpr int kMaxNear = 64;
    // An off-grid combination's neighbours: n point indices at near_index +
    // offset, nearest first, and their values 2l + 1 coordinate by coordinate
    // at near_q + 4 * offset: (4, n_padded) floats, so that the error of every
    // neighbour is computed side by side (vector lanes) in best_neighbour.
    struct near_list {
        uint32_t offset = 0;
        uint16_t n = 0, n_padded = 0;
    };
    std::vector<std::array<int8_t, 4>> levels;  // (n_points, 4)
    std::array<int16_t, kCodes> point;          // the grid point a combination is, or -1
    std::array<near_list, kCodes> near;
    std::vector<float> near_q;
    std::vector<uint16_t> near_index;

    // `grid`: the decoder's table (4 bytes a point), `level_of` its byte value
    // to a level. `n_dist`: neighbours are the points at the n_dist smallest
    // distances, nearest first, lower index first among equals (llama.cpp's
    // sort order; 2 distances for the 256-point grid, 3 for the 512-point one).
    search_grid(const uint32_t* grid, int n_points, int (*level_of)(int), int n_dist) : levels(n_points) {
        point.fill(-1);
        for (int j = 0; j < n_points; ++j) {
            for (int c = 0; c < 4; ++c) levels[j][c] = (int8_t)level_of((grid[j] >> (8 * c)) & 0xff);
            point[group_code(levels[j].data())] = (int16_t)j;
        }
        std::vector<int> dist(n_points), order(n_points);
        for (int code = 0; code < kCodes; ++code) {
            if (point[code] >= 0) continue;
            for (int j = 0; j < n_points; ++j) {
                int d2 = 0;
                for (int c = 0; c < 4; ++c) {
                    const int d = levels[j][c] - ((code >> (3 * c)) & 7);
                    d2 += d * d;
                }
                dist[j] = d2;
            }
            int cut = -1;  // the n_dist-th smallest distinct distance
            for (int h = 0; h < n_dist; ++h) {
                int next = INT_MAX;
                for (int d : dist)
                    if (d > cut && d < next) next = d;
                if (next == INT_MAX) break;
                cut = next;
            }
            order.clear();
            for (int j = 0; j < n_points; ++j)
                if (dist[j] <= cut) order.push_back(j);
            std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return dist[a] < dist[b]; });
            const int n = (int)order.size(), n_padded = (n + 7) / 8 * 8;
            if (n_padded > kMaxNear) throw std::logic_error("iq3 search grid: too many neighbours");
            near[code] = near_list{(uint32_t)near_index.size(), (uint16_t)n, (uint16_t)n_padded};
            for (int m = 0; m < n_padded; ++m) near_index.push_back((uint16_t)order[std::min(m, n - 1)]);
            for (int c = 0; c < 4; ++c)
                for (int m = 0; m < n_padded; ++m) near_q.push_back((float)(2 * levels[order[std::min(m, n - 1)]][c] + 1));
        }
    }
};

int level_of_iq3_xxs(int v) { return v / 8; }   // 4, 12, ..., 52, 62: the decoder's values 8l + 4 (62 for l = 7)
int level_of_iq3_s(int v) { return v / 2; }     // 1, 3, ..., 15: 2l + 1

// Built on first use (thread-safe static initialisation), kept for the process.
const search_grid& grid_iq3_xxs() {
    static const search_grid g(iq3xxs_grid, 256, level_of_iq3_xxs, 2);
    return g;
}
const search_grid& grid_iq3_s() {
    static const search_grid g(iq3s_grid, 512, level_of_iq3_s, 3);
    return g;
}

// The neighbour of an off-grid combination that fits magnitudes xv (weights
// sw) best at `scale`; its levels go to l. Each neighbour's error is
// llama.cpp's sum, term by term in coordinate order, computed for all
// neighbours at once (the loop vectorises over them, each lane doing the
// same operations); then the first smallest wins, and the first neighbour
// where no error compares below FLT_MAX (see the top).
void best_neighbour(const search_grid& g, int code, const float* xv, const float* sw, float scale, int8_t* l) {
    const search_grid::near_list& nl = g.near[code];
    const int np = nl.n_padded;
    const float* q = g.near_q.data() + 4 * (size_t)nl.offset;
    const float x0 = xv[0], x1 = xv[1], x2 = xv[2], x3 = xv[3];
    const float w0 = sw[0], w1 = sw[1], w2 = sw[2], w3 = sw[3];
    float d2[search_grid::kMaxNear];
    for (int m = 0; m < np; ++m) {
        const float a0 = scale * q[m] - x0, a1 = scale * q[np + m] - x1;
        const float a2 = scale * q[2 * np + m] - x2, a3 = scale * q[3 * np + m] - x3;
        float d = 0.f + w0 * a0 * a0;
        d += w1 * a1 * a1;
        d += w2 * a2 * a2;
        d += w3 * a3 * a3;
        d2[m] = d;
    }
    float best_d2 = FLT_MAX;
    int best = 0;
    for (int m = 0; m < nl.n; ++m) {
        if (d2[m] < best_d2) {
            best_d2 = d2[m];
            best = m;
        }
    }
    std::memcpy(l, g.levels[g.near_index[nl.offset + best]].data(), 4);
}

LP_INLINE int8_t level_at(float id, float v) {
    return (int8_t)qfit::clamp_int(nearest_int(0.5f * (id * v - 1)), 0, kMaxLevel);
}

// How the two types' searches differ.
struct search_params {
    const search_grid* grid;
    int n_trials;        // trial inverse scales (15 + 0.2 s) / max for s in -n_trials..n_trials
    bool start_on_grid;  // what the groups count as when no trial is kept
    bool refit_all;      // at the kept scale, round every group again (else only the off-grid ones)
};

// sum w·xv·q and sum w·q·q over a sub-block, q = 2l + 1, in llama.cpp's order.
LP_INLINE void fit_sums(const float* w, const float* xv, const int8_t* l, float* sumqx, float* sumq2) {
    float sx = 0, s2 = 0;
    for (int i = 0; i < kSub; ++i) {
        const float q = (float)(2 * l[i] + 1);
        sx += w[i] * xv[i] * q;
        s2 += w[i] * q * q;
    }
    *sumqx = sx;
    *sumq2 = s2;
}

// Steps 3 and 4 of the top for one sub-block of magnitudes xv (largest: max,
// above the type's zero threshold), weights w, their square roots sw. Leaves
// the levels in l (every group a grid point) and returns the scale.
float fit_sub_block(const search_params& p, const float* xv, const float* w, const float* sw, float max,
                    int8_t l[kSub]) {
    const search_grid& g = *p.grid;
    std::memset(l, 0, kSub);
    bool on_grid[kGroups];
    std::fill(on_grid, on_grid + kGroups, p.start_on_grid);
    float best = 0;
    float scale = max / 15;
    int8_t trial[kSub];
    bool trial_on[kGroups];
    for (int s = -p.n_trials; s <= p.n_trials; ++s) {
        const float id = (15 + (float)s * 0.2f) / max;
        const float trial_scale = 1 / id;
        for (int k = 0; k < kGroups; ++k) {
            int8_t* lk = trial + 4 * k;
            for (int c = 0; c < 4; ++c) lk[c] = level_at(id, xv[4 * k + c]);
            const int code = group_code(lk);
            trial_on[k] = g.point[code] >= 0;
            if (!trial_on[k]) best_neighbour(g, code, xv + 4 * k, sw + 4 * k, trial_scale, lk);
        }
        float sumqx, sumq2;
        fit_sums(w, xv, trial, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            std::memcpy(l, trial, kSub);
            std::copy(trial_on, trial_on + kGroups, on_grid);
        }
    }
    if (std::count(on_grid, on_grid + kGroups, false) > 0 && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < kGroups; ++k) {
            if (on_grid[k] && !p.refit_all) continue;
            int8_t* lk = l + 4 * k;
            for (int c = 0; c < 4; ++c) lk[c] = level_at(id, xv[4 * k + c]);
            const int code = group_code(lk);
            if (g.point[code] < 0) best_neighbour(g, code, xv + 4 * k, sw + 4 * k, scale, lk);
        }
        float sumqx, sumq2;
        fit_sums(w, xv, l, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    return scale;
}

// Step 1 of the top for one sub-block.
void sub_block_weights(const float* x, const float* qw, float sigma2, float* w, float* sw) {
    if (qw) {
        for (int i = 0; i < kSub; ++i) w[i] = qw[i] * std::sqrt(sigma2 + x[i] * x[i]);
    } else {
        for (int i = 0; i < kSub; ++i) w[i] = x[i] * x[i];
    }
    for (int i = 0; i < kSub; ++i) sw[i] = std::sqrt(w[i]);
}

// Magnitudes of 8 weights (xv) and their signs as a bit mask.
LP_INLINE uint8_t split_signs(const float* x, float* xv) {
    uint8_t s = 0;
    for (int i = 0; i < 8; ++i) {
        if (x[i] >= 0) {
            xv[i] = x[i];
        } else {
            xv[i] = -x[i];
            s |= (uint8_t)(1 << i);
        }
    }
    return s;
}

// The super-block's σ² (twice its mean square), summed in element order.
float super_block_sigma2(const float* x) {
    float sumx2 = 0;
    for (int i = 0; i < QK_K; ++i) sumx2 += x[i] * x[i];
    return 2 * sumx2 / QK_K;
}

LP_INLINE float max_of(float a, float b) { return a > b ? a : b; }  // llama.cpp's MAX, NaN cases included

LP_INLINE int scale_level(float id, float scale) {
    return qfit::clamp_int(nearest_int(0.5f * (id * scale - 1)), 0, 15);
}

void quantize_iq3_xxs(const float* x, void* dst, int64_t n, const float* qw) {
    static const search_params params{&grid_iq3_xxs(), 15, true, false};
    const search_grid& g = *params.grid;
    auto* y = static_cast<block_iq3_xxs*>(dst);
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const float* xbl = x + QK_K * ibl;
        const float sigma2 = super_block_sigma2(xbl);
        uint8_t* grid_bytes = y[ibl].qs;                         // 8 per sub-block
        uint8_t* signs_scales = y[ibl].qs + QK_K / 4;            // a uint32 per sub-block
        std::memset(y[ibl].qs, 0, sizeof(y[ibl].qs));
        float scales[QK_K / kSub];
        float max_scale = 0;
        for (int ib = 0; ib < QK_K / kSub; ++ib) {
            const float* xb = xbl + kSub * ib;
            float w[kSub], sw[kSub], xv[kSub];
            sub_block_weights(xb, qw ? qw + QK_K * ibl + kSub * ib : nullptr, sigma2, w, sw);
            uint8_t signs[4];
            for (int k = 0; k < 4; ++k) {
                uint8_t s = split_signs(xb + 8 * k, xv + 8 * k);
                if (__builtin_popcount(s) % 2) {  // odd: the least important element keeps the wrong sign
                    int imin = 0;
                    float least = w[8 * k] * xb[8 * k] * xb[8 * k];
                    for (int i = 1; i < 8; ++i) {
                        const float e = w[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                        if (e < least) {
                            least = e;
                            imin = i;
                        }
                    }
                    xv[8 * k + imin] = -xv[8 * k + imin];
                    s ^= (uint8_t)(1 << imin);
                }
                signs[k] = s & 127;
            }
            float max = xv[0];
            for (int i = 1; i < kSub; ++i) max = max_of(max, xv[i]);
            if (max < 1e-8f) {  // llama.cpp's GROUP_MAX_EPS_IQ3_XXS: grid bytes, signs and scale stay 0
                scales[ib] = 0;
                continue;
            }
            int8_t l[kSub];
            float scale = fit_sub_block(params, xv, w, sw, max, l);
            if (scale < 0) {  // keep the stored scale positive: flip the signs instead
                scale = -scale;
                for (uint8_t& s : signs) s = (uint8_t)(~s & 127);
            }
            for (int k = 0; k < kGroups; ++k) grid_bytes[8 * ib + k] = (uint8_t)g.point[group_code(l + 4 * k)];
            const uint32_t packed = signs[0] | (uint32_t)signs[1] << 7 | (uint32_t)signs[2] << 14 | (uint32_t)signs[3] << 21;
            std::memcpy(signs_scales + 4 * ib, &packed, 4);
            scales[ib] = scale;
            max_scale = max_of(max_scale, scale);
        }
        if (!max_scale) {
            y[ibl].d = fp32_to_fp16(0.f);
            std::memset(y[ibl].qs, 0, sizeof(y[ibl].qs));
            continue;
        }
        const float d = max_scale / 31;
        y[ibl].d = fp32_to_fp16(d * 1.0125f);
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / kSub; ++ib) {  // the scale level in bits 28..31 of the sub-block's word
            const uint32_t word = load_u32(signs_scales + 4 * ib) | (uint32_t)scale_level(id, scales[ib]) << 28;
            std::memcpy(signs_scales + 4 * ib, &word, 4);
        }
    }
}

void quantize_iq3_s(const float* x, void* dst, int64_t n, const float* qw) {
    static const search_params params{&grid_iq3_s(), 9, false, true};
    const search_grid& g = *params.grid;
    auto* y = static_cast<block_iq3_s*>(dst);
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        block_iq3_s& b = y[ibl];
        std::memset(&b, 0, sizeof(b));
        const float* xbl = x + QK_K * ibl;
        const float sigma2 = super_block_sigma2(xbl);
        // Write positions of the grid bytes and signs: advanced per sub-block
        // stored, not per sub-block (llama.cpp's quirk, see the top).
        uint8_t* qs = b.qs;
        uint8_t* signs = b.signs;
        float scales[QK_K / kSub];
        float max_scale = 0;
        for (int ib = 0; ib < QK_K / kSub; ++ib) {
            const float* xb = xbl + kSub * ib;
            float w[kSub], sw[kSub], xv[kSub];
            sub_block_weights(xb, qw ? qw + QK_K * ibl + kSub * ib : nullptr, sigma2, w, sw);
            uint8_t sg[4];
            for (int k = 0; k < 4; ++k) sg[k] = split_signs(xb + 8 * k, xv + 8 * k);
            float max = xv[0];
            for (int i = 1; i < kSub; ++i) max = max_of(max, xv[i]);
            if (!max) {
                scales[ib] = 0;
                continue;
            }
            int8_t l[kSub];
            float scale = fit_sub_block(params, xv, w, sw, max, l);
            if (scale < 0) {
                scale = -scale;
                for (uint8_t& s : sg) s = (uint8_t)~s;
            }
            for (int k = 0; k < kGroups; ++k) {
                const int point = g.point[group_code(l + 4 * k)];
                qs[k] = (uint8_t)(point & 255);
                b.qh[ib] |= (uint8_t)((point >> 8) << k);
            }
            qs += kGroups;
            std::memcpy(signs, sg, 4);
            signs += 4;
            scales[ib] = scale;
            max_scale = max_of(max_scale, scale);
        }
        if (!max_scale) continue;
        const float d = max_scale / 31;
        b.d = fp32_to_fp16(d * 1.033f);
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / kSub; ib += 2)
            b.scales[ib / 2] = (uint8_t)(scale_level(id, scales[ib]) | scale_level(id, scales[ib + 1]) << 4);
    }
}

}  // namespace
}  // namespace iq

void quantize_row_iq3_xxs_weighted(const float* x, void* dst, int64_t n, const float* qw) {
    iq::quantize_iq3_xxs(x, dst, n, qw);
}
void quantize_row_iq3_s_weighted(const float* x, void* dst, int64_t n, const float* qw) {
    iq::quantize_iq3_s(x, dst, n, qw);
}
void quantize_row_iq3_xxs_ref(const float* x, void* dst, int64_t n) { iq::quantize_iq3_xxs(x, dst, n, nullptr); }
void quantize_row_iq3_s_ref(const float* x, void* dst, int64_t n) { iq::quantize_iq3_s(x, dst, n, nullptr); }

}  // namespace lp
