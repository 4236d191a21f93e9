// avx512_emulated_check.cpp — the AVX-512 F32 / F16 kernels of
// quants/float_tiles_avx512.cpp checked on a CPU without AVX-512. The file is
// compiled here against SIMDe (libsimde-dev), whose portable versions of the
// _mm512 intrinsics (its "native aliases") give each instruction's exact
// result, with the kernels' target attribute lowered to AVX2. What that
// checks is the kernels' logic, not their speed:
//   - vec_dot, the 4 x 4 tiles, mat-vec and the packed mat-mat give the same
//     bits for every (row, column) pair: register-tile edges (rows past a
//     32-row tile, columns past a 12-column one), partial last steps, several
//     activation tiles;
//   - each is within 4e-6 · Σ|w·a| of the double-precision sum (the bound of
//     tests/quant_checks.py and kernel_check.cpp);
//   - hsum_f32x16 adds the lanes in the documented tree (which the packed
//     product's lane merge follows: the bit comparisons above).
// On a CPU with AVX-512 tests/cpp/kernel_check.cpp and the Python tests run
// the real instructions. Build and run: tools/avx512_emulated_check.sh.
// Last line "N passed, M failed"; exit status 1 on any failure.
#include <immintrin.h>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"
#include "test_rng.h"

// The kernels' functions are compiled for AVX2 (the SIMDe code they call
// would otherwise be vectorised with real AVX-512 instructions).
#undef LP_TARGET_AVX512
#define LP_TARGET_AVX512 LP_TARGET_AVX2
#define LP_PIN_ZMM(x) ((void)0)  // SIMDe's vectors are not registers

// SIMDe 0.8.2's _mm512_mask_storeu_ps writes zeros to the lanes the mask
// leaves out; the instruction leaves that memory alone. The real semantics
// (a whole-vector read, blend and write: the buffers here have room past
// their ends).
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps(mem, k, a)                                                                 \
    simde_mm512_storeu_ps((mem), simde_mm512_mask_mov_ps(simde_mm512_loadu_ps(mem), (k), (a)))

#include "quants/float_tiles_avx512.cpp"

using namespace lp;

namespace {

struct rng : test_rng {
    using test_rng::test_rng;
    float uniform() { return (float)(unit() * 2 - 1); }  // [-1, 1)
};

int n_pass = 0, n_fail = 0;

void report(bool ok, const std::string& what) {
    (ok ? n_pass : n_fail)++;
    if (!ok || std::getenv("LP_VERBOSE")) std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); }

// Rows of F32 or F16 elements (elem_bytes 4 / 2) from floats.
std::vector<uint8_t> rows_of(const std::vector<float>& x, int elem_bytes) {
    std::vector<uint8_t> out(x.size() * (size_t)elem_bytes);
    for (size_t i = 0; i < x.size(); ++i) {
        if (elem_bytes == 4) {
            std::memcpy(out.data() + 4 * i, &x[i], 4);
        } else {
            const uint16_t h = fp32_to_fp16(x[i]);
            std::memcpy(out.data() + 2 * i, &h, 2);
        }
    }
    return out;
}

float elem_at(const uint8_t* row, int64_t i, int elem_bytes) {
    if (elem_bytes == 4) {
        float f;
        std::memcpy(&f, row + 4 * i, 4);
        return f;
    }
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    return fp16_to_fp32(h);
}

