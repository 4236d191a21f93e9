// ternary_neon.cpp — the aarch64 NEON kernels of TQ1_0 and TQ2_0 (formats:
// ternary.h; references and registration: ternary.cpp): their dot products
// against Q8_K (the reference's bits; ternary_neon.inc) with their 4×4
// mat-mat tiles (the same bits; neon_tile.inc) at the neon level
// (smull/sadalp) and the neon_dot level (SDOT). Compiles to nothing where the
// build has no NEON.
#include "ternary.h"

#if defined(LP_HAVE_NEON)

#include <cstring>

#include "../common.h"
#include "blocks.h"
#include "simd_neon.h"

namespace lp {

namespace {

namespace plain {
#define LP_NEON_FN
static LP_INLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) { return neon::dot16_plain(acc, w, a); }
#include "ternary_neon.inc"
#undef LP_NEON_FN
}  // namespace plain

namespace sdot {
#define LP_NEON_FN LP_TARGET_DOTPROD
LP_NEON_FN static LP_INLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) {
    return neon::dot16_sdot(acc, w, a);
}
#include "ternary_neon.inc"
#undef LP_NEON_FN
}  // namespace sdot

}  // namespace

void register_ternary_neon(type_traits* table, isa level) {
    if (!isa_is_arm(level)) return;
    type_traits& t1 = table[(int)ggml_type::TQ1_0];
    type_traits& t2 = table[(int)ggml_type::TQ2_0];
    const bool dp = level == isa::neon_dot;
    t1.vec_dot = dp ? sdot::vec_dot_neon<sdot::tq1_0_fmt> : plain::vec_dot_neon<plain::tq1_0_fmt>;
    t1.gemm_tile = dp ? sdot::gemm_tile_neon<sdot::tq1_0_fmt> : plain::gemm_tile_neon<plain::tq1_0_fmt>;
    t2.vec_dot = dp ? sdot::vec_dot_neon<sdot::tq2_0_fmt> : plain::vec_dot_neon<plain::tq2_0_fmt>;
    t2.gemm_tile = dp ? sdot::gemm_tile_neon<sdot::tq2_0_fmt> : plain::gemm_tile_neon<plain::tq2_0_fmt>;
    t1.vec_dot_isa = t2.vec_dot_isa = level;
}

}  // namespace lp

#else

namespace lp {
void register_ternary_neon(type_traits*, isa) {}
}  // namespace lp

#endif  // LP_HAVE_NEON
