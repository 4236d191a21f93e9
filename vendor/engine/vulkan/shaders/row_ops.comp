#version 450
// row_ops.comp — the backend's row operations (backend.h: row_op) on dense
// rows: y (n_rows, width) in place, x the second operand (per row, or one
// row shared: x_stride 0), wn / bn a norm's weight and bias. One workgroup
// per (row, group); a group is a norm group, for rope a head, for copy a
// piece of n elements (group g at y_group / x_group floats times g; the
// others' groups are n apart). For weighted_sum `groups` is the number of
// summands instead (one workgroup per row): y = sum over g of
// wn[wn_off + t * groups + g] * x row's g-th n-wide part.
// Numerics follow the CPU's (cpu/ops.cpp): GELU and quick GELU look up the
// same F16 tables (input rounded to F16 to nearest even, as fp32_to_fp16).
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
layout(std430, binding = 0) buffer Ybuf { float y[]; };
layout(std430, binding = 1) readonly buffer Xbuf { float x[]; };
layout(std430, binding = 2) readonly buffer Wnbuf { float wn[]; };
layout(std430, binding = 3) readonly buffer Bnbuf { float bn[]; };
layout(std430, binding = 4) readonly buffer Tbuf { float tables[]; };  // gelu (65536), then quick gelu (65536)
layout(push_constant) uniform Params {
    uint kind, n, groups, n_rows;
    uint y_stride, x_stride;
    uint flags;  // 1: x given, 2: wn given, 4: bn given, 8: rope neox
    float f;
    uint a;
    uint y_off, x_off, wn_off, bn_off;  // float offsets of row 0 / the weight / the bias in their buffers
    float f2;    // swiglu_oai: alpha (f: the limit)
    uint y_group, x_group;  // floats from one group to the next in y and in x
} p;

// kinds, in backend.h's order
const uint K_RMS_NORM = 0u, K_LAYER_NORM = 1u, K_ADD = 2u, K_MUL = 3u, K_SCALE = 4u, K_SOFTCAP = 5u,
           K_GELU_MUL = 6u, K_SILU_MUL = 7u, K_GELU_QUICK_MUL = 8u, K_ROPE = 9u, K_HADAMARD = 10u, K_COPY = 11u,
           K_WEIGHTED_SUM = 13u, K_SWIGLU_OAI = 14u,  // 12, kv_store, is convert.comp's
           K_SIGMOID_MUL = 15u, K_SOFTPLUS_MUL = 16u, K_SCALE_BY = 17u;

#include "reduce.glsl"

