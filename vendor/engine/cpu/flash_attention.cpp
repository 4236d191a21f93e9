// flash_attention.cpp — see flash_attention.h for the design. This file has
// the driver (blocks, chunks, tiles, the online softmax and the merges, the
// thread split) and the scalar reference kernels; the SIMD kernels live in
// flash_kernels_x86.cpp.
#include "flash_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "../common.h"
#include "features.h"
#include "ops.h"

namespace lp {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------
// Scalar reference kernels (always compiled; the table's fallback).
// ---------------------------------------------------------------------------

template <flash_elem E> float load_elem(const uint8_t* row, int i) {
    if constexpr (E == flash_elem::f32) {
        float f;
        std::memcpy(&f, row + 4 * (size_t)i, 4);
        return f;
    } else {
        uint16_t h;
        std::memcpy(&h, row + 2 * (size_t)i, 2);
        return E == flash_elem::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
    }
}

template <flash_elem E>
void dots_scalar(const uint8_t* k, size_t k_row_bytes, const int32_t* cells, int n, const float* q, int nq, int d,
                 float* s, int s_stride) {
    for (int i = 0; i < n; ++i) {
        const uint8_t* row = k + (size_t)cells[i] * k_row_bytes;
        for (int qi = 0; qi < nq; ++qi) {
            const float* qq = q + (size_t)qi * d;
            float sum = 0;
            for (int e = 0; e < d; ++e) sum += qq[e] * load_elem<E>(row, e);
            s[(size_t)qi * s_stride + i] = sum;
        }
    }
}

template <flash_elem E>
void pv_scalar(const uint8_t* v, size_t v_row_bytes, const int32_t* cells, int n, const float* p, int p_stride, int nq,
               int d, float* acc, int acc_stride) {
    for (int i = 0; i < n; ++i) {
        const uint8_t* row = v + (size_t)cells[i] * v_row_bytes;
        for (int qi = 0; qi < nq; ++qi) {
            const float w = p[(size_t)qi * p_stride + i];
            float* a = acc + (size_t)qi * acc_stride;
            for (int e = 0; e < d; ++e) a[e] += w * load_elem<E>(row, e);
        }
    }
}

float max_tile_scalar(const float* x) {
    float m = kNegInf;
    for (int i = 0; i < kFlashTile; ++i) m = std::max(m, x[i]);
    return m;
}

// In double, rounded once, as the SIMD kernels (a left-to-right sum would
// also not depend on zeros between a row's values; double keeps the levels
// closer).
float exp_sum_scalar(float* x, float m) {
    double sum = 0;
    for (int i = 0; i < kFlashTile; ++i) {
        x[i] = x[i] == kNegInf ? 0.0f : std::exp(x[i] - m);
        sum += x[i];
    }
    return (float)sum;
}

flash_kernels make_table(isa level) {
    flash_kernels k;
    k.dots[0] = dots_scalar<flash_elem::f32>;
    k.dots[1] = dots_scalar<flash_elem::f16>;
    k.dots[2] = dots_scalar<flash_elem::bf16>;
    k.pv[0] = pv_scalar<flash_elem::f32>;
    k.pv[1] = pv_scalar<flash_elem::f16>;
    k.pv[2] = pv_scalar<flash_elem::bf16>;
    k.exp_sum = exp_sum_scalar;
    k.max_tile = max_tile_scalar;
    flash_kernels_x86(k, level);
    return k;
}

// 0, 1, ..., kFlashTile-1: the cell list of a tile dequantized into a buffer.
struct iota_table {
    int32_t v[kFlashTile];
};
constexpr iota_table make_iota() {
    iota_table t{};
    for (int i = 0; i < kFlashTile; ++i) t.v[i] = i;
    return t;
}
constexpr iota_table kIota = make_iota();

// ---------------------------------------------------------------------------
// The driver.
// ---------------------------------------------------------------------------

// A partial or total result of nq queries, each: acc (head_dim_v floats, not
// yet divided by the sum), the max of the scores seen and the sum of their
// exponentials relative to it.
struct partial {
    float* acc;  // (nq, acc_stride)
    int64_t acc_stride;
    float* m;    // (nq)
    float* l;    // (nq)
};

// What every task of one call shares.
struct plan {
    const attention_args& a;
    const flash_kernels& kf;
    int n_gqa, rows, nq_max, dk, dv;
    int64_t n_blocks;
    bool k_float, v_float;
    flash_elem ek = flash_elem::f32, ev = flash_elem::f32;
    ggml_type q_type;       // the keys' activation format (quantized keys)
    size_t q_row_bytes;     // bytes of one query in it
    int group = 1;          // blocks per task of the blocked path (run_group)
};

bool float_elem(ggml_type t, flash_elem& e) {
    switch (t) {
        case ggml_type::F32: e = flash_elem::f32; return true;
        case ggml_type::F16: e = flash_elem::f16; return true;
        case ggml_type::BF16: e = flash_elem::bf16; return true;
        default: return false;
    }
}

// Rows [t0, t0 + nb) of block b, and the cells [lo, hi) any of them sees
// (lo == hi when none sees anything).
struct block_range {
    int t0, nb;
    int32_t lo, hi;
};

block_range block_of(const plan& P, int64_t b) {
    block_range r{(int)(b * P.rows), 0, 0, 0};
    r.nb = std::min(P.rows, P.a.n_tok - r.t0);
    const cell_span span = rows_span(P.a, r.t0, r.nb);
    r.lo = span.lo;
    r.hi = span.hi;
    return r;
}

// The queries of a block (rows × the heads sharing key head hk, row-major) as
// the key kernels take them: rounded to F16 / BF16 against such keys,
// quantized to the keys' activation format against quantized keys.
void load_queries(const plan& P, const block_range& br, int hk, float* out) {
    const attention_args& a = P.a;
    for (int r = 0; r < br.nb; ++r)
        for (int g = 0; g < P.n_gqa; ++g) {
            const int qi = r * P.n_gqa + g;
            const float* src = a.q + (int64_t)(br.t0 + r) * a.q_stride + (int64_t)(hk * P.n_gqa + g) * P.dk;
            if (!P.k_float) {
                const type_traits& tt = traits(P.q_type);
                (tt.from_float ? tt.from_float : tt.from_float_ref)(
                    src, reinterpret_cast<uint8_t*>(out) + (size_t)qi * P.q_row_bytes, P.dk);
                continue;
            }
            float* dst = out + (size_t)qi * P.dk;
            if (P.ek == flash_elem::f16) {
                for (int e = 0; e < P.dk; ++e) dst[e] = fp16_to_fp32(fp32_to_fp16(src[e]));
            } else if (P.ek == flash_elem::bf16) {
                for (int e = 0; e < P.dk; ++e) dst[e] = bf16_to_fp32(fp32_to_bf16(src[e]));
            } else {
                std::memcpy(dst, src, sizeof(float) * (size_t)P.dk);
            }
        }
}

// Bits of row t's mask word for the tile at j0, limited to [lo, hi) of the row
// and of the range [c0, c1) being processed.
uint64_t row_word(const attention_args& a, int t, int32_t j0, int32_t c0, int32_t c1) {
    const int32_t lo = std::max(a.lo[t], c0), hi = std::min(a.hi[t], c1);
    if (hi <= lo || hi <= j0 || lo >= j0 + kFlashTile) return 0;
    uint64_t w = a.mask[(int64_t)t * a.mask_words + j0 / 64];
    const int b0 = std::max(lo - j0, 0), b1 = std::min(hi - j0, kFlashTile);
    const uint64_t keep = (b1 == 64 ? ~0ull : ((1ull << b1) - 1)) & ~((1ull << b0) - 1);
    return w & keep;
}

// One tile [j0, j0 + kFlashTile) of a block's chunk, cells limited to
// [c0, c1): scores, the online-softmax update of `part`, the weighted values.
void tile(const plan& P, const block_range& br, int hk, int32_t j0, int32_t c0, int32_t c1, const float* qbuf,
          attention_scratch::flash_thread& s, const partial& part) {
    const attention_args& a = P.a;
    constexpr int T = kFlashTile;
    uint64_t words[kFlashQueries];  // rows <= kFlashQueries
    uint64_t any = 0;
    for (int r = 0; r < br.nb; ++r) any |= words[r] = row_word(a, br.t0 + r, j0, c0, c1);
    if (!any) return;
    int32_t cells[T];
    int n = 0;
    for (uint64_t w = any; w; w &= w - 1) cells[n++] = j0 + __builtin_ctzll(w);
    const int nq = br.nb * P.n_gqa;
    float* sc = s.sc.data();  // (nq, T) compacted scores, then weights

    // q·k for the cells any row sees
    if (P.k_float) {
        P.kf.dots[(int)P.ek](a.k + (size_t)hk * P.dk * (P.ek == flash_elem::f32 ? 4 : 2), a.k_row_bytes, cells, n,
                             qbuf, nq, P.dk, sc, T);
    } else {
        const type_traits& tk = traits(a.type_k);
        const size_t k_off = row_size(a.type_k, (int64_t)hk * P.dk);
        const uint8_t* qx = reinterpret_cast<const uint8_t*>(qbuf);
        for (int i = 0; i < n; ++i) {
            const uint8_t* kr = a.k + (size_t)cells[i] * a.k_row_bytes + k_off;
            for (int qi = 0; qi < nq; ++qi) tk.vec_dot(P.dk, sc + (size_t)qi * T + i, kr, qx + (size_t)qi * P.q_row_bytes);
        }
    }

    // Per query: soft-cap and scale (as the explicit path, element by
    // element), then into the tile's fixed slots with -inf for cells the
    // query's row does not see, so the sum below adds the same numbers in the
    // same order whichever other rows share the block.
    for (int r = 0; r < br.nb; ++r)
        for (int g = 0; g < P.n_gqa; ++g) {
            const int qi = r * P.n_gqa + g;
            float* c = sc + (size_t)qi * T;
            if (a.softcap > 0.0f) softcap_row(c, n, a.softcap);
            scale_row(c, n, a.scale);
            // A row that sees the whole tile: the compacted scores are the slots.
            const bool whole = words[r] == ~0ull;
            float* slot = whole ? c : s.s.data() + (size_t)qi * T;
            if (!whole) {
                std::fill(slot, slot + T, kNegInf);
                for (int i = 0; i < n; ++i) {
                    const int j = cells[i] - j0;
                    if ((words[r] >> j) & 1u) slot[j] = c[i];
                }
            }
            const float mt = P.kf.max_tile(slot);
            if (mt == kNegInf) {  // nothing visible to this row here (or every score -inf)
                std::fill(c, c + n, 0.0f);
                continue;
            }
            const float m = part.m[qi], mn = std::max(m, mt);
            const float sum = P.kf.exp_sum(slot, mn);
            if (m != kNegInf && mn > m) {
                const float alpha = std::exp(m - mn);
                part.l[qi] = part.l[qi] * alpha + sum;
                scale_row(part.acc + (size_t)qi * part.acc_stride, P.dv, alpha);
            } else {
                part.l[qi] = part.l[qi] + sum;
            }
            part.m[qi] = mn;
            if (!whole)
                for (int i = 0; i < n; ++i) c[i] = slot[cells[i] - j0];
        }

    // acc += weights · values. F16 / BF16 values are converted as they are
    // loaded: converting a tile once into a buffer was slower (measured; the
    // buffer does not stay in L1 next to the key tile).
    if (P.v_float) {
        P.kf.pv[(int)P.ev](a.v + (size_t)hk * P.dv * (P.ev == flash_elem::f32 ? 4 : 2), a.v_row_bytes, cells, n, sc,
                           T, nq, P.dv, part.acc, (int)part.acc_stride);
    } else {
        const type_traits& tv = traits(a.type_v);
        const size_t v_off = row_size(a.type_v, (int64_t)hk * P.dv);
        float* vb = s.vbuf.data();
        for (int i = 0; i < n; ++i) tv.to_float(a.v + (size_t)cells[i] * a.v_row_bytes + v_off, vb + (size_t)i * P.dv, P.dv);
        P.kf.pv[0](reinterpret_cast<const uint8_t*>(vb), sizeof(float) * (size_t)P.dv, kIota.v, n, sc, T, nq, P.dv,
                   part.acc, (int)part.acc_stride);
    }
}

void clear(const partial& p, int nq, int dv) {
    for (int qi = 0; qi < nq; ++qi) {
        std::fill(p.acc + (size_t)qi * p.acc_stride, p.acc + (size_t)qi * p.acc_stride + dv, 0.0f);
        p.m[qi] = kNegInf;
        p.l[qi] = 0.0f;
    }
}

// Asks for key head hk's keys and values of cells [j0, j1) ahead of use: one
// head's slice of a cell row is a few cache lines at a stride of the whole
// row, which the hardware prefetchers follow poorly (token generation read
// the cache at under half the bandwidth without this).
void prefetch_cells(const plan& P, int hk, int32_t j0, int32_t j1) {
    const attention_args& a = P.a;
    const size_t k_off = row_size(a.type_k, (int64_t)hk * P.dk), k_len = row_size(a.type_k, P.dk);
    const size_t v_off = row_size(a.type_v, (int64_t)hk * P.dv), v_len = row_size(a.type_v, P.dv);
    for (int32_t j = j0; j < j1; ++j) {
        const uint8_t* kr = a.k + (size_t)j * a.k_row_bytes + k_off;
        const uint8_t* vr = a.v + (size_t)j * a.v_row_bytes + v_off;
        for (size_t o = 0; o < k_len; o += 64) __builtin_prefetch(kr + o, 0, 2);
        for (size_t o = 0; o < v_len; o += 64) __builtin_prefetch(vr + o, 0, 2);
    }
}

// The chunk of the block's cells in [c0, c1) (inside one aligned chunk) into
// part, from scratch. prefetch: also ask for each next tile's cells while a
// tile is processed (off where another block of the group has just read the
// chunk).
void chunk(const plan& P, const block_range& br, int hk, int32_t c0, int32_t c1, const float* qbuf,
           attention_scratch::flash_thread& s, const partial& part, bool prefetch) {
    clear(part, br.nb * P.n_gqa, P.dv);
    for (int32_t j0 = c0 / kFlashTile * kFlashTile; j0 < c1; j0 += kFlashTile) {
        if (prefetch) prefetch_cells(P, hk, std::max(j0 + kFlashTile, c0), std::min(j0 + 2 * kFlashTile, br.hi));
        tile(P, br, hk, j0, c0, c1, qbuf, s, part);
    }
}

// Reads one byte of each cache line of rows [j0, j1) of the key and value
// caches, all heads, front to back: demand loads in address order, which the
// hardware's stream prefetchers follow ahead into L2. Returns what it read (a
// sink, so that the loads stay).
int32_t touch_rows(const plan& P, int32_t j0, int32_t j1) {
    const attention_args& a = P.a;
    int32_t sink = 0;
    if (j1 <= j0) return sink;
    for (const auto& [base, row] : {std::pair{a.k, a.k_row_bytes}, std::pair{a.v, a.v_row_bytes}}) {
        const uint8_t* p = base + (size_t)j0 * row;
        const size_t len = (size_t)(j1 - j0) * row;
        for (size_t o = 0; o < len; o += 64) sink += p[o];
    }
    return sink;
}

// The chunk [c0, c1) of a block for key heads [h0, h0 + nh) (nh <= kFlashGroup;
// head h0 + i's queries at qbuf + i·q_floats) into parts[i], tile by tile with
// the heads inside. The split path reads the chunk's cache rows whole first
// (touch_rows): token generation used to run chunk() per head, whose software
// prefetches ask for a head's slice of each row — a few lines at the stride of
// the row — and are limited by the core's few fill buffers (1B shape at depth
// 4096: the cache read at ~8 GB/s while the weights stream at ~20; tg32
// 16.0-16.7 against 16.6-17.4 t/s now). Each head's tiles run in chunk()'s
// order, so the results are chunk()'s bit for bit.
void chunk_heads(const plan& P, const block_range& br, int h0, int nh, int32_t c0, int32_t c1, const float* qbuf,
                 size_t q_floats, attention_scratch::flash_thread& s, const partial* parts) {
    for (int i = 0; i < nh; ++i) clear(parts[i], br.nb * P.n_gqa, P.dv);
    for (int32_t j0 = c0 / kFlashTile * kFlashTile; j0 < c1; j0 += kFlashTile)
        for (int i = 0; i < nh; ++i) tile(P, br, h0 + i, j0, c0, c1, qbuf + i * q_floats, s, parts[i]);
}

// total (query qi) ⊕= part (query qi). Chunks are merged in cell order, one
// at a time, on every path.
void merge(const partial& total, const partial& part, int qi, int dv) {
    const float pm = part.m[qi];
    if (pm == kNegInf) return;
    float* ta = total.acc + (size_t)qi * total.acc_stride;
    const float* pa = part.acc + (size_t)qi * part.acc_stride;
    const float tm = total.m[qi];
    if (tm == kNegInf) {
        std::memcpy(ta, pa, sizeof(float) * (size_t)dv);
        total.m[qi] = pm;
        total.l[qi] = part.l[qi];
        return;
    }
    const float M = std::max(tm, pm), alpha = std::exp(tm - M), beta = std::exp(pm - M);
    total.l[qi] = total.l[qi] * alpha + part.l[qi] * beta;
    for (int e = 0; e < dv; ++e) ta[e] = ta[e] * alpha + pa[e] * beta;
    total.m[qi] = M;
}

// out (query qi) = acc / sum, or zeros for a query that saw nothing. With
// an attention sink (sink not null), its logit joins the max and the sum
// first, as one more cell without a value (llama.cpp rescales acc when the
// sink is the new max).
void finish(const float* acc, float m, float l, int dv, const float* sink, float* out) {
    float rescale = 1.0f;
    if (sink) {
        const float s = *sink;
        if (m == kNegInf || s > m) {
            rescale = m == kNegInf ? 0.0f : std::exp(m - s);
            l = l * rescale + 1.0f;
        } else {
            l += std::exp(s - m);
        }
    }
    if (!(l > 0.0f)) {
        std::fill(out, out + dv, 0.0f);
        return;
    }
    const float inv = 1.0f / l;
    if (sink)
        for (int e = 0; e < dv; ++e) out[e] = (acc[e] * rescale) * inv;
    else
        for (int e = 0; e < dv; ++e) out[e] = acc[e] * inv;
}

// The sink of query qi of key head hk, or null.
const float* sink_of(const attention_args& a, int n_gqa, int hk, int qi) {
    return a.sinks ? a.sinks + hk * n_gqa + qi % n_gqa : nullptr;
}

float* out_row(const plan& P, const block_range& br, int hk, int qi) {
    const int r = qi / P.n_gqa, g = qi % P.n_gqa;
    return P.a.out + (int64_t)(br.t0 + r) * P.a.out_stride + (int64_t)(hk * P.n_gqa + g) * P.dv;
}

// Chunks [first, end) of a block: aligned chunk starts.
int32_t first_chunk(const block_range& br) { return br.lo / kFlashChunk * kFlashChunk; }

// A group of blocks × one key head on one thread: the chunks in cell order
// on the outside, the group's blocks inside, so each chunk's keys and values
// (kFlashChunk cells) are read from memory once and then from the core's
// cache by the other blocks of the group (prefill at depth: without this
// every block streamed the whole cache from L3 / memory). Each block still
// processes and merges its own chunks in cell order, as alone.
void run_group(const plan& P, int64_t g, int hk, attention_scratch::flash_thread& s) {
    const int64_t b0 = g * P.group;
    const int ng = (int)std::min<int64_t>(P.group, P.n_blocks - b0);
    const int64_t ps = P.dv;
    const size_t q_floats = (size_t)P.nq_max * (size_t)P.dk;
    const size_t t_floats = (size_t)P.nq_max * (size_t)(ps + 2);
    block_range br[kFlashGroup];
    int32_t lo = 0, hi = 0;  // the cells any block of the group sees
    for (int i = 0; i < ng; ++i) {
        br[i] = block_of(P, b0 + i);
        float* t = s.total.data() + i * t_floats;
        clear(partial{t, ps, t + (size_t)P.nq_max * ps, t + (size_t)P.nq_max * (ps + 1)}, br[i].nb * P.n_gqa, P.dv);
        if (br[i].hi <= br[i].lo) continue;
        load_queries(P, br[i], hk, s.q.data() + i * q_floats);
        if (hi <= lo) lo = br[i].lo, hi = br[i].hi;
        lo = std::min(lo, br[i].lo);
        hi = std::max(hi, br[i].hi);
    }
    const partial part{s.part.data(), ps, s.part.data() + (size_t)P.nq_max * ps, s.part.data() + (size_t)P.nq_max * (ps + 1)};
    for (int32_t c = lo / kFlashChunk * kFlashChunk; c < hi; c += kFlashChunk) {
        bool first = true;  // the first block to read this chunk prefetches it
        for (int i = 0; i < ng; ++i) {
            if (br[i].hi <= br[i].lo || c + kFlashChunk <= br[i].lo || c >= br[i].hi) continue;
            float* t = s.total.data() + i * t_floats;
            const partial total{t, ps, t + (size_t)P.nq_max * ps, t + (size_t)P.nq_max * (ps + 1)};
            chunk(P, br[i], hk, std::max(c, br[i].lo), std::min(c + kFlashChunk, br[i].hi), s.q.data() + i * q_floats, s,
                  part, first);
            first = false;
            for (int qi = 0; qi < br[i].nb * P.n_gqa; ++qi) merge(total, part, qi, P.dv);
        }
    }
    for (int i = 0; i < ng; ++i) {
        const float* t = s.total.data() + i * t_floats;
        for (int qi = 0; qi < br[i].nb * P.n_gqa; ++qi)
            finish(t + (size_t)qi * ps, t[(size_t)P.nq_max * ps + qi], t[(size_t)P.nq_max * ps + P.nq_max + qi], P.dv,
                   sink_of(P.a, P.n_gqa, hk, qi), out_row(P, br[i], hk, qi));
    }
}

// Few blocks, many cells (token generation): the chunks of every block are
// spread over the threads in rounds of at most n_slots, a task doing every
// key head of its chunk (chunk_heads), so that a thread reads the chunk's
// cache rows whole (one head's slice of a row is a few lines at the stride of
// the row: a task per head read the cache at a fraction of the memory
// bandwidth). After each
// round the partials are merged in chunk order into totals kept in the output
// rows (acc) and split_ml (max, sum).
// Round task i's partial for key head hk.
partial split_slot(const plan& P, attention_scratch& sc, size_t i, int hk) {
    const size_t slot_floats = (size_t)P.nq_max * (size_t)(P.dv + 2);
    float* slot = sc.slots.data() + (i * (size_t)P.a.n_head_kv + (size_t)hk) * slot_floats;
    return partial{slot, P.dv, slot + (size_t)P.nq_max * P.dv, slot + (size_t)P.nq_max * (P.dv + 1)};
}

void run_split(const plan& P, thread_pool& pool, attention_scratch& sc) {
    const attention_args& a = P.a;
    const int n_kv = a.n_head_kv;
    const int64_t n_pairs = P.n_blocks * n_kv;
    // A partial per task and key head, the max / sum of every pair's total:
    // reserve() sized both for n_head_kv key heads (check() made sure).
    using task = std::pair<int64_t, int32_t>;  // (block, aligned chunk start)
    std::vector<task>& tasks = sc.split_tasks;  // reserved for n_slots: no allocation here
    // Totals: acc in the output rows (zeroed), max / sum in split_ml.
    for (int64_t pair = 0; pair < n_pairs; ++pair) {
        const block_range br = block_of(P, pair / n_kv);
        const int hk = (int)(pair % n_kv);
        float* ml = sc.split_ml.data() + (size_t)pair * 2 * P.nq_max;
        for (int qi = 0; qi < br.nb * P.n_gqa; ++qi) {
            std::fill(out_row(P, br, hk, qi), out_row(P, br, hk, qi) + P.dv, 0.0f);
            ml[qi] = kNegInf;
            ml[P.nq_max + qi] = 0.0f;
        }
    }
    // Walk (block, chunk) in order, a round at a time.
    int64_t blk = 0;
    int32_t c = 0;
    bool started = false;
    auto advance = [&]() -> bool {  // next (block, c) with cells; false at the end
        while (blk < P.n_blocks) {
            const block_range br = block_of(P, blk);
            if (br.hi > br.lo) {
                if (!started) {
                    c = first_chunk(br);
                    started = true;
                    return true;
                }
                c += kFlashChunk;
                if (c < br.hi) return true;
            }
            ++blk;
            started = false;
        }
        return false;
    };
    struct job {
        const plan& P;
        attention_scratch& sc;
        const std::vector<task>& tasks;
    } j{P, sc, tasks};
    bool more = advance();
    while (more) {
        tasks.clear();
        while (more && (int64_t)tasks.size() < sc.n_slots) {
            tasks.push_back({blk, c});
            more = advance();
        }
        pool.parallel_for((int64_t)tasks.size(), [p = &j](int64_t i, int thread) {
            const plan& P = p->P;
            const task& t = p->tasks[(size_t)i];
            const block_range br = block_of(P, t.first);
            attention_scratch::flash_thread& s = p->sc.flash[(size_t)thread];
            const size_t q_floats = (size_t)P.nq_max * (size_t)P.dk;  // s.q holds kFlashGroup heads' queries
            const int32_t c0 = std::max(t.second, br.lo), c1 = std::min(t.second + kFlashChunk, br.hi);
            s.touched = touch_rows(P, c0, c1);  // the chunk then sits in L2 for every head group
            for (int h0 = 0; h0 < P.a.n_head_kv; h0 += kFlashGroup) {
                const int nh = std::min(kFlashGroup, P.a.n_head_kv - h0);
                partial parts[kFlashGroup];
                for (int h = 0; h < nh; ++h) {
                    load_queries(P, br, h0 + h, s.q.data() + h * q_floats);
                    parts[h] = split_slot(P, p->sc, (size_t)i, h0 + h);
                }
                chunk_heads(P, br, h0, nh, c0, c1, s.q.data(), q_floats, s, parts);
            }
        });
        for (size_t i = 0; i < tasks.size(); ++i) {
            const block_range br = block_of(P, tasks[i].first);
            for (int hk = 0; hk < n_kv; ++hk) {
                const partial part = split_slot(P, sc, i, hk);
                float* ml = sc.split_ml.data() + (size_t)(tasks[i].first * n_kv + hk) * 2 * P.nq_max;
                for (int qi = 0; qi < br.nb * P.n_gqa; ++qi) {
                    // The total of query qi: its output row, its max and sum.
                    float* row = out_row(P, br, hk, qi);
                    const partial total{row, 0, ml + qi, ml + P.nq_max + qi};
                    const partial one{part.acc + (size_t)qi * P.dv, 0, part.m + qi, part.l + qi};
                    merge(total, one, 0, P.dv);
                }
            }
        }
    }
    for (int64_t pr = 0; pr < n_pairs; ++pr) {
        const block_range br = block_of(P, pr / n_kv);
        const int hk = (int)(pr % n_kv);
        const float* ml = sc.split_ml.data() + (size_t)pr * 2 * P.nq_max;
        for (int qi = 0; qi < br.nb * P.n_gqa; ++qi) {
            float* row = out_row(P, br, hk, qi);
            finish(row, ml[qi], ml[P.nq_max + qi], P.dv, sink_of(P.a, P.n_gqa, hk, qi), row);
        }
    }
}

void check(const attention_args& a, const attention_scratch& sc, const thread_pool& pool) {
    if (a.n_head <= 0 || a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0)
        throw value_error("attention: n_head (" + std::to_string(a.n_head) + ") must be a positive multiple of n_head_kv (" +
                          std::to_string(a.n_head_kv) + ")");
    if (sc.path != attention_path::flash || !sc.fits(a) || (int)sc.flash.size() < pool.n_threads())
        throw value_error(
            "attention: the scratch was not reserved for the flash path with these head sizes, key heads and threads");
    for (auto [t, d] : {std::pair{a.type_k, a.head_dim_k}, std::pair{a.type_v, a.head_dim_v}}) {
        const type_traits& tr = traits(t);
        if (!tr.to_float || (tr.is_quantized && (!tr.vec_dot || d % tr.block_size != 0)))
            throw value_error(std::string("attention: cache type ") + type_name(t) + " does not fit head size " +
                              std::to_string(d));
    }
}

}  // namespace

