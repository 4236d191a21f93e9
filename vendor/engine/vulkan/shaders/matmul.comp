#version 450
// matmul.comp — y (n_tok, n_rows) = a (n_tok, n_cols) · wᵀ for one weight
// type (WTYPE, set per compiled variant). The activations arrive in the
// type's dot format (F32, F16, BF16, Q8_0 / Q8_1 / Q8_K blocks), converted by
// convert.comp with the CPU's reference formulas, so a row's integer block
// sums are the CPU's and only the float summation order differs. Activation
// rows start at byte a_off + t * a_row_bytes, output rows at float
// y_off + t * y_stride (the operands live inside larger device buffers).
// One workgroup per (64 / lanes weight rows, 8 tokens): `lanes` invocations
// over each row's blocks (float types: elements), each block unpacked once
// and dotted with every token's, then a sum per (row, token): subgroup
// shuffles in the USE_SUBGROUPS variant (devices with subgroup shuffles),
// else a tree in shared memory.
// Simple by design: correct on every device; fast kernels come later.
//
// The MOE variant (backend.h: moe_matmul) multiplies n_tok (token, expert)
// slots instead: the weights are n_expert matrices of n_rows rows back to
// back, slot s takes expert ids[s]'s rows, activation row s / x_div, and
// adds bias row ids[s] when given. Slots meet different experts, so a
// workgroup works on one slot (TT = 1): each weight block it reads serves
// that slot only. A faster version would group the slots by expert on the
// device (counts, offsets and a slot order from the ids, as the CPU's
// moe_matmul does on the host) and run the tiles of 8 over each expert's
// slots, reading each chosen expert's weights once per tile.
#extension GL_GOOGLE_include_directive : enable
#ifndef USE_SUBGROUPS
#define USE_SUBGROUPS 0  // the portable variant (cmake/vulkan.cmake builds both)
#endif
#if USE_SUBGROUPS
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_shuffle : enable
#endif
#include "bytes.glsl"
#ifndef MOE
#define MOE 0
#endif

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
layout(std430, binding = 1) readonly buffer Abuf { uint a[]; };
layout(std430, binding = 2) writeonly buffer Ybuf { float y[]; };
layout(push_constant) uniform Params {
    uint n_rows, n_cols, n_tok;
    uint w_row_bytes, a_row_bytes;  // bytes per weight row / activation row
    uint y_stride;                  // floats between output rows
    uint a_off;                     // byte offset of activation row 0 (a multiple of 4)
    uint y_off;                     // float offset of output row 0
    uint lanes;                     // invocations per weight row: 1, 2, 4, ..., 64
#if MOE
    uint n_expert;                  // n_rows is the rows of one expert
    uint ids_off;                   // int offset of slot 0's expert
    uint x_div;                     // slots per activation row
    uint bias_off;                  // float offset of expert 0's bias row, or NO_BIAS
#endif
} p;

#if MOE
layout(std430, binding = 3) readonly buffer Ibuf { int ids[]; };
layout(std430, binding = 4) readonly buffer Bbuf { float bias[]; };
const uint NO_BIAS = 0xffffffffu;
// One slot per workgroup column: the slots of a tile would need different experts.
const uint TT = 1u;
#else
// Tokens per workgroup: each weight block is read and unpacked once for up
// to TT activation rows (prefill), instead of once per token.
const uint TT = 8u;
#endif
shared float part[64];
#include "iq_lattice.glsl"  // after the buffers: its decoders read w

#if WTYPE == T_Q8_0 || WTYPE == T_Q4_0 || WTYPE == T_Q5_0 || WTYPE == T_Q4_1 || WTYPE == T_Q5_1 || WTYPE == T_MXFP4 || \
    WTYPE == T_IQ4_NL
