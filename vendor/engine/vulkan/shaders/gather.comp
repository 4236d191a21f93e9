#version 450
// gather.comp — in place: row i of data becomes row idx[i] (idx ascending,
// idx[i] >= i; backend.h: gather_rows). Row i reads a row no step before it
// has written (idx[i] >= i, and step j < i wrote row j < i), so the rows are
// copied in order, one step per row, by a single workgroup with a barrier
// between steps.
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Dbuf { float data[]; };
layout(std430, binding = 1) readonly buffer Ibuf { int idx[]; };
layout(push_constant) uniform Params {
    uint off, stride, n_cols, n, idx_off;  // floats, floats, floats, rows, ints
} p;

void main() {
    for (uint i = 0u; i < p.n; ++i) {
        const uint src = uint(idx[p.idx_off + i]);
        if (src != i)
            for (uint c = gl_LocalInvocationID.x; c < p.n_cols; c += 64u)
                data[p.off + i * p.stride + c] = data[p.off + src * p.stride + c];
        memoryBarrierBuffer();
        barrier();
    }
}
