// bytes.glsl — reading the GGUF block formats out of uint storage buffers,
// and the float -> F16 / BF16 conversions with the CPU's rounding.
// The blocks are byte structures (34 bytes for Q8_0, 18 for Q4_0, ...), not
// word aligned, so fields are read as bytes and 16-bit halves of words.
// A macro per buffer, since GLSL functions cannot take a buffer argument.
#define BYTE_OF(buf, off) ((buf[(off) >> 2] >> (((off) & 3u) * 8u)) & 0xffu)
// 16-bit field at an even byte offset
#define U16_OF(buf, off) ((buf[(off) >> 2] >> (((off) & 2u) * 8u)) & 0xffffu)
// signed byte
#define I8_OF(buf, off) (int(BYTE_OF(buf, off) << 24) >> 24)
// 32-bit little-endian field at an even byte offset
#define U32_OF(buf, off) (U16_OF(buf, off) | (U16_OF(buf, (off) + 2u) << 16))

float half_bits_to_float(uint h) { return unpackHalf2x16(h).x; }
float bf16_bits_to_float(uint h) { return uintBitsToFloat(h << 16); }

// MXFP4 (quants/mxfp4.h): 17-byte blocks of 32, an E8M0 exponent byte e then
// 16 bytes of 4-bit E2M1 codes (weight j in byte j's low nibble, 16 + j in
// its high one). The codes' values doubled, and the scale halved, 2^(e - 128),
// built from its bits as the CPU does (e < 2: the subnormals 2^-127, 2^-128,
// which a device that flushes denormals reads as 0).
const int kvalues_mxfp4[16] = int[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
// IQ4_NL / IQ4_XS (quants/iquants.cpp): 4-bit indices into this non-linear
// table of 16 int8 values; also the IQ4_NL KV cache's (convert.comp, attention.comp).
//   IQ4_NL: 18-byte blocks of 32, fp16 d then 16 bytes of indices (weight j in
//           byte j's low nibble, 16 + j in its high one); w = d * kvalues_iq4[q].
//   IQ4_XS: 136-byte blocks of 256, fp16 d, uint16 scales_h (2 high bits per
//           32), 4 bytes scales_l (a nibble per 32, low first), qs[128] (16
//           bytes per 32, nibbles as IQ4_NL's); w = d * (ls - 32) * kvalues_iq4[q],
//           ls the 6-bit scale of the weight's 32.
const int kvalues_iq4[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
// The 6-bit scale minus 32 of sub-block ib (< 8) of the IQ4_XS block at byte wb.
#define IQ4_XS_SCALE(buf, wb, ib)                                            \
    (int(((BYTE_OF(buf, (wb) + 4u + (ib) / 2u) >> (4u * ((ib) % 2u))) & 15u) | \
         (((U16_OF(buf, (wb) + 2u) >> (2u * (ib))) & 3u) << 4)) - 32)
// TQ1_0 / TQ2_0 (quants/ternary.h): the trit t (0..2) of element e (0..255)
// of the 256-element block at byte wb; the weight is d * (t - 1), d the fp16
// at byte 52 (TQ1_0) or 64 (TQ2_0). TQ1_0 packs five base-3 digits a byte
// (qs[0..31]: element 32n + m; qs[32..47]: 160 + 16n + m; qh[0..3], four
// digits: 240 + 4n + j); digit n is the top digit of the byte times 3^n
// (mod 256), (v * 3) >> 8. TQ2_0: byte 32 (e / 128) + e % 32, bits 2 ((e % 128) / 32).
#define TQ1_TRIT(buf, wb, e) tq1_top_digit(BYTE_OF(buf, (wb) + ((e) < 160u ? (e) % 32u : (e) < 240u ? 32u + ((e) - 160u) % 16u : 48u + ((e) - 240u) % 4u)), (e) < 160u ? (e) / 32u : (e) < 240u ? ((e) - 160u) / 16u : ((e) - 240u) / 4u)
#define TQ2_TRIT(buf, wb, e) ((BYTE_OF(buf, (wb) + 32u * ((e) / 128u) + (e) % 32u) >> (2u * (((e) % 128u) / 32u))) & 3u)
uint tq1_top_digit(uint byte, uint n) {
    const uint pow3[5] = uint[5](1u, 3u, 9u, 27u, 81u);
    return (((byte * pow3[n]) & 255u) * 3u) >> 8;
}

float e8m0_half(uint e) { return uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23); }

// float -> F16 bits, round to nearest even, as common.h's fp32_to_fp16
// (subnormal results: the float add rounds to nearest even for us).
uint f16_bits(float v) {
    const uint xb = floatBitsToUint(v);
    const uint sgn = (xb >> 16) & 0x8000u;
    const uint ax = xb & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sgn | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);
    if (ax >= 0x477ff000u) return sgn | 0x7c00u;
    if (ax < 0x38800000u) {
        precise float r = uintBitsToFloat(ax) + 0.5;  // round to nearest even by the add
        return sgn | (floatBitsToUint(r) - 0x3f000000u);
    }
    const uint mant_odd = (ax >> 13) & 1u;
    return sgn | (((ax + 0xc8000fffu + mant_odd) >> 13) & 0xffffu);
}

// float -> BF16 bits, round to nearest even, NaN kept (quietened), as fp32_to_bf16.
uint bf16_bits(float v) {
    const uint xb = floatBitsToUint(v);
    if ((xb & 0x7fffffffu) > 0x7f800000u) return ((xb >> 16) | 64u) & 0xffffu;
    return ((xb + (0x7fffu + ((xb >> 16) & 1u))) >> 16) & 0xffffu;
}
