#version 450
// attention.comp — attention of query rows over one layer's KV cache
// (backend.h: attention). One workgroup per (query row, head); 64
// invocations. Three passes over the cells the row sees ([lo, hi) and its
// mask bits): scores q·k (soft-capped, then scaled) into a scratch row,
// their max and exp-sum (reduce.glsl), then per value dimension the
// weighted sum. F32 throughout: no rounding of the weights to F16 (the CPU's
// explicit path rounds them against an F16 cache, as llama.cpp does; its
// flash path does not). The queries arrive as the CPU's kernels see them:
// rounded to the keys' dot-product format (convert.comp, round-trip mode).
// Cache element types (type ids as ggml's): F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, IQ4_NL, per cache (keys and values may differ).
// Attention sinks (gpt-oss; sink_off != NO_SINK): head h's logit sinks[h]
// joins the max and the exp-sum as one more cell without a value, as the
// CPU's softmax_row_sink does.
#extension GL_GOOGLE_include_directive : enable
#ifndef USE_SUBGROUPS
#define USE_SUBGROUPS 0  // the portable variant (cmake/vulkan.cmake builds both)
#endif
#if USE_SUBGROUPS
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_shuffle : enable
#endif
#include "bytes.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Qbuf { float q[]; };
layout(std430, binding = 1) readonly buffer Kbuf { uint kc[]; };
layout(std430, binding = 2) readonly buffer Vbuf { uint vc[]; };
layout(std430, binding = 3) readonly buffer Mbuf { uint mask[]; };  // (n_tok, 2 * mask_words) 32-bit halves
layout(std430, binding = 4) readonly buffer Lbuf { int lo_cell[]; };  // (n_tok) first visible cell
layout(std430, binding = 5) readonly buffer Hbuf { int hi_cell[]; };  // (n_tok) one past the last
layout(std430, binding = 6) buffer Sbuf { float sc[]; };            // (n_tok * n_head, n_cells) scratch;
                                                                    // the (n_head) sink logits at sink_off
layout(std430, binding = 7) writeonly buffer Obuf { float o[]; };
// Offsets of each operand in its buffer: q, o, sc in floats; k, v in bytes;
// mask, lo, hi in 32-bit words; sink_off in floats, in sc's buffer (NO_SINK:
// no sinks; a ninth binding would pass the 8 storage buffers the runtime allows).
// q_stride / o_stride: floats between rows.
layout(push_constant) uniform Params {
    uint n_tok, n_head, n_head_kv, dk, dv;
    uint type_k, type_v, k_row_bytes, v_row_bytes;
    uint mask_words, n_cells;
    float scale, softcap;
    uint q_off, q_stride, k_off, v_off, mask_off, lo_off, hi_off, sc_off, o_off, o_stride;
    uint sink_off;
} p;
const uint NO_SINK = 0xffffffffu;

