#version 450
// get_rows.comp — y row t = row ids[t] of a table of type WTYPE, as floats
// (the exact dequantization the CPU's to_float does: d * q per element).
// One workgroup per requested row, 64 invocations over its elements.
#extension GL_GOOGLE_include_directive : enable
#include "bytes.glsl"

#define T_F32 0
#define T_F16 1
#define T_BF16 30
#define T_Q4_0 2
#define T_Q5_0 6
#define T_Q8_0 8
#define T_Q4_1 3
#define T_Q5_1 7
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_MXFP4 39
#define T_TQ1_0 34
#define T_TQ2_0 35
#define T_IQ4_NL 20
#define T_IQ4_XS 23

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Wbuf { uint w[]; };
layout(std430, binding = 1) readonly buffer Ibuf { int ids[]; };
layout(std430, binding = 2) writeonly buffer Ybuf { float y[]; };
layout(push_constant) uniform Params {
    uint n_ids, n_cols, row_bytes, y_stride;
    uint ids_off, y_off;  // offsets (ints, floats) of the ids and of output row 0
} p;
#include "iq_lattice.glsl"  // after the buffers: its decoders read w

float element(uint rb, uint i) {
#if WTYPE == T_F32
    return uintBitsToFloat(w[(rb >> 2) + i]);
#elif WTYPE == T_F16 || WTYPE == T_BF16
    const uint hi = (rb >> 1) + i;
    const uint h = (w[hi >> 1] >> ((hi & 1u) * 16u)) & 0xffffu;
#if WTYPE == T_F16
    return half_bits_to_float(h);
#else
    return bf16_bits_to_float(h);
#endif
#elif WTYPE == T_Q8_0
    const uint b = rb + (i / 32u) * 34u;
    return half_bits_to_float(U16_OF(w, b)) * float(I8_OF(w, b + 2u + i % 32u));
#elif WTYPE == T_Q4_0
    const uint b = rb + (i / 32u) * 18u, j = i % 32u;
    const uint q = BYTE_OF(w, b + 2u + j % 16u);
    return half_bits_to_float(U16_OF(w, b)) * float(int(j < 16u ? q & 15u : q >> 4) - 8);
#elif WTYPE == T_Q5_0
    const uint b = rb + (i / 32u) * 22u, j = i % 32u;
    const uint q = BYTE_OF(w, b + 6u + j % 16u), qh = U32_OF(w, b + 2u);
    const uint v = (j < 16u ? q & 15u : q >> 4) | (((qh >> j) & 1u) << 4);
    return half_bits_to_float(U16_OF(w, b)) * float(int(v) - 16);
#elif WTYPE == T_Q4_1
    const uint b = rb + (i / 32u) * 20u, j = i % 32u;
    const uint q = BYTE_OF(w, b + 4u + j % 16u);
    return half_bits_to_float(U16_OF(w, b)) * float(j < 16u ? q & 15u : q >> 4) + half_bits_to_float(U16_OF(w, b + 2u));
#elif WTYPE == T_Q5_1
    const uint b = rb + (i / 32u) * 24u, j = i % 32u;
    const uint q = BYTE_OF(w, b + 8u + j % 16u), qh = U32_OF(w, b + 4u);
    const uint v = (j < 16u ? q & 15u : q >> 4) | (((qh >> j) & 1u) << 4);
    return half_bits_to_float(U16_OF(w, b)) * float(v) + half_bits_to_float(U16_OF(w, b + 2u));
#elif WTYPE == T_TQ1_0
    const uint b = rb + (i / 256u) * 54u, e = i % 256u;
    return float(int(TQ1_TRIT(w, b, e)) - 1) * half_bits_to_float(U16_OF(w, b + 52u));
#elif WTYPE == T_TQ2_0
    const uint b = rb + (i / 256u) * 66u, e = i % 256u;
    return float(int(TQ2_TRIT(w, b, e)) - 1) * half_bits_to_float(U16_OF(w, b + 64u));
#elif IQ_LATTICE
    const uint b = rb + (i / 256u) * IQ_BLOCK_BYTES, e = i % 256u;
    int q[8];
    iq_group8(b, e / 8u, q);
    precise float v = iq_dequant_scale(iq_d(b), iq_ls(b, e / 16u)) * (float(q[e % 8u]) * IQ_Q_UNIT);
    return v;
#elif WTYPE == T_IQ4_NL
    const uint b = rb + (i / 32u) * 18u, j = i % 32u;
    const uint q = BYTE_OF(w, b + 2u + j % 16u);
    return half_bits_to_float(U16_OF(w, b)) * float(kvalues_iq4[j < 16u ? q & 15u : q >> 4]);
#elif WTYPE == T_IQ4_XS
    // gguf-py's order, as the CPU's: dl = d * (ls - 32), then dl * value
    const uint b = rb + (i / 256u) * 136u, e = i % 256u, ib = e / 32u, j = e % 32u;
    const uint q = BYTE_OF(w, b + 8u + 16u * ib + j % 16u);
    precise float dl = half_bits_to_float(U16_OF(w, b)) * float(IQ4_XS_SCALE(w, b, ib));
    precise float v = dl * float(kvalues_iq4[j < 16u ? q & 15u : q >> 4]);
    return v;
#elif WTYPE == T_MXFP4
    const uint b = rb + (i / 32u) * 17u, j = i % 32u;
    const uint q = BYTE_OF(w, b + 1u + j % 16u);
    return float(kvalues_mxfp4[j < 16u ? q & 15u : q >> 4]) * e8m0_half(BYTE_OF(w, b));
#elif WTYPE == T_Q6_K
    const uint b = rb + (i / 256u) * 210u, e = i % 256u;
    const uint h = e / 128u, r = e % 128u;
    const uint low = (BYTE_OF(w, b + 64u * h + e % 64u) >> (r < 64u ? 0u : 4u)) & 15u;
    const uint crumb = (BYTE_OF(w, b + 128u + h * 32u + e % 32u) >> (2u * (r / 32u))) & 3u;
    const float d = half_bits_to_float(U16_OF(w, b + 208u));
    return (d * float(I8_OF(w, b + 192u + e / 16u))) * float(int(low | (crumb << 4)) - 32);
#else  // Q4_K / Q5_K
#if WTYPE == T_Q5_K
    const uint bb = 176u, qs = 48u;
#else
    const uint bb = 144u, qs = 16u;
#endif
    const uint b = rb + (i / 256u) * bb, e = i % 256u, g = e / 32u;
    const uint byte = BYTE_OF(w, b + qs + 32u * (e / 64u) + e % 32u);
    uint q = (e % 64u) < 32u ? byte & 15u : byte >> 4;
#if WTYPE == T_Q5_K
    q |= ((BYTE_OF(w, b + 16u + e % 32u) >> (e / 32u)) & 1u) << 4;
#endif
    const uint s = b + 4u;
    uint sc, mn;
    if (g < 4u) {
        sc = BYTE_OF(w, s + g) & 63u;
        mn = BYTE_OF(w, s + g + 4u) & 63u;
    } else {
        const uint hi = BYTE_OF(w, s + g + 4u);
        sc = (hi & 15u) | ((BYTE_OF(w, s + g - 4u) >> 6) << 4);
        mn = (hi >> 4) | ((BYTE_OF(w, s + g) >> 6) << 4);
    }
    const float dl = half_bits_to_float(U16_OF(w, b)) * float(sc), ml = half_bits_to_float(U16_OF(w, b + 2u)) * float(mn);
    return dl * float(q) - ml;
#endif
}

void main() {
#if IQ_LATTICE
    iq_load_grid();
#endif
    for (uint t = gl_WorkGroupID.x; t < p.n_ids; t += gl_NumWorkGroups.x) {
        const uint rb = uint(ids[p.ids_off + t]) * p.row_bytes;
        for (uint i = gl_LocalInvocationID.x; i < p.n_cols; i += 64u) y[p.y_off + t * p.y_stride + i] = element(rb, i);
    }
}
