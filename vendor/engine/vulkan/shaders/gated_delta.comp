#version 450
// gated_delta.comp — the gated delta rule (backend.h gated_delta, op_args.h
// gated_delta_args), token by token over a batch: per value head h with state
// S (head_dim × head_dim, element (i, j) at j * head_dim + i),
//   S = exp(g) S;  d = (v - Sᵀk) * beta;  S = S + k dᵀ;  o = Sᵀq * scale.
// Column j of S (contiguous) meets only d[j], v[j] and o[j]: each column is
// independent of the others, so one invocation owns one (head, column) and
// walks the rows of the batch in order (rows of several sequences on their
// own slots may interleave, as on the CPU). Its dot products run over i in
// order, unfused (precise), as gated_delta_ref's.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Qbuf { float q[]; };
layout(std430, binding = 1) readonly buffer Kbuf { float k[]; };
layout(std430, binding = 2) readonly buffer Vbuf { float v[]; };
layout(std430, binding = 3) readonly buffer Gbuf { float g[]; };
layout(std430, binding = 4) readonly buffer Bbuf { float beta[]; };
layout(std430, binding = 5) buffer Obuf { float o[]; };
layout(std430, binding = 6) buffer Sbuf { float st[]; };
layout(std430, binding = 7) readonly buffer Ibuf { int slot[]; };
layout(push_constant) uniform Params {
    uint n_tok, n_head_k, n_head_v, head_dim;
    uint q_off, k_off, qk_stride, v_off, v_stride;  // floats
    uint g_off, b_off, gb_stride, o_off, o_stride;  // floats
    uint st_off, st_stride, slot_off;               // floats (slot: ints)
    float scale;
} p;

void main() {
    const uint S = p.head_dim;
    for (uint job = gl_GlobalInvocationID.x; job < p.n_head_v * S; job += gl_NumWorkGroups.x * 64u) {
        const uint h = job / S, j = job % S, hk = h % p.n_head_k;
        for (uint t = 0u; t < p.n_tok; ++t) {
            const uint m = p.st_off + uint(slot[p.slot_off + t]) * p.st_stride + (h * S + j) * S;
            const uint qt = p.q_off + t * p.qk_stride + hk * S, kt = p.k_off + t * p.qk_stride + hk * S;
            const float decay = exp(g[p.g_off + t * p.gb_stride + h]);
            const float b = beta[p.b_off + t * p.gb_stride + h];
            precise float s = 0.0;
            for (uint i = 0u; i < S; ++i) {
                precise const float mi = st[m + i] * decay;
                st[m + i] = mi;
                precise const float prod = mi * k[kt + i];
                s += prod;
            }
            precise const float dj = (v[p.v_off + t * p.v_stride + h * S + j] - s) * b;
            precise float r = 0.0;
            for (uint i = 0u; i < S; ++i) {
                precise const float upd = k[kt + i] * dj;
                precise const float mi = st[m + i] + upd;
                st[m + i] = mi;
                precise const float prod = mi * q[qt + i];
                r += prod;
            }
            o[p.o_off + t * p.o_stride + h * S + j] = r * p.scale;
        }
    }
}
