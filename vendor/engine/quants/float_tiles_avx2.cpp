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
        const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
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
// Mat-mat panels (gemm_panel_fn): up to 16 weight rows × 128 activation rows
// per call. The 4 × 2 tile above holds 8 accumulators, exactly the FMA
// latency × throughput of a 2-FMA-port core, and loads 6 vectors per 8 FMAs;
// measured at about half the FMA peak. The panel's register tile is 4 weight
// rows × 3 activation rows: 12 accumulators (slack over the 8 chains two
// ports need), the 3 activation vectors held, each weight vector loaded once
// into a register for its 3 FMAs: 7 loads per 12 FMAs, 16 ymm registers.
// The four rows of a column are reduced together (reduce4) and stored as one
// 4-float vector.
//
// K blocks of kKc elements: a panel's 4-row group (4 × 2 KB) stays in L1 while
// all its columns' blocks stream past from L2 (128 × 2 KB), and the 8-lane
// partial accumulators of the (row, column) pairs wait in a per-thread
// buffer between blocks. Each pair still takes its FMAs in the order of
// float_tile<1, 1>, i.e. vec_dot (elements 0-7, 8-15, ..., the zero-padded
// tail last, then hsum_f32x8's lane sum), so panel, vec_dot and mat-vec give
// the same bits. F16 rows are converted to F32 once per K block for all the
// panel's columns (exact), the F16 activations on the fly (exact).
constexpr int64_t kKc = 512;
// Columns per F16 panel call (type_traits::panel_cols): the rows are
// converted to F32 once per call, so 256 columns halve that work against
// 128; at 640 a K block's activations (and the partial sums) outgrow L2 and
// a CLIP-L encode got slower (Zen 4, 2 threads).
constexpr int kF16PanelCols = 256;
// partial-accumulator floats of one 4-row group over nc columns: ceil(nc / 3)
// column groups of 3 columns × 4 rows × 8 lanes
constexpr size_t group_part(int nc) { return (size_t)(nc + 2) / 3 * 96; }

