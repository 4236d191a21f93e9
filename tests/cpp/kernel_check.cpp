// kernel_check.cpp — every compiled SIMD level's kernels against the scalar
// references, for every type with a dot product: vec_dot, the mat-mat tiles
// and panels where a level has them, the activation quantizers (from_float),
// the fast dequantizers (to_float), the matrix driver (cpu/matmul.h, two
// threads) that puts them together, Mamba-2's selective scan
// (cpu/delta_net.h ssm_scan) and the gated delta rule's chunked form. Runs wherever the engine builds:
// natively on x86 (AVX2, AVX-512 against scalar) and under qemu-aarch64
// (neon, neon_dot; tools/neon_check.sh).
//
// Inputs are seeded, so a failure reproduces: weights from the reference
// quantizer, random block bytes (every quant value and sub-scale, finite fp16
// scales) and all-ones bits (the largest quants); activations Gaussian, all
// ones and random signs, quantized with the reference activation quantizer.
//
// The promises checked are those the kernels' files make:
//   - quantizers and dequantizers: the reference's bytes (F16/BF16 NaN: a NaN);
//   - NEON integer dot products and tiles: the reference's bits (exact int32
//     sums, the reference's float step);
//   - every other SIMD dot product, tile and panel: within 4e-6·Σ|w·a| of the
//     reference (tests/quant_checks.py's SIMD_TOL), float summation order only;
//   - the driver: as its kernels (NEON integer types: matmul_ref's bits);
//   - the scan: outputs and states within 2e-5·(1 + |reference|) of
//     ssm_scan_ref's after several tokens (float summation order only);
//   - the chunked delta rule: outputs and states within 5e-5 of the largest
//     |value| of gated_delta_ref's (the sums regrouped into products).
// One line per check; the last line is "N passed, M failed"; exit status 1
// on any failure.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"
#include "cpu/delta_net.h"
#include "cpu/features.h"
#include "cpu/matmul.h"
#include "cpu/threadpool.h"
#include "ggml_type.h"
#include "test_rng.h"

using namespace lp;

namespace {

constexpr double kSimdTol = 4e-6;

// xoshiro-style generator: fixed sequence for a seed on every platform
// (std::normal_distribution is not specified bit for bit).
struct rng : test_rng {
    using test_rng::test_rng;
    double uniform() { return unit(); }
    float gauss() {
        const double u = uniform() + 1e-300, v = uniform();
        return (float)(std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v));
    }
};

struct tally {
    int passed = 0, failed = 0;
    void report(bool ok, const std::string& what, const std::string& detail) {
        std::printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", what.c_str(), detail.empty() ? "" : ": ", detail.c_str());
        (ok ? passed : failed)++;
    }
};

struct type_case {
    ggml_type type;
    std::vector<int> halves;  // byte offsets of the fp16 fields in a block
    std::vector<int> e8m0 = {};  // byte offsets of E8M0 exponents (kept near 2^0: random ones overflow)
    // byte offsets of fp16 fields spread over the top nibbles of four uint16 (IQ1_M's scale)
    std::vector<int> nibble_halves = {};
};

const std::vector<type_case>& dot_types() {
    static const std::vector<type_case> all = {
        {ggml_type::F32, {}},        {ggml_type::F16, {}},         {ggml_type::BF16, {}},
        {ggml_type::Q4_0, {0}},      {ggml_type::Q4_1, {0, 2}},    {ggml_type::Q5_0, {0}},
        {ggml_type::Q5_1, {0, 2}},   {ggml_type::Q8_0, {0}},       {ggml_type::Q2_K, {80, 82}},
        {ggml_type::Q3_K, {108}},    {ggml_type::Q4_K, {0, 2}},    {ggml_type::Q5_K, {0, 2}},
        {ggml_type::Q6_K, {208}},    {ggml_type::IQ4_NL, {0}},     {ggml_type::IQ4_XS, {0}},
        {ggml_type::MXFP4, {}, {0}},  {ggml_type::TQ1_0, {52}},     {ggml_type::TQ2_0, {64}},
        // the grid-based i-quants: read only (no quantizer), so random and "ones" blocks
        {ggml_type::IQ2_XXS, {0}},   {ggml_type::IQ2_XS, {0}},     {ggml_type::IQ2_S, {0}},
        {ggml_type::IQ3_XXS, {0}},   {ggml_type::IQ3_S, {0}},      {ggml_type::IQ1_S, {0}},
        {ggml_type::IQ1_M, {}, {}, {48}},
    };
    return all;
}