// 32-element blocks. Activations: Q8_0 blocks (d, 32 int8) for Q4_0 / Q5_0 /
// Q8_0 / MXFP4 / IQ4_NL; Q8_1 (d, s = d * sum, 32 int8) for Q4_1 / Q5_1, whose
// min term is m * s.
#if WTYPE == T_Q4_1 || WTYPE == T_Q5_1
const uint A_BYTES = 36u, A_QS = 4u;
#else
const uint A_BYTES = 34u, A_QS = 2u;
#endif
const uint BLOCK = 32u;
// The block's 32 quants as signed integers (the type's offset applied).
void unpack_block(uint wb, out int q[32]) {
#if WTYPE == T_Q8_0
    for (uint j = 0u; j < 32u; ++j) q[j] = I8_OF(w, wb + 2u + j);
#elif WTYPE == T_MXFP4
    // the doubled E2M1 values (the scale is halved to match: mxfp4.h)
    for (uint j = 0u; j < 16u; ++j) {
        const uint b = BYTE_OF(w, wb + 1u + j);
        q[j] = kvalues_mxfp4[b & 15u];
        q[j + 16u] = kvalues_mxfp4[b >> 4];
    }
#elif WTYPE == T_IQ4_NL
    // the table values the indices pick (iquants.cpp's vec_dot_iq4_nl_q8_0_ref)
    for (uint j = 0u; j < 16u; ++j) {
        const uint b = BYTE_OF(w, wb + 2u + j);
        q[j] = kvalues_iq4[b & 15u];
        q[j + 16u] = kvalues_iq4[b >> 4];
    }
#elif WTYPE == T_Q4_0 || WTYPE == T_Q4_1
#if WTYPE == T_Q4_0
    const uint qs = 2u;
    const int off = 8;
#else
    const uint qs = 4u;
    const int off = 0;
#endif
    for (uint j = 0u; j < 16u; ++j) {
        const uint b = BYTE_OF(w, wb + qs + j);
        q[j] = int(b & 15u) - off;
        q[j + 16u] = int(b >> 4) - off;
    }
#else  // Q5_0 (d, qh, qs) / Q5_1 (d, m, qh, qs): 5-bit quants, the fifth bits in qh
#if WTYPE == T_Q5_0
    const uint qh_at = 2u;
    const int off = 16;
#else
    const uint qh_at = 4u;
    const int off = 0;
#endif
    const uint qh = U32_OF(w, wb + qh_at);
    for (uint j = 0u; j < 16u; ++j) {
        const uint b = BYTE_OF(w, wb + qh_at + 4u + j);
        q[j] = int((b & 15u) | (((qh >> j) & 1u) << 4)) - off;
        q[j + 16u] = int((b >> 4) | (((qh >> (j + 16u)) & 1u) << 4)) - off;
    }
#endif
}
// acc[tt] += block · activation block of token t0 + tt, for tt < nt: the
// integer dot, then the reference's float formula (legacy.cpp's vec_dot refs).
void block_dots(uint wb, uint ab, uint a_row, uint nt, inout float acc[TT]) {
    int q[32];
    unpack_block(wb, q);
#if WTYPE == T_MXFP4
    const float dw = e8m0_half(BYTE_OF(w, wb));  // d = d_a * dw, as mxfp4.cpp's reference
#else
    const float dw = half_bits_to_float(U16_OF(w, wb));
#endif
#if WTYPE == T_Q4_1 || WTYPE == T_Q5_1
    const float mw = half_bits_to_float(U16_OF(w, wb + 2u));
#endif
    for (uint tt = 0u; tt < TT; ++tt) {
        if (tt >= nt) break;
        const uint at = ab + tt * a_row;
        int s = 0;
        for (uint j = 0u; j < 32u; ++j) s += q[j] * I8_OF(a, at + A_QS + j);
        const float da = half_bits_to_float(U16_OF(a, at));
#if WTYPE == T_Q4_1 || WTYPE == T_Q5_1
        acc[tt] += float(s) * (dw * da) + mw * half_bits_to_float(U16_OF(a, at + 2u));
#else
        acc[tt] += float(s) * (dw * da);
#endif
    }
}
#endif

