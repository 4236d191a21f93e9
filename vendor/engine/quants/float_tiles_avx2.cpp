// float_tiles_avx2.cpp — the AVX2 F32 and F16 dot products as register-
// blocked tiles (gemm_tile_fn): the mat-mat of F32 / F16 models (BERT-style
// embedders are stored that way) ran one vec_dot per (row, column), which is
// load bound — two loads per FMA. A tile loads each weight vector once for
// all its columns and each activation vector once for all its rows.
//
// Every (row, column) pair has one 8-lane accumulator that takes the FMAs of
// elements 0-7, 8-15, ... in order, the last partial vector zero-padded
// (masked loads), then one horizontal sum. vec_dot is the 1 × 1 tile, so
// vec_dot, mat-vec (the driver's 4 × 1 tiles) and mat-mat give the same bits.
// (float.cpp's former AVX2 vec_dot kept 4 accumulators per product: no room
// for that in a tile's 16 registers.)
//
// Shape: the driver asks for up to 4 × 4; that is run as 4 rows × 2 columns
// twice: 8 accumulators (enough independent chains to hide the FMA latency on
// two FMA ports), 4 weight vectors and 1 activation vector fit the 16 ymm
// registers; 6 loads per 8 FMAs keep it FMA bound.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../common.h"
#include "../ggml_type.h"

#if defined(LP_X86)
#include <immintrin.h>
#endif

#include "blocks.h"
#include "simd_x86.h"
#include "tiles_avx2_common.h"

namespace lp {

#if defined(LP_HAVE_AVX2)

namespace {

struct f32_avx2 {
    static constexpr size_t elem = 4;
    LP_TARGET_AVX2 static LP_INLINE __m256 load(const uint8_t* row, int64_t i) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
    }
    // the cnt (< 8) elements from i, zeros after; live: lanes < cnt
    LP_TARGET_AVX2 static LP_INLINE __m256 load_tail(const uint8_t* row, int64_t i, int, __m256i live) {
        return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + i, live);
    }
};

struct f16_avx2 {
    static constexpr size_t elem = 2;
    LP_TARGET_AVX2 static LP_INLINE __m256 load(const uint8_t* row, int64_t i) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + i)));
    }
    // no 16-bit masked load in AVX2: the tail goes through a zeroed buffer
    LP_TARGET_AVX2 static LP_INLINE __m256 load_tail(const uint8_t* row, int64_t i, int cnt, __m256i) {
        alignas(16) uint16_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        const auto* h = reinterpret_cast<const uint16_t*>(row) + i;
        for (int k = 0; k < cnt; ++k) buf[k] = h[k];
        return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)));
    }
};

// Q8_0 rows read as floats (d · q, exactly: q has 8 bits, d 11): the
// encoders' throughput product at this level without AVX-VNNI
// (use_dequantized_q8_0_avx2). Rows are whole 32-element blocks, so every
// load of 8 lies in one block.
struct q8_0_as_f32_avx2 {
    static constexpr size_t elem = 1;
    LP_TARGET_AVX2 static LP_INLINE __m256 load(const uint8_t* row, int64_t i) {
        const auto* b = reinterpret_cast<const block_q8_0*>(row) + i / QK8_0;
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->qs + i % QK8_0));
        return _mm256_mul_ps(_mm256_set1_ps(x86::half_to_float(b->d)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    }
    LP_TARGET_AVX2 static LP_INLINE __m256 load_tail(const uint8_t* row, int64_t i, int cnt, __m256i) {
        alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        const auto* b = reinterpret_cast<const block_q8_0*>(row) + i / QK8_0;
        for (int k = 0; k < cnt; ++k) buf[k] = x86::half_to_float(b->d) * (float)b->qs[i % QK8_0 + k];
        return _mm256_load_ps(buf);
    }
};

