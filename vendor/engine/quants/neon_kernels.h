// neon_kernels.h — the aarch64 NEON kernels of each quantization family
// (float_neon.cpp, legacy_neon.cpp, kquants_neon.cpp, iquants_neon.cpp, iq_lattice_neon.cpp),
// installed into a trait table by the family's registration for the levels
// isa::neon and isa::neon_dot. Defined only where the build compiles NEON in
// (LP_HAVE_NEON, aarch64); callers guard the calls with the same macro.
#pragma once

#include "../common.h"
#include "../ggml_type.h"

namespace lp {

void register_float_neon(type_traits* table, isa level);    // F32 F16 BF16
void register_legacy_neon(type_traits* table, isa level);   // Q4_0 Q4_1 Q5_0 Q5_1 Q8_0, Q8_0/Q8_1 quantizers
void register_kquant_neon(type_traits* table, isa level);   // Q2_K..Q6_K, the Q8_K quantizer
void register_iquant_neon(type_traits* table, isa level);   // IQ4_NL IQ4_XS
void register_iq_lattice_neon(type_traits* table, isa level);  // IQ2_*, IQ3_*, IQ1_*

}  // namespace lp