#if WTYPE == T_TQ1_0 || WTYPE == T_TQ2_0
// Ternary super-blocks of 256 against Q8_K activations: the integer sum of
// (t - 1) * a over the block, times d_w * d_a, as ternary.cpp's reference.
const uint A_BYTES = 292u, A_QS = 4u;
const uint BLOCK = 256u;
void block_dots(uint wb, uint ab, uint a_row, uint nt, inout float acc[TT]) {
    int dot[TT];
    for (uint tt = 0u; tt < TT; ++tt) dot[tt] = 0;
    for (uint g = 0u; g < 8u; ++g) {
        int q[32];
        for (uint k = 0u; k < 32u; ++k) {
            const uint e = 32u * g + k;
#if WTYPE == T_TQ1_0
            q[k] = int(TQ1_TRIT(w, wb, e)) - 1;
#else
            q[k] = int(TQ2_TRIT(w, wb, e)) - 1;
#endif
        }
        for (uint tt = 0u; tt < TT; ++tt) {
            if (tt >= nt) break;
            const uint at = ab + tt * a_row + A_QS + 32u * g;
            int s = 0;
            for (uint k = 0u; k < 32u; ++k) s += q[k] * I8_OF(a, at + k);
            dot[tt] += s;
        }
    }
#if WTYPE == T_TQ1_0
    const float d = half_bits_to_float(U16_OF(w, wb + 52u));
#else
    const float d = half_bits_to_float(U16_OF(w, wb + 64u));
#endif
    for (uint tt = 0u; tt < TT; ++tt) {
        if (tt >= nt) break;
        acc[tt] += float(dot[tt]) * (d * uintBitsToFloat(a[(ab + tt * a_row) >> 2]));
    }
}
#endif

#if IQ_LATTICE
// The grid i-quants' super-blocks of 256 against Q8_K activations: per 16
// weights the integer dot times the odd scale ls, summed exactly over the
// block, then times d_w * d_a * unit, as iq_lattice.cpp's reference. The
// weights are decoded 16 at a time and dotted with every token's.
const uint A_BYTES = 292u, A_QS = 4u;
const uint BLOCK = 256u;
void block_dots(uint wb, uint ab, uint a_row, uint nt, inout float acc[TT]) {
    int dot[TT];
    for (uint tt = 0u; tt < TT; ++tt) dot[tt] = 0;
    for (uint h = 0u; h < 16u; ++h) {
        int lo[8], hi[8];
        iq_group8(wb, 2u * h, lo);
        iq_group8(wb, 2u * h + 1u, hi);
        const int ls = iq_ls(wb, h);
        for (uint tt = 0u; tt < TT; ++tt) {
            if (tt >= nt) break;
            const uint at = ab + tt * a_row + A_QS + 16u * h;
            int s = 0;
            for (uint k = 0u; k < 8u; ++k) s += lo[k] * I8_OF(a, at + k) + hi[k] * I8_OF(a, at + 8u + k);
            dot[tt] += ls * s;
        }
    }
    const float d = iq_d(wb);
    for (uint tt = 0u; tt < TT; ++tt) {
        if (tt >= nt) break;
        acc[tt] += float(dot[tt]) * (d * uintBitsToFloat(a[(ab + tt * a_row) >> 2]) * IQ_UNIT);
    }
}
#endif

#if WTYPE == T_IQ4_XS
// IQ4_XS super-blocks of 256 against Q8_K activations: per 32 weights the
// integer dot of the table values with the activations times the sub-block's
// scale ls - 32, summed exactly over the block, then times d_w * d_a, as
// iquants.cpp's vec_dot_iq4_xs_q8_k_ref. A sub-block is unpacked once and
// dotted with every token's.
const uint A_BYTES = 292u, A_QS = 4u;
const uint BLOCK = 256u;
void block_dots(uint wb, uint ab, uint a_row, uint nt, inout float acc[TT]) {
    int dot[TT];
    for (uint tt = 0u; tt < TT; ++tt) dot[tt] = 0;
    for (uint ib = 0u; ib < 8u; ++ib) {
        int q[32];
        for (uint j = 0u; j < 16u; ++j) {
            const uint b = BYTE_OF(w, wb + 8u + 16u * ib + j);
            q[j] = kvalues_iq4[b & 15u];
            q[j + 16u] = kvalues_iq4[b >> 4];
        }
        const int ls = IQ4_XS_SCALE(w, wb, ib);
        for (uint tt = 0u; tt < TT; ++tt) {
            if (tt >= nt) break;
            const uint at = ab + tt * a_row + A_QS + 32u * ib;
            int s = 0;
            for (uint k = 0u; k < 32u; ++k) s += q[k] * I8_OF(a, at + k);
            dot[tt] += ls * s;
        }
    }
    const float d = half_bits_to_float(U16_OF(w, wb));
    for (uint tt = 0u; tt < TT; ++tt) {
        if (tt >= nt) break;
        acc[tt] += float(dot[tt]) * (d * uintBitsToFloat(a[(ab + tt * a_row) >> 2]));
    }
}
#endif