bool is_float_type(ggml_type t) { return t == ggml_type::F32 || t == ggml_type::F16 || t == ggml_type::BF16; }

std::vector<int64_t> row_lengths(ggml_type t) {
    if (is_float_type(t)) return {1, 3, 16, 17, 100, 256, 1000, 4103};
    if (traits(t, isa::scalar).block_size == 32) return {32, 64, 96, 288, 4096};
    return {256, 512, 768, 4096};
}

using bytes = std::vector<uint8_t>;

bytes quantize_ref(ggml_type t, const std::vector<float>& x, int64_t rows, int64_t n) {
    const type_traits& tr = traits(t, isa::scalar);
    const size_t rs = row_size(t, n);
    bytes out(rs * (size_t)rows);
    for (int64_t r = 0; r < rows; ++r) tr.from_float_ref(x.data() + r * n, out.data() + r * rs, n);
    return out;
}

std::vector<double> dequant(ggml_type t, const uint8_t* row, int64_t n) {
    std::vector<float> f((size_t)n);
    traits(t, isa::scalar).to_float(row, f.data(), n);
    return std::vector<double>(f.begin(), f.end());
}

// The weight rows of one case: "quantized", "random" or "ones".
bytes weight_rows(const type_case& tc, const std::string& kind, int64_t rows, int64_t n, rng& g) {
    const type_traits& tr = traits(tc.type, isa::scalar);
    if (kind == "quantized" || is_float_type(tc.type)) {
        std::vector<float> x((size_t)(rows * n));
        for (float& v : x) v = g.gauss() * 0.5f;
        return quantize_ref(tc.type, x, rows, n);
    }
    bytes raw(row_size(tc.type, n) * (size_t)rows);
    for (uint8_t& b : raw) b = kind == "ones" ? 0xff : (uint8_t)g.next();
    for (size_t blk = 0; blk < raw.size() / tr.type_size; ++blk)
        for (int off : tc.halves) {
            const float h = kind == "ones" ? 0.01f : g.gauss() * 0.05f;
            const uint16_t bits = fp32_to_fp16(h);
            std::memcpy(raw.data() + blk * tr.type_size + off, &bits, 2);
        }
    for (size_t blk = 0; blk < raw.size() / tr.type_size; ++blk)
        for (int off : tc.nibble_halves) {
            const uint16_t bits = fp32_to_fp16(kind == "ones" ? 0.01f : g.gauss() * 0.05f);
            for (int k = 0; k < 4; ++k) {
                uint8_t* w = raw.data() + blk * tr.type_size + off + 2 * k;
                w[1] = (uint8_t)((w[1] & 0x0f) | (((bits >> (4 * k)) & 0xf) << 4));
            }
        }
    for (size_t blk = 0; blk < raw.size() / tr.type_size; ++blk)
        for (int off : tc.e8m0) raw[blk * tr.type_size + off] = (uint8_t)(kind == "ones" ? 127 : 118 + g.next() % 16);
    return raw;
}

std::vector<float> activation_floats(const std::string& kind, int64_t n, rng& g) {
    std::vector<float> a((size_t)n);
    for (float& v : a) {
        if (kind == "gaussian") v = g.gauss();
        else if (kind == "ones") v = 1.0f;
        else v = (g.next() & 1) ? 1.0f : -1.0f;
    }
    return a;
}

