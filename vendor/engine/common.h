// common.h — small shared definitions for the llamapy engine: error types,
// half-precision conversions and the macros that mark per-ISA functions.
// Not here: anything about tensors or models (see ggml_type.h, gguf/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace lp {

// Raised for malformed or truncated GGUF files; the bindings map it to
// llamapy.GGUFError (a ValueError).
struct gguf_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Raised for bad arguments from the caller (shapes, types); maps to ValueError.
struct value_error : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

// ---------------------------------------------------------------------------
// Per-ISA code. Each quantization family keeps its scalar reference and its
// SIMD versions in one file; the SIMD functions carry a target attribute so a
// portable build still compiles them, and the right one is picked at run time
// from the CPU's features (cpu/features.h). LP_ENABLE_AVX2 / LP_ENABLE_AVX512
// are set by CMake from the LLAMAPY_* / GGML_* options.
// The AVX-512 level we target is F+BW+VL+DQ+VNNI (Ice Lake, Zen 4 and newer);
// CPUs with AVX-512 but no VNNI run the AVX2 paths.
// ---------------------------------------------------------------------------
#if defined(__x86_64__) || defined(_M_X64)
#define LP_X86 1
#endif

#if defined(LP_X86) && defined(LP_ENABLE_AVX2)
#define LP_HAVE_AVX2 1
#define LP_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi2,popcnt")))
#endif

#if defined(LP_X86) && defined(LP_ENABLE_AVX512)
#define LP_HAVE_AVX512 1
#define LP_TARGET_AVX512 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi2,popcnt")))
#endif

// aarch64: NEON is part of the base architecture (armv8-a), so the neon level
// needs no attribute; the dot-product level (SDOT/UDOT) does. GCC 12's
// arm_neon.h declares vdotq_s32 under arch=armv8.2-a+dotprod, and its
// inlining check wants the caller's target to include that one ("+dotprod"
// alone is refused); every CPU with the dot product is armv8.2 or later.
#if defined(__aarch64__)
#define LP_ARM64 1
#endif

#if defined(LP_ARM64) && defined(LP_ENABLE_NEON)
#define LP_HAVE_NEON 1
#define LP_TARGET_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#endif

#define LP_RESTRICT __restrict__
#define LP_INLINE inline __attribute__((always_inline))

// ---------------------------------------------------------------------------
// IEEE half <-> float, exact (bit manipulation, no hardware needed).
// ---------------------------------------------------------------------------
static inline float fp32_from_bits(uint32_t w) { float f; std::memcpy(&f, &w, 4); return f; }
static inline uint32_t fp32_to_bits(float f) { uint32_t w; std::memcpy(&w, &f, 4); return w; }

static inline float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) {  // inf / nan
        return fp32_from_bits(sign | 0x7f800000u | (mant << 13));
    }
    if (exp == 0) {
        if (mant == 0) return fp32_from_bits(sign);
        // subnormal: normalise
        int e = -1;
        do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
        mant &= 0x3ffu;
        return fp32_from_bits(sign | ((uint32_t)(127 - 15 - e) << 23) | (mant << 13));
    }
    return fp32_from_bits(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

// Round-to-nearest-even float -> half, with overflow to inf and NaN kept NaN.
static inline uint16_t fp32_to_fp16(float f) {
    const uint32_t x = fp32_to_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {  // inf or nan
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    }
    if (ax >= 0x477ff000u) {  // rounds to >= 65520 -> inf
        return (uint16_t)(sign | 0x7c00u);
    }
    if (ax < 0x38800000u) {  // result is subnormal or zero (|f| < 2^-14)
        // add 0.5 in float so the FPU does the round-to-nearest-even for us
        const float r = fp32_from_bits(ax) + 0.5f;
        return (uint16_t)(sign | (fp32_to_bits(r) - 0x3f000000u));
    }
    const uint32_t mant_odd = (ax >> 13) & 1u;
    uint32_t v = ax + 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
    return (uint16_t)(sign | (v >> 13));
}

// bfloat16: the top half of a float. Conversion to bf16 rounds to nearest even,
// NaN stays NaN (quietened), as llama.cpp's converter does.
static inline float bf16_to_fp32(uint16_t h) { return fp32_from_bits((uint32_t)h << 16); }
static inline uint16_t fp32_to_bf16(float f) {
    uint32_t x = fp32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64u);
    return (uint16_t)((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

// An allocator whose resize() leaves new elements uninitialised (default-
// rather than value-initialised): big work buffers are then not written when
// they are created, so a context comes up without touching tens of MB that
// the first forward pass writes anyway.
template <class T> struct uninit_allocator : std::allocator<T> {
    template <class U> struct rebind { using other = uninit_allocator<U>; };
    uninit_allocator() = default;
    template <class U> uninit_allocator(const uninit_allocator<U>&) noexcept {}
    template <class U> void construct(U* p) noexcept { ::new (static_cast<void*>(p)) U; }
    template <class U, class... A> void construct(U* p, A&&... a) { ::new (static_cast<void*>(p)) U(std::forward<A>(a)...); }
};
// A float buffer that is not zero-filled when sized (see uninit_allocator).
using work_buffer = std::vector<float, uninit_allocator<float>>;

}  // namespace lp
