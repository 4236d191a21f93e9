// iq_lattice.h — the grid-based i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S, IQ1_S and IQ1_M: their block layouts (bit for bit those of
// llama.cpp's files), the lattice tables (iq_grids.inc, generated from the
// gguf package) and one scalar decoder per type, shared by the reference and
// the NEON kernels (iq_lattice.cpp, iq_lattice_neon.cpp).
//
// All seven store, per group of 8 (or 4) weights, an index into a fixed grid
// of points (a lattice), plus signs, plus small sub-block scales. Every
// weight comes out as  w = d * ls * unit * q  with
//   d     the super-block's fp16 scale,
//   ls    an odd integer sub-block scale (2s + 1; per 16 or per 32 weights),
//   q     a small signed integer (the grid value with its sign; for IQ1,
//         whose grid is -1/0/+1 shifted by ±1/8, q = 8 * g ± 1),
//   unit  a power of two fixed by the type (1/8, 1/4, 1).
// So the decoders give 256 int8 q and 16 integer scales per super-block,
// and one int8 × int8 dot with per-16 scales serves every type.
// Not here: quantization to these types (iq_lattice_write_iq2.cpp writes the
// IQ2 and IQ1 ones, iq_lattice_write_iq3.cpp IQ3_XXS and IQ3_S).
#pragma once

#include <cstdint>
#include <cstring>

#include "../common.h"
#include "blocks.h"

