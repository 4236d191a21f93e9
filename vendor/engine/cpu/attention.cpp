// attention.cpp — see attention.h. Work is split into tasks of (a block of up
// to kAttentionBlock query rows, one key/value head). A task gathers the cells
// any of its rows sees, converts each key row once and takes its dot product
// with every query of the block (rows × the heads sharing the key head),
// masks, soft-caps and normalises the scores, then accumulates each value row
// into every output. Each (row, head) result is computed by the same sequence
// of operations whatever the block, so batching does not change results.
#include "attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../common.h"
#include "features.h"
#include "flash_attention.h"
#include "ops.h"

#if defined(LP_X86)
// GCC 12 reports the self-initialised placeholder inside its own AVX-512
// intrinsics (_mm512_undefined_*) as uninitialised at -O3 (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace lp {

namespace {

// out[qi * out_stride] = q[qi] · k  for qi < nq (queries d floats apart)
using dots_fn = void (*)(const float* k, const float* q, int nq, int d, float* out, int64_t out_stride);
// acc[qi][0..d) += p[qi * p_stride] * v  for qi < nq (accumulators acc_stride floats apart)
using axpys_fn = void (*)(const float* v, const float* p, int64_t p_stride, int nq, int d, float* acc,
                          int64_t acc_stride);

void dots_scalar(const float* k, const float* q, int nq, int d, float* out, int64_t out_stride) {
    for (int qi = 0; qi < nq; ++qi) {
        const float* qq = q + (int64_t)qi * d;
        float s = 0;
        for (int i = 0; i < d; ++i) s += qq[i] * k[i];
        out[qi * out_stride] = s;
    }
}

void axpys_scalar(const float* v, const float* p, int64_t p_stride, int nq, int d, float* acc,
             int64_t acc_stride) {
    for (int qi = 0; qi < nq; ++qi) {
        const float w = p[qi * p_stride];
        float* a = acc + qi * acc_stride;
        for (int i = 0; i < d; ++i) a[i] += w * v[i];
    }
}

// Rounds x in place the way converting it to `t` and back would (the format
// llama.cpp hands the dot products when the other operand has type t).
void round_through_scalar(ggml_type t, float* x, int64_t n) {
    if (t == ggml_type::F16) {
        for (int64_t i = 0; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
    } else if (t == ggml_type::BF16) {
        for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_fp32(fp32_to_bf16(x[i]));
    }
}

#if defined(LP_HAVE_AVX2)

LP_TARGET_AVX2 LP_INLINE float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

LP_TARGET_AVX2 void dots_avx2(const float* k, const float* q, int nq, int d, float* out, int64_t out_stride) {
    const int d8 = d & ~7;
    for (int qi = 0; qi < nq; ++qi) {
        const float* qq = q + (int64_t)qi * d;
        __m256 acc = _mm256_setzero_ps();
        for (int i = 0; i < d8; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(qq + i), _mm256_loadu_ps(k + i), acc);
        float s = hsum256(acc);
        for (int i = d8; i < d; ++i) s += qq[i] * k[i];
        out[qi * out_stride] = s;
    }
}

LP_TARGET_AVX2 void axpys_avx2(const float* v, const float* p, int64_t p_stride, int nq, int d, float* acc,
                               int64_t acc_stride) {
    const int d8 = d & ~7;
    for (int qi = 0; qi < nq; ++qi) {
        const float w = p[qi * p_stride];
        const __m256 vw = _mm256_set1_ps(w);
        float* a = acc + qi * acc_stride;
        for (int i = 0; i < d8; i += 8)
            _mm256_storeu_ps(a + i, _mm256_fmadd_ps(vw, _mm256_loadu_ps(v + i), _mm256_loadu_ps(a + i)));
        for (int i = d8; i < d; ++i) a[i] = std::fma(w, v[i], a[i]);
    }
}

LP_TARGET_AVX2 void round_f16_avx2(float* x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
    }
    round_through_scalar(ggml_type::F16, x + i, n - i);
}

#endif  // LP_HAVE_AVX2

#if defined(LP_HAVE_AVX512)

// Each query's dot product is one 16-lane accumulator over d (masked tail),
// then a horizontal sum; four queries at a time share the key loads.
LP_TARGET_AVX512 void dots_avx512(const float* k, const float* q, int nq, int d, float* out, int64_t out_stride) {
    const __mmask16 tail = (__mmask16)((1u << (d & 15)) - 1);
    const int d16 = d & ~15;
    int qi = 0;
    for (; qi + 4 <= nq; qi += 4) {
        const float* q0 = q + (int64_t)qi * d;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int i = 0; i < d16; i += 16) {
            const __m512 kv = _mm512_loadu_ps(k + i);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + i), kv, a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + d + i), kv, a1);
            a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + 2 * d + i), kv, a2);
            a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + 3 * d + i), kv, a3);
        }
        if (tail) {
            const __m512 kv = _mm512_maskz_loadu_ps(tail, k + d16);
            a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q0 + d16), kv, a0);
            a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q0 + d + d16), kv, a1);
            a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q0 + 2 * d + d16), kv, a2);
            a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q0 + 3 * d + d16), kv, a3);
        }
        out[(qi + 0) * out_stride] = _mm512_reduce_add_ps(a0);
        out[(qi + 1) * out_stride] = _mm512_reduce_add_ps(a1);
        out[(qi + 2) * out_stride] = _mm512_reduce_add_ps(a2);
        out[(qi + 3) * out_stride] = _mm512_reduce_add_ps(a3);
    }
    for (; qi < nq; ++qi) {
        const float* q0 = q + (int64_t)qi * d;
        __m512 a0 = _mm512_setzero_ps();
        for (int i = 0; i < d16; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + i), _mm512_loadu_ps(k + i), a0);
        if (tail) a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q0 + d16), _mm512_maskz_loadu_ps(tail, k + d16), a0);
        out[qi * out_stride] = _mm512_reduce_add_ps(a0);
    }
}