std::vector<isa> runnable_levels() {
    std::vector<isa> out;
    for (isa level : compiled_isas()) {
        if (level == isa::scalar) continue;
        if (!isa_at_least(best_isa(), level)) {
            std::printf("skip %s: not run by this CPU (or capped by LLAMAPY_ISA)\n", isa_name(level));
            continue;
        }
        out.push_back(level);
    }
    return out;
}

bool exact_promise(ggml_type t, isa level) { return isa_is_arm(level) && !is_float_type(t); }

// Worst error of one kernel against the reference over all cases of a row
// length, in units of Σ|w·a| (or the count of differing bits when exact).
struct worst {
    double rel = 0;
    int mismatches = 0;
    void add(float got, float ref, double scale, bool exact) {
        if (exact) {
            if (std::memcmp(&got, &ref, 4) != 0) ++mismatches;
        } else if (!(std::fabs((double)got - (double)ref) <= kSimdTol * scale + 1e-30)) {
            ++mismatches;
        }
        const double e = std::fabs((double)got - (double)ref) / (scale + 1e-30);
        if (e > rel || std::isnan(e)) rel = e;
    }
    std::string text(bool exact) const {
        char buf[96];
        std::snprintf(buf, sizeof buf, "%s, max err %.3g of sum|w*a|, %d off", exact ? "bit-exact" : "within 4e-6",
                      rel, mismatches);
        return buf;
    }
};

void check_dots(tally& t, const std::vector<isa>& levels) {
    const int64_t rows = 6;
    constexpr int na = 5;  // activation rows: the tiles take up to 4, the panels more
    const char* w_kinds[] = {"quantized", "random", "ones"};
    const char* a_kinds[] = {"gaussian", "ones", "signs"};
    for (const type_case& tc : dot_types()) {
        const type_traits& ref = traits(tc.type, isa::scalar);
        const ggml_type at = ref.vec_dot_type;
        for (int64_t n : row_lengths(tc.type)) {
            rng g(1000 + (uint64_t)tc.type * 131 + (uint64_t)n);
            const size_t ws = row_size(tc.type, n), as = row_size(at, n);
            // All cases of this length, with the reference results and scales.
            struct one { bytes w, a; std::vector<float> ref; std::vector<double> scale; };
            std::vector<one> cases;
            for (const char* wk : w_kinds) {
                if (is_float_type(tc.type) && std::string(wk) != "quantized") continue;
                if (!ref.from_float_ref && std::string(wk) == "quantized") continue;  // read-only types
                for (const char* ak : a_kinds) {
                    one c;
                    c.w = weight_rows(tc, wk, rows, n, g);
                    std::vector<float> af;
                    for (int r = 0; r < na; ++r) {
                        std::vector<float> a = activation_floats(ak, n, g);
                        af.insert(af.end(), a.begin(), a.end());
                    }
                    c.a = quantize_ref(at, af, na, n);
                    for (int ca = 0; ca < na; ++ca)
                        for (int r = 0; r < rows; ++r) {
                            float v;
                            ref.vec_dot_ref(n, &v, c.w.data() + r * ws, c.a.data() + ca * as);
                            c.ref.push_back(v);
                            const std::vector<double> wd = dequant(tc.type, c.w.data() + r * ws, n);
                            const std::vector<double> ad = dequant(at, c.a.data() + ca * as, n);
                            double s = 0;
                            for (int64_t k = 0; k < n; ++k) s += std::fabs(wd[k] * ad[k]);
                            c.scale.push_back(s);
                        }
                    cases.push_back(std::move(c));
                }
            }
            for (isa level : levels) {
                const type_traits& tr = traits(tc.type, level);
                const bool exact = exact_promise(tc.type, level);
                const std::string what = std::string(tr.name) + " " + isa_name(level) + " n=" + std::to_string(n);
                if (tr.vec_dot_isa != level) {
                    std::printf("note vec_dot %s: kernel of level %s\n", what.c_str(), isa_name(tr.vec_dot_isa));
                }
                worst wv;
                for (const one& c : cases)
                    for (int ca = 0; ca < na; ++ca)
                        for (int r = 0; r < rows; ++r) {
                            float v;
                            tr.vec_dot(n, &v, c.w.data() + r * ws, c.a.data() + ca * as);
                            wv.add(v, c.ref[ca * rows + r], c.scale[ca * rows + r], exact);
                        }
                t.report(wv.mismatches == 0, "vec_dot " + what, wv.text(exact));
                if (tr.gemm_tile) {
                    worst wt;
                    for (const one& c : cases)
                        for (int nr = 1; nr <= 4; ++nr)
                            for (int nc = 1; nc <= 4; ++nc) {
                                float out[16];
                                tr.gemm_tile(n, c.w.data() + ws, ws, c.a.data() + as, as, out, 4, nr, nc);
                                for (int cc = 0; cc < nc; ++cc)
                                    for (int r = 0; r < nr; ++r) {
                                        const int k = (1 + cc) * rows + 1 + r;
                                        wt.add(out[cc * 4 + r], c.ref[k], c.scale[k], exact);
                                    }
                            }
                    t.report(wt.mismatches == 0, "gemm_tile " + what, wt.text(exact));
                }
                if (tr.gemm_panel) {
                    worst wp;
                    for (const one& c : cases)
                        for (int nr : {1, 3, 6})
                            for (int nc : {1, 2, 5}) {
                                float out[5 * 6];
                                tr.gemm_panel(n, c.w.data(), ws, nr, c.a.data(), as, nc, out, 6);
                                for (int cc = 0; cc < nc; ++cc)
                                    for (int r = 0; r < nr; ++r)
                                        wp.add(out[cc * 6 + r], c.ref[cc * rows + r], c.scale[cc * rows + r], false);
                            }
                    t.report(wp.mismatches == 0, "gemm_panel " + what, wp.text(false));
                }
            }
        }
    }
}