// [hsum(v0), hsum(v1), hsum(v2), hsum(v3)], each lane summed in
// hsum_f32x8's order: y_j = v_j + v_{j+4}, then (y0 + y2) + (y1 + y3).
LP_TARGET_AVX2 LP_INLINE __m128 reduce4(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
    const __m256 s01 = _mm256_add_ps(_mm256_permute2f128_ps(v0, v1, 0x20), _mm256_permute2f128_ps(v0, v1, 0x31));
    const __m256 s23 = _mm256_add_ps(_mm256_permute2f128_ps(v2, v3, 0x20), _mm256_permute2f128_ps(v2, v3, 0x31));
    // s01 = [y(v0) | y(v1)], s23 = [y(v2) | y(v3)]
    const __m256d d01 = _mm256_castps_pd(s01), d23 = _mm256_castps_pd(s23);
    const __m256 u = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(d01, d23)),
                                   _mm256_castpd_ps(_mm256_unpackhi_pd(d01, d23)));
    // u = [v0: y0+y2, y1+y3, v2: y0+y2, y1+y3 | v1: ..., v3: ...]
    const __m256 t = _mm256_add_ps(_mm256_shuffle_ps(u, u, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(u, u, _MM_SHUFFLE(3, 1, 3, 1)));
    // t = [h0, h2, h0, h2 | h1, h3, h1, h3]
    return _mm_unpacklo_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// Activation loads of the panel tile: F32 rows, or F16 rows converted.
struct act_f32 {
    LP_TARGET_AVX2 static LP_INLINE __m256 load(const uint8_t* row, int64_t i) { return f32_avx2::load(row, i); }
    LP_TARGET_AVX2 static LP_INLINE __m256 load_tail(const uint8_t* row, int64_t i, int cnt, __m256i live) {
        return f32_avx2::load_tail(row, i, cnt, live);
    }
};
using act_f16 = f16_avx2;

// NR (<= 4) F32 weight rows w (stride wsf floats, element 0 = element i0 of
// the row) × NC (<= 3) activation rows a (stride as bytes), elements
// [i0, i0 + len): the accumulators start at zero (first) or from part
// ([c][r] 8-lane vectors), end in part or, at the last block (last; its
// zero-padded tail included), reduced into out[c · os + r].
template <class A, int NR, int NC>
LP_TARGET_AVX2 void panel_tile(int64_t i0, int64_t len, bool first, bool last, const float* w, size_t wsf,
                               const uint8_t* a, size_t as, float* part, float* out, size_t os) {
    __m256 acc[NR][NC];
    for (int c = 0; c < NC; ++c)
        for (int r = 0; r < NR; ++r)
            acc[r][c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(part + (c * 4 + r) * 8);
    const uint8_t* ac[NC];
    for (int c = 0; c < NC; ++c) ac[c] = a + c * as;
    int64_t k = 0;
    for (; k + 8 <= len; k += 8) {
        __m256 av[NC];
        for (int c = 0; c < NC; ++c) {
            av[c] = A::load(ac[c], i0 + k);
            __asm__("" : "+x"(av[c]));
        }
        for (int r = 0; r < NR; ++r) {
            __m256 wv = _mm256_loadu_ps(w + r * wsf + k);
            // one load per weight vector, not one per FMA (see float_tile)
            __asm__("" : "+x"(wv));
            for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_fmadd_ps(wv, av[c], acc[r][c]);
        }
    }
    if (k < len) {  // the row's tail (only in its last block)
        const int cnt = (int)(len - k);
        const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 av[NC];
        for (int c = 0; c < NC; ++c) av[c] = A::load_tail(ac[c], i0 + k, cnt, live);
        for (int r = 0; r < NR; ++r) {
            const __m256 wv = _mm256_maskload_ps(w + r * wsf + k, live);
            for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_fmadd_ps(wv, av[c], acc[r][c]);
        }
    }
    if (!last) {
        for (int c = 0; c < NC; ++c)
            for (int r = 0; r < NR; ++r) _mm256_storeu_ps(part + (c * 4 + r) * 8, acc[r][c]);
        return;
    }
    for (int c = 0; c < NC; ++c) {
        if constexpr (NR == 4) {
            _mm_storeu_ps(out + (size_t)c * os, reduce4(acc[0][c], acc[1][c], acc[2][c], acc[3][c]));
        } else {
            for (int r = 0; r < NR; ++r) out[(size_t)c * os + r] = x86::hsum_f32x8(acc[r][c]);
        }
    }
}

template <class A, int NR>
LP_TARGET_AVX2 void panel_rows(int64_t i0, int64_t len, bool first, bool last, const float* w, size_t wsf,
                               const uint8_t* a, size_t as, int nc, float* part, float* out, size_t os) {
    int c = 0;
    for (; c + 3 <= nc; c += 3, part += 3 * 32)
        panel_tile<A, NR, 3>(i0, len, first, last, w, wsf, a + c * as, as, part, out + c * os, os);
    if (nc - c == 2) panel_tile<A, NR, 2>(i0, len, first, last, w, wsf, a + c * as, as, part, out + c * os, os);
    if (nc - c == 1) panel_tile<A, NR, 1>(i0, len, first, last, w, wsf, a + c * as, as, part, out + c * os, os);
}

// Per-thread buffers of a panel: the partial accumulators (4 row groups ×
// kGroupPart) and, for F16, one K block of the rows as F32.
struct panel_scratch {
    std::vector<float> part, rows;
};

template <class L, class A>
LP_TARGET_AVX2 void gemm_panel_float_avx2(int64_t n, const void* w_, size_t ws, int nr, const void* a_, size_t as,
                                          int nc, float* out, size_t os) {
    const auto* w = static_cast<const uint8_t*>(w_);
    const auto* a = static_cast<const uint8_t*>(a_);
    if (nc == 1) {  // mat-vec: stream the rows (float_tile's prefetch), 4 at a time
        for (int r = 0; r < nr; r += 4) gemm_tile_float_avx2<L>(n, w + r * ws, ws, a, as, out + r, os, std::min(4, nr - r), 1);
        return;
    }
    static thread_local panel_scratch s;
    float* part = nullptr;
    const size_t gpart = group_part(nc);
    if (n > kKc) {
        if (s.part.size() < kPanelRows / 4 * gpart) s.part.resize(kPanelRows / 4 * gpart);
        part = s.part.data();
    }
    constexpr bool f16 = L::elem == 2;
    if (f16) s.rows.resize((size_t)kPanelRows * kKc);
    for (int64_t i0 = 0; i0 < n; i0 += kKc) {
        const int64_t len = std::min(kKc, n - i0);
        const bool first = i0 == 0, last = i0 + len == n;
        const float* wf;
        size_t wsf;
        if constexpr (f16) {
            // rows [i0, i0 + len) as F32, the tail zero-padded to 8
            float* dst = s.rows.data();
            for (int r = 0; r < nr; ++r) {
                const uint8_t* src = w + r * ws;
                int64_t k = 0;
                for (; k + 8 <= len; k += 8) _mm256_storeu_ps(dst + r * kKc + k, L::load(src, i0 + k));
                if (k < len) _mm256_storeu_ps(dst + r * kKc + k, L::load_tail(src, i0 + k, (int)(len - k), _mm256_setzero_si256()));
            }
            wf = dst;
            wsf = (size_t)kKc;
        } else {
            wf = reinterpret_cast<const float*>(w) + i0;
            wsf = ws / sizeof(float);
        }
        for (int r = 0; r < nr; r += 4) {
            float* pr = part ? part + (size_t)(r / 4) * gpart : nullptr;
            const float* wr = wf + r * wsf;
            switch (std::min(4, nr - r)) {
                case 4: panel_rows<A, 4>(i0, len, first, last, wr, wsf, a, as, nc, pr, out + r, os); break;
                case 3: panel_rows<A, 3>(i0, len, first, last, wr, wsf, a, as, nc, pr, out + r, os); break;
                case 2: panel_rows<A, 2>(i0, len, first, last, wr, wsf, a, as, nc, pr, out + r, os); break;
                default: panel_rows<A, 1>(i0, len, first, last, wr, wsf, a, as, nc, pr, out + r, os); break;
            }
        }
    }
}

template <class L>
LP_TARGET_AVX2 void vec_dot_float_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    float_tile<L, 1, 1>(n, static_cast<const uint8_t*>(w_row), 0, static_cast<const uint8_t*>(a_row), 0, out, 0);
}

}  // namespace

void use_f16_avx2_kernels(type_traits& f16) {
    f16.vec_dot = vec_dot_float_avx2<f16_avx2>;
    f16.gemm_tile = gemm_tile_float_avx2<f16_avx2>;
    f16.gemm_panel = gemm_panel_float_avx2<f16_avx2, act_f16>;
    f16.panel_rows = kPanelRows;
    f16.panel_cols = kF16PanelCols;
    f16.vec_dot_isa = isa::avx2;
}

void register_float_tiles_avx2(type_traits* table, isa level) {
    if (level != isa::avx2) return;
    type_traits& f32 = table[(int)ggml_type::F32];
    f32.vec_dot = vec_dot_float_avx2<f32_avx2>;
    f32.gemm_tile = gemm_tile_float_avx2<f32_avx2>;
    f32.gemm_panel = gemm_panel_float_avx2<f32_avx2, act_f32>;
    use_f16_avx2_kernels(table[(int)ggml_type::F16]);
}

#else

void register_float_tiles_avx2(type_traits*, isa) {}
void use_f16_avx2_kernels(type_traits&) {}

#endif  // LP_HAVE_AVX2

}  // namespace lp
