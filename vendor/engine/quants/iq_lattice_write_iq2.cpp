// iq_lattice_write_iq2.cpp — writing the 8-wide lattice i-quants IQ2_XXS,
// IQ2_XS, IQ2_S, IQ1_S and IQ1_M (their blocks: iq_lattice.h), with an
// importance matrix as llama.cpp's quantizer does, byte for byte
// (tests/test_iq_lattice_write.py, tests/test_quantize_llama_cpp.py).
//
// Every group of 8 weights must land on a point of a fixed grid. A group
// rounded to levels l in {0, 1, 2} (values 2l + 1) that is not a grid point is
// moved to the grid point nearest to it by weighted error, chosen among a
// short candidate list: the grid points at the closest few lattice distances
// from the rounded point (snap_table below, built once per grid).
//   IQ2_XXS / IQ2_XS: magnitudes on the grid; signs in 7 bits, the eighth
//     implied by even parity (the least important weight gives way);
//   IQ2_S: magnitudes on the grid, 8 free sign bits;
//   IQ1_S / IQ1_M: values -1, 0, +1 shifted by ±1/8; the split of a block's
//     sorted values into three sets is found exhaustively, then each 8 is
//     snapped to the grid.
// The float operations run in llama.cpp's order (the build has
// -ffp-contract=off), its tie-breaks are kept (first candidate wins, the
// sort of IQ1 is stable as glibc's qsort), so the blocks are llama.cpp's.
//
// Not here: reading these types (iq_lattice.cpp), IQ3_XXS / IQ3_S
// (iq_lattice_write_iq3.cpp), the importance matrix files (llamapy/imatrix.py).
#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <cstring>
#include <vector>

#include "iq_lattice.h"
#include "kquants_fit.h"
#include "weighted.h"

namespace lp {

namespace {

using qfit::nearest_int;

// Levels are 2 bits per element, element i at bit 2i; with every level <= 2
// the code is at most 0b1010...10.
constexpr int kCodeCount = 0xAAAA + 1;
// Room for the longest candidate list (292, IQ2_XS's; checked when a table is built).
constexpr size_t kMaxCandidates = 1024;

// A grid's snapping table: for each code of 8 levels in {0, 1, 2}, either its
// grid index or the list of candidate grid points for it.
struct snap_table {
    std::vector<uint8_t> levels;    // (n_grid, 8): the level of each element of each grid point
    std::vector<int32_t> by_code;   // (kCodeCount,): >= 0 grid index, else -(1 + index into `lists`)
    // Per off-grid code, its candidates (by distance, then index): n grid
    // indices at near_idx[start..), and their levels element-major at
    // near_lv[8 start + i n + c] (element i of candidate c), so that scoring
    // runs over the candidates in the inner loop, which vectorizes while each
    // candidate's sum keeps its element order.
    struct cand_list { uint32_t start; uint32_t n; };
    std::vector<cand_list> lists;
    std::vector<uint16_t> near_idx;
    std::vector<uint8_t> near_lv;

    // The grid (its n_grid 8-byte entries) and how a stored byte maps to a
    // level; n_shells: how many distinct distances the candidate lists span.
    snap_table(const uint64_t* grid, int n_grid, int (*level_of)(uint8_t), int n_shells) {
        levels.resize((size_t)n_grid * 8);
        by_code.assign(kCodeCount, INT32_MIN);  // codes with a level 3 are never looked up
        for (int g = 0; g < n_grid; ++g) {
            int code = 0;
            for (int i = 0; i < 8; ++i) {
                const int l = level_of((uint8_t)(grid[g] >> (8 * i)));
                levels[(size_t)g * 8 + i] = (uint8_t)l;
                code |= l << (2 * i);
            }
            by_code[code] = g;
        }
        // Squared distances are at most 8 * 4^2: count per distance, then
        // list indices shell by shell (index order within a shell, as the
        // (distance, index) sort llama.cpp does).
        std::vector<int> d2((size_t)n_grid);
        for (int code = 0; code < kCodeCount; ++code) {
            bool reachable = true;
            for (int i = 0; i < 8; ++i) reachable &= ((code >> (2 * i)) & 3) <= 2;
            if (!reachable || by_code[code] >= 0) continue;
            int count[8 * 16 + 1] = {0};
            for (int g = 0; g < n_grid; ++g) {
                int s = 0;
                for (int i = 0; i < 8; ++i) {
                    const int diff = 2 * (levels[(size_t)g * 8 + i] - ((code >> (2 * i)) & 3));
                    s += diff * diff;
                }
                d2[(size_t)g] = s;
                ++count[s];
            }
            int limit = -1, shells = 0;
            for (int s = 0; s <= 8 * 16 && shells < n_shells; ++s)
                if (count[s]) { limit = s; ++shells; }
            const size_t start = near_idx.size();
            by_code[code] = -(1 + (int32_t)lists.size());
            for (int s = 0; s <= limit; ++s) {
                if (!count[s]) continue;
                for (int g = 0; g < n_grid; ++g)
                    if (d2[(size_t)g] == s) near_idx.push_back((uint16_t)g);
            }
            const size_t n = near_idx.size() - start;
            lists.push_back({(uint32_t)start, (uint32_t)n});
            near_lv.resize(8 * near_idx.size());
            for (int i = 0; i < 8; ++i)
                for (size_t c = 0; c < n; ++c) near_lv[8 * start + i * n + c] = levels[(size_t)near_idx[start + c] * 8 + i];
            if (n > kMaxCandidates) throw std::logic_error("iq lattice: candidate list longer than kMaxCandidates");
        }
    }

