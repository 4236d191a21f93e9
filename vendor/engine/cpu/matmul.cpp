// matmul.cpp — the mat-vec / mat-mat drivers. Work is split into tiles of
// weight rows × activation rows; each tile runs the type's tiled kernel when
// it has one (4×4 register blocking) or its vec_dot otherwise.
#include "matmul.h"

#include <algorithm>
#include <string>

#include "../common.h"

namespace lp {

namespace {

// Converts the activations to the kernels' input format. Returns a pointer to
// the first converted row and sets the converted row stride in bytes.
const uint8_t* convert_activations(const type_traits& wt, const float* x, int64_t x_stride, int64_t n_tok,
                                   int64_t n_cols, thread_pool* pool, matmul_scratch* scratch, size_t* a_stride,
                                   isa level, bool ref) {
    const type_traits& at = traits(wt.vec_dot_type, level);
    if (wt.vec_dot_type == ggml_type::F32) {
        *a_stride = (size_t)x_stride * sizeof(float);
        return reinterpret_cast<const uint8_t*>(x);
    }
    const from_float_fn conv = ref ? at.from_float_ref : at.from_float;
    if (!conv) throw value_error(std::string("no activation conversion to ") + type_name(wt.vec_dot_type));
    const size_t rs = row_size(wt.vec_dot_type, n_cols);
    *a_stride = rs;
    scratch->act.resize(rs * (size_t)n_tok);
    uint8_t* dst = scratch->act.data();
    if (pool && n_tok > 1) {
        pool->parallel_for(n_tok, [&](int64_t t, int) { conv(x + t * x_stride, dst + t * rs, n_cols); });
    } else {
        for (int64_t t = 0; t < n_tok; ++t) conv(x + t * x_stride, dst + t * rs, n_cols);
    }
    return dst;
}

void check(const weight_view& w, const type_traits& wt) {
    if (!wt.vec_dot && !wt.vec_dot_ref)
        throw value_error(std::string("no matrix kernels for weight type ") + type_name(w.type));
    if (w.n_cols % wt.block_size != 0)
        throw value_error("weight row length " + std::to_string(w.n_cols) + " is not a multiple of the " +
                          type_name(w.type) + " block size " + std::to_string(wt.block_size));
}

// Mat-mat of a type with a packed product (F32 / F16 at the x86 levels):
// the activations are packed once, tile by tile on the pool, then each job
// takes panel_rows weight rows, packs them once and runs them against its
// share of the activation tiles: all of them where there are enough row
// panels to keep the threads busy (the packed rows are then made once per
// product), else an even split of the tiles.
void matmul_packed(const weight_view& w, const type_traits& wt, gemm_packed_fn product, const float* x,
                   int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride, thread_pool& pool,
                   matmul_scratch& scratch) {
    const int64_t pc = wt.pack_cols;
    const size_t tile = packed_tile_floats(wt.pack_cols, wt.pack_lanes, w.n_cols);
    const int64_t n_tiles = (n_tok + pc - 1) / pc;
    const size_t need = sizeof(float) * tile * (size_t)n_tiles;
    if (scratch.act.size() < need) scratch.act.resize(need);
    float* ap = reinterpret_cast<float*>(scratch.act.data());
    pool.parallel_for(n_tiles, [&](int64_t t, int) {
        wt.pack_acts(w.n_cols, x + t * pc * x_stride, x_stride, (int)std::min(pc, n_tok - t * pc), ap + t * tile);
    });
    const auto* wd = static_cast<const uint8_t*>(w.data);
    const int64_t prows = wt.panel_rows;
    const int64_t n_rt = (w.n_rows + prows - 1) / prows;
    const int64_t want = 3 * (int64_t)pool.n_threads();
    const int64_t n_ct = std::min(n_tiles, std::max<int64_t>(1, (want + n_rt - 1) / n_rt));
    const int64_t per = (n_tiles + n_ct - 1) / n_ct;  // activation tiles per job
    pool.parallel_for(n_rt * n_ct, [&](int64_t job, int) {
        const int64_t rt = job % n_rt, ct = job / n_rt;
        const int64_t c0 = ct * per * pc;
        if (c0 >= n_tok) return;
        const int64_t nc = std::min<int64_t>(per * pc, n_tok - c0);
        const int64_t r0 = rt * prows, nr = std::min<int64_t>(prows, w.n_rows - r0);
        product(w.n_cols, wd + r0 * w.row_stride, w.row_stride, (int)nr, ap + (size_t)(c0 / pc) * tile, (int)nc,
                y + c0 * y_stride + r0, (size_t)y_stride);
    });
}

// Mat-mat through a panel kernel: panel_rows weight rows per call, against
// up to panel_cols activation rows (converted: a, a_stride bytes apart).
void matmul_panels(const weight_view& w, const type_traits& wt, gemm_panel_fn panel, const uint8_t* a,
                   size_t a_stride, int64_t n_tok, float* y, int64_t y_stride, thread_pool& pool) {
    const auto* wd = static_cast<const uint8_t*>(w.data);
    const int64_t prows = wt.panel_rows;
    const int64_t n_rt = (w.n_rows + prows - 1) / prows;
    const int64_t pcols = wt.panel_cols;
    const int64_t n_ct = (n_tok + pcols - 1) / pcols;
    pool.parallel_for(n_rt * n_ct, [&](int64_t job, int) {
        const int64_t rt = job % n_rt, ct = job / n_rt;
        const int64_t c0 = ct * pcols, nc = std::min<int64_t>(pcols, n_tok - c0);
        const int64_t r0 = rt * prows, nr = std::min<int64_t>(prows, w.n_rows - r0);
        panel(w.n_cols, wd + r0 * w.row_stride, w.row_stride, (int)nr, a + c0 * a_stride, a_stride, (int)nc,
              y + c0 * y_stride + r0, (size_t)y_stride);
    });
}

}  // namespace

void matmul(const weight_view& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride,
            thread_pool& pool, matmul_scratch& scratch, isa level, matmul_kernels kernels) {
    const type_traits& wt = traits(w.type, level);
    check(w, wt);
    if (n_tok <= 0 || w.n_rows <= 0) return;
    if (kernels == matmul_kernels::throughput && wt.throughput_packed) {
        // every batch size through the one-chain packed product (see ggml_type.h)
        matmul_packed(w, wt, wt.throughput_packed, x, x_stride, n_tok, y, y_stride, pool, scratch);
        return;
    }
    if (kernels == matmul_kernels::throughput && wt.throughput_panel) {
        // every batch size through the one panel (see matmul.h), no small-batch path
        size_t a_stride = 0;
        const uint8_t* a = convert_activations(wt, x, x_stride, n_tok, w.n_cols, &pool, &scratch, &a_stride, level,
                                               false);
        matmul_panels(w, wt, wt.throughput_panel, a, a_stride, n_tok, y, y_stride, pool);
        return;
    }
    const bool small = n_tok <= wt.matvec_batch_max || n_tok == 1;
    if (!small && wt.gemm_packed) {
        matmul_packed(w, wt, wt.gemm_packed, x, x_stride, n_tok, y, y_stride, pool, scratch);
        return;
    }
    size_t a_stride = 0;
    const uint8_t* a = convert_activations(wt, x, x_stride, n_tok, w.n_cols, &pool, &scratch, &a_stride, level, false);
    const auto* wd = static_cast<const uint8_t*>(w.data);
    const int nth = pool.n_threads();

    if (small) {
        // Mat-vec, and small batches (a few server slots decoding together, a
        // short draft): memory bound. Contiguous chunks of rows, a few per
        // thread (so a slow thread does not hold up the others and each
        // thread streams its weights linearly); per group of rows (a panel's
        // 16, a tile's 4: a few KB to ~40 KB, in L1/L2) the mat-vec kernel
        // once per activation row, or the type's matvec_cols for several at
        // once. The weights come from memory once; later rows read them from
        // cache. Same bits as one row at a time. (A tile kernel with nc = 1
        // may walk its 4 rows one by one where that streams better.)
        const gemm_panel_fn panel = wt.gemm_panel;
        const gemm_tile_fn tile = wt.gemm_tile;
        const vec_dot_fn dot = wt.vec_dot;
        const gemm_tile_fn cols = n_tok > 1 || wt.matvec_by_cols ? wt.matvec_cols : nullptr;
        const int64_t g = panel || cols ? kPanelRows : 4;
        const int64_t n_g = (w.n_rows + g - 1) / g;
        const int64_t per = (n_g + (int64_t)nth * 8 - 1) / ((int64_t)nth * 8);
        pool.parallel_for((n_g + per - 1) / per, [&](int64_t job, int) {
            for (int64_t p = job * per; p < std::min(n_g, (job + 1) * per); ++p) {
                const int64_t r0 = p * g, nr = std::min<int64_t>(g, w.n_rows - r0);
                const uint8_t* wr = wd + r0 * w.row_stride;
                if (cols) {
                    for (int64_t c = 0; c < n_tok; c += 4)
                        cols(w.n_cols, wr, w.row_stride, a + c * a_stride, a_stride, y + c * y_stride + r0,
                             (size_t)y_stride, (int)nr, (int)std::min<int64_t>(4, n_tok - c));
                    continue;
                }
                for (int64_t c = 0; c < n_tok; ++c) {
                    const uint8_t* ac = a + c * a_stride;
                    float* yc = y + c * y_stride + r0;
                    if (panel)
                        panel(w.n_cols, wr, w.row_stride, (int)nr, ac, a_stride, 1, yc, (size_t)y_stride);
                    else if (tile)
                        tile(w.n_cols, wr, w.row_stride, ac, 0, yc, 0, (int)nr, 1);
                    else
                        for (int64_t r = 0; r < nr; ++r) dot(w.n_cols, yc + r, wr + r * w.row_stride, ac);
                }
            }
        });
        return;
    }

    if (const gemm_panel_fn panel = wt.gemm_panel) {
        matmul_panels(w, wt, panel, a, a_stride, n_tok, y, y_stride, pool);  // the type's panel kernel
        return;
    }

    // Mat-mat: tiles of TR weight rows × TC activation rows. A tile's weights
    // (TR rows) stay in L1/L2 while its activations stream past, 4 at a time
    // (each group of 4 is reused from L1 by all TR rows). Measured on Zen 5
    // (2 threads, Llama-1B shapes, 4x4 register-blocked kernels): 16 × 128 is
    // ~5% ahead of 16 × 64, 32 × 64 and 8 × 256, and ~10% ahead of 32 × 32
    // and 64 × 32 — fewer passes over each row tile's weights.
    constexpr int64_t TR = 16, TC = 128;
    const int64_t n_rt = (w.n_rows + TR - 1) / TR, n_ct = (n_tok + TC - 1) / TC;
    const gemm_tile_fn tile = wt.gemm_tile;
    const vec_dot_fn dot = wt.vec_dot;
    pool.parallel_for(n_rt * n_ct, [&](int64_t job, int) {
        const int64_t rt = job % n_rt, ct = job / n_rt;
        const int64_t r0 = rt * TR, r1 = std::min(w.n_rows, r0 + TR);
        const int64_t c0 = ct * TC, c1 = std::min(n_tok, c0 + TC);
        if (tile) {
            for (int64_t c = c0; c < c1; c += 4) {
                const int nc = (int)std::min<int64_t>(4, c1 - c);
                for (int64_t r = r0; r < r1; r += 4) {
                    const int nr = (int)std::min<int64_t>(4, r1 - r);
                    tile(w.n_cols, wd + r * w.row_stride, w.row_stride, a + c * a_stride, a_stride,
                         y + c * y_stride + r, (size_t)y_stride, nr, nc);
                }
            }
        } else {
            for (int64_t c = c0; c < c1; ++c)
                for (int64_t r = r0; r < r1; ++r)
                    dot(w.n_cols, y + c * y_stride + r, wd + r * w.row_stride, a + c * a_stride);
        }
    });
}

void matmul_ref(const weight_view& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride) {
    const type_traits& wt = traits(w.type, isa::scalar);
    check(w, wt);
    matmul_scratch scratch;
    size_t a_stride = 0;
    const uint8_t* a =
        convert_activations(wt, x, x_stride, n_tok, w.n_cols, nullptr, &scratch, &a_stride, isa::scalar, true);
    const auto* wd = static_cast<const uint8_t*>(w.data);
    for (int64_t t = 0; t < n_tok; ++t)
        for (int64_t r = 0; r < w.n_rows; ++r)
            wt.vec_dot_ref(w.n_cols, y + t * y_stride + r, wd + r * w.row_stride, a + t * a_stride);
}

}  // namespace lp
