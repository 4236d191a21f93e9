#version 450
// convert.comp — F32 rows into one of the engine's storage formats, by the
// formulas of the CPU's reference converters (quants/legacy.cpp, float.cpp,
// kquants.cpp: quantize_row_*_ref, fp32_to_fp16, fp32_to_bf16):
//   mode 0: packed rows into d: row t at byte d_off + r * d_row_bytes, where
//           r = cells[c_off + t] when flag 1 is set (the KV cache store:
//           row t goes to its cache cell), else r = t (a matmul's activations
//           in the weight type's dot format);
//   mode 1: round trip into float rows f (the value the packed format holds,
//           as to_float gives it back): attention's queries as the CPU's
//           kernels see them against an F16 / BF16 / Q8_0-dot cache.
// Types (ggml ids): F32 0, F16 1, BF16 30, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7,
// Q8_0 8, Q8_1 9, Q8_K 15, IQ4_NL 20 (quants/iquants.cpp: the scale search).
// One invocation per unit: a block (32 or 256 elements), or 2 elements of
// F16 / BF16, or 1 of F32. Blocks are byte structures (34 bytes for Q8_0)
// and rows need not start on a word, so bytes are written with a pair of
// atomics on their word (clear own bytes, then set them): neighbouring
// invocations own the other bytes of a shared word.
// Division, the one operation here Vulkan does not round correctly (2.5
// ULP), is done in integers (div_rn) to give the CPU's quotient.
#extension GL_GOOGLE_include_directive : enable
#include "bytes.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Xbuf { float x[]; };
layout(std430, binding = 1) buffer Dbuf { uint d[]; };
layout(std430, binding = 2) readonly buffer Cbuf { int cells[]; };
layout(std430, binding = 3) writeonly buffer Fbuf { float f[]; };
layout(push_constant) uniform Params {
    uint type, n, n_rows;
    uint x_off, x_stride;        // floats
    uint d_off, d_row_bytes;     // bytes
    uint c_off;                  // ints
    uint f_off, f_stride;        // floats
    uint mode, flags;            // flags: 1 cells given
} p;

const uint T_F32 = 0u, T_F16 = 1u, T_BF16 = 30u, T_Q4_0 = 2u, T_Q4_1 = 3u, T_Q5_0 = 6u, T_Q5_1 = 7u, T_Q8_0 = 8u,
           T_Q8_1 = 9u, T_Q8_K = 15u, T_IQ4_NL = 20u;

// a / b rounded to nearest even, as the CPU divides. Vulkan's division
// may be off by 2.5 ULP (and lavapipe's is: a Q8_0 scale one ULP off turns
// -91.49999 into -91.5), so the quotient of the two 24-bit significands is
// taken by integer long division: 25 quotient bits, then the remainder as
// the sticky bit. Finite a, nonzero finite b; a result outside the normal
// range (never a quantizer's scale in practice) takes the device's division.
uint significand(float v, out int e) {
    const uint u = floatBitsToUint(v);
    e = int((u >> 23) & 0xffu);
    uint m = u & 0x7fffffu;
    if (e == 0) {  // subnormal: normalise
        while ((m & 0x800000u) == 0u) {
            m <<= 1;
            e -= 1;
        }
        e += 1;
        return m;
    }
    return m | 0x800000u;
}
float div_rn(float a, float b) {
    if (a == 0.0) return a / b;
    const uint sgn = (floatBitsToUint(a) ^ floatBitsToUint(b)) & 0x80000000u;
    int ea, eb;
    uint ma = significand(a, ea);
    const uint mb = significand(b, eb);
    int e = ea - eb;
    if (ma < mb) {  // then 1 <= ma / mb < 2
        ma <<= 1;
        e -= 1;
    }
    uint q = 0u, r = ma;
    for (int i = 0; i < 25; ++i) {
        q <<= 1;
        if (r >= mb) {
            r -= mb;
            q |= 1u;
        }
        r <<= 1;
    }
    uint m = q >> 1;
    if ((q & 1u) != 0u && (r != 0u || (m & 1u) != 0u)) m += 1u;
    if (m == 0x1000000u) {
        m >>= 1;
        e += 1;
    }
    const int be = e + 127;
    if (be <= 0 || be >= 255) return a / b;
    return uintBitsToFloat(sgn | (uint(be) << 23) | (m & 0x7fffffu));
}

