// weighted.h — quantization with an importance matrix (llama-quantize --imatrix).
#pragma once

#include <cstdint>

#include "../ggml_type.h"

namespace lp {

// Whether t has an importance-weighted quantizer here (Q4_0, Q4_1, Q5_0, Q5_1,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M). Types llama.cpp quantizes the same with and without
// weights (Q8_0, MXFP4, the float types) answer false: use their reference.
bool has_weighted_quantizer(ggml_type t);

// One row of n elements (a whole number of blocks) to dst, weighted by qw (the
// importance matrix's n values for this row's columns), as llama.cpp's
// quantizer does with an imatrix. Returns false where has_weighted_quantizer
// is false.
bool quantize_row_weighted(ggml_type t, const float* x, void* dst, int64_t n, const float* qw);

// The IQ4 ones live with their family (iquants.cpp).
void quantize_row_iq4_nl_weighted(const float* x, void* dst, int64_t n, const float* qw);
void quantize_row_iq4_xs_weighted(const float* x, void* dst, int64_t n, const float* qw);

// The 8-wide lattice i-quants (iq_lattice_write_iq2.cpp). IQ2_XXS, IQ2_XS and
// IQ1_S need qw (llama.cpp refuses them without an importance matrix); IQ2_S
// and IQ1_M also quantize without one (the _ref forms).
void quantize_row_iq2_xxs_weighted(const float* x, void* dst, int64_t n, const float* qw);
void quantize_row_iq2_xs_weighted(const float* x, void* dst, int64_t n, const float* qw);
void quantize_row_iq2_s_weighted(const float* x, void* dst, int64_t n, const float* qw);
void quantize_row_iq1_s_weighted(const float* x, void* dst, int64_t n, const float* qw);
void quantize_row_iq1_m_weighted(const float* x, void* dst, int64_t n, const float* qw);
void quantize_row_iq2_s_ref(const float* x, void* dst, int64_t n);
void quantize_row_iq1_m_ref(const float* x, void* dst, int64_t n);
// The 4-wide lattice i-quants IQ3_XXS and IQ3_S (iq_lattice_write_iq3.cpp;
// has_weighted_quantizer answers true for both). The _ref forms are what
// llama.cpp writes without an importance matrix (x² weighs each error).
void quantize_row_iq3_xxs_weighted(const float* x, void* dst, int64_t n, const float* qw);
void quantize_row_iq3_s_weighted(const float* x, void* dst, int64_t n, const float* qw);
void quantize_row_iq3_xxs_ref(const float* x, void* dst, int64_t n);
void quantize_row_iq3_s_ref(const float* x, void* dst, int64_t n);

}  // namespace lp
