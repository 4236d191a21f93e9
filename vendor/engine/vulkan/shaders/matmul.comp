#version 450
// matmul.comp — y (n_tok, n_rows) = a (n_tok, n_cols) · wᵀ for one weight
// type (WTYPE, set per compiled variant). The activations arrive in the
// type's dot format, converted on the host exactly as the CPU converts them
// (F32, F16, BF16, or Q8_0 blocks for the legacy quants), so a row's integer
// block sums are the CPU's and only the float summation order differs.
// One workgroup per (weight row, token): 64 invocations over the row's
// blocks (float types: elements), then a tree sum in shared memory.
// Simple by design: correct on every device; fast kernels come later.
#extension GL_GOOGLE_include_directive : enable
#include "bytes.glsl"

#define T_F32 0
#define T_F16 1
#define T_BF16 30
#define T_Q4_0 2
#define T_Q5_0 6
#define T_Q8_0 8

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Wbuf { uint w[]; };
layout(std430, binding = 1) readonly buffer Abuf { uint a[]; };
layout(std430, binding = 2) writeonly buffer Ybuf { float y[]; };
layout(push_constant) uniform Params {
    uint n_rows, n_cols, n_tok;
    uint w_row_bytes, a_row_bytes;  // bytes per weight row / activation row
    uint y_stride;                  // floats between output rows
} p;

shared float part[64];

#if WTYPE == T_Q8_0 || WTYPE == T_Q4_0 || WTYPE == T_Q5_0
// Activation block b of a row starting at byte ab: Q8_0 (d, 32 int8).
float block_dot(uint wb, uint ab) {
    const float da = half_bits_to_float(U16_OF(a, ab));
#if WTYPE == T_Q8_0
    const float dw = half_bits_to_float(U16_OF(w, wb));
    int s = 0;
    for (uint j = 0u; j < 32u; ++j) s += I8_OF(w, wb + 2u + j) * I8_OF(a, ab + 2u + j);
#elif WTYPE == T_Q4_0
    const float dw = half_bits_to_float(U16_OF(w, wb));
    int s = 0;
    for (uint j = 0u; j < 16u; ++j) {
        const uint q = BYTE_OF(w, wb + 2u + j);
        s += (int(q & 15u) - 8) * I8_OF(a, ab + 2u + j) + (int(q >> 4) - 8) * I8_OF(a, ab + 18u + j);
    }
#else  // Q5_0: d, qh (32 fifth bits), qs (16 bytes of nibble pairs)
    const float dw = half_bits_to_float(U16_OF(w, wb));
    const uint qh = U32_OF(w, wb + 2u);
    int s = 0;
    for (uint j = 0u; j < 16u; ++j) {
        const uint q = BYTE_OF(w, wb + 6u + j);
        const int lo = int((q & 15u) | (((qh >> j) & 1u) << 4)) - 16;
        const int hi = int((q >> 4) | (((qh >> (j + 16u)) & 1u) << 4)) - 16;
        s += lo * I8_OF(a, ab + 2u + j) + hi * I8_OF(a, ab + 18u + j);
    }
#endif
    return float(s) * (dw * da);
}
#endif

#if WTYPE == T_Q8_0
const uint BLOCK_BYTES = 34u;
#elif WTYPE == T_Q4_0
const uint BLOCK_BYTES = 18u;
#elif WTYPE == T_Q5_0
const uint BLOCK_BYTES = 22u;
#endif

void main() {
    const uint lid = gl_LocalInvocationID.x;
    for (uint t = gl_WorkGroupID.y; t < p.n_tok; t += gl_NumWorkGroups.y) {
        for (uint r = gl_WorkGroupID.x; r < p.n_rows; r += gl_NumWorkGroups.x) {
            float acc = 0.0;
#if WTYPE == T_F32
            for (uint i = lid; i < p.n_cols; i += 64u)
                acc += uintBitsToFloat(w[r * p.n_cols + i]) * uintBitsToFloat(a[t * p.n_cols + i]);
#elif WTYPE == T_F16 || WTYPE == T_BF16
            for (uint i = lid; i < p.n_cols; i += 64u) {
                const uint wi = r * p.n_cols + i, ai = t * p.n_cols + i;
                const uint wh = (w[wi >> 1] >> ((wi & 1u) * 16u)) & 0xffffu;
                const uint ah = (a[ai >> 1] >> ((ai & 1u) * 16u)) & 0xffffu;
#if WTYPE == T_F16
                acc += half_bits_to_float(wh) * half_bits_to_float(ah);
#else
                acc += bf16_bits_to_float(wh) * bf16_bits_to_float(ah);
#endif
            }
#else
            const uint nb = p.n_cols / 32u;
            for (uint b = lid; b < nb; b += 64u)
                acc += block_dot(r * p.w_row_bytes + b * BLOCK_BYTES, t * p.a_row_bytes + b * 34u);
#endif
            part[lid] = acc;
            barrier();
            for (uint s = 32u; s > 0u; s >>= 1) {
                if (lid < s) part[lid] += part[lid + s];
                barrier();
            }
            if (lid == 0u) y[t * p.y_stride + r] = part[0];
            barrier();
        }
    }
}