    const uint8_t* point(int g) const { return &levels[(size_t)g * 8]; }
};

int level_iq2(uint8_t v) { return v == 8 ? 0 : v == 25 ? 1 : 2; }  // grid values 8, 25, 43
int level_iq1(uint8_t v) { return (int)(int8_t)v + 1; }           // grid values -1, 0, +1

// One table per grid, built on first use (thread-safe static initialization).
// llama.cpp's candidate lists span 2 distances for the 256- and 512-point
// grids, 1 for IQ2_S's 1024 and 3 for IQ1's 2048.
const snap_table& table_iq2_xxs() { static const snap_table t(iq::iq2xxs_grid, 256, level_iq2, 2); return t; }
const snap_table& table_iq2_xs() { static const snap_table t(iq::iq2xs_grid, 512, level_iq2, 2); return t; }
const snap_table& table_iq2_s() { static const snap_table t(iq::iq2s_grid, 1024, level_iq2, 1); return t; }
const snap_table& table_iq1() { static const snap_table t(iq::iq1s_grid, 2048, level_iq1, 3); return t; }

int code_of(const int8_t* L) {
    int code = 0;
    for (int i = 0; i < 8; ++i) code |= L[i] << (2 * i);
    return code;
}

// The grid index of levels that are a grid point; 0 for anything else, which
// only non-finite inputs produce (llama.cpp aborts on those).
int grid_index_of(const snap_table& t, const int8_t* L) {
    for (int i = 0; i < 8; ++i)
        if (L[i] < 0 || L[i] > 2) return 0;
    const int32_t e = t.by_code[code_of(L)];
    return e >= 0 ? e : 0;
}

// --- the IQ2 family ---------------------------------------------------------

// The candidate of least weighted error d2 (the first on ties; the first of
// all where none compares, as with NaN, which llama.cpp aborts on); writes its
// levels, returns its grid index.
int pick_candidate(const snap_table& t, const snap_table::cand_list& cl, const float* d2, int8_t* L) {
    float best = FLT_MAX;
    uint32_t best_c = 0;
    for (uint32_t c = 0; c < cl.n; ++c)
        if (d2[c] < best) { best = d2[c]; best_c = c; }
    const int g = t.near_idx[cl.start + best_c];
    const uint8_t* p = t.point(g);
    for (int i = 0; i < 8; ++i) L[i] = (int8_t)p[i];
    return g;
}

// Rounds 8 non-negative values at inverse scale id to levels 0..2 and puts
// them on the grid: kept if the rounding is a grid point, else the candidate
// with the least Σ w·(scale·(2l+1) − x)² (first on ties). Writes the levels,
// returns the grid index; *on_grid says which case it was.
int snap8_iq2(const snap_table& t, const float* xval, const float* w, float id, float scale, int8_t* L,
              bool* on_grid) {
    for (int i = 0; i < 8; ++i) L[i] = (int8_t)qfit::clamp_int(nearest_int(0.5f * (id * xval[i] - 1)), 0, 2);
    const int32_t e = t.by_code[code_of(L)];
    *on_grid = e >= 0;
    if (e >= 0) return e;
    const snap_table::cand_list& cl = t.lists[(size_t)(-e - 1)];
    const int n = (int)cl.n;
    const uint8_t* lv = &t.near_lv[8 * (size_t)cl.start];
    float d2[kMaxCandidates];
    for (int c = 0; c < n; ++c) d2[c] = 0;
    for (int i = 0; i < 8; ++i) {
        const float xi = xval[i], wi = w[i];
        for (int c = 0; c < n; ++c) {
            const float q = (float)(2 * lv[i * n + c] + 1);
            const float diff = scale * q - xi;
            d2[c] += wi * diff * diff;
        }
    }
    return pick_candidate(t, cl, d2, L);
}

// Σ w·x·q and Σ w·q² over n values with q = 2L + 1.
void sums_iq2(int n, const float* w, const float* xval, const int8_t* L, float* sumqx, float* sumq2) {
    float sx = 0, s2 = 0;
    for (int i = 0; i < n; ++i) {
        const float q = (float)(2 * L[i] + 1);
        sx += w[i] * xval[i] * q;
        s2 += w[i] * q * q;
    }
    *sumqx = sx;
    *sumq2 = s2;
}

// |x| of one group of 8 and its sign bits. With even_parity (IQ2_XXS,
// IQ2_XS) the eighth sign is not stored but implied by the parity of the
// other seven: with an odd count of negatives, the element of least w·x² is
// given the wrong sign (its |x| negated) so that the count becomes even.
uint8_t fold_signs(const float* x, const float* w, float* xval, bool even_parity) {
    uint8_t s = 0;
    int n_neg = 0;
    for (int i = 0; i < 8; ++i) {
        if (x[i] >= 0) {
            xval[i] = x[i];
        } else {
            xval[i] = -x[i];
            s |= (uint8_t)(1 << i);
            ++n_neg;
        }
    }
    if (even_parity && n_neg % 2) {
        int imin = 0;
        float vmin = w[0] * x[0] * x[0];
        for (int i = 1; i < 8; ++i) {
            const float v = w[i] * x[i] * x[i];
            if (v < vmin) { vmin = v; imin = i; }
        }
        xval[imin] = -xval[imin];
        s ^= (uint8_t)(1 << imin);
    }
    return even_parity ? (uint8_t)(s & 127) : s;
}

// One sub-block of NG groups of 8 (IQ2_XS and IQ2_S: NG = 2): the scale
// search of those two types. Tries 19 inverse scales (5 ± 0.1·is)/max,
// snapping each to the grid, and keeps the one with the best (Σwxq)²/Σwq²;
// the groups that were off the grid are then snapped again at the chosen
// scale and the scale refitted. Fills L and grid and returns the scale.
template <int NG>
float fit_iq2_sub(const snap_table& t, const float* xval, const float* weight, const float* waux, float max,
                  int8_t* L, int* grid) {
    constexpr int N = 8 * NG;
    int8_t Laux[N];
    int grid_aux[NG];
    bool on_grid[NG], on_grid_aux[NG];
    std::memset(L, 0, N);
    for (int k = 0; k < NG; ++k) { on_grid[k] = true; grid[k] = t.by_code[0]; }
    float best = 0, scale = max / 5;
    for (int is = -9; is <= 9; ++is) {
        const float id = (5 + is * 0.1f) / max;
        const float this_scale = 1 / id;
        for (int k = 0; k < NG; ++k)
            grid_aux[k] = snap8_iq2(t, xval + 8 * k, waux + 8 * k, id, this_scale, Laux + 8 * k, &on_grid_aux[k]);
        float sumqx, sumq2;
        sums_iq2(N, weight, xval, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            std::memcpy(L, Laux, N);
            for (int k = 0; k < NG; ++k) { on_grid[k] = on_grid_aux[k]; grid[k] = grid_aux[k]; }
        }
    }
    bool all_on = true;
    for (int k = 0; k < NG; ++k) all_on &= on_grid[k];
    if (!all_on && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < NG; ++k) {
            if (on_grid[k]) continue;
            bool unused;
            grid[k] = snap8_iq2(t, xval + 8 * k, waux + 8 * k, id, scale, L + 8 * k, &unused);
        }
        float sumqx, sumq2;
        sums_iq2(N, weight, xval, L, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    return scale;
}

float superblock_sigma2(const float* x, float factor) {
    float sumx2 = 0;
    for (int i = 0; i < QK_K; ++i) sumx2 += x[i] * x[i];
    return factor * sumx2 / QK_K;
}

// weight = qw·sqrt(σ² + x²) (the importance-weighted form of every type here).
void importance(int n, const float* x, const float* qw, float sigma2, float* w) {
    for (int i = 0; i < n; ++i) w[i] = qw[i] * std::sqrt(sigma2 + x[i] * x[i]);
}

void quantize_iq2_xxs_rows(const float* x, void* dst, int64_t n, const float* qw) {
    const snap_table& t = table_iq2_xxs();
    auto* y = static_cast<iq::block_iq2_xxs*>(dst);
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const float* xbl = x + QK_K * ibl;
        const float sigma2 = superblock_sigma2(xbl, 1.0f);
        uint32_t q2[2 * (QK_K / 32)] = {0};  // per 32: grid bytes, then signs and the scale
        float scales[QK_K / 32];
        float max_scale = 0;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const float* xb = xbl + 32 * ib;
            float weight[32], waux[32], xval[32];
            int8_t L[32], Laux[32];
            uint8_t signs[4];
            int grid[4];
            importance(32, xb, qw + QK_K * ibl + 32 * ib, sigma2, weight);
            for (int i = 0; i < 32; ++i) waux[i] = std::sqrt(weight[i]);
            for (int k = 0; k < 4; ++k) signs[k] = fold_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k, true);
            float max = xval[0];
            for (int i = 1; i < 32; ++i) max = max > xval[i] ? max : xval[i];
            scales[ib] = 0;
            if (max < qfit::GROUP_MAX_EPS) continue;
            // start from the best plain 4-level fit of |x|, then 13 inverse
            // scales around it, each snapped to the grid
            float scale = qfit::fit_levels(32, 4, xval, weight, reinterpret_cast<uint8_t*>(L));
            const float eff_max = scale * 3;
            if (eff_max <= 0) continue;
            float best = 0;
            for (int is = -6; is <= 6; ++is) {
                const float id = (5 + is * 0.1f) / eff_max;
                const float this_scale = 1 / id;
                bool on_grid;
                for (int k = 0; k < 4; ++k)
                    snap8_iq2(t, xval + 8 * k, waux + 8 * k, id, this_scale, Laux + 8 * k, &on_grid);
                float sumqx, sumq2;
                sums_iq2(32, weight, xval, Laux, &sumqx, &sumq2);
                if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    std::memcpy(L, Laux, 32);
                }
            }
            // every group snapped again at the chosen scale, which is refitted
            if (scale > 0) {
                const float id = 1 / scale;
                bool on_grid;
                for (int k = 0; k < 4; ++k)
                    grid[k] = snap8_iq2(t, xval + 8 * k, waux + 8 * k, id, scale, L + 8 * k, &on_grid);
                float sumqx, sumq2;
                sums_iq2(32, weight, xval, L, &sumqx, &sumq2);
                if (sumq2 > 0) scale = sumqx / sumq2;
            } else {  // a negative scale: L is the last accepted candidate's, on the grid
                for (int k = 0; k < 4; ++k) grid[k] = grid_index_of(t, L + 8 * k);
            }
            if (scale < 0) {  // the scale is stored unsigned: flip the signs instead
                scale = -scale;
                for (int k = 0; k < 4; ++k) signs[k] = (uint8_t)(~signs[k] & 127);
            }
            for (int k = 0; k < 4; ++k) {
                q2[2 * ib] |= (uint32_t)grid[k] << (8 * k);
                q2[2 * ib + 1] |= (uint32_t)signs[k] << (7 * k);
            }
            scales[ib] = scale;
            max_scale = max_scale > scale ? max_scale : scale;
        }
        y[ibl].d = fp32_to_fp16(0.f);
        if (!max_scale) {
            std::memset(y[ibl].qs, 0, sizeof y[ibl].qs);
            continue;
        }
        const float d = max_scale / 31;
        y[ibl].d = fp32_to_fp16(d);
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const int l = qfit::clamp_int(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15);
            q2[2 * ib + 1] |= (uint32_t)l << 28;
        }
        std::memcpy(y[ibl].qs, q2, sizeof q2);
    }
}