float tanh_f(float v) {
    // tanh through exp, stable for both signs: tanh(v) = sign(v) (1 - e) / (1 + e), e = exp(-2|v|)
    const float e = exp(-2.0 * abs(v));
    return sign(v) * (1.0 - e) / (1.0 + e);
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const bool has_x = (p.flags & 1u) != 0u, has_w = (p.flags & 2u) != 0u, has_b = (p.flags & 4u) != 0u;
    // workgroups per row: the norm groups or heads; one for every other kind
    const uint per_row = (p.kind == K_RMS_NORM || p.kind == K_ROPE || p.kind == K_COPY) ? p.groups : 1u;
    for (uint job = gl_WorkGroupID.x; job < p.n_rows * per_row; job += gl_NumWorkGroups.x) {
        const uint t = job / per_row, g = job % per_row;
        const uint y0 = p.y_off + t * p.y_stride + g * p.y_group, x0 = p.x_off + t * p.x_stride + g * p.x_group;
        if (p.kind == K_RMS_NORM || p.kind == K_LAYER_NORM) {
            float s = 0.0, mean = 0.0;
            if (p.kind == K_LAYER_NORM) {
                for (uint i = lid; i < p.n; i += 64u) s += x[x0 + i];
                mean = group_reduce(s, false) / float(p.n);
                s = 0.0;
            }
            for (uint i = lid; i < p.n; i += 64u) {
                const float v = x[x0 + i] - mean;
                s += v * v;
            }
            const float scale = 1.0 / sqrt(group_reduce(s, false) / float(p.n) + p.f);
            for (uint i = lid; i < p.n; i += 64u) {
                float v = (x[x0 + i] - mean) * scale;
                if (has_w) v *= wn[p.wn_off + i];
                if (has_b) v += bn[p.bn_off + i];
                y[y0 + i] = v;
            }
        } else if (p.kind == K_HADAMARD) {
            // blocks of a: the CPU's butterflies (a + c, a - c), one pass at a
            // time over the whole row, then the scale 1/sqrt(a) (f, from the host)
            for (uint h = 1u; h < p.a; h *= 2u) {
                for (uint k = lid; k < p.n / 2u; k += 64u) {
                    const uint j = (k / h) * 2u * h + k % h;
                    const float va = y[y0 + j], vc = y[y0 + j + h];
                    y[y0 + j] = va + vc;
                    y[y0 + j + h] = va - vc;
                }
                memoryBarrierBuffer();
                barrier();
            }
            for (uint i = lid; i < p.n; i += 64u) y[y0 + i] *= p.f;
        } else if (p.kind == K_WEIGHTED_SUM) {
            // each product rounded, then added in summand order, as the CPU
            // (precise: no fused multiply-add)
            const uint wb = p.wn_off + t * p.groups;
            for (uint i = lid; i < p.n; i += 64u) {
                precise float r = wn[wb] * x[x0 + i];
                for (uint k = 1u; k < p.groups; ++k) {
                    precise const float prod = wn[wb + k] * x[x0 + k * p.n + i];
                    r += prod;
                }
                y[y0 + i] = r;
            }
        } else if (p.kind == K_ROPE) {
            // x: this row's cos/sin table, a/2 pairs; rotate the first a dims of the head
            const uint half_a = p.a / 2u;
            const uint xt = p.x_off + t * p.x_stride;
            const bool neox = (p.flags & 8u) != 0u;
            for (uint i = lid; i < half_a; i += 64u) {
                const float c = x[xt + 2u * i], sn = x[xt + 2u * i + 1u];
                const uint i0 = neox ? i : 2u * i, i1 = neox ? i + half_a : 2u * i + 1u;
                const float v0 = y[y0 + i0], v1 = y[y0 + i1];
                y[y0 + i0] = v0 * c - v1 * sn;
                y[y0 + i1] = v0 * sn + v1 * c;
            }
        } else {
            for (uint i = lid; i < p.n; i += 64u) {
                const float v = y[y0 + i];
                const float u = has_x ? x[x0 + i] : 1.0;
                float r = v;
                if (p.kind == K_ADD) r = v + u;
                else if (p.kind == K_MUL) r = v * u;
                else if (p.kind == K_SCALE) r = v * p.f;
                else if (p.kind == K_SOFTCAP) r = tanh_f(v / p.f) * p.f;
                else if (p.kind == K_COPY) r = u;
                else if (p.kind == K_SILU_MUL) {
                    r = v / (1.0 + exp(-v));
                    if (has_x) r *= u;
                } else if (p.kind == K_GELU_MUL) {
                    r = v <= -10.0 ? 0.0 : (v >= 10.0 ? v : tables[f16_bits(v)]);
                    if (has_x) r *= u;
                } else if (p.kind == K_GELU_QUICK_MUL) {
                    r = tables[65536u + f16_bits(v)];
                    if (has_x) r *= u;
                } else if (p.kind == K_SIGMOID_MUL) {
                    // ggml's sigmoid 1 / (1 + e^-v): y * sigmoid(x), or sigmoid(y) without x
                    r = has_x ? v * (1.0 / (1.0 + exp(-u))) : 1.0 / (1.0 + exp(-v));
                } else if (p.kind == K_SOFTPLUS_MUL) {
                    // ggml's softplus ln(1 + e^v), v itself above 20; bn the bias, wn the factor
                    const float s = v + bn[p.bn_off + i];
                    r = (s > 20.0 ? s : log(1.0 + exp(s))) * wn[p.wn_off + i];
                } else if (p.kind == K_SCALE_BY) {
                    r = v * x[p.x_off + t * p.x_stride];  // one scalar per row
                } else if (p.kind == K_SWIGLU_OAI) {
                    // gpt-oss: g = min(y, limit), u = clamp(x, -limit, limit)
                    const float gv = min(v, p.f), uv = clamp(u, -p.f, p.f);
                    r = gv / (1.0 + exp(p.f2 * -gv)) * (uv + 1.0);
                }
                y[y0 + i] = r;
            }
        }
    }
}