#if WTYPE == T_Q4_K || WTYPE == T_Q5_K || WTYPE == T_Q6_K
// 256-element super-blocks against Q8_K activations (float d, 256 int8,
// 16 int16 sums): the integer dot per sub-block times its scale, then the
// reference's float formula (kquants.cpp: vec_dot_*_q8_k_ref). The weights
// are unpacked a sub-block at a time and dotted with every token's.
const uint A_BYTES = 292u, A_QS = 4u;
const uint BLOCK = 256u;
#if WTYPE == T_Q6_K
// w = d * sc[e/16] * q, q = low nibble (ql) | 2 high bits (qh) - 32
void block_dots(uint wb, uint ab, uint a_row, uint nt, inout float acc[TT]) {
    int dot[TT];
    for (uint tt = 0u; tt < TT; ++tt) dot[tt] = 0;
    for (uint g = 0u; g < 16u; ++g) {
        int q[16];
        for (uint k = 0u; k < 16u; ++k) {
            const uint e = 16u * g + k;
            const uint h = e / 128u, r = e % 128u;
            const uint low = (BYTE_OF(w, wb + 64u * h + e % 64u) >> (r < 64u ? 0u : 4u)) & 15u;
            const uint crumb = (BYTE_OF(w, wb + 128u + h * 32u + e % 32u) >> (2u * (r / 32u))) & 3u;
            q[k] = int(low | (crumb << 4)) - 32;
        }
        const int sc = I8_OF(w, wb + 192u + g);
        for (uint tt = 0u; tt < TT; ++tt) {
            if (tt >= nt) break;
            const uint at = ab + tt * a_row + A_QS + 16u * g;
            int s = 0;
            for (uint k = 0u; k < 16u; ++k) s += q[k] * I8_OF(a, at + k);
            dot[tt] += sc * s;
        }
    }
    const float d = half_bits_to_float(U16_OF(w, wb + 208u));
    for (uint tt = 0u; tt < TT; ++tt) {
        if (tt >= nt) break;
        acc[tt] += d * uintBitsToFloat(a[(ab + tt * a_row) >> 2]) * float(dot[tt]);
    }
}
#else
// Q4_K / Q5_K: d, dmin, 12 bytes of 6-bit scales and mins, (Q5_K: qh[32]), qs[128]
uint k4_scale(uint wb, uint j, bool is_min) {
    const uint s = wb + 4u;
    if (j < 4u) return BYTE_OF(w, s + j + (is_min ? 4u : 0u)) & 63u;
    const uint hi = BYTE_OF(w, s + j + 4u);
    return is_min ? ((hi >> 4) | ((BYTE_OF(w, s + j) >> 6) << 4)) : ((hi & 15u) | ((BYTE_OF(w, s + j - 4u) >> 6) << 4));
}
void block_dots(uint wb, uint ab, uint a_row, uint nt, inout float acc[TT]) {
#if WTYPE == T_Q5_K
    const uint qs = 48u;
#else
    const uint qs = 16u;
#endif
    int dot[TT], msum[TT];
    for (uint tt = 0u; tt < TT; ++tt) {
        dot[tt] = 0;
        msum[tt] = 0;
    }
    for (uint g = 0u; g < 8u; ++g) {
        int q[32];
        for (uint k = 0u; k < 32u; ++k) {
            const uint e = 32u * g + k;
            const uint byte = BYTE_OF(w, wb + qs + 32u * (e / 64u) + k);
            uint v = (e % 64u) < 32u ? byte & 15u : byte >> 4;
#if WTYPE == T_Q5_K
            v |= ((BYTE_OF(w, wb + 16u + e % 32u) >> (e / 32u)) & 1u) << 4;
#endif
            q[k] = int(v);
        }
        const int sc = int(k4_scale(wb, g, false)), mn = int(k4_scale(wb, g, true));
        for (uint tt = 0u; tt < TT; ++tt) {
            if (tt >= nt) break;
            const uint at = ab + tt * a_row + A_QS + 32u * g;
            int s = 0, sa = 0;
            for (uint k = 0u; k < 32u; ++k) {
                const int av = I8_OF(a, at + k);
                s += q[k] * av;
                sa += av;
            }
            dot[tt] += sc * s;
            msum[tt] += mn * sa;
        }
    }
    const float d = half_bits_to_float(U16_OF(w, wb)), dmin = half_bits_to_float(U16_OF(w, wb + 2u));
    for (uint tt = 0u; tt < TT; ++tt) {
        if (tt >= nt) break;
        const float da = uintBitsToFloat(a[(ab + tt * a_row) >> 2]);
        acc[tt] += d * da * float(dot[tt]) - dmin * da * float(msum[tt]);
    }
}
#endif
#endif