template <class L, int NR, int NC>
LP_TARGET_AVX2 void float_tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                               size_t os) {
    __m256 acc[NR][NC];
    for (int r = 0; r < NR; ++r)
        for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();
    // Mat-vec streams the weights: one linear prefetch stream for the NR rows
    // (tiles_avx2_common.h).
    [[maybe_unused]] const char* pf = tiles_avx2::prefetch_start(w, ws, NR);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        if constexpr (NC == 1) tiles_avx2::prefetch_step(pf, NR * 8 * L::elem);
        __m256 wv[NR];
        for (int r = 0; r < NR; ++r) {
            wv[r] = L::load(w + r * ws, i);
            // Keep the weights in registers: GCC otherwise folds each
            // weight load into every column's FMA (10 loads per 8 FMAs, load
            // bound on 2-load-per-cycle cores such as Zen 3; 6 this way).
            __asm__("" : "+x"(wv[r]));
        }
        for (int c = 0; c < NC; ++c) {
            const __m256 av = L::load(a + c * as, i);
            for (int r = 0; r < NR; ++r) acc[r][c] = _mm256_fmadd_ps(wv[r], av, acc[r][c]);
        }
    }
    if (i < n) {
        const __m256i live = x86::first_lanes8((int)(n - i));
        const int cnt = (int)(n - i);
        __m256 wv[NR];
        for (int r = 0; r < NR; ++r) wv[r] = L::load_tail(w + r * ws, i, cnt, live);
        for (int c = 0; c < NC; ++c) {
            const __m256 av = L::load_tail(a + c * as, i, cnt, live);
            for (int r = 0; r < NR; ++r) acc[r][c] = _mm256_fmadd_ps(wv[r], av, acc[r][c]);
        }
    }
    for (int c = 0; c < NC; ++c)
        for (int r = 0; r < NR; ++r) out[(size_t)c * os + r] = x86::hsum_f32x8(acc[r][c]);
}

template <class L, int NR>
LP_TARGET_AVX2 void float_rows(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                               size_t os, int nc) {
    int c = 0;
    for (; c + 2 <= nc; c += 2) float_tile<L, NR, 2>(n, w, ws, a + c * as, as, out + c * os, os);
    if (c < nc) float_tile<L, NR, 1>(n, w, ws, a + c * as, as, out + c * os, os);
}

template <class L>
LP_TARGET_AVX2 void gemm_tile_float_avx2(int64_t n, const void* w, size_t ws, const void* a, size_t as, float* out,
                                         size_t os, int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    switch (nr) {
        case 4: float_rows<L, 4>(n, wb, ws, ab, as, out, os, nc); return;
        case 3: float_rows<L, 3>(n, wb, ws, ab, as, out, os, nc); return;
        case 2: float_rows<L, 2>(n, wb, ws, ab, as, out, os, nc); return;
        case 1: float_rows<L, 1>(n, wb, ws, ab, as, out, os, nc); return;
        default: return;
    }
}

// ---------------------------------------------------------------------------
// Mat-mat: the packed product (gemm_packed_fn, pack_acts_fn), as at AVX-512
// (float_tiles_avx512.cpp says why and how) with this level's chains: a
// pair's dot product is 8 lane chains (elements l, l + 8, ... from zero, the
// zero-padded tail included) added in hsum_f32x8's tree. The register tile
// runs one lane's chains for 16 weight rows (two vectors) × 6 activation
// rows: 12 accumulators, 8 loads per 12 FMAs, 15 of the 16 ymm registers.
// Lanes are taken in bit-reversed order (0, 4, 2, 6, 1, 5, 3, 7) and merged
// like a binary counter, so lane l meets l + 4, then l + 2, then l + 1.
//
// Layouts (floats; S = ceil(K / 8) steps of 8 elements): packed activations
// per tile of kPackCols rows [lane][step][6 rows] (made once per matmul by
// the driver); packed weights per tile of kPackRows rows [lane][step][16
// rows] (per call; F16 widened exactly). Zero-padded past K and past the
// last row.
constexpr int kLanes = 8;
constexpr int kPackRows = 16;
constexpr int kPackCols = 6;
constexpr int kPackedPanelRows = 64;
constexpr int kTreeLevels = 3;
static_assert(kPackedPanelRows % kPanelRows == 0, "panel_rows is a multiple of kPanelRows");