// C's roundf: half away from zero.
float round_away(float v) {
    const float t = trunc(v);
    return abs(v - t) >= 0.5 ? t + sign(v) : t;
}

// Writes the low `nbytes` (1, 2 or 4) bytes of v at byte offset off of d
// (the bytes must lie in one word, as every field here does).
void put(uint off, uint v, uint nbytes) {
    const uint sh = (off & 3u) * 8u;
    const uint m = (nbytes == 4u ? 0xffffffffu : ((1u << (8u * nbytes)) - 1u)) << sh;
    if (m == 0xffffffffu) {
        d[off >> 2] = v;
        return;
    }
    atomicAnd(d[off >> 2], ~m);
    atomicOr(d[off >> 2], (v << sh) & m);
}
void put16(uint off, uint v) {  // at an even offset: one word
    put(off, v & 0xffffu, 2u);
}
void put32(uint off, uint v) {  // at an even offset: maybe two words
    if ((off & 3u) == 0u) put(off, v, 4u);
    else {
        put16(off, v);
        put16(off + 2u, v >> 16);
    }
}

// IQ4_NL, as quants/iquants.cpp: best_index_iq4, fit_iq4, best_scale_iq4
// (float operations in the CPU's order, divisions by div_rn).
uint best_index_iq4(float v) {
    if (v <= float(kvalues_iq4[0])) return 0u;
    if (v >= float(kvalues_iq4[15])) return 15u;
    uint lo = 0u, hi = 15u;
    while (hi - lo > 1u) {
        const uint mid = (lo + hi) / 2u;
        if (v < float(kvalues_iq4[mid])) hi = mid;
        else lo = mid;
    }
    precise float below = v - float(kvalues_iq4[hi - 1u]);
    precise float above = float(kvalues_iq4[hi]) - v;
    return below < above ? hi - 1u : hi;
}
void fit_iq4(uint xs, float id, out float sumqx, out float sumq2) {
    precise float sqx = 0.0, sq2 = 0.0;
    for (uint j = 0u; j < 32u; ++j) {
        precise float xj = x[xs + j];
        precise float v = id * xj;
        const float q = float(kvalues_iq4[best_index_iq4(v)]);
        precise float w = xj * xj;
        precise float wq = w * q;
        sqx += wq * xj;
        sq2 += wq * q;
    }
    sumqx = sqx;
    sumq2 = sq2;
}
float best_scale_iq4(uint xs) {
    float amax = 0.0, mx = 0.0;
    for (uint j = 0u; j < 32u; ++j) {
        const float ax = abs(x[xs + j]);
        if (ax > amax) {
            amax = ax;
            mx = x[xs + j];
        }
    }
    if (amax < 1e-15) return 0.0;
    float d = div_rn(-mx, float(kvalues_iq4[0]));
    float sumqx, sumq2;
    fit_iq4(xs, div_rn(1.0, d), sumqx, sumq2);
    d = div_rn(sumqx, sumq2);
    precise float best = d * sumqx;
    for (int itry = -7; itry <= 7; ++itry) {
        fit_iq4(xs, div_rn(float(itry - 127), mx), sumqx, sumq2);
        precise float lhs = sumqx * sumqx;
        precise float rhs = best * sumq2;
        if (sumq2 > 0.0 && lhs > rhs) {
            d = div_rn(sumqx, sumq2);
            best = d * sumqx;
        }
    }
    return d;
}