#if WTYPE == T_Q8_0
const uint BLOCK_BYTES = 34u;
#elif WTYPE == T_Q4_0
const uint BLOCK_BYTES = 18u;
#elif WTYPE == T_Q5_0
const uint BLOCK_BYTES = 22u;
#elif WTYPE == T_Q4_1
const uint BLOCK_BYTES = 20u;
#elif WTYPE == T_Q5_1
const uint BLOCK_BYTES = 24u;
#elif WTYPE == T_Q4_K
const uint BLOCK_BYTES = 144u;
#elif WTYPE == T_Q5_K
const uint BLOCK_BYTES = 176u;
#elif WTYPE == T_Q6_K
const uint BLOCK_BYTES = 210u;
#elif WTYPE == T_TQ1_0
const uint BLOCK_BYTES = 54u;
#elif WTYPE == T_TQ2_0
const uint BLOCK_BYTES = 66u;
#elif WTYPE == T_IQ4_NL
const uint BLOCK_BYTES = 18u;
#elif WTYPE == T_IQ4_XS
const uint BLOCK_BYTES = 136u;
#elif WTYPE == T_MXFP4
const uint BLOCK_BYTES = 17u;  // odd: blocks start at any byte (BYTE_OF reads them)
#elif IQ_LATTICE
const uint BLOCK_BYTES = IQ_BLOCK_BYTES;  // even, as the 16-bit fields need
#endif

// part[row L] = the sum of v over the L lanes of each row of the workgroup
// (lanes [row L, row L + L), L a power of two): a tree over strides L/2 .. 1.
// The portable variant runs every stride through shared memory; the
// subgroup variant the strides at or above the subgroup size S the same way
// and the last ones as shuffles inside the subgroup holding the row's
// remaining partials: the same additions in the same order, the same bits.
void row_sums(float v, uint lid, uint L) {
    part[lid] = v;
    barrier();
#if USE_SUBGROUPS
    const uint S = gl_SubgroupSize;
    for (uint s = L / 2u; s >= S && s > 0u; s >>= 1) {
        if (lid % L < s) part[lid] += part[lid + s];
        barrier();
    }
    const uint w = min(L, S), base = L > S ? gl_SubgroupID * L : gl_SubgroupID * S;
    if (base < 64u) {
        const uint i = gl_SubgroupInvocationID;
        float t = part[base + i];
        for (uint s = w / 2u; s > 0u; s >>= 1) t += subgroupShuffleXor(t, s);
        if (i % w == 0u) part[base + i] = t;
    }
    barrier();
#else
    for (uint s = L / 2u; s > 0u; s >>= 1) {
        if (lid % L < s) part[lid] += part[lid + s];
        barrier();
    }
#endif
}