LP_TARGET_AVX512 void axpys_avx512(const float* v, const float* p, int64_t p_stride, int nq, int d, float* acc,
                                   int64_t acc_stride) {
    const __mmask16 tail = (__mmask16)((1u << (d & 15)) - 1);
    const int d16 = d & ~15;
    for (int qi = 0; qi < nq; ++qi) {
        const __m512 w = _mm512_set1_ps(p[qi * p_stride]);
        float* a = acc + qi * acc_stride;
        for (int i = 0; i < d16; i += 16)
            _mm512_storeu_ps(a + i, _mm512_fmadd_ps(w, _mm512_loadu_ps(v + i), _mm512_loadu_ps(a + i)));
        if (tail)
            _mm512_mask_storeu_ps(a + d16, tail,
                                  _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(tail, v + d16), _mm512_maskz_loadu_ps(tail, a + d16)));
    }
}

LP_TARGET_AVX512 void round_f16_avx512(float* x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm512_storeu_ps(x + i, _mm512_cvtph_ps(h));
    }
    round_through_scalar(ggml_type::F16, x + i, n - i);
}

// values_range for an F16 cache: acc[q][d0, d1) = sum_i p[q][i] · v(cell idx[i])[d0, d1),
// converting the value rows straight from the cache. Per element the same
// FMA chain (cells in order, starting from 0) as the generic path.
LP_TARGET_AVX512 void values_f16_avx512(const uint8_t* v, size_t v_row_bytes, const int32_t* idx, int64_t m,
                                        const float* p, int nq, int d0, int d1, float* acc, int64_t acc_stride) {
    for (int c0 = d0; c0 < d1; c0 += 64) {
        const int nc = std::min(64, d1 - c0);            // dims in this chunk
        const int nv = (nc + 15) / 16;                    // vectors in this chunk
        const __mmask16 last = (__mmask16)(nc % 16 ? (1u << (nc % 16)) - 1 : 0xffffu);
        for (int q0 = 0; q0 < nq; q0 += 4) {
            const int nqq = std::min(4, nq - q0);
            __m512 a[4][4];
            for (int q = 0; q < 4; ++q)
                for (int k = 0; k < 4; ++k) a[q][k] = _mm512_setzero_ps();
            for (int64_t i = 0; i < m; ++i) {
                const uint16_t* vr = reinterpret_cast<const uint16_t*>(v + (size_t)idx[i] * v_row_bytes) + c0;
                __m512 vv[4];
                for (int k = 0; k < nv; ++k) {
                    const __mmask16 mk = k == nv - 1 ? last : (__mmask16)0xffff;
                    vv[k] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, vr + 16 * k));
                }
                for (int q = 0; q < nqq; ++q) {
                    const __m512 w = _mm512_set1_ps(p[(int64_t)(q0 + q) * m + i]);
                    for (int k = 0; k < nv; ++k) a[q][k] = _mm512_fmadd_ps(w, vv[k], a[q][k]);
                }
            }
            for (int q = 0; q < nqq; ++q)
                for (int k = 0; k < nv; ++k) {
                    const __mmask16 mk = k == nv - 1 ? last : (__mmask16)0xffff;
                    _mm512_mask_storeu_ps(acc + (int64_t)(q0 + q) * acc_stride + c0 + 16 * k, mk, a[q][k]);
                }
        }
    }
}

