// moe.cpp — see moe.h.
#include "moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "../common.h"
#include "ops.h"

namespace lp {

// ---------------------------------------------------------------------------
// Routing
// ---------------------------------------------------------------------------

namespace {

// Index of the largest of v[0..n) not yet taken (ties: the lower index, as a
// stable descending sort puts first).
int64_t best_free(const float* v, int64_t n, const uint8_t* taken) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i) {
        if (taken[i]) continue;
        if (best < 0 || v[i] > v[best]) best = i;
    }
    return best;
}

}  // namespace

void moe_route_row(const moe_route_args& a, int64_t t, float* work) {
    const int64_t n = a.n_expert;
    const int k = a.k;
    const float* logits = a.logits + t * a.logits_stride;
    float* probs = work;
    float* sel = work + n;
    std::copy(logits, logits + n, probs);
    if (a.gating == moe_gating::softmax) softmax_row(probs, n);
    else if (a.gating == moe_gating::sigmoid)
        for (int64_t e = 0; e < n; ++e) probs[e] = 1.0f / (1.0f + std::exp(-probs[e]));
    for (int64_t e = 0; e < n; ++e) sel[e] = a.bias ? probs[e] + a.bias[e] : probs[e];

    // Group-limited routing: only the experts of the n_group_used groups with
    // the best two-expert scores compete.
    if (a.n_group > 1) {
        const int64_t per = n / a.n_group;
        float score[256];
        uint8_t keep[256] = {};
        for (int g = 0; g < a.n_group; ++g) {
            const float* s = sel + g * per;
            float b1 = -std::numeric_limits<float>::infinity(), b2 = b1;
            for (int64_t i = 0; i < per; ++i) {
                if (s[i] > b1) {
                    b2 = b1;
                    b1 = s[i];
                } else if (s[i] > b2) {
                    b2 = s[i];
                }
            }
            score[g] = per > 1 ? b1 + b2 : b1;
        }
        uint8_t taken[256] = {};
        for (int j = 0; j < a.n_group_used; ++j) {
            const int64_t g = best_free(score, a.n_group, taken);
            taken[g] = 1;
            keep[g] = 1;
        }
        for (int g = 0; g < a.n_group; ++g)
            if (!keep[g]) std::fill(sel + g * per, sel + (g + 1) * per, -std::numeric_limits<float>::infinity());
    }

    int32_t* ids = a.ids + t * k;
    float* w = a.weights + t * k;
    // Taken flags live after the two rows of work (n bytes fit in n floats).
    uint8_t* taken = reinterpret_cast<uint8_t*>(probs + 2 * n);
    std::fill(taken, taken + n, 0);
    for (int j = 0; j < k; ++j) {
        const int64_t e = best_free(sel, n, taken);
        taken[e] = 1;
        ids[j] = (int32_t)e;
        w[j] = probs[e];
    }
    if (a.gating == moe_gating::softmax_weight) softmax_row(w, k);
    if (a.norm) {
        double sum = 0.0;
        for (int j = 0; j < k; ++j) sum += (double)w[j];
        const float s = std::max((float)sum, 6.103515625e-5f);  // F16's smallest normal, as llama.cpp clamps
        for (int j = 0; j < k; ++j) w[j] /= s;
    }
    if (a.scale != 0.0f && a.scale != 1.0f)
        for (int j = 0; j < k; ++j) w[j] *= a.scale;
    if (a.expert_scale)
        for (int j = 0; j < k; ++j) w[j] *= a.expert_scale[ids[j]];
}

void moe_route(const moe_route_args& a, thread_pool& pool) {
    if (a.n_tok <= 0) return;
    if (a.k <= 0 || a.k > a.n_expert) throw value_error("moe_route: experts per row out of range");
    if (a.n_group > 1 && (a.n_group > 256 || a.n_expert % a.n_group != 0 || a.n_group_used <= 0 ||
                          a.n_group_used > a.n_group))
        throw value_error("moe_route: bad expert groups");
    const size_t work = (size_t)(3 * a.n_expert);  // probs, selection scores, taken flags
    if (a.n_tok == 1 || pool.n_threads() == 1) {
        std::vector<float> w(work);
        for (int64_t t = 0; t < a.n_tok; ++t) moe_route_row(a, t, w.data());
        return;
    }
    std::vector<float> w(work * (size_t)pool.n_threads());
    pool.parallel_for(a.n_tok, [&](int64_t t, int th) { moe_route_row(a, t, w.data() + work * (size_t)th); });
}

