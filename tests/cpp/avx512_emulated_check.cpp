// avx512_emulated_check.cpp — the AVX-512 F32 / F16 kernels of
// quants/float_tiles_avx512.cpp checked on a CPU without AVX-512. The file is
// compiled here against SIMDe (libsimde-dev), whose portable versions of the
// _mm512 intrinsics (its "native aliases") give each instruction's exact
// result, with the kernels' target attribute lowered to AVX2. What that
// checks is the kernels' logic, not their speed:
//   - vec_dot, the 4 x 4 tiles, mat-vec and the mat-mat panels give the same
//     bits for every (row, column) pair: register-tile edges (1-4 rows x 1-6
//     columns), K blocks with partial tails, up to kPanelCols columns;
//   - each is within 4e-6 · Σ|w·a| of the double-precision sum (the bound of
//     tests/quant_checks.py and kernel_check.cpp);
//   - hsum_f32x16 and reduce4 add the lanes in the documented tree.
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

template <class L>
void check_shape(const char* type, int nr, int nc, int64_t n, uint64_t seed) {
    rng g(seed);
    std::vector<float> wf((size_t)(nr * n)), af((size_t)(nc * n));
    for (float& v : wf) v = g.uniform();
    for (float& v : af) v = g.uniform() * 2;
    const int eb = L::elem_bytes;
    const std::vector<uint8_t> w = rows_of(wf, eb), a = rows_of(af, eb);
    const size_t ws = (size_t)n * eb, as = (size_t)n * eb;
    const size_t os = (size_t)nr + 3;  // a stride past the rows: nothing between is written
    std::vector<float> panel((size_t)nc * os, -7.0f), matvec((size_t)nr, -7.0f);
    gemm_panel_float_avx512<L>(n, w.data(), ws, nr, a.data(), as, nc, panel.data(), os);
    bool bits = true, close = true, untouched = true;
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
        }
        for (size_t r = (size_t)nr; r < os; ++r) untouched = untouched && panel[(size_t)c * os + r] == -7.0f;
    }
    // mat-vec through the panel entry point (nc == 1), and the 4 x 4 tiles
    gemm_panel_float_avx512<L>(n, w.data(), ws, nr, a.data(), as, 1, matvec.data(), 1);
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
    report(bits, what + ": panel == vec_dot bits");
    report(close, what + ": panel within 4e-6 of the reference");
    report(untouched, what + ": panel writes only its outputs");
    report(mv, what + ": mat-vec == panel bits");
    report(tiles, what + ": 4x4 tiles == panel bits");
}

void check_lane_sums() {
    rng g(99);
    bool ok = true;
    for (int t = 0; t < 200; ++t) {
        float v[4][16];
        for (auto& row : v)
            for (float& x : row) x = g.uniform() * (float)(1 << (g.next() % 20));
        float want[4];
        for (int k = 0; k < 4; ++k) {
            float y[8], z[4];
            for (int j = 0; j < 8; ++j) y[j] = v[k][j] + v[k][j + 8];
            for (int j = 0; j < 4; ++j) z[j] = y[j] + y[j + 4];
            want[k] = (z[0] + z[2]) + (z[1] + z[3]);
            ok = ok && same_bits(hsum_f32x16(_mm512_loadu_ps(v[k])), want[k]);
        }
        float got[4];
        _mm_storeu_ps(got, reduce4(_mm512_loadu_ps(v[0]), _mm512_loadu_ps(v[1]), _mm512_loadu_ps(v[2]),
                                   _mm512_loadu_ps(v[3])));
        for (int k = 0; k < 4; ++k) ok = ok && same_bits(got[k], want[k]);
    }
    report(ok, "hsum_f32x16 and reduce4: the documented lane-sum tree");
}

}  // namespace

int main() {
    check_lane_sums();
    const int64_t lengths[] = {1, 15, 16, 17, 100, 255, 256, 257, 384, 511, 513, 1000};
    const int row_counts[] = {1, 3, 4, 7, 16, 37, 64};  // mat-mat panels of F32 / F16 take up to 64 rows
    const int col_counts[] = {2, 5, 6, 7, 13, 128};
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