#endif  // LP_HAVE_AVX512

using values_f16_fn = void (*)(const uint8_t* v, size_t v_row_bytes, const int32_t* idx, int64_t m, const float* p,
                               int nq, int d0, int d1, float* acc, int64_t acc_stride);

struct kernels {
    dots_fn dots = dots_scalar;
    axpys_fn axpys = axpys_scalar;
    void (*round_f16)(float*, int64_t) = nullptr;  // null: scalar
    values_f16_fn values_f16 = nullptr;            // null: convert rows and use axpys
};

kernels pick_kernels() {
    kernels k;
    const isa l = best_isa();
    (void)l;
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(l, isa::avx2)) k = {dots_avx2, axpys_avx2, round_f16_avx2, nullptr};
#endif
#if defined(LP_HAVE_AVX512)
    if (l == isa::avx512) k = {dots_avx512, axpys_avx512, round_f16_avx512, values_f16_avx512};
#endif
    return k;
}

// Queries as the key type's dot product sees them: rounded to F16 / BF16
// against such a cache; against a quantized cache, quantized to its
// activation format (Q8_0 / Q8_1) and back, as llama.cpp's q·k does.
void round_queries(const kernels& kf, ggml_type t, float* x, int64_t n) {
    if (t == ggml_type::F16 && kf.round_f16) {
        kf.round_f16(x, n);
    } else if (t == ggml_type::F16 || t == ggml_type::BF16) {
        round_through_scalar(t, x, n);
    } else if (t != ggml_type::F32) {
        const ggml_type at = traits(t).vec_dot_type;
        const type_traits& tt = traits(at);
        thread_local std::vector<uint8_t> buf;
        buf.resize(row_size(at, n));
        (tt.from_float ? tt.from_float : tt.from_float_ref)(x, buf.data(), n);
        tt.to_float(buf.data(), x, n);
    }
}

// Softmax weights as the value product sees them: rounded to F16 / BF16
// against such a cache (llama.cpp's kq·v takes them in the cache's type);
// against a quantized cache they stay F32 (llama.cpp's flash-attention path,
// the one that allows quantized values, dequantizes the values instead).
void round_weights(const kernels& kf, ggml_type t, float* x, int64_t n) {
    if (t == ggml_type::F16 && kf.round_f16) kf.round_f16(x, n);
    else if (t == ggml_type::F16 || t == ggml_type::BF16) round_through_scalar(t, x, n);
}


// The steps of one task: rows [t0, t0 + nb) against key/value head hk. The
// queries of the block are its rows × the n_gqa heads sharing head hk, in
// row-major order; scores are (query, cell) with row stride m.
struct block {
    const attention_args& a;
    int t0, nb, hk;
    int n_gqa, nq;
    int64_t m = 0;  // cells seen by any row of the block
};