// IQ2_XS and IQ2_S: per 16 weights a scale and two grid points.
// IQ2_XS: 9-bit grid index + 7 sign bits per 8; σ² = Σx²/256, weights required.
// IQ2_S: 10-bit index split over qs / qh, 8 sign bits; σ² = 2Σx²/256, and
// without weights 0.25σ² + x²; d shrunk by 0.9875.
template <bool IS_S>
void quantize_iq2_16_rows(const float* x, void* dst, int64_t n, const float* qw) {
    const snap_table& t = IS_S ? table_iq2_s() : table_iq2_xs();
    const float eps = IS_S ? 1e-8f : qfit::GROUP_MAX_EPS;
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const float* xbl = x + QK_K * ibl;
        const float sigma2 = superblock_sigma2(xbl, IS_S ? 2.0f : 1.0f);
        float scales[QK_K / 16];
        float max_scale = 0;
        uint16_t words[QK_K / 8] = {0};          // IQ2_XS: index | signs << 9
        uint8_t idx_lo[QK_K / 8] = {0}, idx_hi[QK_K / 32] = {0}, sign8[QK_K / 8] = {0};  // IQ2_S
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float* xb = xbl + 16 * ib;
            float weight[16], waux[16], xval[16];
            int8_t L[16];
            int grid[2];
            uint8_t signs[2];
            if (qw) {
                importance(16, xb, qw + QK_K * ibl + 16 * ib, sigma2, weight);
            } else {
                for (int i = 0; i < 16; ++i) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
            }
            for (int i = 0; i < 16; ++i) waux[i] = std::sqrt(weight[i]);
            for (int k = 0; k < 2; ++k) signs[k] = fold_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k, !IS_S);
            float max = xval[0];
            for (int i = 1; i < 16; ++i) max = max > xval[i] ? max : xval[i];
            scales[ib] = 0;
            if (max < eps) continue;
            float scale = fit_iq2_sub<2>(t, xval, weight, waux, max, L, grid);
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 2; ++k) signs[k] = (uint8_t)(IS_S ? ~signs[k] : ~signs[k] & 127);
            }
            for (int k = 0; k < 2; ++k) {
                const int i8 = 2 * ib + k;
                if (IS_S) {
                    idx_lo[i8] = (uint8_t)(grid[k] & 255);
                    idx_hi[i8 / 4] |= (uint8_t)((grid[k] >> 8) << (2 * (i8 % 4)));
                    sign8[i8] = signs[k];
                } else {
                    words[i8] = (uint16_t)(grid[k] | (signs[k] << 9));
                }
            }
            scales[ib] = scale;
            max_scale = max_scale > scale ? max_scale : scale;
        }
        uint8_t packed_scales[QK_K / 32] = {0};
        float d = 0;
        if (max_scale) {
            d = max_scale / 31;
            const float id = 1 / d;
            for (int ib = 0; ib < QK_K / 16; ++ib) {
                const int l = qfit::clamp_int(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15);
                packed_scales[ib / 2] |= (uint8_t)(l << (4 * (ib % 2)));
            }
        }
        if (IS_S) {
            auto& b = static_cast<iq::block_iq2_s*>(dst)[ibl];
            std::memset(&b, 0, sizeof b);
            std::memcpy(b.qs, idx_lo, sizeof idx_lo);
            std::memcpy(b.qs + QK_K / 8, sign8, sizeof sign8);
            std::memcpy(b.qh, idx_hi, sizeof idx_hi);
            if (!max_scale) continue;
            b.d = fp32_to_fp16(d * 0.9875f);
            std::memcpy(b.scales, packed_scales, sizeof packed_scales);
        } else {
            auto& b = static_cast<iq::block_iq2_xs*>(dst)[ibl];
            std::memset(&b, 0, sizeof b);
            if (!max_scale) continue;
            b.d = fp32_to_fp16(d);
            std::memcpy(b.qs, words, sizeof words);
            std::memcpy(b.scales, packed_scales, sizeof packed_scales);
        }
    }
}

