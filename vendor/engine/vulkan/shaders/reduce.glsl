// reduce.glsl — a workgroup-wide max or sum for 64-invocation workgroups
// (row_ops.comp's norms, attention.comp's softmax), included by shaders
// that declare USE_SUBGROUPS (and the subgroup extensions it needs).
// Both variants combine in one tree order, so they give the same bits:
// strides 32 .. 1 over shared memory (portable); or the strides at or above
// the subgroup size S over shared memory and the last log2(S) as shuffles
// inside subgroup 0, which then holds the S partials (USE_SUBGROUPS).
shared float red[64];

float group_reduce(float v, bool is_max) {
    const uint lid = gl_LocalInvocationID.x;
#if USE_SUBGROUPS
    const uint S = gl_SubgroupSize;
#else
    const uint S = 1u;
#endif
    red[lid] = v;
    barrier();
    for (uint s = 32u; s >= S && s > 0u; s >>= 1) {
        if (lid < s) red[lid] = is_max ? max(red[lid], red[lid + s]) : red[lid] + red[lid + s];
        barrier();
    }
#if USE_SUBGROUPS
    if (gl_SubgroupID == 0u) {
        const uint i = gl_SubgroupInvocationID;
        float t = red[i];
        for (uint s = S / 2u; s > 0u; s >>= 1) {
            const float o = subgroupShuffleXor(t, s);
            t = is_max ? max(t, o) : t + o;
        }
        if (i == 0u) red[0] = t;
    }
    barrier();
#endif
    const float r = red[0];
    barrier();
    return r;
}