// Inputs for the quantizers: Gaussian blocks plus the edge cases a fast path
// gets wrong first: an all-zero block, ties of the rounding (x·(1/d) = k +
// 0.5), equal magnitudes of both signs at the maximum (the first one sets
// Q8_K's sign), tiny values and a huge one.
std::vector<float> quantizer_input(int64_t n, rng& g) {
    std::vector<float> x((size_t)n);
    for (float& v : x) v = g.gauss();
    for (int64_t i = 0; i < n && i < 32; ++i) x[i] = 0;
    // 127 opens every block of 32 here, so d = 1 and halves are exact ties
    for (int64_t i = 256; i < n && i < 512; ++i) x[i] = i % 32 ? (float)((i % 23) - 11) + 0.5f : 127.0f;
    if (n > 512) x[300] = -127;
    for (int64_t i = 512; i < n && i < 768; ++i) x[i] = (i % 2 ? 1e-30f : -3e-31f) * (float)(i % 7);
    if (n > 768) { x[520] = -2.5f; x[530] = 2.5f; }
    for (int64_t i = 768; i < n && i < 1024; ++i) x[i] = 0;  // a whole Q8_K block of zeros
    if (n > 1024) x[1030] = 6e4f;
    return x;
}

void check_quantizers(tally& t, const std::vector<isa>& levels) {
    const ggml_type act_types[] = {ggml_type::Q8_0, ggml_type::Q8_1, ggml_type::Q8_K, ggml_type::F16, ggml_type::BF16};
    for (ggml_type at : act_types) {
        for (int64_t n : {256, 1024, 4096}) {
            rng g(77 + (uint64_t)at * 7 + (uint64_t)n);
            std::vector<float> x = quantizer_input(n, g);
            if (at == ggml_type::F16 || at == ggml_type::BF16) {
                // the float formats also meet NaN, infinities, subnormals, overflow
                const float specials[] = {NAN, -NAN, INFINITY, -INFINITY, 1e-40f, -6e-8f, 65520.f, 70000.f, 3e38f};
                for (size_t k = 0; k < sizeof specials / sizeof *specials; ++k) x[40 + 3 * k] = specials[k];
            }
            const bytes want = quantize_ref(at, x, 1, n);
            for (isa level : levels) {
                const type_traits& tr = traits(at, level);
                if (!tr.from_float || tr.from_float == tr.from_float_ref) continue;
                bytes got(want.size());
                tr.from_float(x.data(), got.data(), n);
                size_t off = 0;
                for (size_t k = 0; k < got.size(); ++k) off += got[k] != want[k];
                t.report(off == 0, std::string("from_float ") + tr.name + " " + isa_name(level) + " n=" +
                                       std::to_string(n), std::to_string(off) + " bytes differ");
            }
        }
    }
    // to_float: F16 has SIMD dequantizers; all 65536 halves, NaN as NaN.
    std::vector<uint16_t> halves(65536);
    for (int i = 0; i < 65536; ++i) halves[i] = (uint16_t)i;
    std::vector<float> want(65536), got(65536);
    traits(ggml_type::F16, isa::scalar).to_float(halves.data(), want.data(), 65536);
    for (isa level : levels) {
        const type_traits& tr = traits(ggml_type::F16, level);
        if (tr.to_float == traits(ggml_type::F16, isa::scalar).to_float) continue;
        tr.to_float(halves.data(), got.data(), 65536);
        int off = 0;
        for (int i = 0; i < 65536; ++i)
            if (std::isnan(want[i]) ? !std::isnan(got[i]) : std::memcmp(&want[i], &got[i], 4) != 0) ++off;
        t.report(off == 0, std::string("to_float F16 ") + isa_name(level) + " all halves",
                 std::to_string(off) + " values differ");
    }
}