// ---------------------------------------------------------------------------
// Expert products
// ---------------------------------------------------------------------------

namespace {

// y[c * ys + r] = row r of w · activation c, for r < nr, c < nc: the type's
// kernels as the dense driver (matmul.cpp) picks them — the mat-vec kernels
// over cached row groups for a few activation rows, the panel / tile kernels
// for more.
void product_block(const type_traits& wt, int64_t n_cols, const uint8_t* w, size_t w_stride, int64_t nr,
                   const uint8_t* a, size_t a_stride, int64_t nc, float* y, int64_t ys) {
    const bool small = nc <= wt.matvec_batch_max || nc == 1;
    if (small) {
        const gemm_tile_fn cols = nc > 1 || wt.matvec_by_cols ? wt.matvec_cols : nullptr;
        const int64_t g = wt.gemm_panel || cols ? kPanelRows : 4;
        for (int64_t r0 = 0; r0 < nr; r0 += g) {
            const int64_t n = std::min<int64_t>(g, nr - r0);
            const uint8_t* wr = w + r0 * w_stride;
            if (cols) {
                for (int64_t c = 0; c < nc; c += 4)
                    cols(n_cols, wr, w_stride, a + c * a_stride, a_stride, y + c * ys + r0, (size_t)ys, (int)n,
                         (int)std::min<int64_t>(4, nc - c));
                continue;
            }
            for (int64_t c = 0; c < nc; ++c) {
                const uint8_t* ac = a + c * a_stride;
                float* yc = y + c * ys + r0;
                if (wt.gemm_panel) wt.gemm_panel(n_cols, wr, w_stride, (int)n, ac, a_stride, 1, yc, (size_t)ys);
                else if (wt.gemm_tile) wt.gemm_tile(n_cols, wr, w_stride, ac, 0, yc, 0, (int)n, 1);
                else
                    for (int64_t r = 0; r < n; ++r) wt.vec_dot(n_cols, yc + r, wr + r * w_stride, ac);
            }
        }
        return;
    }
    if (wt.gemm_panel) {
        const int64_t pr = wt.panel_rows, pc = wt.panel_cols;
        for (int64_t c0 = 0; c0 < nc; c0 += pc)
            for (int64_t r0 = 0; r0 < nr; r0 += pr)
                wt.gemm_panel(n_cols, w + r0 * w_stride, w_stride, (int)std::min(pr, nr - r0), a + c0 * a_stride,
                              a_stride, (int)std::min(pc, nc - c0), y + c0 * ys + r0, (size_t)ys);
        return;
    }
    constexpr int64_t TC = 128;  // activation rows per pass over the block's weights (matmul.cpp's tiles)
    for (int64_t c0 = 0; c0 < nc; c0 += TC) {
        const int64_t c1 = std::min(nc, c0 + TC);
        if (wt.gemm_tile) {
            for (int64_t c = c0; c < c1; c += 4)
                for (int64_t r = 0; r < nr; r += 4)
                    wt.gemm_tile(n_cols, w + r * w_stride, w_stride, a + c * a_stride, a_stride, y + c * ys + r,
                                 (size_t)ys, (int)std::min<int64_t>(4, nr - r), (int)std::min<int64_t>(4, c1 - c));
        } else {
            for (int64_t c = c0; c < c1; ++c)
                for (int64_t r = 0; r < nr; ++r) wt.vec_dot(n_cols, y + c * ys + r, w + r * w_stride, a + c * a_stride);
        }
    }
}

void check_experts(const experts_view& w, const type_traits& wt) {
    if (w.n_expert <= 0 || w.all.n_rows % w.n_expert != 0)
        throw value_error("moe_matmul: " + std::to_string(w.all.n_rows) + " rows do not split into " +
                          std::to_string(w.n_expert) + " experts");
    if (!wt.vec_dot && !wt.vec_dot_ref)
        throw value_error(std::string("no matrix kernels for weight type ") + type_name(w.all.type));
    if (w.all.n_cols % wt.block_size != 0)
        throw value_error("expert row length " + std::to_string(w.all.n_cols) + " is not a multiple of the " +
                          type_name(w.all.type) + " block size " + std::to_string(wt.block_size));
}

int32_t checked_id(const int32_t* ids, int64_t s, int64_t n_expert) {
    const int32_t e = ids[s];
    if (e < 0 || e >= n_expert)
        throw value_error("moe_matmul: slot " + std::to_string(s) + " names expert " + std::to_string(e) + " of " +
                          std::to_string(n_expert));
    return e;
}

}  // namespace