block make_block(const attention_args& a, int t0, int nb, int hk) {
    const int n_gqa = a.n_head / a.n_head_kv;
    return block{a, t0, nb, hk, n_gqa, nb * n_gqa};
}

// 1. the cells any row of the block sees, in position order (cell order where
// positions tie, across sequences), into idx
void gather_cells(block& b, int32_t* idx) {
    const attention_args& a = b.a;
    const cell_span span = rows_span(a, b.t0, b.nb);
    b.m = 0;
    for (int32_t j = span.lo; j < span.hi; ++j) {
        bool any = false;
        for (int r = 0; r < b.nb && !any; ++r) any = cell_visible(a.mask + (int64_t)(b.t0 + r) * a.mask_words, j);
        if (any) idx[b.m++] = j;
    }
    if (const int32_t* pos = a.cell_pos) {
        auto before = [pos](int32_t x, int32_t y) { return pos[x] < pos[y] || (pos[x] == pos[y] && x < y); };
        if (!std::is_sorted(idx, idx + b.m, before)) std::sort(idx, idx + b.m, before);
    }
}

// 2. the queries, rounded as the key type's dot product sees them: qh (nq, head_dim_k)
void load_queries(const block& b, const kernels& kf, float* qh) {
    const attention_args& a = b.a;
    const int dk = a.head_dim_k;
    for (int r = 0; r < b.nb; ++r)
        for (int g = 0; g < b.n_gqa; ++g) {
            float* qd = qh + (size_t)(r * b.n_gqa + g) * dk;
            std::memcpy(qd, a.q + (int64_t)(b.t0 + r) * a.q_stride + (int64_t)(b.hk * b.n_gqa + g) * dk,
                        sizeof(float) * dk);
            round_queries(kf, a.type_k, qd, dk);
        }
}

// 3. scores[query][i] = q · k(idx[i]) for cells i in [i0, i1); each key row converted once into row
void scores_range(const block& b, const kernels& kf, const int32_t* idx, int64_t i0, int64_t i1, const float* qh,
                  float* scores, float* row) {
    const attention_args& a = b.a;
    const int dk = a.head_dim_k;
    const type_traits& tk = traits(a.type_k);
    const size_t k_off = row_size(a.type_k, (int64_t)b.hk * dk);
    for (int64_t i = i0; i < i1; ++i) {
        const uint8_t* kr = a.k + (size_t)idx[i] * a.k_row_bytes + k_off;
        const float* kd = reinterpret_cast<const float*>(kr);
        if (a.type_k != ggml_type::F32) {
            tk.to_float(kr, row, dk);
            kd = row;
        }
        kf.dots(kd, qh, b.nq, dk, scores + i, b.m);
    }
}

// 4. weights: soft-cap, scale, mask, softmax, rounded as the value type's dot
// product sees them; a row that sees nothing gets all-zero weights.
void weights(const block& b, const kernels& kf, const int32_t* idx, float* scores) {
    const attention_args& a = b.a;
    for (int r = 0; r < b.nb; ++r) {
        const uint64_t* bits = a.mask + (int64_t)(b.t0 + r) * a.mask_words;
        const bool empty = a.hi[b.t0 + r] <= a.lo[b.t0 + r];
        for (int g = 0; g < b.n_gqa; ++g) {
            float* sc = scores + (size_t)(r * b.n_gqa + g) * b.m;
            if (empty) {
                std::fill(sc, sc + b.m, 0.0f);
                continue;
            }
            if (a.softcap > 0.0f) softcap_row(sc, b.m, a.softcap);
            scale_row(sc, b.m, a.scale);
            for (int64_t i = 0; i < b.m; ++i)
                if (!cell_visible(bits, idx[i])) sc[i] = -INFINITY;
            if (a.sinks) softmax_row_sink(sc, b.m, a.sinks[b.hk * b.n_gqa + g]);
            else softmax_row(sc, b.m);
            round_weights(kf, a.type_v, sc, b.m);
        }
    }
}