namespace lp {
namespace iq {

// --- block layouts (256 weights each; fp16 fields as raw bits) -------------
// IQ2_XXS: per 32 weights two uint32: 4 grid bytes, then 4 × 7 sign bits and
// a 4-bit scale in the top nibble.
struct block_iq2_xxs { uint16_t d; uint16_t qs[QK_K / 8]; };
// IQ2_XS: per 8 weights a uint16 (9-bit grid index, 7 sign bits); 4-bit
// scales per 16.
struct block_iq2_xs { uint16_t d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; };
// IQ2_S: per 8 weights a grid byte (qs[0..31]) and a sign byte (qs[32..63]),
// two more index bits per 8 in qh; 4-bit scales per 16.
struct block_iq2_s { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; };
// IQ3_XXS: per 4 weights a grid byte (qs[0..63]); per 32 a uint32 of signs
// and scale as in IQ2_XXS (qs[64..95]).
struct block_iq3_xxs { uint16_t d; uint8_t qs[3 * QK_K / 8]; };
// IQ3_S: per 4 weights a grid byte plus a ninth bit in qh; one sign bit per
// weight; 4-bit scales per 32.
struct block_iq3_s {
    uint16_t d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t signs[QK_K / 8];
    uint8_t scales[QK_K / 64];
};
// IQ1_S: per 8 weights a grid byte; per 32 a uint16: 4 × 3 more index bits,
// a 3-bit scale, and the sign of the ±1/8 shift in bit 15.
struct block_iq1_s { uint16_t d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; };
// IQ1_M: per 8 weights a grid byte and a nibble (3 index bits, shift sign);
// 3-bit scales per 16; the fp16 d is spread over the top nibbles of the four
// uint16 of `scales`.
struct block_iq1_m { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; };
static_assert(sizeof(block_iq2_xxs) == 66, "iq2_xxs layout");
static_assert(sizeof(block_iq2_xs) == 74, "iq2_xs layout");
static_assert(sizeof(block_iq2_s) == 82, "iq2_s layout");
static_assert(sizeof(block_iq3_xxs) == 98, "iq3_xxs layout");
static_assert(sizeof(block_iq3_s) == 110, "iq3_s layout");
static_assert(sizeof(block_iq1_s) == 50, "iq1_s layout");
static_assert(sizeof(block_iq1_m) == 56, "iq1_m layout");

// --- the lattice tables (iq_grids.inc; defined in iq_lattice.cpp) ----------
// Entry i of an 8-wide grid: element j in byte j; of a 4-wide one likewise.
extern const uint64_t iq2xxs_grid[256];
extern const uint64_t iq2xs_grid[512];
extern const uint64_t iq2s_grid[1024];
extern const uint32_t iq3xxs_grid[256];
extern const uint32_t iq3s_grid[512];
extern const uint64_t iq1s_grid[2048];  // int8 -1 / 0 / +1 bytes
extern const uint8_t iq_ksigns[128];    // 7 sign bits -> 8 (even parity)

// A decoded super-block: w[i] = d * ls[i / 16] * unit * q[i].
struct decoded {
    alignas(32) int8_t q[QK_K];
    int16_t ls[QK_K / 16];
    float d;
};

LP_INLINE uint32_t load_u32(const void* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
LP_INLINE uint16_t load_u16(const void* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

// How a decoder writes a group of 8 weights. put_scalar is the reference;
// the NEON kernels plug in their own (iq_lattice_neon.cpp) with the same
// results, so every decoder below is written once.
struct put_scalar {
    // 8 grid values (the bytes of `entry`, element j in byte j), bit j of
    // `signs` negating element j.
    static void signed8(int8_t* q, uint64_t entry, uint32_t signs) {
        for (int j = 0; j < 8; ++j) {
            const int v = (int8_t)(uint8_t)(entry >> (8 * j));
            q[j] = (int8_t)((signs >> j) & 1 ? -v : v);
        }
    }
    // IQ1: q = 8 * g ± 1, the grid value and the shift of its group of 8 in
    // eighths (exact: w = dl * (g ± 1/8) = dl * q / 8).
    static void iq1(int8_t* q, uint64_t entry, bool minus) {
        for (int j = 0; j < 8; ++j) q[j] = (int8_t)(8 * (int8_t)(uint8_t)(entry >> (8 * j)) + (minus ? -1 : 1));
    }
};

// Two 4-wide grid entries as one 8-wide (the IQ3 grids).
LP_INLINE uint64_t pair4(uint32_t lo, uint32_t hi) { return (uint64_t)lo | (uint64_t)hi << 32; }

// --- one decoder per type --------------------------------------------------
// Each also names the type's `unit` (see the top) as a constant.

struct iq2_xxs {
    using block = block_iq2_xxs;
    static constexpr float unit = 0.125f;  // w = d * (0.5 + s) / 4 * grid = d * (2s + 1) / 8 * grid
    // dequantization's scale and value, in gguf-py's float order (bit-exact)
    static float dequant_scale(float d, int ls) { return d * ((float)ls * 0.5f) * 0.25f; }
    static constexpr float q_unit = 1.0f;
    template <class P = put_scalar>
    static void decode(const block& b, decoded& o) {
        o.d = fp16_to_fp32(b.d);
        for (int ib = 0; ib < 8; ++ib) {
            const uint32_t grid = load_u32(b.qs + 4 * ib), aux = load_u32(b.qs + 4 * ib + 2);
            o.ls[2 * ib] = o.ls[2 * ib + 1] = (int16_t)(2 * (aux >> 28) + 1);
            for (int l = 0; l < 4; ++l)
                P::signed8(o.q + 32 * ib + 8 * l, iq2xxs_grid[(grid >> (8 * l)) & 0xff],
                           iq_ksigns[(aux >> (7 * l)) & 0x7f]);
        }
    }
};

struct iq2_xs {
    using block = block_iq2_xs;
    static constexpr float unit = 0.125f;
    static float dequant_scale(float d, int ls) { return d * ((float)ls * 0.5f) * 0.25f; }
    static constexpr float q_unit = 1.0f;
    template <class P = put_scalar>
    static void decode(const block& b, decoded& o) {
        o.d = fp16_to_fp32(b.d);
        for (int ib = 0; ib < 8; ++ib) {
            o.ls[2 * ib] = (int16_t)(2 * (b.scales[ib] & 0xf) + 1);
            o.ls[2 * ib + 1] = (int16_t)(2 * (b.scales[ib] >> 4) + 1);
            for (int l = 0; l < 4; ++l) {
                const uint16_t v = b.qs[4 * ib + l];
                P::signed8(o.q + 32 * ib + 8 * l, iq2xs_grid[v & 511], iq_ksigns[v >> 9]);
            }
        }
    }
};

struct iq2_s {
    using block = block_iq2_s;
    static constexpr float unit = 0.125f;
    static float dequant_scale(float d, int ls) { return d * ((float)ls * 0.5f) * 0.25f; }
    static constexpr float q_unit = 1.0f;
    template <class P = put_scalar>
    static void decode(const block& b, decoded& o) {
        o.d = fp16_to_fp32(b.d);
        const uint8_t* signs = b.qs + QK_K / 8;
        for (int ib = 0; ib < 8; ++ib) {
            o.ls[2 * ib] = (int16_t)(2 * (b.scales[ib] & 0xf) + 1);
            o.ls[2 * ib + 1] = (int16_t)(2 * (b.scales[ib] >> 4) + 1);
            for (int l = 0; l < 4; ++l) {
                const int idx = b.qs[4 * ib + l] | (((b.qh[ib] >> (2 * l)) & 3) << 8);
                P::signed8(o.q + 32 * ib + 8 * l, iq2s_grid[idx], signs[4 * ib + l]);
            }
        }
    }
};

struct iq3_xxs {
    using block = block_iq3_xxs;
    static constexpr float unit = 0.25f;  // w = d * (0.5 + s) / 2 * grid
    static float dequant_scale(float d, int ls) { return d * ((float)ls * 0.5f) * 0.5f; }
    static constexpr float q_unit = 1.0f;
    template <class P = put_scalar>
    static void decode(const block& b, decoded& o) {
        o.d = fp16_to_fp32(b.d);
        for (int ib = 0; ib < 8; ++ib) {
            const uint32_t aux = load_u32(b.qs + QK_K / 4 + 4 * ib);
            o.ls[2 * ib] = o.ls[2 * ib + 1] = (int16_t)(2 * (aux >> 28) + 1);
            for (int l = 0; l < 4; ++l)
                P::signed8(o.q + 32 * ib + 8 * l,
                           pair4(iq3xxs_grid[b.qs[8 * ib + 2 * l]], iq3xxs_grid[b.qs[8 * ib + 2 * l + 1]]),
                           iq_ksigns[(aux >> (7 * l)) & 0x7f]);
        }
    }
};

struct iq3_s {
    using block = block_iq3_s;
    static constexpr float unit = 1.0f;  // w = d * (1 + 2s) * grid
    static float dequant_scale(float d, int ls) { return d * (float)ls; }
    static constexpr float q_unit = 1.0f;
    template <class P = put_scalar>
    static void decode(const block& b, decoded& o) {
        o.d = fp16_to_fp32(b.d);
        for (int ib = 0; ib < 8; ++ib) {
            o.ls[2 * ib] = o.ls[2 * ib + 1] = (int16_t)(2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 0xf) + 1);
            const uint8_t* qs = b.qs + 8 * ib;
            const int qh = b.qh[ib];
            for (int l = 0; l < 4; ++l)  // grid entries 2l and 2l + 1, a ninth index bit each in qh
                P::signed8(o.q + 32 * ib + 8 * l,
                           pair4(iq3s_grid[qs[2 * l] | ((qh >> (2 * l)) & 1) << 8],
                                 iq3s_grid[qs[2 * l + 1] | ((qh >> (2 * l + 1)) & 1) << 8]),
                           b.signs[4 * ib + l]);
        }
    }
};

struct iq1_s {
    using block = block_iq1_s;
    static constexpr float unit = 0.125f;
    static float dequant_scale(float d, int ls) { return d * (float)ls; }
    static constexpr float q_unit = 0.125f;  // g ± 1/8 = q / 8
    template <class P = put_scalar>
    static void decode(const block& b, decoded& o) {
        o.d = fp16_to_fp32(b.d);
        for (int ib = 0; ib < 8; ++ib) {
            const int qh = b.qh[ib];
            o.ls[2 * ib] = o.ls[2 * ib + 1] = (int16_t)(2 * ((qh >> 12) & 7) + 1);
            for (int l = 0; l < 4; ++l)
                P::iq1(o.q + 32 * ib + 8 * l, iq1s_grid[b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)],
                       (qh & 0x8000) != 0);
        }
    }
};

struct iq1_m {
    using block = block_iq1_m;
    static constexpr float unit = 0.125f;
    static float dequant_scale(float d, int ls) { return d * (float)ls; }
    static constexpr float q_unit = 0.125f;  // g ± 1/8 = q / 8
    // The fp16 scale: the top nibble of each of the four scale words.
    static uint16_t half_d(const block& b) {
        uint16_t sc[4];
        std::memcpy(sc, b.scales, 8);
        return (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    }
    template <class P = put_scalar>
    static void decode(const block& b, decoded& o) {
        o.d = fp16_to_fp32(half_d(b));
        for (int h = 0; h < 16; ++h)  // word h/4 holds the 3-bit scales of 16-weight halves 4(h/4)..+3
            o.ls[h] = (int16_t)(2 * ((load_u16(b.scales + 2 * (h / 4)) >> (3 * (h % 4))) & 7) + 1);
        for (int g = 0; g < 32; ++g) {  // groups of 8; their nibbles in qh, low one first
            const int nib = (b.qh[g / 2] >> (4 * (g % 2))) & 0xf;
            P::iq1(o.q + 8 * g, iq1s_grid[b.qs[g] | ((nib & 7) << 8)], (nib & 8) != 0);
        }
    }
};

}  // namespace iq
}  // namespace lp
