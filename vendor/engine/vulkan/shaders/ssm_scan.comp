#version 450
// ssm_scan.comp — Mamba-2's selective scan (backend.h ssm_scan, op_args.h
// ssm_scan_args), token by token over a batch: per head h (group
// g = h / (n_head / n_group)) with state S (head_dim × d_state, row p at
// p * d_state), dt = softplus(dt_in[h]) (dt_in itself past 20),
//   S = exp(dt A[h]) S + dt x_h B_gᵀ;  y_h = S C_g (+ D[h] x_h).
// Row p of S meets only x_h[p] and y_h[p]: the rows are independent, so one
// invocation owns one (head, row) and walks the batch's rows in order (rows
// of several sequences on their own slots may interleave, as on the CPU).
// The d_state products are summed in order, unfused (precise), as
// ssm_scan_ref's. No reduction across invocations: no subgroup variant.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Xbuf { float x[]; };
layout(std430, binding = 1) readonly buffer Dtbuf { float dt[]; };
layout(std430, binding = 2) readonly buffer ADbuf { float AD[]; };  // A (n_head), then D (n_head) when given
layout(std430, binding = 3) readonly buffer Bbuf { float B[]; };
layout(std430, binding = 4) readonly buffer Cbuf { float C[]; };
layout(std430, binding = 5) buffer Ybuf { float y[]; };
layout(std430, binding = 6) buffer Sbuf { float st[]; };
layout(std430, binding = 7) readonly buffer Ibuf { int slot[]; };
layout(push_constant) uniform Params {
    uint n_tok, n_head, head_dim, d_state, n_group;
    uint x_off, x_stride, dt_off, dt_stride, a_off;  // floats
    uint b_off, c_off, bc_stride, d_off;              // floats (A, D: in AD); d_off NONE: no skip
    uint y_off, y_stride, st_off, st_stride, slot_off;  // floats (slot: ints)
} p;

const uint NONE = 0xffffffffu;

// ln(1 + e) for e = exp(v) >= 0, to the precision of the CPU's log1p: where
// 1 + e rounds, log(u) * e / (u - 1) corrects the rounding (u - 1 is exact).
float log1p_of(float e) {
    const float u = 1.0 + e;
    return u == 1.0 ? e : log(u) * (e / (u - 1.0));
}

void main() {
    const uint P = p.head_dim, N = p.d_state, per_group = p.n_head / p.n_group;
    for (uint job = gl_GlobalInvocationID.x; job < p.n_head * P; job += gl_NumWorkGroups.x * 64u) {
        const uint h = job / P, r = job % P, g = h / per_group;
        const float a = AD[p.a_off + h];
        const bool skip = p.d_off != NONE;
        const float dh = skip ? AD[p.d_off + h] : 0.0;
        for (uint t = 0u; t < p.n_tok; ++t) {
            const uint s0 = p.st_off + uint(slot[p.slot_off + t]) * p.st_stride + (h * P + r) * N;
            const uint b0 = p.b_off + t * p.bc_stride + g * N, c0 = p.c_off + t * p.bc_stride + g * N;
            const float d = dt[p.dt_off + t * p.dt_stride + h];
            const float sp = d > 20.0 ? d : log1p_of(exp(d));
            const float decay = exp(sp * a);
            const float xv = x[p.x_off + t * p.x_stride + h * P + r];
            precise const float x_dt = xv * sp;
            precise float sum = 0.0;
            for (uint i = 0u; i < N; ++i) {
                precise const float kept = st[s0 + i] * decay;
                precise const float added = B[b0 + i] * x_dt;
                precise const float si = kept + added;
                st[s0 + i] = si;
                precise const float prod = si * C[c0 + i];
                sum += prod;
            }
            precise const float yv = skip ? sum + xv * dh : sum;
            y[p.y_off + t * p.y_stride + h * P + r] = yv;
        }
    }
}
