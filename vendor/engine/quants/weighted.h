// weighted.h — quantization with an importance matrix (llama-quantize --imatrix).
#pragma once

#include <cstdint>

#include "../ggml_type.h"

namespace lp {

// Whether t has an importance-weighted quantizer here (Q4_0, Q4_1, Q5_0, Q5_1,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS). Types llama.cpp quantizes the same with and without
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

// The 4-wide lattice i-quants IQ3_XXS and IQ3_S (iq_lattice_write_iq3.cpp;
// has_weighted_quantizer answers true for both). The _ref forms are what
// llama.cpp writes without an importance matrix (x² weighs each error).
void quantize_row_iq3_xxs_weighted(const float* x, void* dst, int64_t n, const float* qw);
void quantize_row_iq3_s_weighted(const float* x, void* dst, int64_t n, const float* qw);
void quantize_row_iq3_xxs_ref(const float* x, void* dst, int64_t n);
void quantize_row_iq3_s_ref(const float* x, void* dst, int64_t n);

}  // namespace lp
