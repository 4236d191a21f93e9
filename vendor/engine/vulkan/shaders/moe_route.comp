#version 450
// moe_route.comp — mixture-of-experts routing (backend.h: moe_route; the
// rules are op_args.h's moe_route_args, the CPU's are cpu/moe.cpp
// moe_route_row): from row t of the router's logits, the k chosen experts
// (best first) and their weights. One workgroup of 64 invocations per row,
// the row's scores in shared memory: up to MAX_E experts, MAX_K chosen, 256
// groups (the host checks). Each pick is a workgroup-wide argmax over the
// experts not yet taken, ties to the lower index (the CPU's stable order).
// The k weights' softmax / normalisation are a handful of values: done by
// invocation 0, in the CPU's order. Sums are floats here (the CPU adds the
// softmax and the normalisation in double): weights agree to rounding.
// One variant: the reductions are shared-memory trees (reduce.glsl's
// portable form); routing is a sliver of a layer's work.
#extension GL_GOOGLE_include_directive : enable
#define USE_SUBGROUPS 0

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Lbuf { float logits[]; };
layout(std430, binding = 1) readonly buffer Bbuf { float bias[]; };    // (n_expert) selection bias, when given
layout(std430, binding = 2) writeonly buffer Ibuf { int ids[]; };      // (n_tok, k)
layout(std430, binding = 3) writeonly buffer Wbuf { float weights[]; };  // (n_tok, k)
layout(std430, binding = 4) readonly buffer Ebuf { float escale[]; };  // (n_expert) per-expert output scales, when given
// Offsets in their buffers (floats / ints); bias_off / es_off NONE: none.
layout(push_constant) uniform Params {
    uint n_tok, n_expert, k;
    uint logits_off, logits_stride;
    uint bias_off;
    uint gating;  // 0 softmax, 1 sigmoid, 2 softmax over the chosen (op_args.h moe_gating)
    uint n_group, n_group_used;
    uint norm;
    float scale;
    uint ids_off, w_off, es_off;
} p;

const uint NONE = 0xffffffffu;
const uint MAX_E = 512u, MAX_K = 32u, MAX_G = 256u;
const uint G_SOFTMAX = 0u, G_SIGMOID = 1u, G_SOFTMAX_WEIGHT = 2u;

#include "reduce.glsl"

shared float probs[MAX_E];  // the gating's probabilities
shared float sel[MAX_E];    // selection scores: probs + bias, -inf outside the kept groups
shared uint taken[MAX_E];   // 1: chosen already
shared float gscore[MAX_G]; // group scores: the sum of the group's two best selection scores
shared uint gkept[MAX_G];   // 1: the group competes
shared float best_v[64];
shared uint best_i[64];
shared float wk[MAX_K];     // the chosen experts' weights
shared uint ik[MAX_K];      // and their ids