// The driver at each level (mat-vec and mat-mat, 2 threads, a row count that
// is no multiple of any tile) against matmul_ref on Gaussian weights.
void check_matmul(tally& t, const std::vector<isa>& levels) {
    thread_pool pool(2);
    for (const type_case& tc : dot_types()) {
        const type_traits& ref = traits(tc.type, isa::scalar);
        const int64_t n = is_float_type(tc.type) ? 300 : (ref.block_size == 32 ? 256 : 512), rows = 37;
        rng g(5000 + (uint64_t)tc.type);
        const bytes w = weight_rows(tc, ref.from_float_ref ? "quantized" : "random", rows, n, g);
        const size_t ws = row_size(tc.type, n);
        std::vector<std::vector<double>> wd;
        for (int64_t r = 0; r < rows; ++r) wd.push_back(dequant(tc.type, w.data() + r * ws, n));
        const weight_view wv{tc.type, rows, n, w.data(), ws};
        for (int64_t n_tok : {1, 3, 9}) {
            std::vector<float> x((size_t)(n_tok * n));
            for (float& v : x) v = g.gauss();
            // Σ|w·a| per output, with the activations as the reference quantizes them
            const ggml_type at = ref.vec_dot_type;
            const bytes aq = quantize_ref(at, x, n_tok, n);
            std::vector<double> scale((size_t)(n_tok * rows));
            for (int64_t tk = 0; tk < n_tok; ++tk) {
                const std::vector<double> ad = dequant(at, aq.data() + tk * row_size(at, n), n);
                for (int64_t r = 0; r < rows; ++r) {
                    double s = 0;
                    for (int64_t k = 0; k < n; ++k) s += std::fabs(wd[r][k] * ad[k]);
                    scale[tk * rows + r] = s;
                }
            }
            std::vector<float> want((size_t)(n_tok * rows)), got(want.size());
            matmul_ref(wv, x.data(), n, n_tok, want.data(), rows);
            for (isa level : levels) {
                matmul_scratch scratch;
                matmul(wv, x.data(), n, n_tok, got.data(), rows, pool, scratch, level);
                const bool exact = exact_promise(tc.type, level);
                worst wm;
                for (size_t k = 0; k < got.size(); ++k) wm.add(got[k], want[k], scale[k], exact);
                t.report(wm.mismatches == 0, std::string("matmul ") + ref.name + " " + isa_name(level) + " " +
                                                 std::to_string(n_tok) + "x" + std::to_string(n) + " @ 37 rows",
                         wm.text(exact));
            }
        }
    }
}

