// kquants_x86.h — the x86 kernels of the k-quant family, defined in
// kquants_x86.cpp (AVX2, Q8_K quantizers) and kquants_tiles_x86.cpp (AVX-512
// dot products and tiles), registered by kquants.cpp. Each has the signature
// and the result of its scalar twin in kquants.cpp (same name, _ref suffix)
// up to float summation order; the Q8_K quantizers write the reference's
// bytes. An AVX-512 tile gives its dot product's result bit for bit.
// Declared only where the build compiles the level in (LP_HAVE_AVX2/512).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../common.h"
#include "../ggml_type.h"

namespace lp {

#if defined(LP_HAVE_AVX2)
void vec_dot_q2_k_q8_k_avx2(int64_t n, float* out, const void* w_row, const void* a_row);
void vec_dot_q3_k_q8_k_avx2(int64_t n, float* out, const void* w_row, const void* a_row);
void vec_dot_q4_k_q8_k_avx2(int64_t n, float* out, const void* w_row, const void* a_row);
void vec_dot_q5_k_q8_k_avx2(int64_t n, float* out, const void* w_row, const void* a_row);
void vec_dot_q6_k_q8_k_avx2(int64_t n, float* out, const void* w_row, const void* a_row);
void quantize_q8_k_avx2(const float* x, void* dst, int64_t n);
#endif

#if defined(LP_HAVE_AVX512)
void vec_dot_q2_k_q8_k_avx512(int64_t n, float* out, const void* w_row, const void* a_row);
void vec_dot_q3_k_q8_k_avx512(int64_t n, float* out, const void* w_row, const void* a_row);
void vec_dot_q4_k_q8_k_avx512(int64_t n, float* out, const void* w_row, const void* a_row);
void vec_dot_q5_k_q8_k_avx512(int64_t n, float* out, const void* w_row, const void* a_row);
void vec_dot_q6_k_q8_k_avx512(int64_t n, float* out, const void* w_row, const void* a_row);
// Small batches (type_traits::matvec_cols): nr rows × nc <= 4 columns row by
// row, the vec_dot's bits (Q4_K / Q5_K: the panels' own, kquants_panels_x86.cpp).
void matvec_cols_q2_k_q8_k_avx512(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                                  float* out, size_t out_stride, int nr, int nc);
void matvec_cols_q3_k_q8_k_avx512(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                                  float* out, size_t out_stride, int nr, int nc);
void matvec_cols_q6_k_q8_k_avx512(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                                  float* out, size_t out_stride, int nr, int nc);
// 4×4 tiles (ggml_type.h, gemm_tile_fn): out[c·out_stride + r] = dot(w row r, a row c),
// the same bits as the vec_dot of that row and column.
void gemm_tile_q2_k_q8_k_avx512(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                                float* out, size_t out_stride, int nr, int nc);
void gemm_tile_q3_k_q8_k_avx512(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                                float* out, size_t out_stride, int nr, int nc);
void gemm_tile_q4_k_q8_k_avx512(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                                float* out, size_t out_stride, int nr, int nc);
void gemm_tile_q5_k_q8_k_avx512(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                                float* out, size_t out_stride, int nr, int nc);
void gemm_tile_q6_k_q8_k_avx512(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                                float* out, size_t out_stride, int nr, int nc);
void quantize_q8_k_avx512(const float* x, void* dst, int64_t n);
#endif

// kquants_panels_x86.cpp: at the AVX-512 level, switches Q4_K and Q5_K to
// their panel kernels (gemm_panel, and a vec_dot with the same bits).
void register_kquant_panels_x86(type_traits* table, isa level);

// kquants_tiles_avx2.cpp: at the AVX2 level, the Q4_K / Q5_K / Q6_K tiles
// (gemm_tile, the same bits as their AVX2 vec_dot).
void register_kquant_tiles_avx2(type_traits* table, isa level);

}  // namespace lp
