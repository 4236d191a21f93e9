// mxfp4_neon.cpp — the aarch64 NEON kernels of MXFP4 (format, reference and
// registration: mxfp4.cpp, mxfp4.h): its dot product against Q8_0 (the
// reference's bits; mxfp4_neon.inc) and the 4×4 mat-mat tile (the same
// bits; neon_tile.inc), at the neon level (smull/sadalp) and the neon_dot
// level (SDOT). The Q8_0 activation quantizer is legacy_neon.cpp's.
// Compiles to the empty registration where the build has no NEON.
#include "mxfp4.h"

#if defined(LP_HAVE_NEON)

#include "../common.h"
#include "blocks.h"
#include "simd_neon.h"

namespace lp {

namespace {

namespace plain {
#define LP_NEON_FN
static LP_INLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) { return neon::dot16_plain(acc, w, a); }
#include "mxfp4_neon.inc"
#undef LP_NEON_FN
}  // namespace plain

namespace sdot {
#define LP_NEON_FN LP_TARGET_DOTPROD
LP_NEON_FN static LP_INLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) {
    return neon::dot16_sdot(acc, w, a);
}
#include "mxfp4_neon.inc"
#undef LP_NEON_FN
}  // namespace sdot

}  // namespace

void register_mxfp4_neon(type_traits* table, isa level) {
    if (!isa_is_arm(level)) return;
    type_traits& t = table[(int)ggml_type::MXFP4];
    const bool dp = level == isa::neon_dot;
    t.vec_dot = dp ? sdot::vec_dot_neon<sdot::mxfp4_fmt> : plain::vec_dot_neon<plain::mxfp4_fmt>;
    t.gemm_tile = dp ? sdot::gemm_tile_neon<sdot::mxfp4_fmt> : plain::gemm_tile_neon<plain::mxfp4_fmt>;
    t.vec_dot_isa = level;
}

}  // namespace lp

#else

namespace lp {
void register_mxfp4_neon(type_traits*, isa) {}
}  // namespace lp

#endif  // LP_HAVE_NEON