// Mamba-2's scan at each level against ssm_scan_ref: several tokens on two
// interleaved state slots (the state carries the rounding on), state sizes
// with and without a vector tail.
void check_ssm_scan(tally& t, const std::vector<isa>& levels) {
    const int H = 4, P = 5, G = 2;
    const int64_t n_tok = 6, n_slot = 2;
    const int32_t slots[n_tok] = {0, 1, 1, 0, 1, 0};
    for (int N : {16, 37, 128}) {
        rng g(7000 + (uint64_t)N);
        auto gauss = [&](size_t n, float sc) {
            std::vector<float> v(n);
            for (float& e : v) e = sc * g.gauss();
            return v;
        };
        const std::vector<float> x = gauss((size_t)(n_tok * H * P), 1.0f), dt = gauss((size_t)(n_tok * H), 1.0f),
                                 B = gauss((size_t)(n_tok * G * N), 1.0f), C = gauss((size_t)(n_tok * G * N), 1.0f),
                                 D = gauss((size_t)H, 1.0f), st0 = gauss((size_t)(n_slot * H * P * N), 1.0f);
        std::vector<float> A((size_t)H);
        for (float& e : A) e = -(0.05f + (float)g.uniform());
        auto run = [&](std::vector<float>& y, std::vector<float>& st, isa level, bool ref) {
            y.assign(x.size(), 0.0f);
            st = st0;
            ssm_scan_args a;
            a.n_tok = n_tok;
            a.n_head = H;
            a.head_dim = P;
            a.d_state = N;
            a.n_group = G;
            a.x = x.data();
            a.x_stride = H * P;
            a.dt = dt.data();
            a.dt_stride = H;
            a.A = A.data();
            a.B = B.data();
            a.C = C.data();
            a.bc_stride = G * N;
            a.D = D.data();
            a.y = y.data();
            a.y_stride = H * P;
            a.state = st.data();
            a.state_stride = (int64_t)H * P * N;
            a.slot = slots;
            if (ref)
                ssm_scan_ref(a, 0, H);
            else
                ssm_scan(a, 0, H, level);
        };
        std::vector<float> want_y, want_st, got_y, got_st;
        run(want_y, want_st, isa::scalar, true);
        for (isa level : levels) {
            run(got_y, got_st, level, false);
            double worst = 0;
            auto cmp = [&](const std::vector<float>& got, const std::vector<float>& want) {
                for (size_t k = 0; k < got.size(); ++k)
                    worst = std::max(worst, std::fabs((double)got[k] - want[k]) / (1.0 + std::fabs((double)want[k])));
            };
            cmp(got_y, want_y);
            cmp(got_st, want_st);
            t.report(worst <= 2e-5, std::string("ssm_scan ") + isa_name(level) + " d_state=" + std::to_string(N),
                     "worst " + std::to_string(worst));
        }
    }
}