void main() {
    // `lanes` invocations per weight row (a power of two: fewer than 64 when
    // a row has few blocks, so a workgroup works on 64 / lanes rows at once
    // instead of leaving most invocations idle), each over up to TT tokens,
    // then a tree sum per (row, token). A (row, token) result is the same
    // sum in the same order whatever the tile.
    const uint lid = gl_LocalInvocationID.x;
    const uint L = p.lanes, lane = lid % L, rpw = 64u / L;
#if IQ_LATTICE
    iq_load_grid();
#endif
    for (uint t0 = gl_WorkGroupID.y * TT; t0 < p.n_tok; t0 += gl_NumWorkGroups.y * TT) {
        const uint nt = min(TT, p.n_tok - t0);
#if MOE
        // slot t0: its expert's rows, its token's activation row (an id out
        // of range gives a NaN row rather than a read past the weights)
        const uint e = uint(ids[p.ids_off + t0]);
        const bool valid = e < p.n_expert;
        const uint w_base = e * p.n_rows, a_row0 = t0 / p.x_div;
#else
        const bool valid = true;
        const uint w_base = 0u, a_row0 = t0;
#endif
        for (uint r0 = gl_WorkGroupID.x * rpw; r0 < p.n_rows; r0 += gl_NumWorkGroups.x * rpw) {
            const uint r = r0 + lid / L, wr = w_base + r;  // wr: the row in the weight buffer
            float acc[TT];
            for (uint tt = 0u; tt < TT; ++tt) acc[tt] = 0.0;
            if (r < p.n_rows && valid) {
#if WTYPE == T_F32
                const uint ab = (p.a_off + a_row0 * p.a_row_bytes) >> 2, astep = p.a_row_bytes >> 2;
                for (uint i = lane; i < p.n_cols; i += L) {
                    const float wv = uintBitsToFloat(w[wr * p.n_cols + i]);
                    for (uint tt = 0u; tt < TT; ++tt) {
                        if (tt >= nt) break;
                        acc[tt] += wv * uintBitsToFloat(a[ab + tt * astep + i]);
                    }
                }
#elif WTYPE == T_F16 || WTYPE == T_BF16
                const uint ab = (p.a_off + a_row0 * p.a_row_bytes) >> 1, astep = p.a_row_bytes >> 1;
                for (uint i = lane; i < p.n_cols; i += L) {
                    const uint wi = wr * p.n_cols + i;
                    const uint wh = (w[wi >> 1] >> ((wi & 1u) * 16u)) & 0xffffu;
#if WTYPE == T_F16
                    const float wv = half_bits_to_float(wh);
#else
                    const float wv = bf16_bits_to_float(wh);
#endif
                    for (uint tt = 0u; tt < TT; ++tt) {
                        if (tt >= nt) break;
                        const uint ai = ab + tt * astep + i;
                        const uint ah = (a[ai >> 1] >> ((ai & 1u) * 16u)) & 0xffffu;
#if WTYPE == T_F16
                        acc[tt] += wv * half_bits_to_float(ah);
#else
                        acc[tt] += wv * bf16_bits_to_float(ah);
#endif
                    }
                }
#else
                const uint nb = p.n_cols / BLOCK;
                for (uint b = lane; b < nb; b += L)
                    block_dots(wr * p.w_row_bytes + b * BLOCK_BYTES, p.a_off + a_row0 * p.a_row_bytes + b * A_BYTES,
                               p.a_row_bytes, nt, acc);
#endif
            }
            for (uint tt = 0u; tt < TT; ++tt) {
                if (tt >= nt) break;
                row_sums(acc[tt], lid, L);
                if (lane == 0u && r < p.n_rows) {
                    float v = part[lid];
#if MOE
                    if (!valid) v = uintBitsToFloat(0x7fc00000u);
                    else if (p.bias_off != NO_BIAS) v += bias[p.bias_off + wr];
#endif
                    y[p.y_off + (t0 + tt) * p.y_stride + r] = v;
                }
                barrier();
            }
        }
    }
}