namespace {

// Jobs of one product at most: every chosen expert (at most n_slots of
// them) in row blocks of at least kPanelRows.
int64_t max_jobs(int64_t n_slots, int64_t n_expert, int64_t widest) {
    return std::min(n_slots, n_expert) * ((widest + kPanelRows - 1) / kPanelRows);
}

}  // namespace

void moe_scratch::reserve(int64_t n_slots, int64_t n_expert, int64_t widest) {
    count.reserve((size_t)n_expert);
    start.reserve((size_t)n_expert + 1);
    order.reserve((size_t)n_slots);
    act.reserve(sizeof(float) * (size_t)(2 * n_slots * widest));  // F32 is the widest format; slots + tokens
    out.reserve((size_t)(n_slots * widest));
    jobs.reserve((size_t)max_jobs(n_slots, n_expert, widest));
}

size_t moe_scratch::reserve_bytes(int64_t n_slots, int64_t n_expert, int64_t widest) {
    return sizeof(int32_t) * (size_t)(2 * n_expert + 1 + n_slots) + 3 * sizeof(float) * (size_t)(n_slots * widest) +
           sizeof(int64_t) * (size_t)max_jobs(n_slots, n_expert, widest);
}

size_t moe_scratch::bytes() const {
    return sizeof(int32_t) * (count.capacity() + start.capacity() + order.capacity()) + act.capacity() +
           sizeof(float) * out.capacity() + sizeof(int64_t) * jobs.capacity();
}