// F32 rows of F16-representable values for the F16 type (the packed product
// rounds F32 activations to F16 itself; vec_dot takes the F16 rows).
template <class L>
void check_shape(const char* type, int nr, int nc, int64_t n, uint64_t seed) {
    rng g(seed);
    std::vector<float> wf((size_t)(nr * n)), af((size_t)(nc * n));
    for (float& v : wf) v = g.uniform();
    for (float& v : af) v = g.uniform() * 2;
    const int eb = L::elem_bytes;
    // SIMDe's masked loads and stores touch the whole 64 bytes (a masked
    // AVX-512 access does not): room past every buffer's end
    const size_t pad = 64;
    std::vector<uint8_t> w = rows_of(wf, eb), a = rows_of(af, eb);
    w.resize(w.size() + pad * 4);
    a.resize(a.size() + pad * 4);
    af.resize(af.size() + pad);
    const size_t ws = (size_t)n * eb, as = (size_t)n * eb;
    const size_t os = (size_t)nr + 3;  // a stride past the rows: nothing between is written
    std::vector<float> panel((size_t)nc * os + pad, -7.0f), matvec((size_t)nr + pad, -7.0f);
    // the packed product: activation tiles of kPackCols rows, then up to
    // kPackedPanelRows weight rows per call, as the driver cuts them
    const size_t tile = packed_tile_floats(kPackCols, kLanes, n);
    std::vector<float> ap(tile * (size_t)((nc + kPackCols - 1) / kPackCols) + pad);
    for (int c = 0; c < nc; c += kPackCols) {
        const int cnt = std::min(kPackCols, nc - c);
        if (eb == 4) pack_acts_float_avx512<f32_acts>(n, af.data() + (size_t)c * n, n, cnt, ap.data() + (size_t)(c / kPackCols) * tile);
        else pack_acts_float_avx512<f16_acts>(n, af.data() + (size_t)c * n, n, cnt, ap.data() + (size_t)(c / kPackCols) * tile);
    }
    // the product as decode and prefill run it (OneChain false: vec_dot's bits), and the
    // encoders' one-chain throughput product (its own summation order: close, not bits)
    std::vector<float> one((size_t)nc * os + pad, -7.0f);
    for (int r = 0; r < nr; r += kPackedPanelRows) {
        gemm_packed_float_avx512<L, false>(n, w.data() + r * ws, ws, std::min(kPackedPanelRows, nr - r), ap.data(),
                                           nc, panel.data() + r, os);
        gemm_packed_float_avx512<L, true>(n, w.data() + r * ws, ws, std::min(kPackedPanelRows, nr - r), ap.data(),
                                          nc, one.data() + r, os);
    }
    bool bits = true, close = true, untouched = true, one_close = true;
    for (int c = 0; c < nc; ++c) {
        for (int r = 0; r < nr; ++r) {
            float dot;
            vec_dot_float_avx512<L>(n, &dot, w.data() + r * ws, a.data() + c * as);
            const float got = panel[(size_t)c * os + r];
            bits = bits && same_bits(got, dot);
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n; ++i) {
                const double p = (double)elem_at(w.data() + r * ws, i, eb) * elem_at(a.data() + c * as, i, eb);
                ref += p;
                mag += std::fabs(p);
            }
            close = close && std::fabs(got - ref) <= 4e-6 * mag + 1e-30;
            one_close = one_close && std::fabs(one[(size_t)c * os + r] - ref) <= 4e-6 * mag + 1e-30;
        }
        for (size_t r = (size_t)nr; r < os; ++r)
            untouched = untouched && panel[(size_t)c * os + r] == -7.0f && one[(size_t)c * os + r] == -7.0f;
    }
    // mat-vec: the 4 x 1 tiles the driver runs, and the 4 x 4 tiles
    for (int r = 0; r < nr; r += 4)
        gemm_tile_float_avx512<L>(n, w.data() + r * ws, ws, a.data(), as, matvec.data() + r, 1, std::min(4, nr - r), 1);
    bool mv = true;
    for (int r = 0; r < nr; ++r) mv = mv && same_bits(matvec[(size_t)r], panel[(size_t)r]);
    bool tiles = true;
    for (int c = 0; c < nc; c += 4)
        for (int r = 0; r < nr; r += 4) {
            float out[16];
            const int tr = std::min(4, nr - r), tc = std::min(4, nc - c);
            gemm_tile_float_avx512<L>(n, w.data() + r * ws, ws, a.data() + c * as, as, out, 4, tr, tc);
            for (int j = 0; j < tc; ++j)
                for (int i = 0; i < tr; ++i) tiles = tiles && same_bits(out[j * 4 + i], panel[(size_t)(c + j) * os + r + i]);
        }
    const std::string what = std::string(type) + " " + std::to_string(nr) + " rows x " + std::to_string(nc) +
                             " columns x " + std::to_string(n);
    report(bits, what + ": packed product == vec_dot bits");
    report(close, what + ": packed product within 4e-6 of the reference");
    report(one_close, what + ": one-chain packed product within 4e-6 of the reference");
    report(untouched, what + ": packed products write only their outputs");
    report(mv, what + ": mat-vec == packed product bits");
    report(tiles, what + ": 4x4 tiles == packed product bits");
}

void check_lane_sums() {
    rng g(99);
    bool ok = true;
    for (int t = 0; t < 200; ++t) {
        float v[16];
        for (float& x : v) x = g.uniform() * (float)(1 << (g.next() % 20));
        float y[8], z[4];
        for (int j = 0; j < 8; ++j) y[j] = v[j] + v[j + 8];
        for (int j = 0; j < 4; ++j) z[j] = y[j] + y[j + 4];
        ok = ok && same_bits(hsum_f32x16(_mm512_loadu_ps(v)), (z[0] + z[2]) + (z[1] + z[3]));
    }
    report(ok, "hsum_f32x16: the documented lane-sum tree");
}

}  // namespace

int main() {
    check_lane_sums();
    const int64_t lengths[] = {1, 15, 16, 17, 100, 255, 256, 257, 384, 511, 513, 1000};
    const int row_counts[] = {1, 3, 4, 7, 16, 33, 37, 64, 100};  // up to 64 rows per call, 32 per tile
    const int col_counts[] = {2, 4, 5, 8, 12, 13, 30, 128};
    uint64_t seed = 1;
    for (int64_t n : lengths)
        for (int nr : row_counts)
            for (int nc : col_counts) {
                check_shape<f32_lanes>("F32", nr, nc, n, seed++);
                check_shape<f16_lanes>("F16", nr, nc, n, seed++);
            }
    std::printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