// Element i of the row starting at byte rb of a cache of type t (buf: kc or vc).
#define CACHE_ELEMENT(buf, t, rb, i, result)                                                        \
    {                                                                                               \
        const uint ii = (i);                                                                        \
        if (t == 0u) {                                                                              \
            result = uintBitsToFloat(buf[((rb) >> 2) + ii]);                                        \
        } else if (t == 1u || t == 30u) {                                                           \
            const uint hi_ = ((rb) >> 1) + ii;                                                      \
            const uint h_ = (buf[hi_ >> 1] >> ((hi_ & 1u) * 16u)) & 0xffffu;                        \
            result = t == 1u ? half_bits_to_float(h_) : bf16_bits_to_float(h_);                     \
        } else {                                                                                    \
            const uint j_ = ii % 32u;                                                               \
            const uint bs_ = t == 8u ? 34u : (t == 2u || t == 20u) ? 18u : t == 3u ? 20u : t == 6u ? 22u : 24u; \
            const uint b_ = (rb) + (ii / 32u) * bs_;                                                \
            const float d_ = half_bits_to_float(U16_OF(buf, b_));                                   \
            if (t == 8u) {                                                                          \
                result = d_ * float(I8_OF(buf, b_ + 2u + j_));                                      \
            } else {                                                                                \
                const uint qs_ = t == 2u || t == 20u ? 2u : t == 3u ? 4u : t == 6u ? 6u : 8u;       \
                const uint byte_ = BYTE_OF(buf, b_ + qs_ + j_ % 16u);                               \
                uint v_ = j_ < 16u ? byte_ & 15u : byte_ >> 4;                                      \
                if (t == 6u || t == 7u) {                                                           \
                    const uint qh_ = U32_OF(buf, b_ + (t == 6u ? 2u : 4u));                         \
                    v_ |= ((qh_ >> j_) & 1u) << 4;                                                  \
                }                                                                                   \
                if (t == 2u) result = float(int(v_) - 8) * d_;                                      \
                else if (t == 6u) result = float(int(v_) - 16) * d_;                                \
                else if (t == 20u) result = d_ * float(kvalues_iq4[v_]);                            \
                else result = d_ * float(v_) + half_bits_to_float(U16_OF(buf, b_ + 2u));            \
            }                                                                                       \
        }                                                                                           \
    }

#include "reduce.glsl"

bool visible(uint t, uint j) {
    const uint w = mask[p.mask_off + t * 2u * p.mask_words + (j >> 5)];
    return ((w >> (j & 31u)) & 1u) != 0u;
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint gqa = p.n_head / p.n_head_kv;
    for (uint job = gl_WorkGroupID.x; job < p.n_tok * p.n_head; job += gl_NumWorkGroups.x) {
        const uint t = job / p.n_head, h = job % p.n_head, hk = h / gqa;
        const uint lo = uint(lo_cell[p.lo_off + t]), hi = uint(hi_cell[p.hi_off + t]);
        const uint qb = p.q_off + t * p.q_stride + h * p.dk, sb = p.sc_off + job * p.n_cells;
        float m = -3.0e38;
        for (uint j = lo + lid; j < hi; j += 64u) {
            if (!visible(t, j)) continue;
            const uint rb = p.k_off + j * p.k_row_bytes;
            float s = 0.0;
            for (uint i = 0u; i < p.dk; ++i) {
                float kv;
                CACHE_ELEMENT(kc, p.type_k, rb, hk * p.dk + i, kv)
                s += q[qb + i] * kv;
            }
            if (p.softcap > 0.0) {
                const float x = s / p.softcap, e = exp(-2.0 * abs(x));
                s = sign(x) * (1.0 - e) / (1.0 + e) * p.softcap;
            }
            s *= p.scale;
            sc[sb + j] = s;
            m = max(m, s);
        }
        m = group_reduce(m, true);
        // With a sink: its logit joins the max (a row that sees no cell then
        // has max = sink, sum exp(0) = 1 and zero output, as on the CPU).
        const bool has_sink = p.sink_off != NO_SINK;
        const float sink = has_sink ? sc[p.sink_off + h] : 0.0;
        if (has_sink) m = max(m, sink);
        float l = 0.0;
        for (uint j = lo + lid; j < hi; j += 64u) {
            if (!visible(t, j)) continue;
            const float e = exp(sc[sb + j] - m);
            sc[sb + j] = e;
            l += e;
        }
        memoryBarrierBuffer();
        l = group_reduce(l, false);
        if (has_sink) l += exp(sink - m);
        const uint ob = p.o_off + t * p.o_stride + h * p.dv;
        for (uint d = lid; d < p.dv; d += 64u) {
            float acc = 0.0;
            for (uint j = lo; j < hi; ++j) {
                if (!visible(t, j)) continue;
                float vv;
                CACHE_ELEMENT(vc, p.type_v, p.v_off + j * p.v_row_bytes, hk * p.dv + d, vv)
                acc += sc[sb + j] * vv;
            }
            o[ob + d] = l > 0.0 ? acc / l : 0.0;
        }
        memoryBarrierBuffer();
        barrier();
    }
}
