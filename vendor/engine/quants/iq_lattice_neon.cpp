// iq_lattice_neon.cpp — the aarch64 NEON kernels of the grid-based i-quants
// (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M; formats, decoders
// and references: iq_lattice.h / iq_lattice.cpp): their dot products against
// Q8_K and 4×4 mat-mat tiles (neon_tile.inc's drivers) at the neon level
// (smull/sadalp) and the neon_dot level (SDOT). A block is decoded by the
// reference's decoders with a NEON writer for each group of 8 weights (one
// table load per grid entry; signs with VTST + negate; IQ1's 8g ± 1 with a
// shift and an add), the 256 products then run 16 lanes at a time. The
// integer sums are exact and the float step is the reference's, so both
// levels give their _ref twin's bits. Compiles to nothing where the build has
// no NEON.
#include "neon_kernels.h"

#if defined(LP_HAVE_NEON)

#include "../common.h"
#include "blocks.h"
#include "iq_lattice.h"
#include "simd_neon.h"

namespace lp {

namespace {

using namespace iq;

// The decoders' 8-weight writer (iq_lattice.h: put_scalar's results).
struct put_neon {
    static LP_INLINE void signed8(int8_t* q, uint64_t entry, uint32_t signs) {
        const int8x8_t mag = vcreate_s8(entry);
        const int8x8_t neg =
            vreinterpret_s8_u8(vtst_u8(vdup_n_u8((uint8_t)signs), vcreate_u8(0x8040201008040201ULL)));
        vst1_s8(q, vsub_s8(veor_s8(mag, neg), neg));  // (v ^ -1) - (-1) = -v where the bit is set
    }
    static LP_INLINE void iq1(int8_t* q, uint64_t entry, bool minus) {
        vst1_s8(q, vadd_s8(vshl_n_s8(vcreate_s8(entry), 3), vdup_n_s8(minus ? -1 : 1)));
    }
};

#define LP_IQ_LATTICE_NEON_FORMAT                                                                      \
    template <class T>                                                                                 \
    struct lattice_fmt {                                                                               \
        using wblock = typename T::block;                                                              \
        using ablock = block_q8_K;                                                                     \
        using decoded = iq::decoded;                                                                   \
        static constexpr int block = QK_K;                                                             \
        static LP_INLINE void decode(const wblock& b, decoded& o) { T::template decode<put_neon>(b, o); } \
        LP_NEON_FN static LP_INLINE float step(const decoded& w, const ablock& a, float sum) {         \
            int32x4_t acc = vdupq_n_s32(0);                                                            \
            for (int g = 0; g < QK_K / 16; ++g)                                                        \
                acc = vmlaq_n_s32(acc, dot16(vdupq_n_s32(0), vld1q_s8(w.q + 16 * g), vld1q_s8(a.qs + 16 * g)), \
                                  w.ls[g]);                                                            \
            return sum + (float)vaddvq_s32(acc) * (w.d * a.d * T::unit);                               \
        }                                                                                              \
    };

namespace plain {
#define LP_NEON_FN
static LP_INLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) { return neon::dot16_plain(acc, w, a); }
LP_IQ_LATTICE_NEON_FORMAT
#include "neon_tile.inc"
#undef LP_NEON_FN
}  // namespace plain

namespace sdot {
#define LP_NEON_FN LP_TARGET_DOTPROD
LP_NEON_FN static LP_INLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) {
    return neon::dot16_sdot(acc, w, a);
}
LP_IQ_LATTICE_NEON_FORMAT
#include "neon_tile.inc"
#undef LP_NEON_FN
}  // namespace sdot

#undef LP_IQ_LATTICE_NEON_FORMAT

template <class T>
void register_one(type_traits* table, ggml_type type, isa level) {
    type_traits& t = table[(int)type];
    const bool dp = level == isa::neon_dot;
    t.vec_dot = dp ? sdot::vec_dot_neon<sdot::lattice_fmt<T>> : plain::vec_dot_neon<plain::lattice_fmt<T>>;
    t.gemm_tile = dp ? sdot::gemm_tile_neon<sdot::lattice_fmt<T>> : plain::gemm_tile_neon<plain::lattice_fmt<T>>;
    t.vec_dot_isa = level;
}

}  // namespace

void register_iq_lattice_neon(type_traits* table, isa level) {
    if (!isa_is_arm(level)) return;
    register_one<iq2_xxs>(table, ggml_type::IQ2_XXS, level);
    register_one<iq2_xs>(table, ggml_type::IQ2_XS, level);
    register_one<iq2_s>(table, ggml_type::IQ2_S, level);
    register_one<iq3_xxs>(table, ggml_type::IQ3_XXS, level);
    register_one<iq3_s>(table, ggml_type::IQ3_S, level);
    register_one<iq1_s>(table, ggml_type::IQ1_S, level);
    register_one<iq1_m>(table, ggml_type::IQ1_M, level);
}

}  // namespace lp

#endif  // LP_HAVE_NEON