// --- the IQ1 family ---------------------------------------------------------

// The two value sets: -1, 0, +1 shifted by +1/8 or by -1/8.
constexpr float kShiftUp[3] = {-1 + 0.125f, 0.125f, 1 + 0.125f};
constexpr float kShiftDown[3] = {-1 - 0.125f, -0.125f, 1 - 0.125f};

// Indices 0..n-1 ordered by x ascending, equal values in index order (the
// order glibc's merge-sorting qsort leaves them in for llama.cpp). Insertion
// sort: n is 16 or 32, and it stays in bounds whatever the values (NaN too).
void sort_by_value(int n, const float* x, int* order) {
    for (int i = 0; i < n; ++i) {
        int j = i;
        while (j > 0 && x[i] < x[order[j - 1]]) {
            order[j] = order[j - 1];
            --j;
        }
        order[j] = i;
    }
}

// The levels from a split of the sorted values: the first i1 -> 0 (-1), up to
// i2 -> 1 (0), the rest -> 2 (+1).
void levels_from_split(int n, const int* order, int i1, int i2, int8_t* L) {
    for (int j = 0; j < n; ++j) L[order[j]] = (int8_t)(j < i1 ? 0 : j < i2 ? 1 : 2);
}

// Puts the levels of 8 weights on the IQ1 grid: kept if they are a grid
// point, else the candidate with the least Σ w·(scale·v[l] − x)², v the
// group's value set. Returns the grid index; *on_grid says which.
int snap8_iq1(const snap_table& t, const float* x, const float* w, float scale, const float* v, int8_t* L,
              bool* on_grid) {
    const int32_t e = t.by_code[code_of(L)];
    *on_grid = e >= 0;
    if (e >= 0) return e;
    const snap_table::cand_list& cl = t.lists[(size_t)(-e - 1)];
    const int n = (int)cl.n;
    const uint8_t* lv = &t.near_lv[8 * (size_t)cl.start];
    float d2[kMaxCandidates];
    for (int c = 0; c < n; ++c) d2[c] = 0;
    // v[l] = v[0] + l exactly: both value sets step by 1 and are multiples of 1/8
    const float v0 = v[0];
    for (int i = 0; i < 8; ++i) {
        const float xi = x[i], wi = w[i];
        for (int c = 0; c < n; ++c) {
            const float q = v0 + (float)lv[i * n + c];
            const float diff = scale * q - xi;
            d2[c] += wi * diff * diff;
        }
    }
    return pick_candidate(t, cl, d2, L);
}