const flash_kernels& flash_kernels_for(isa level) {
    static const flash_kernels tables[] = {make_table(isa::scalar), make_table(isa::avx2), make_table(isa::avx512)};
    if (level == isa::avx512 && isa_at_least(best_isa(), isa::avx512)) return tables[2];
    if (isa_at_least(level, isa::avx2) && isa_at_least(best_isa(), isa::avx2)) return tables[1];
    return tables[0];
}

void flash_attention(const attention_args& a, thread_pool& pool, attention_scratch& sc) {
    if (a.n_tok <= 0) return;
    check(a, sc, pool);
    const int n_gqa = a.n_head / a.n_head_kv;
    plan P{a, flash_kernels_for(best_isa()), n_gqa, flash_block_rows(n_gqa), 0, a.head_dim_k, a.head_dim_v, 0, false,
           false, flash_elem::f32, flash_elem::f32, ggml_type::F32, 0};
    P.nq_max = P.rows * n_gqa;
    P.n_blocks = (a.n_tok + P.rows - 1) / P.rows;
    P.k_float = float_elem(a.type_k, P.ek);
    P.v_float = float_elem(a.type_v, P.ev);
    if (!P.k_float) {
        P.q_type = traits(a.type_k).vec_dot_type;
        P.q_row_bytes = row_size(P.q_type, P.dk);
    }
    int32_t span = 0;
    for (int t = 0; t < a.n_tok; ++t) span = std::max(span, a.hi[t] - a.lo[t]);
    // Few blocks (token generation, short batches) over many cells: split
    // the cells. Also with key heads enough for every thread: one task per
    // head would read each head's slice of the cache rows apart (see
    // run_split), at a fraction of the bandwidth.
    if (pool.n_threads() > 1 && P.n_blocks < pool.n_threads() && span > kFlashChunk) {
        run_split(P, pool, sc);
        return;
    }
    // Groups of blocks share a task where the cells are many (their chunks
    // are then reused from the cache) and there are tasks enough to keep
    // every thread busy (dynamic scheduling over >= 4 tasks per thread).
    if (span > 4 * kFlashChunk)
        P.group = (int)std::clamp<int64_t>(P.n_blocks / (4 * pool.n_threads()), 1, kFlashGroup);
    const int64_t n_groups = (P.n_blocks + P.group - 1) / P.group;
    struct job {
        const plan& P;
        attention_scratch& sc;
    } j{P, sc};
    pool.parallel_for(n_groups * a.n_head_kv, [p = &j](int64_t task, int thread) {
        const int hk = (int)(task % p->P.a.n_head_kv);
        run_group(p->P, task / p->P.a.n_head_kv, hk, p->sc.flash[(size_t)thread]);
    });
}

}  // namespace lp