// 5. acc[query][d0, d1) = sum over cells of weight × value dims [d0, d1), cells in
// ascending order (acc (nq, head_dim_v)); the conversion goes through row.
void values_range(const block& b, const kernels& kf, const int32_t* idx, const float* scores, int d0, int d1,
                  float* acc, float* row) {
    const attention_args& a = b.a;
    const int dv = a.head_dim_v, n = d1 - d0;
    const size_t v_off = row_size(a.type_v, (int64_t)b.hk * dv), d0_off = row_size(a.type_v, d0);
    if (a.type_v == ggml_type::F16 && kf.values_f16) {
        kf.values_f16(a.v + v_off, a.v_row_bytes, idx, b.m, scores, b.nq, d0, d1, acc, dv);
        return;
    }
    for (int q = 0; q < b.nq; ++q) std::fill(acc + (size_t)q * dv + d0, acc + (size_t)q * dv + d1, 0.0f);
    const type_traits& tv = traits(a.type_v);
    for (int64_t i = 0; i < b.m; ++i) {
        const uint8_t* vr = a.v + (size_t)idx[i] * a.v_row_bytes + v_off + d0_off;
        const float* vd = reinterpret_cast<const float*>(vr);
        if (a.type_v != ggml_type::F32) {
            tv.to_float(vr, row, n);
            vd = row;
        }
        kf.axpys(vd, scores + i, b.m, b.nq, n, acc + d0, dv);
    }
}

// 6. the block's outputs
void store(const block& b, const float* acc) {
    const attention_args& a = b.a;
    const size_t per_row = (size_t)b.n_gqa * a.head_dim_v;
    for (int r = 0; r < b.nb; ++r)
        std::memcpy(a.out + (int64_t)(b.t0 + r) * a.out_stride + (int64_t)b.hk * per_row, acc + r * per_row,
                    sizeof(float) * per_row);
}

// A whole task on one thread.
void attend_block(const attention_args& a, int t0, int nb, int hk, attention_scratch::per_thread& s,
                  const kernels& kf) {
    block b = make_block(a, t0, nb, hk);
    gather_cells(b, s.idx.data());
    load_queries(b, kf, s.qh.data());
    scores_range(b, kf, s.idx.data(), 0, b.m, s.qh.data(), s.scores.data(), s.row.data());
    weights(b, kf, s.idx.data(), s.scores.data());
    values_range(b, kf, s.idx.data(), s.scores.data(), 0, a.head_dim_v, s.acc.data(), s.row.data());
    store(b, s.acc.data());
}

// A task spread over all threads (few rows, many cells: token generation):
// cells split for the scores, value dimensions split for the sums. Every
// number is computed by the same operations as in attend_block.
void attend_block_split(const attention_args& a, int t0, int nb, int hk, attention_scratch& scratch,
                        thread_pool& pool, const kernels& kf) {
    attention_scratch::per_thread& s = scratch.threads[0];  // the block's shared buffers
    block b = make_block(a, t0, nb, hk);
    gather_cells(b, s.idx.data());
    load_queries(b, kf, s.qh.data());
    struct ctx {
        block& b;
        attention_scratch& scratch;
        const kernels& kf;
        int64_t n_chunks;
    } c{b, scratch, kf, (int64_t)pool.n_threads() * 4};
    pool.parallel_for(c.n_chunks, [p = &c](int64_t chunk, int thread) {
        attention_scratch::per_thread& s0 = p->scratch.threads[0];
        const int64_t per = (p->b.m + p->n_chunks - 1) / p->n_chunks;
        const int64_t i0 = std::min(p->b.m, chunk * per), i1 = std::min(p->b.m, i0 + per);
        scores_range(p->b, p->kf, s0.idx.data(), i0, i1, s0.qh.data(), s0.scores.data(),
                     p->scratch.threads[(size_t)thread].row.data());
    });
    weights(b, kf, s.idx.data(), s.scores.data());
    const int n_slices = std::max(1, std::min(pool.n_threads() * 2, a.head_dim_v / 16));
    pool.parallel_for(n_slices, [p = &c, n_slices](int64_t k, int thread) {
        attention_scratch::per_thread& s0 = p->scratch.threads[0];
        const int dv = p->b.a.head_dim_v;
        // whole pieces of 16 dims (32 for a quantized cache: whole blocks)
        const int g = traits(p->b.a.type_v).block_size > 1 ? 32 : 16;
        const int per = (dv / g + n_slices - 1) / n_slices * g;
        const int d0 = std::min(dv, (int)k * per), d1 = (k == n_slices - 1) ? dv : std::min(dv, d0 + per);
        if (d1 > d0)
            values_range(p->b, p->kf, s0.idx.data(), s0.scores.data(), d0, d1, s0.acc.data(),
                         p->scratch.threads[(size_t)thread].row.data());
    });
    store(b, s.acc.data());
}

}  // namespace