// Index of the largest of sel[0..n) (groups: gscore) not yet taken (gkept),
// ties to the lower index; every invocation gets it.
uint pick(bool groups, uint n) {
    const uint lid = gl_LocalInvocationID.x;
    float bv = 0.0;
    uint bi = NONE;
    for (uint i = lid; i < n; i += 64u) {  // ascending: a tie keeps the first
        const bool done = groups ? gkept[i] != 0u : taken[i] != 0u;
        const float v = groups ? gscore[i] : sel[i];
        if (!done && (bi == NONE || v > bv)) {
            bv = v;
            bi = i;
        }
    }
    best_v[lid] = bv;
    best_i[lid] = bi;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (lid < s) {
            const float ov = best_v[lid + s];
            const uint oi = best_i[lid + s];
            const uint mi = best_i[lid];
            if (oi != NONE && (mi == NONE || ov > best_v[lid] || (ov == best_v[lid] && oi < mi))) {
                best_v[lid] = ov;
                best_i[lid] = oi;
            }
        }
        barrier();
    }
    const uint r = best_i[0];
    barrier();
    return r;
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint n = p.n_expert, k = p.k;
    const float neg_inf = uintBitsToFloat(0xff800000u);
    for (uint t = gl_WorkGroupID.x; t < p.n_tok; t += gl_NumWorkGroups.x) {
        const uint lb = p.logits_off + t * p.logits_stride;
        // probabilities
        if (p.gating == G_SOFTMAX) {
            float m = neg_inf;
            for (uint e = lid; e < n; e += 64u) m = max(m, logits[lb + e]);
            m = group_reduce(m, true);
            float s = 0.0;
            for (uint e = lid; e < n; e += 64u) {
                const float v = exp(logits[lb + e] - m);
                probs[e] = v;
                s += v;
            }
            const float inv = 1.0 / group_reduce(s, false);  // as the CPU: times the reciprocal
            for (uint e = lid; e < n; e += 64u) probs[e] *= inv;
        } else if (p.gating == G_SIGMOID) {
            for (uint e = lid; e < n; e += 64u) probs[e] = 1.0 / (1.0 + exp(-logits[lb + e]));
        } else {
            for (uint e = lid; e < n; e += 64u) probs[e] = logits[lb + e];
        }
        for (uint e = lid; e < n; e += 64u) {
            sel[e] = p.bias_off != NONE ? probs[e] + bias[p.bias_off + e] : probs[e];
            taken[e] = 0u;
        }
        barrier();

        // group-limited routing: only the experts of the n_group_used best groups compete
        if (p.n_group > 1u) {
            const uint per = n / p.n_group;
            for (uint g = lid; g < p.n_group; g += 64u) {
                float b1 = neg_inf, b2 = neg_inf;
                for (uint i = 0u; i < per; ++i) {
                    const float v = sel[g * per + i];
                    if (v > b1) {
                        b2 = b1;
                        b1 = v;
                    } else if (v > b2) {
                        b2 = v;
                    }
                }
                gscore[g] = per > 1u ? b1 + b2 : b1;
                gkept[g] = 0u;
            }
            barrier();
            for (uint j = 0u; j < p.n_group_used; ++j) {
                const uint g = pick(true, p.n_group);
                if (lid == 0u) gkept[g] = 1u;
                barrier();
            }
            for (uint e = lid; e < n; e += 64u)
                if (gkept[e / per] == 0u) sel[e] = neg_inf;
            barrier();
        }

        // the k best selection scores, best first; their probabilities are the weights
        for (uint j = 0u; j < k; ++j) {
            const uint e = pick(false, n);
            if (lid == 0u) {
                taken[e] = 1u;
                ids[p.ids_off + t * k + j] = int(e);
                wk[j] = probs[e];
                ik[j] = e;
            }
            barrier();
        }

        if (lid == 0u) {
            if (p.gating == G_SOFTMAX_WEIGHT) {
                float m = wk[0];
                for (uint j = 1u; j < k; ++j) m = max(m, wk[j]);
                float s = 0.0;
                for (uint j = 0u; j < k; ++j) {
                    wk[j] = exp(wk[j] - m);
                    s += wk[j];
                }
                const float inv = 1.0 / s;
                for (uint j = 0u; j < k; ++j) wk[j] *= inv;
            }
            if (p.norm != 0u) {
                float s = 0.0;
                for (uint j = 0u; j < k; ++j) s += wk[j];
                s = max(s, 6.103515625e-5);  // F16's smallest normal, as llama.cpp clamps
                for (uint j = 0u; j < k; ++j) wk[j] /= s;
            }
            const bool scaled = p.scale != 0.0 && p.scale != 1.0;
            for (uint j = 0u; j < k; ++j) {
                float wj = scaled ? wk[j] * p.scale : wk[j];
                // Gemma 4: each chosen expert's output scale, last (the CPU's order)
                if (p.es_off != NONE) wj *= escale[p.es_off + ik[j]];
                weights[p.w_off + t * k + j] = wj;
            }
        }
        barrier();
    }
}