// In place: lane j of r[i] becomes lane i of r[j].
LP_TARGET_AVX2 LP_INLINE void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {  // per 128-bit half: [a0 b0 a1 b1], [a2 b2 a3 b3]
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int g = 0; g < 2; ++g) {  // u[4g + m], half h: rows 4g..4g+3 of column 4h + m
        u[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int m = 0; m < 4; ++m) {
        r[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20);
        r[m + 4] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
    }
}

// The cnt (<= 8) floats from x, zeros after.
LP_TARGET_AVX2 LP_INLINE __m256 load_f32_first(const float* x, int cnt) {
    if (cnt == 8) return _mm256_loadu_ps(x);
    const __m256i live = x86::first_lanes8(cnt);
    return _mm256_maskload_ps(x, live);
}

// Activation values as vec_dot sees them: F32 as they are, F16 rounded to
// F16 (to nearest even, as the F16 activation conversion) and widened back.
struct f32_acts {
    LP_TARGET_AVX2 static LP_INLINE __m256 load(const float* x, int cnt) { return load_f32_first(x, cnt); }
};
struct f16_acts {
    LP_TARGET_AVX2 static LP_INLINE __m256 load(const float* x, int cnt) {
        return _mm256_cvtph_ps(_mm256_cvtps_ph(load_f32_first(x, cnt), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
};

// nc (<= kPackCols) F32 activation rows x (stride xs floats) of n elements
// into one packed tile at dst; rows past nc are zeros.
template <class A>
LP_TARGET_AVX2 void pack_acts_float_avx2(int64_t n, const float* x, int64_t xs, int nc, float* dst) {
    const int64_t S = (n + kLanes - 1) / kLanes;
    for (int64_t j = 0; j < S; ++j) {
        const int cnt = (int)std::min<int64_t>(kLanes, n - j * kLanes);
        __m256 v[8];
        for (int c = 0; c < 8; ++c) v[c] = c < nc ? A::load(x + c * xs + j * kLanes, cnt) : _mm256_setzero_ps();
        transpose8(v);
        for (int l = 0; l < kLanes; ++l) {
            float* d = dst + (l * S + j) * kPackCols;  // 6 of the 8 lanes
            _mm_storeu_ps(d, _mm256_castps256_ps128(v[l]));
            _mm_storel_pi(reinterpret_cast<__m64*>(d + 4), _mm256_extractf128_ps(v[l], 1));
        }
    }
}

// Rows [r0, r0 + 16) of the weights (nr rows in all) into one packed tile.
template <class L>
LP_TARGET_AVX2 void pack_weights(int64_t n, int64_t S, const uint8_t* w, size_t ws, int r0, int nr, float* dst) {
    for (int64_t j = 0; j < S; ++j) {
        const int64_t i = j * kLanes;
        const int cnt = (int)std::min<int64_t>(kLanes, n - i);
        const __m256i live = x86::first_lanes8(cnt);
        for (int h = 0; h < kPackRows / 8; ++h) {
            __m256 v[8];
            for (int k = 0; k < 8; ++k) {
                const int r = r0 + 8 * h + k;
                v[k] = r >= nr ? _mm256_setzero_ps() : cnt == 8 ? L::load(w + r * ws, i) : L::load_tail(w + r * ws, i, cnt, live);
            }
            transpose8(v);
            for (int l = 0; l < kLanes; ++l) _mm256_storeu_ps(dst + (l * S + j) * kPackRows + 8 * h, v[l]);
        }
    }
}

// One lane's chains for a 16-row × NC-column tile (NC of the packed tile's 6
// activation rows; NC even).
template <int NC>
LP_TARGET_AVX2 LP_INLINE void lane_chains(int64_t S, const float* wp, const float* ap, __m256 acc[2][NC]) {
    for (int c = 0; c < NC; ++c) acc[0][c] = acc[1][c] = _mm256_setzero_ps();
    for (int64_t j = 0; j < S; ++j, wp += kPackRows, ap += kPackCols) {
        __m256 w0 = _mm256_loadu_ps(wp), w1 = _mm256_loadu_ps(wp + 8);
        __asm__("" : "+x"(w0));  // one load per weight vector, not one folded into each FMA
        __asm__("" : "+x"(w1));
        for (int c = 0; c < NC; ++c) {
            __m256 b = _mm256_broadcast_ss(ap + c);
            __asm__("" : "+x"(b));
            acc[0][c] = _mm256_fmadd_ps(w0, b, acc[0][c]);
            acc[1][c] = _mm256_fmadd_ps(w1, b, acc[1][c]);
        }
    }
}

// Adds the chains of the index-th lane (bit-reversed order) into the tree
// (kTreeLevels levels of 2 × kPackCols vectors); true when acc holds the
// finished sums (the 8th lane).
template <int NC>
LP_TARGET_AVX2 LP_INLINE bool merge_lane(int index, __m256 acc[2][NC], float* tree) {
    int level = 0;
    for (int bits = index; bits & 1; bits >>= 1, ++level) {
        const float* t = tree + level * (2 * kPackCols * 8);
        for (int c = 0; c < NC; ++c) {
            acc[0][c] = _mm256_add_ps(_mm256_loadu_ps(t + (2 * c) * 8), acc[0][c]);
            acc[1][c] = _mm256_add_ps(_mm256_loadu_ps(t + (2 * c + 1) * 8), acc[1][c]);
        }
    }
    if (level == kTreeLevels) return true;
    float* t = tree + level * (2 * kPackCols * 8);
    for (int c = 0; c < NC; ++c) {
        _mm256_storeu_ps(t + (2 * c) * 8, acc[0][c]);
        _mm256_storeu_ps(t + (2 * c + 1) * 8, acc[1][c]);
    }
    return false;
}

constexpr int bit_reversed3(int i) { return ((i & 1) << 2) | (i & 2) | ((i & 4) >> 2); }

// The first cnt (<= 8) floats of v to dst.
LP_TARGET_AVX2 LP_INLINE void store_first(float* dst, __m256 v, int cnt) {
    if (cnt >= 8) {
        _mm256_storeu_ps(dst, v);
        return;
    }
    const __m256i live = x86::first_lanes8(cnt);
    _mm256_maskstore_ps(dst, live, v);
}

struct packed_scratch {
    std::vector<float> w, tree;
};

// Columns [0, nc) of one packed activation tile against every row tile.
template <int NC>
LP_TARGET_AVX2 void packed_column_tile(int64_t S, int n_rt, int nr, const float* wp, const float* ap, int nc,
                                       float* tree, float* out, size_t os) {
    const size_t wtile = (size_t)kLanes * S * kPackRows, wlane = (size_t)S * kPackRows, alane = (size_t)S * kPackCols;
    for (int i = 0; i < kLanes; ++i) {
        const int l = bit_reversed3(i);
        for (int rt = 0; rt < n_rt; ++rt) {
            __m256 acc[2][NC];
            lane_chains<NC>(S, wp + rt * wtile + l * wlane, ap + l * alane, acc);
            if (!merge_lane<NC>(i, acc, tree + (size_t)rt * kTreeLevels * 2 * kPackCols * 8)) continue;
            const int r0 = rt * kPackRows;
            for (int c = 0; c < nc; ++c) {
                store_first(out + (size_t)c * os + r0, acc[0][c], nr - r0);
                if (nr - r0 > 8) store_first(out + (size_t)c * os + r0 + 8, acc[1][c], nr - r0 - 8);
            }
        }
    }
}

// nr (<= kPackedPanelRows) weight rows × nc packed activation rows:
// out[c · os + r].
template <class L>
LP_TARGET_AVX2 void gemm_packed_float_avx2(int64_t n, const void* w, size_t ws, int nr, const float* ap, int nc,
                                           float* out, size_t os) {
    const int64_t S = (n + kLanes - 1) / kLanes;
    const int n_rt = (nr + kPackRows - 1) / kPackRows;
    static thread_local packed_scratch s;
    const size_t wtile = (size_t)kLanes * S * kPackRows;
    if (s.w.size() < (size_t)n_rt * wtile) s.w.resize((size_t)n_rt * wtile);
    s.tree.resize((size_t)n_rt * kTreeLevels * 2 * kPackCols * 8);
    for (int rt = 0; rt < n_rt; ++rt)
        pack_weights<L>(n, S, static_cast<const uint8_t*>(w), ws, rt * kPackRows, nr, s.w.data() + rt * wtile);
    const size_t atile = (size_t)kPackCols * kLanes * S;
    for (int c0 = 0; c0 < nc; c0 += kPackCols) {
        const int ncc = std::min(kPackCols, nc - c0);
        const float* apt = ap + (size_t)(c0 / kPackCols) * atile;
        float* o = out + (size_t)c0 * os;
        if (ncc <= 2) packed_column_tile<2>(S, n_rt, nr, s.w.data(), apt, ncc, s.tree.data(), o, os);
        else if (ncc <= 4) packed_column_tile<4>(S, n_rt, nr, s.w.data(), apt, ncc, s.tree.data(), o, os);
        else packed_column_tile<6>(S, n_rt, nr, s.w.data(), apt, ncc, s.tree.data(), o, os);
    }
}

template <class L>
LP_TARGET_AVX2 void vec_dot_float_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    float_tile<L, 1, 1>(n, static_cast<const uint8_t*>(w_row), 0, static_cast<const uint8_t*>(a_row), 0, out, 0);
}

void use_packed_avx2(type_traits& t, pack_acts_fn pack, gemm_packed_fn product) {
    t.gemm_panel = nullptr;  // mat-vec: the 4-row tiles; mat-mat: the packed product
    t.pack_acts = pack;
    t.gemm_packed = product;
    t.pack_lanes = kLanes;
    t.pack_cols = kPackCols;
    t.panel_rows = kPackedPanelRows;
}

}  // namespace

void use_f16_avx2_kernels(type_traits& f16) {
    f16.vec_dot = vec_dot_float_avx2<f16_avx2>;
    f16.gemm_tile = gemm_tile_float_avx2<f16_avx2>;
    use_packed_avx2(f16, pack_acts_float_avx2<f16_acts>, gemm_packed_float_avx2<f16_avx2>);
    f16.vec_dot_isa = isa::avx2;
}

// Encoders' Q8_0 products at the AVX2 level without AVX-VNNI: the weights
// dequantized into the packed F32 product's panels and the activations kept
// in F32. Its int8 panel takes 4 multiply-port uops and a conversion per 32
// products there and ran MiniLM slower than the F32 file (Zen 2, 1,000
// sentences: 249 against 317 per second); this way the Q8_0 file runs as fast
// as the F32 one, and its activations are not rounded to 8 bits. Other bits
// than the Q8_0 kernels' (throughput only: decoders keep those).
void use_dequantized_q8_0_avx2(type_traits& q8_0) {
    q8_0.pack_acts = pack_acts_float_avx2<f32_acts>;
    q8_0.throughput_packed = gemm_packed_float_avx2<q8_0_as_f32_avx2>;
    q8_0.pack_lanes = kLanes;
    q8_0.pack_cols = kPackCols;
    static_assert(kPackedPanelRows == 4 * kPanelRows, "Q8_0's panel_rows serves its packed product too");
}

void register_float_tiles_avx2(type_traits* table, isa level) {
    if (level != isa::avx2) return;
    type_traits& f32 = table[(int)ggml_type::F32];
    f32.vec_dot = vec_dot_float_avx2<f32_avx2>;
    f32.gemm_tile = gemm_tile_float_avx2<f32_avx2>;
    use_packed_avx2(f32, pack_acts_float_avx2<f32_acts>, gemm_packed_float_avx2<f32_avx2>);
    use_f16_avx2_kernels(table[(int)ggml_type::F16]);
}

#else

void register_float_tiles_avx2(type_traits*, isa) {}
void use_dequantized_q8_0_avx2(type_traits&) {}
void use_f16_avx2_kernels(type_traits&) {}

#endif  // LP_HAVE_AVX2

}  // namespace lp