// Least-squares scale of groups of 8 on given grid points with value sets
// v[k]: Σ w·q·x / Σ w·q², kept only when both sums are positive.
void refit_iq1(const snap_table& t, int n_groups, const int* grid, const float* const* v, const float* x,
               const float* w, float* scale) {
    float sumqx = 0, sumq2 = 0;
    for (int k = 0; k < n_groups; ++k) {
        const uint8_t* p = t.point(grid[k]);
        for (int j = 0; j < 8; ++j) {
            const float q = v[k][p[j]];
            sumqx += w[8 * k + j] * q * x[8 * k + j];
            sumq2 += w[8 * k + j] * q * q;
        }
    }
    if (sumqx > 0 && sumq2 > 0) *scale = sumqx / sumq2;
}

// IQ1_S: per 32 weights one shift sign, a 3-bit scale and 4 grid points.
void quantize_iq1_s_rows(const float* x, void* dst, int64_t n, const float* qw) {
    const snap_table& t = table_iq1();
    auto* y = static_cast<iq::block_iq1_s*>(dst);
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        iq::block_iq1_s& b = y[ibl];
        std::memset(&b, 0, sizeof b);
        const float* xbl = x + QK_K * ibl;
        const float sigma2 = superblock_sigma2(xbl, 2.0f);
        float scales[QK_K / 32];
        int8_t shifts[QK_K / 32];
        float max_scale = 0;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const float* xb = xbl + 32 * ib;
            float weight[32];
            importance(32, xb, qw + QK_K * ibl + 32 * ib, sigma2, weight);
            scales[ib] = 0;
            shifts[ib] = 1;
            float max = std::fabs(xb[0]);
            for (int i = 1; i < 32; ++i) max = max > std::fabs(xb[i]) ? max : std::fabs(xb[i]);
            if (max < 1e-12f) continue;
            // With three values per shift, the best split of the sorted values
            // into three sets is found exhaustively from prefix sums.
            int order[32];
            sort_by_value(32, xb, order);
            float sumx[33], sumw[33];
            sumx[0] = sumw[0] = 0;
            for (int j = 0; j < 32; ++j) {
                sumx[j + 1] = sumx[j] + weight[order[j]] * xb[order[j]];
                sumw[j + 1] = sumw[j] + weight[order[j]];
            }
            float best = -FLT_MAX, scale = max;
            int besti1 = -1, besti2 = -1, best_shift = 0;
            for (int i1 = 0; i1 <= 32; ++i1) {
                for (int i2 = i1; i2 <= 32; ++i2) {
                    for (int sh = 1; sh >= -1; sh -= 2) {
                        const float* v = sh == 1 ? kShiftUp : kShiftDown;
                        const float sumqx = (sumx[i1] - sumx[0]) * v[0] + (sumx[i2] - sumx[i1]) * v[1] +
                                            (sumx[32] - sumx[i2]) * v[2];
                        const float sumq2 = (sumw[i1] - sumw[0]) * v[0] * v[0] + (sumw[i2] - sumw[i1]) * v[1] * v[1] +
                                            (sumw[32] - sumw[i2]) * v[2] * v[2];
                        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                            scale = sumqx / sumq2;
                            best = scale * sumqx;
                            besti1 = i1;
                            besti2 = i2;
                            best_shift = sh;
                        }
                    }
                }
            }
            if (besti1 < 0 || besti2 < 0 || best_shift == 0) continue;
            int8_t L[32];
            levels_from_split(32, order, besti1, besti2, L);
            if (scale < 0) {  // mirrored: -1 <-> +1 and the shift's sign
                for (int j = 0; j < 32; ++j) L[j] = (int8_t)(2 - L[j]);
                scale = -scale;
                best_shift = -best_shift;
            }
            const float* v = best_shift == 1 ? kShiftUp : kShiftDown;
            int grid[4];
            bool all_on = true;
            for (int k = 0; k < 4; ++k) {
                bool on;
                grid[k] = snap8_iq1(t, xb + 8 * k, weight + 8 * k, scale, v, L + 8 * k, &on);
                all_on &= on;
            }
            if (!all_on) {
                const float* vs[4] = {v, v, v, v};
                refit_iq1(t, 4, grid, vs, xb, weight, &scale);
            }
            uint16_t h = 0;
            for (int k = 0; k < 4; ++k) {
                b.qs[4 * ib + k] = (uint8_t)(grid[k] & 255);
                h |= (uint16_t)((grid[k] >> 8) << (3 * k));
            }
            b.qh[ib] = h;
            scales[ib] = scale;
            shifts[ib] = (int8_t)best_shift;
            max_scale = max_scale > scale ? max_scale : scale;
        }
        if (!max_scale) continue;
        const float d = max_scale / 15;
        b.d = fp32_to_fp16(d * 1.125f);  // llama.cpp's empirical factor
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            int l = qfit::clamp_int(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 7);
            if (shifts[ib] == -1) l |= 8;
            b.qh[ib] |= (uint16_t)(l << 12);
        }
    }
}