uint block_elems(uint t) { return t == T_Q8_K ? 256u : (t == T_F32 ? 1u : (t == T_F16 || t == T_BF16) ? 2u : 32u); }
uint block_bytes(uint t) {
    switch (t) {
        case T_F32: return 4u;
        case T_F16: return 4u;
        case T_BF16: return 4u;
        case T_Q4_0: return 18u;
        case T_Q4_1: return 20u;
        case T_Q5_0: return 22u;
        case T_Q5_1: return 24u;
        case T_Q8_0: return 34u;
        case T_Q8_1: return 36u;
        case T_IQ4_NL: return 18u;
        default: return 292u;  // Q8_K: float d, 256 int8, 16 int16 bsums
    }
}

void main() {
    const uint be = block_elems(p.type);
    const uint per_row = (p.n + be - 1u) / be;
    const uint total = per_row * p.n_rows;
    const uint step = gl_NumWorkGroups.x * 64u;
    for (uint u = gl_GlobalInvocationID.x; u < total; u += step) {
        const uint t = u / per_row, b = u % per_row;
        const uint xs = p.x_off + t * p.x_stride + b * be;  // first element
        const uint nel = min(be, p.n - b * be);
        const uint r = (p.flags & 1u) != 0u ? uint(cells[p.c_off + t]) : t;
        const uint db = p.d_off + r * p.d_row_bytes + b * block_bytes(p.type);  // packed block
        const uint fb = p.f_off + t * p.f_stride + b * be;                      // round-trip values
        const bool rt = p.mode == 1u;
        if (p.type == T_F32) {
            if (rt) f[fb] = x[xs];
            else d[db >> 2] = floatBitsToUint(x[xs]);
        } else if (p.type == T_F16 || p.type == T_BF16) {
            for (uint j = 0u; j < nel; ++j) {
                const uint h = p.type == T_F16 ? f16_bits(x[xs + j]) : bf16_bits(x[xs + j]);
                if (rt) f[fb + j] = p.type == T_F16 ? half_bits_to_float(h) : bf16_bits_to_float(h);
                else put16(p.d_off + r * p.d_row_bytes + (b * 2u + j) * 2u, h);
            }
        } else if (p.type == T_Q8_0 || p.type == T_Q8_1) {
            // d = amax / 127, q = roundf(x / d); Q8_1 adds s = d * sum(q), d before its F16 rounding
            float amax = 0.0;
            for (uint j = 0u; j < 32u; ++j) amax = max(amax, abs(x[xs + j]));
            const float dd = div_rn(amax, 127.0);
            const float id = dd != 0.0 ? div_rn(1.0, dd) : 0.0;
            const uint qs = p.type == T_Q8_0 ? 2u : 4u;
            const float dh = half_bits_to_float(f16_bits(dd));
            int sum = 0;
            for (uint j = 0u; j < 32u; j += 4u) {
                uint word = 0u;
                for (uint k = 0u; k < 4u; ++k) {
                    precise float v = x[xs + j + k] * id;
                    const int q = int(round_away(v));
                    sum += q;
                    word |= (uint(q) & 0xffu) << (8u * k);
                    if (rt) f[fb + j + k] = dh * float(q);
                }
                if (!rt) put32(db + qs + j, word);
            }
            if (!rt) {
                put16(db, f16_bits(dd));
                if (p.type == T_Q8_1) {
                    precise float s = float(sum) * dd;
                    put16(db + 2u, f16_bits(s));
                }
            }
        } else if (p.type == T_IQ4_NL) {
            // d = the best scale of the block (a search over 16 candidates),
            // index of each element: the table entry nearest to x / d
            const float dd = best_scale_iq4(xs);
            const float id = dd != 0.0 ? div_rn(1.0, dd) : 0.0;
            const float dh = half_bits_to_float(f16_bits(dd));
            uint qv[32];
            for (uint j = 0u; j < 32u; ++j) {
                precise float v = id * x[xs + j];
                qv[j] = best_index_iq4(v);
                if (rt) f[fb + j] = dh * float(kvalues_iq4[qv[j]]);
            }
            if (!rt) {
                for (uint j = 0u; j < 16u; j += 4u) {
                    uint word = 0u;
                    for (uint k = 0u; k < 4u; ++k) word |= (qv[j + k] | (qv[j + k + 16u] << 4)) << (8u * k);
                    put32(db + 2u + j, word);
                }
                put16(db, f16_bits(dd));
            }
        } else if (p.type == T_Q8_K) {
            // iscale = -127 / max (the signed value of largest magnitude), q = min(127, nearest(iscale x)),
            // d = 1 / iscale; bsums: sums of 16 quants. An all-zero block is all zeros.
            float amax = 0.0, mx = 0.0;
            for (uint j = 0u; j < 256u; ++j) {
                const float ax = abs(x[xs + j]);
                if (amax < ax) {
                    amax = ax;
                    mx = x[xs + j];
                }
            }
            const float iscale = amax != 0.0 ? div_rn(-127.0, mx) : 0.0;
            for (uint g = 0u; g < 16u; ++g) {
                int s = 0;
                for (uint j = 0u; j < 16u; j += 4u) {
                    uint word = 0u;
                    for (uint k = 0u; k < 4u; ++k) {
                        precise float v = iscale * x[xs + 16u * g + j + k];
                        const int q = amax != 0.0 ? min(127, int(roundEven(v))) : 0;
                        s += q;
                        word |= (uint(q) & 0xffu) << (8u * k);
                    }
                    put32(db + 4u + 16u * g + j, word);
                }
                put16(db + 260u + 2u * g, uint(s));
            }
            put32(db, floatBitsToUint(amax != 0.0 ? div_rn(1.0, iscale) : 0.0));
        } else {
            // Q4_0 / Q5_0: d = max / -8 (-16), q = min(15 (31), trunc(x / d + 8.5 (16.5)));
            // Q4_1 / Q5_1: d = (max - min) / 15 (31), q = min(15 (31), trunc((x - min) / d + 0.5))
            const bool five = p.type == T_Q5_0 || p.type == T_Q5_1;
            const bool with_min = p.type == T_Q4_1 || p.type == T_Q5_1;
            const int top = five ? 31 : 15;
            float dd, mn = 0.0, off;
            if (with_min) {
                float lo = x[xs], hi = x[xs];
                for (uint j = 1u; j < 32u; ++j) {
                    lo = min(lo, x[xs + j]);
                    hi = max(hi, x[xs + j]);
                }
                mn = lo;
                precise float span = hi - lo;
                dd = div_rn(span, five ? 31.0 : 15.0);
                off = 0.5;
            } else {
                float amax = 0.0, mx = 0.0;
                for (uint j = 0u; j < 32u; ++j) {
                    const float ax = abs(x[xs + j]);
                    if (amax < ax) {
                        amax = ax;
                        mx = x[xs + j];
                    }
                }
                dd = div_rn(mx, five ? -16.0 : -8.0);
                off = five ? 16.5 : 8.5;
            }
            const float id = dd != 0.0 ? div_rn(1.0, dd) : 0.0;
            uint qv[32];
            for (uint j = 0u; j < 32u; ++j) {
                precise float c = with_min ? x[xs + j] - mn : x[xs + j];
                precise float v = c * id;
                precise float w = v + off;
                qv[j] = uint(min(top, int(w)));
            }
            const uint qs = p.type == T_Q4_0 ? 2u : p.type == T_Q4_1 ? 4u : p.type == T_Q5_0 ? 6u : 8u;
            for (uint j = 0u; j < 16u; j += 4u) {
                uint word = 0u;
                for (uint k = 0u; k < 4u; ++k) word |= (((qv[j + k] & 15u) | ((qv[j + k + 16u] & 15u) << 4))) << (8u * k);
                put32(db + qs + j, word);
            }
            if (five) {
                uint qh = 0u;
                for (uint j = 0u; j < 32u; ++j) qh |= (qv[j] >> 4) << j;
                put32(db + (with_min ? 4u : 2u), qh);
            }
            put16(db, f16_bits(dd));
            if (with_min) put16(db + 2u, f16_bits(mn));
        }
    }
}