void attention_scratch::reserve(int n_threads, int64_t n_cells, int n_gqa, int head_dim_k, int head_dim_v) {
    reserve(attention_path::explicit_softmax, n_threads, n_cells, {attention_shape{n_gqa, head_dim_k, head_dim_v, 1}});
}

void attention_scratch::reserve(attention_path p, int n_threads, int64_t n_cells, int n_gqa, int head_dim_k,
                                int head_dim_v, int n_head_kv) {
    reserve(p, n_threads, n_cells, {attention_shape{n_gqa, head_dim_k, head_dim_v, n_head_kv}});
}

void attention_scratch::reserve(attention_path p, int n_threads, int64_t n_cells,
                                const std::vector<attention_shape>& shape_list) {
    if (n_threads < 1 || shape_list.empty()) throw value_error("attention scratch: threads and a shape are needed");
    for (const attention_shape& sh : shape_list)
        if (sh.n_gqa < 1 || sh.head_dim_k < 1 || sh.head_dim_v < 1 || sh.n_head_kv < 1)
            throw value_error("attention scratch: threads, n_gqa, n_head_kv and head sizes must be >= 1");
    shapes = shape_list;
    path = p;
    n_gqa = shapes[0].n_gqa;
    head_dim_k = shapes[0].head_dim_k;
    head_dim_v = shapes[0].head_dim_v;
    n_head_kv = shapes[0].n_head_kv;
    // Every buffer's size: the largest any shape needs (computed first, so
    // each is allocated once at its exact size).
    size_t scores = 0, qh = 0, row = 0, acc = 0;                       // explicit
    size_t fq = 0, fs = 0, fpart = 0, fv = 0, fslots = 0, fml = 0;     // flash
    for (const attention_shape& sh : shapes) {
        const size_t nq = (size_t)kAttentionBlock * (size_t)sh.n_gqa;
        scores = std::max(scores, nq * (size_t)n_cells);
        qh = std::max(qh, nq * (size_t)sh.head_dim_k);
        row = std::max(row, (size_t)std::max(sh.head_dim_k, sh.head_dim_v));
        acc = std::max(acc, nq * (size_t)sh.head_dim_v);
        const size_t fnq = (size_t)flash_block_rows(sh.n_gqa) * (size_t)sh.n_gqa;
        const size_t part = fnq * ((size_t)sh.head_dim_v + 2);
        fq = std::max(fq, kFlashGroup * fnq * (size_t)sh.head_dim_k);
        fs = std::max(fs, fnq * kFlashTile);
        fpart = std::max(fpart, part);
        fv = std::max(fv, (size_t)kFlashTile * (size_t)sh.head_dim_v);
        fslots = std::max(fslots, (size_t)sh.n_head_kv * part);
        fml = std::max(fml, (size_t)sh.n_head_kv * fnq * 2);
    }
    threads.clear();
    flash.clear();
    slots.clear();
    split_ml.clear();
    split_tasks.clear();
    n_slots = 0;
    if (p == attention_path::explicit_softmax) {
        this->n_cells = n_cells;
        threads.resize((size_t)n_threads);
        for (per_thread& t : threads) {
            t.idx.resize((size_t)n_cells);
            t.scores.resize(scores);
            t.qh.resize(qh);
            t.row.resize(row);
            t.acc.resize(acc);
        }
        return;
    }
    this->n_cells = 0;
    flash.resize((size_t)n_threads);
    for (flash_thread& t : flash) {
        t.q.resize(fq);
        t.s.resize(fs);
        t.sc.resize(fs);
        t.part.resize(fpart);
        t.total.resize(kFlashGroup * fpart);
        t.vbuf.resize(fv);
    }
    // Split-K rounds: enough slots that a round keeps every thread busy for a
    // few chunks.
    n_slots = 8 * (int64_t)n_threads;
    slots.resize((size_t)n_slots * fslots);
    split_ml.resize((size_t)n_threads * fml);
    split_tasks.reserve((size_t)n_slots);
}

