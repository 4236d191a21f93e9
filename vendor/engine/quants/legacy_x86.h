// legacy_x86.h — the x86 kernels of the legacy block formats (legacy_x86.cpp),
// installed into a trait table by legacy.cpp's registration.
#pragma once

#include "../ggml_type.h"

namespace lp {

// Sets the AVX2 / AVX-512 kernels of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (and the
// Q8_0 / Q8_1 activation quantizers) for `level`, where the build has them.
void register_legacy_x86(type_traits* table, isa level);

// Then, for the AVX-512 level, the row-panel kernels of Q4_0 and Q5_0
// (legacy_panels_x86.cpp), which replace their dot product and tiles (Q8_0's
// panel exists there but is not switched on: its mat-vec is slower).
void register_legacy_panels_x86(type_traits* table, isa level);

// For the AVX2 level, the register-blocked tiles of Q4_0, Q5_0
// (legacy_tiles_avx2.cpp) and Q8_0 (q8_0_tiles_avx2.cpp), AVX-VNNI where the
// CPU has it, and the vec_dot giving their bits.
void register_legacy_tiles_avx2(type_traits* table, isa level);
// Q8_0's AVX2 kernels (q8_0_tiles_avx2.cpp), with AVX-VNNI or without:
// vec_dot, gemm_tile, gemm_panel and matvec_cols, with one another's bits.
void set_q8_0_tiles_avx2(type_traits& q8_0, bool vnni);
// float_tiles_avx2.cpp: the encoders' Q8_0 product through the packed F32 one
// (dequantized weights), for the AVX2 level without AVX-VNNI.
void use_dequantized_q8_0_avx2(type_traits& q8_0);
// Whether the AVX2 tiles use AVX-VNNI (the CPU has it, LLAMAPY_AVXVNNI not 0).
bool avx2_use_vnni();

}  // namespace lp
