#version 450
// ssm_conv.comp — the short causal convolution of a gated delta-net layer
// (backend.h ssm_conv, op_args.h ssm_conv_args): y[t][c] = sum over i < d of
// w[c][i] * window[i], the window being the slot's last d - 1 inputs of
// channel c (its tail, oldest first) then x[t][c]; the tail then moves on by
// one. One invocation per channel walks every row of the batch in order, so
// the rows of one sequence see each other's tails and rows of several
// sequences (their own slots) may interleave. The products are summed left to
// right, unfused (precise), as the CPU's ssm_conv_ref.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Xbuf { float x[]; };
layout(std430, binding = 1) buffer Ybuf { float y[]; };
layout(std430, binding = 2) readonly buffer Wbuf { float w[]; };
layout(std430, binding = 3) buffer Sbuf { float st[]; };
layout(std430, binding = 4) readonly buffer Ibuf { int slot[]; };
layout(push_constant) uniform Params {
    uint n_tok, n_ch, d_conv;
    uint x_off, x_stride, y_off, y_stride;  // floats
    uint w_off, st_off, st_stride, slot_off;  // floats (slot: ints)
} p;

void main() {
    const uint nt = p.d_conv - 1u;  // the tail kept per channel
    for (uint c = gl_GlobalInvocationID.x; c < p.n_ch; c += gl_NumWorkGroups.x * 64u) {
        const uint wc = p.w_off + c * p.d_conv;
        for (uint t = 0u; t < p.n_tok; ++t) {
            const uint tail = p.st_off + uint(slot[p.slot_off + t]) * p.st_stride + c * nt;
            const float xv = x[p.x_off + t * p.x_stride + c];
            precise float s = 0.0;
            for (uint i = 0u; i < nt; ++i) {
                precise const float prod = st[tail + i] * w[wc + i];
                s += prod;
            }
            precise const float last = xv * w[wc + nt];
            s += last;
            y[p.y_off + t * p.y_stride + c] = s;
            for (uint i = 0u; i + 1u < nt; ++i) st[tail + i] = st[tail + i + 1u];
            if (nt > 0u) st[tail + nt - 1u] = xv;
        }
    }
}