void moe_matmul(const experts_view& w, const float* x, int64_t xs, int x_div, const int32_t* ids, int64_t n_slots,
                float* y, int64_t ys, const float* bias, thread_pool& pool, moe_scratch& s, isa level) {
    const type_traits& wt = traits(w.all.type, level);
    check_experts(w, wt);
    if (n_slots <= 0) return;
    if (!wt.vec_dot) throw value_error(std::string("no matrix kernels for weight type ") + type_name(w.all.type));
    const int64_t n_exp = w.n_expert, R = w.rows(), K = w.all.n_cols;

    // The slots grouped by expert (stable: within an expert, in slot order).
    s.count.assign((size_t)n_exp, 0);
    for (int64_t i = 0; i < n_slots; ++i) ++s.count[(size_t)checked_id(ids, i, n_exp)];
    s.start.assign((size_t)n_exp + 1, 0);
    for (int64_t e = 0; e < n_exp; ++e) s.start[(size_t)e + 1] = s.start[(size_t)e] + s.count[(size_t)e];
    s.order.resize((size_t)n_slots);
    {
        std::vector<int32_t>& next = s.count;  // reused as the fill cursor
        for (int64_t e = 0; e < n_exp; ++e) next[(size_t)e] = s.start[(size_t)e];
        for (int64_t i = 0; i < n_slots; ++i) s.order[(size_t)next[(size_t)ids[i]]++] = (int32_t)i;
    }

    // Activations in the kernels' format, in expert order.
    const ggml_type at = wt.vec_dot_type;
    const from_float_fn conv = at == ggml_type::F32 ? nullptr : traits(at, level).from_float;
    if (at != ggml_type::F32 && !conv) throw value_error(std::string("no activation conversion to ") + type_name(at));
    const size_t a_stride = at == ggml_type::F32 ? sizeof(float) * (size_t)K : row_size(at, K);
    s.act.resize(a_stride * (size_t)n_slots);
    // With one x row per token (x_div k), each row is converted once, into
    // the room after the slots' rows, then copied to its k slots.
    const int64_t n_src = x_div > 1 && conv ? (n_slots + x_div - 1) / x_div : 0;
    if (n_src) {
        s.act.resize(a_stride * (size_t)(n_slots + n_src));
        uint8_t* tok = s.act.data() + a_stride * (size_t)n_slots;
        auto convert_token = [&](int64_t t, int) { conv(x + t * xs, tok + (size_t)t * a_stride, K); };
        if (n_src > 1 && pool.n_threads() > 1) pool.parallel_for(n_src, convert_token);
        else
            for (int64_t t = 0; t < n_src; ++t) convert_token(t, 0);
    }
    auto convert = [&](int64_t i, int) {
        const int64_t src_row = (int64_t)(s.order[(size_t)i] / x_div);
        uint8_t* dst = s.act.data() + (size_t)i * a_stride;
        if (n_src) {
            std::memcpy(dst, s.act.data() + a_stride * (size_t)(n_slots + src_row), a_stride);
            return;
        }
        const float* src = x + src_row * xs;
        if (conv) conv(src, dst, K);
        else std::copy(src, src + K, reinterpret_cast<float*>(dst));
    };
    if (n_slots > 1 && pool.n_threads() > 1 && !n_src) pool.parallel_for(n_slots, convert);
    else
        for (int64_t i = 0; i < n_slots; ++i) convert(i, 0);

    // Jobs: row blocks of each chosen expert over all of its slots, sized so
    // that the work splits into about 24 even jobs per thread however unevenly
    // the tokens chose (an expert most tokens chose gets many row blocks).
    s.out.resize((size_t)(n_slots * R));
    const int nth = pool.n_threads();
    // (24: a job of a decode step is then ~100 rows, tens of KB, so the
    // threads finish within a few microseconds of each other)
    const double target = (double)n_slots * (double)R / (24.0 * nth);  // slot-rows per job
    s.jobs.clear();
    for (int64_t e = 0; e < n_exp; ++e) {
        const int64_t c = s.start[(size_t)e + 1] - s.start[(size_t)e];
        if (c == 0) continue;
        int64_t rows = (int64_t)std::ceil(target / (double)c);
        rows = std::min<int64_t>(R, std::max<int64_t>(kPanelRows, (rows + kPanelRows - 1) / kPanelRows * kPanelRows));
        for (int64_t r0 = 0; r0 < R; r0 += rows) s.jobs.push_back((e << 40) | (r0 << 20) | std::min(rows, R - r0));
    }
    const auto* wd = static_cast<const uint8_t*>(w.all.data);
    const size_t wstride = w.all.row_stride;
    auto run = [&](int64_t j, int) {
        const int64_t code = s.jobs[(size_t)j];
        const int64_t e = code >> 40, r0 = (code >> 20) & 0xFFFFF, nr = code & 0xFFFFF;
        const int64_t i0 = s.start[(size_t)e], nc = s.start[(size_t)e + 1] - i0;
        product_block(wt, K, wd + (size_t)(e * R + r0) * wstride, wstride, nr, s.act.data() + (size_t)i0 * a_stride,
                      a_stride, nc, s.out.data() + i0 * R + r0, R);
    };
    if (s.jobs.size() > 1 && nth > 1) pool.parallel_for((int64_t)s.jobs.size(), run);
    else
        for (size_t j = 0; j < s.jobs.size(); ++j) run((int64_t)j, 0);

    // Back to slot order, with the experts' biases.
    auto scatter = [&](int64_t i, int) {
        const int64_t slot = s.order[(size_t)i];
        const float* src = s.out.data() + i * R;
        float* dst = y + slot * ys;
        if (bias) {
            const float* b = bias + (int64_t)ids[slot] * R;
            for (int64_t r = 0; r < R; ++r) dst[r] = src[r] + b[r];
        } else {
            std::copy(src, src + R, dst);
        }
    };
    if (n_slots > 1 && nth > 1) pool.parallel_for(n_slots, scatter);
    else
        for (int64_t i = 0; i < n_slots; ++i) scatter(i, 0);
}

void moe_matmul_ref(const experts_view& w, const float* x, int64_t xs, int x_div, const int32_t* ids,
                    int64_t n_slots, float* y, int64_t ys, const float* bias) {
    const type_traits& wt = traits(w.all.type, isa::scalar);
    check_experts(w, wt);
    const int64_t R = w.rows(), K = w.all.n_cols;
    const ggml_type at = wt.vec_dot_type;
    const size_t a_stride = at == ggml_type::F32 ? sizeof(float) * (size_t)K : row_size(at, K);
    std::vector<uint8_t> a(a_stride);
    const auto* wd = static_cast<const uint8_t*>(w.all.data);
    for (int64_t i = 0; i < n_slots; ++i) {
        const int64_t e = checked_id(ids, i, w.n_expert);
        const float* src = x + (int64_t)(i / x_div) * xs;
        if (at == ggml_type::F32) std::copy(src, src + K, reinterpret_cast<float*>(a.data()));
        else traits(at, isa::scalar).from_float_ref(src, a.data(), K);
        for (int64_t r = 0; r < R; ++r) {
            float v = 0.0f;
            wt.vec_dot_ref(K, &v, wd + (size_t)(e * R + r) * w.all.row_stride, a.data());
            y[i * ys + r] = bias ? v + bias[e * R + r] : v;
        }
    }
}

}  // namespace lp