bool attention_scratch::fits(const attention_args& a) const {
    if (a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0) return false;
    const int g = a.n_head / a.n_head_kv;
    for (const attention_shape& sh : shapes)
        if (sh.n_gqa == g && sh.head_dim_k == a.head_dim_k && sh.head_dim_v == a.head_dim_v &&
            (path != attention_path::flash || sh.n_head_kv >= a.n_head_kv))
            return true;
    return false;
}

size_t attention_scratch::bytes() const {
    size_t n = 0;
    for (const per_thread& t : threads)
        n += t.idx.capacity() * sizeof(int32_t) +
             (t.scores.capacity() + t.qh.capacity() + t.row.capacity() + t.acc.capacity()) * sizeof(float);
    for (const flash_thread& t : flash)
        n += (t.q.capacity() + t.s.capacity() + t.sc.capacity() + t.part.capacity() + t.total.capacity() +
              t.vbuf.capacity()) * sizeof(float);
    return n + (slots.capacity() + split_ml.capacity()) * sizeof(float);
}

const char* attention_path_name(attention_path p) { return p == attention_path::flash ? "flash" : "explicit"; }

cell_span rows_span(const attention_args& a, int t0, int nb) {
    cell_span s;
    for (int r = 0; r < nb; ++r) {
        const int32_t l = a.lo[t0 + r], h = a.hi[t0 + r];
        if (h <= l) continue;
        if (s.hi <= s.lo) s.lo = l, s.hi = h;
        s.lo = std::min(s.lo, l);
        s.hi = std::max(s.hi, h);
    }
    return s;
}

void attention(const attention_args& a, thread_pool& pool, attention_scratch& scratch) {
    if (a.path == attention_path::flash) {
        flash_attention(a, pool, scratch);
        return;
    }
    if (a.n_tok <= 0) return;
    static const kernels kf = pick_kernels();
    // One pointer captured, so the task fits std::function's inline storage
    // (no allocation per call).
    struct job {
        const attention_args& a;
        attention_scratch& scratch;
    } j{a, scratch};
    const int64_t n_blocks = (a.n_tok + kAttentionBlock - 1) / kAttentionBlock;
    const int64_t n_tasks = n_blocks * a.n_head_kv;
    int64_t max_cells = 0;
    for (int t = 0; t < a.n_tok; ++t) max_cells = std::max<int64_t>(max_cells, a.hi[t] - a.lo[t]);
    if (n_tasks < pool.n_threads() && max_cells >= 256) {
        // Too few tasks to occupy the threads: spread each over all of them.
        for (int64_t task = 0; task < n_tasks; ++task) {
            const int b = (int)(task / a.n_head_kv), hk = (int)(task % a.n_head_kv);
            const int t0 = b * kAttentionBlock;
            attend_block_split(a, t0, std::min(kAttentionBlock, a.n_tok - t0), hk, scratch, pool, kf);
        }
        return;
    }
    pool.parallel_for(n_tasks, [p = &j](int64_t task, int thread) {
        const attention_args& a = p->a;
        const int b = (int)(task / a.n_head_kv), hk = (int)(task % a.n_head_kv);
        const int t0 = b * kAttentionBlock;
        attend_block(a, t0, std::min(kAttentionBlock, a.n_tok - t0), hk, p->scratch.threads[(size_t)thread], kf);
    });
}

}  // namespace lp