// The gated delta rule's chunked form (cpu/delta_chunked.cpp) with each
// level's products against gated_delta_ref: a run of rows on one slot past two
// chunk boundaries, head sizes with full vectors and with a narrower width.
void check_gated_delta_chunked(tally& t, const std::vector<isa>& levels) {
    const int Hk = 1, Hv = 2, chunk = 16;
    const int64_t n_tok = 2 * chunk + 5;
    for (int S : {8, 32}) {
        rng g(8000 + (uint64_t)S);
        auto gauss = [&](size_t n, float sc) {
            std::vector<float> v(n);
            for (float& e : v) e = sc * g.gauss();
            return v;
        };
        std::vector<float> q = gauss((size_t)(n_tok * Hk * S), 1.0f), k = gauss((size_t)(n_tok * Hk * S), 1.0f);
        for (std::vector<float>* x : {&q, &k})  // q and k arrive L2-normed
            for (int64_t r = 0; r < n_tok * Hk; ++r) {
                float s2 = 0.0f;
                for (int i = 0; i < S; ++i) s2 += (*x)[(size_t)(r * S + i)] * (*x)[(size_t)(r * S + i)];
                for (int i = 0; i < S; ++i) (*x)[(size_t)(r * S + i)] /= std::sqrt(s2);
            }
        const std::vector<float> v = gauss((size_t)(n_tok * Hv * S), 1.0f), st0 = gauss((size_t)(Hv * S * S), 0.3f);
        std::vector<float> gate((size_t)(n_tok * Hv)), beta((size_t)(n_tok * Hv));
        for (float& e : gate) e = -(0.01f + (float)g.uniform());
        for (float& e : beta) e = (float)g.uniform();
        const std::vector<int32_t> slots((size_t)n_tok, 0);
        auto run = [&](std::vector<float>& out, std::vector<float>& st, isa level, bool ref) {
            out.assign(v.size(), 0.0f);
            st = st0;
            gated_delta_args a;
            a.n_tok = n_tok;
            a.n_head_k = Hk;
            a.n_head_v = Hv;
            a.head_dim = S;
            a.q = q.data();
            a.k = k.data();
            a.qk_stride = Hk * S;
            a.v = v.data();
            a.v_stride = Hv * S;
            a.g = gate.data();
            a.beta = beta.data();
            a.gb_stride = Hv;
            a.out = out.data();
            a.out_stride = Hv * S;
            a.state = st.data();
            a.state_stride = (int64_t)Hv * S * S;
            a.slot = slots.data();
            a.scale = 1.0f / std::sqrt((float)S);
            if (ref) {
                gated_delta_ref(a, 0, Hv);
                return;
            }
            std::vector<float> work((size_t)gated_delta_chunk_floats(S, chunk));
            for (int h = 0; h < Hv; ++h) gated_delta_chunked(a, h, 0, n_tok, chunk, work.data(), level);
        };
        std::vector<float> want_o, want_st, got_o, got_st;
        run(want_o, want_st, isa::scalar, true);
        for (isa level : levels) {
            run(got_o, got_st, level, false);
            // relative to the largest value: the chunked form regroups each head's sums
            auto worst = [](const std::vector<float>& got, const std::vector<float>& want) {
                double big = 1e-3, w = 0;
                for (float e : want) big = std::max(big, (double)std::fabs(e));
                for (size_t i = 0; i < got.size(); ++i) w = std::max(w, std::fabs((double)got[i] - want[i]) / big);
                return w;
            };
            const double w = std::max(worst(got_o, want_o), worst(got_st, want_st));
            t.report(w <= 5e-5, std::string("gated_delta_chunked ") + isa_name(level) + " S=" + std::to_string(S),
                     "worst " + std::to_string(w));
        }
    }
}

}  // namespace

int main() {
    std::printf("kernel_check: compiled");
    for (isa l : compiled_isas()) std::printf(" %s", isa_name(l));
    std::printf("; this CPU runs up to %s\n", isa_name(best_isa()));
    tally t;
    const std::vector<isa> levels = runnable_levels();
    // A build whose CPU runs no SIMD level checks nothing: say so, as a failure
    // would hide that the kernels were never run.
    if (levels.empty()) std::printf("note: no SIMD level to check against the references\n");
    check_dots(t, levels);
    check_quantizers(t, levels);
    check_matmul(t, levels);
    check_ssm_scan(t, levels);
    check_gated_delta_chunked(t, levels);
    std::printf("%d passed, %d failed\n", t.passed, t.failed);
    return t.failed == 0 ? 0 : 1;
}