// IQ1_M: per 16 weights a 3-bit scale and two grid points, each 8 with its
// own shift sign; the fp16 super-scale spread over the scales' top nibbles.
// Shift patterns k (first 8, second 8): 0 (+, +), 1 (+, −), 2 (−, +), 3 (−, −).
void quantize_iq1_m_rows(const float* x, void* dst, int64_t n, const float* qw) {
    const snap_table& t = table_iq1();
    auto* y = static_cast<iq::block_iq1_m*>(dst);
    auto shift_values = [](int k, int half) -> const float* {
        const bool down = half == 0 ? k >= 2 : k % 2 == 1;
        return down ? kShiftDown : kShiftUp;
    };
    auto block_weights = [&](const float* xb, const float* qwb, float sigma2, float* w) {
        if (qwb) importance(16, xb, qwb, sigma2, w);
        else for (int i = 0; i < 16; ++i) w[i] = xb[i] * xb[i];
    };
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        iq::block_iq1_m& b = y[ibl];
        std::memset(&b, 0, sizeof b);
        const float* xbl = x + QK_K * ibl;
        const float sigma2 = superblock_sigma2(xbl, 2.0f);
        float scales[QK_K / 16];
        int8_t shifts[QK_K / 16];
        float max_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float* xb = xbl + 16 * ib;
            float weight[16];
            block_weights(xb, qw ? qw + QK_K * ibl + 16 * ib : nullptr, sigma2, weight);
            scales[ib] = 0;
            shifts[ib] = 0;
            float max = std::fabs(xb[0]);
            for (int i = 1; i < 16; ++i) max = max > std::fabs(xb[i]) ? max : std::fabs(xb[i]);
            if (max < 1e-7f) continue;
            int order[16];
            sort_by_value(16, xb, order);
            // Prefix sums per half (each half may take either shift). As both
            // value sets step by 1 (v0 − v1 = v1 − v2 = −1), a split's sums
            // come from the totals and the two prefix sums at the split points.
            float px[2][17], pw[2][17];
            px[0][0] = px[1][0] = pw[0][0] = pw[1][0] = 0;
            for (int j = 0; j < 16; ++j) {
                const int i = order[j], h = i < 8 ? 0 : 1;
                px[h][j + 1] = px[h][j] + weight[i] * xb[i];
                px[1 - h][j + 1] = px[1 - h][j];
                pw[h][j + 1] = pw[h][j] + weight[i];
                pw[1 - h][j + 1] = pw[1 - h][j];
            }
            const float tx[2] = {px[0][16], px[1][16]}, tw[2] = {pw[0][16], pw[1][16]};
            const float up2 = kShiftUp[2], dn2 = kShiftDown[2];
            const float cu1 = kShiftUp[0] * kShiftUp[0] - kShiftUp[1] * kShiftUp[1];
            const float cu2 = kShiftUp[1] * kShiftUp[1] - kShiftUp[2] * kShiftUp[2];
            const float cd1 = kShiftDown[0] * kShiftDown[0] - kShiftDown[1] * kShiftDown[1];
            const float cd2 = kShiftDown[1] * kShiftDown[1] - kShiftDown[2] * kShiftDown[2];
            float best = -FLT_MAX, scale = max;
            int besti1 = -1, besti2 = -1, best_k = -1;
            for (int i1 = 0; i1 <= 16; ++i1) {
                for (int i2 = i1; i2 <= 16; ++i2) {
                    float qx_u[2], qx_d[2], q2_u[2], q2_d[2];
                    for (int h = 0; h < 2; ++h) {
                        const float sx = px[h][i1] + px[h][i2];
                        qx_u[h] = tx[h] * up2 - sx;
                        qx_d[h] = tx[h] * dn2 - sx;
                        q2_u[h] = tw[h] * up2 * up2 + pw[h][i1] * cu1 + pw[h][i2] * cu2;
                        q2_d[h] = tw[h] * dn2 * dn2 + pw[h][i1] * cd1 + pw[h][i2] * cd2;
                    }
                    const float sumqx[4] = {qx_u[0] + qx_u[1], qx_u[0] + qx_d[1], qx_d[0] + qx_u[1], qx_d[0] + qx_d[1]};
                    const float sumq2[4] = {q2_u[0] + q2_u[1], q2_u[0] + q2_d[1], q2_d[0] + q2_u[1], q2_d[0] + q2_d[1]};
                    for (int k = 0; k < 4; ++k) {
                        if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best * sumq2[k]) {
                            scale = sumqx[k] / sumq2[k];
                            best = scale * sumqx[k];
                            besti1 = i1;
                            besti2 = i2;
                            best_k = k;
                        }
                    }
                }
            }
            if (besti1 < 0 || besti2 < 0 || best_k < 0) continue;
            int8_t L[16];
            levels_from_split(16, order, besti1, besti2, L);
            if (scale < 0) {  // mirrored: -1 <-> +1, and both halves' shifts flip
                for (int j = 0; j < 16; ++j) L[j] = (int8_t)(2 - L[j]);
                scale = -scale;
                best_k = 3 - best_k;
            }
            const float* vs[2] = {shift_values(best_k, 0), shift_values(best_k, 1)};
            int grid[2];
            bool all_on = true;
            for (int k = 0; k < 2; ++k) {
                bool on;
                grid[k] = snap8_iq1(t, xb + 8 * k, weight + 8 * k, scale, vs[k], L + 8 * k, &on);
                all_on &= on;
            }
            if (!all_on) refit_iq1(t, 2, grid, vs, xb, weight, &scale);
            b.qs[2 * ib] = (uint8_t)(grid[0] & 255);
            b.qs[2 * ib + 1] = (uint8_t)(grid[1] & 255);
            b.qh[ib] = (uint8_t)((grid[0] >> 8) | ((grid[1] >> 8) << 4));
            scales[ib] = scale;
            shifts[ib] = (int8_t)best_k;
            max_scale = max_scale > scale ? max_scale : scale;
        }
        if (!max_scale) continue;
        // 3-bit scales of max_scale / 15, then the super-scale refitted to
        // the stored points and scales over the whole super-block.
        static constexpr uint8_t kShiftBits[4] = {0x00, 0x80, 0x08, 0x88};
        uint16_t sc[4] = {0, 0, 0, 0};
        float d = max_scale / 15;
        const float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const int l = qfit::clamp_int(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 7);
            sc[ib / 4] |= (uint16_t)(l << (3 * (ib % 4)));
            b.qh[ib] |= kShiftBits[shifts[ib]];
            const float* xb = xbl + 16 * ib;
            float weight[16];
            block_weights(xb, qw ? qw + QK_K * ibl + 16 * ib : nullptr, sigma2, weight);
            for (int k = 0; k < 2; ++k) {
                const float* v = shift_values(shifts[ib], k);
                const int g = b.qs[2 * ib + k] | (((b.qh[ib] >> (4 * k)) & 7) << 8);
                const uint8_t* p = t.point(g);
                for (int j = 0; j < 8; ++j) {
                    const float w = weight[8 * k + j];
                    const float q = v[p[j]] * (float)(2 * l + 1);
                    sumqx += w * q * xb[8 * k + j];
                    sumq2 += w * q * q;
                }
            }
        }
        if (sumq2 > 0) d = sumqx / sumq2;
        const uint16_t h = fp32_to_fp16(d * 1.1125f);  // llama.cpp's empirical factor
        sc[0] |= (uint16_t)((h & 0x000f) << 12);
        sc[1] |= (uint16_t)((h & 0x00f0) << 8);
        sc[2] |= (uint16_t)((h & 0x0f00) << 4);
        sc[3] |= (uint16_t)(h & 0xf000);
        std::memcpy(b.scales, sc, sizeof sc);
    }
}

}  // namespace

void quantize_row_iq2_xxs_weighted(const float* x, void* dst, int64_t n, const float* qw) {
    quantize_iq2_xxs_rows(x, dst, n, qw);
}
void quantize_row_iq2_xs_weighted(const float* x, void* dst, int64_t n, const float* qw) {
    quantize_iq2_16_rows<false>(x, dst, n, qw);
}
void quantize_row_iq2_s_weighted(const float* x, void* dst, int64_t n, const float* qw) {
    quantize_iq2_16_rows<true>(x, dst, n, qw);
}
void quantize_row_iq1_s_weighted(const float* x, void* dst, int64_t n, const float* qw) {
    quantize_iq1_s_rows(x, dst, n, qw);
}
void quantize_row_iq1_m_weighted(const float* x, void* dst, int64_t n, const float* qw) {
    quantize_iq1_m_rows(x, dst, n, qw);
}
void quantize_row_iq2_s_ref(const float* x, void* dst, int64_t n) { quantize_iq2_16_rows<true>(x, dst, n, nullptr); }
void quantize_row_iq1_m_ref(const float* x, void* dst, int64_t n) { quantize_iq1_m_rows(x, dst, n, nullptr); }

}  // namespace lp
