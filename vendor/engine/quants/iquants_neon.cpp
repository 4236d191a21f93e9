// iquants_neon.cpp — the aarch64 NEON kernels of IQ4_NL and IQ4_XS (formats,
// references and registration: iquants.cpp): their dot products (the
// reference's bits; iquants_neon.inc) with their 4×4 mat-mat tiles (the
// same bits; neon_tile.inc) at the neon level (smull/sadalp) and the
// neon_dot level (SDOT). Their activation quantizers (Q8_0, Q8_K) are
// the legacy and k-quant families'. Compiles to nothing where the build has
// no NEON.
#include "neon_kernels.h"

#if defined(LP_HAVE_NEON)

#include "../common.h"
#include "blocks.h"
#include "simd_neon.h"

namespace lp {

namespace {

// The IQ4 value table (a fact of the format; iquants.cpp has the same).
alignas(16) constexpr int8_t kvalues_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                1,    13,   25,  38,  53,  69,  89,  113};

namespace plain {
#define LP_NEON_FN
static LP_INLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) { return neon::dot16_plain(acc, w, a); }
#include "iquants_neon.inc"
#undef LP_NEON_FN
}  // namespace plain

namespace sdot {
#define LP_NEON_FN LP_TARGET_DOTPROD
LP_NEON_FN static LP_INLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) {
    return neon::dot16_sdot(acc, w, a);
}
#include "iquants_neon.inc"
#undef LP_NEON_FN
}  // namespace sdot

}  // namespace

void register_iquant_neon(type_traits* table, isa level) {
    if (!isa_is_arm(level)) return;
    type_traits& nl = table[(int)ggml_type::IQ4_NL];
    type_traits& xs = table[(int)ggml_type::IQ4_XS];
    const bool dp = level == isa::neon_dot;
    nl.vec_dot = dp ? sdot::vec_dot_neon<sdot::iq4_nl_fmt> : plain::vec_dot_neon<plain::iq4_nl_fmt>;
    nl.gemm_tile = dp ? sdot::gemm_tile_neon<sdot::iq4_nl_fmt> : plain::gemm_tile_neon<plain::iq4_nl_fmt>;
    xs.vec_dot = dp ? sdot::vec_dot_neon<sdot::iq4_xs_fmt> : plain::vec_dot_neon<plain::iq4_xs_fmt>;
    xs.gemm_tile = dp ? sdot::gemm_tile_neon<sdot::iq4_xs_fmt> : plain::gemm_tile_neon<plain::iq4_xs_fmt>;
    nl.vec_dot_isa = xs.vec_dot_isa = level;
}

}  // namespace lp

#endif  // LP_HAVE_NEON
