// registry.cpp — builds the per-ISA trait tables from the quantization
// families. One table per ISA level, built on first use (thread-safe statics).
#include <algorithm>
#include <array>

#include "../common.h"
#include "../cpu/features.h"
#include "../ggml_type.h"

namespace lp {

namespace {

using table_t = std::array<type_traits, (size_t)ggml_type::COUNT>;

// Geometry of every type GGUF files may carry, including those we cannot
// compute with, so the reader can size and validate any tensor.
void fill_geometry(table_t& t) {
    struct geo { ggml_type type; const char* name; int64_t bs; size_t ts; bool q; };
    static const geo all[] = {
        {ggml_type::F32, "F32", 1, 4, false},        {ggml_type::F16, "F16", 1, 2, false},
        {ggml_type::Q4_0, "Q4_0", 32, 18, true},     {ggml_type::Q4_1, "Q4_1", 32, 20, true},
        {ggml_type::Q5_0, "Q5_0", 32, 22, true},     {ggml_type::Q5_1, "Q5_1", 32, 24, true},
        {ggml_type::Q8_0, "Q8_0", 32, 34, true},     {ggml_type::Q8_1, "Q8_1", 32, 36, true},
        {ggml_type::Q2_K, "Q2_K", 256, 84, true},    {ggml_type::Q3_K, "Q3_K", 256, 110, true},
        {ggml_type::Q4_K, "Q4_K", 256, 144, true},   {ggml_type::Q5_K, "Q5_K", 256, 176, true},
        {ggml_type::Q6_K, "Q6_K", 256, 210, true},   {ggml_type::Q8_K, "Q8_K", 256, 292, true},
        {ggml_type::IQ2_XXS, "IQ2_XXS", 256, 66, true}, {ggml_type::IQ2_XS, "IQ2_XS", 256, 74, true},
        {ggml_type::IQ3_XXS, "IQ3_XXS", 256, 98, true}, {ggml_type::IQ1_S, "IQ1_S", 256, 50, true},
        {ggml_type::IQ4_NL, "IQ4_NL", 32, 18, true},    {ggml_type::IQ3_S, "IQ3_S", 256, 110, true},
        {ggml_type::IQ2_S, "IQ2_S", 256, 82, true},     {ggml_type::IQ4_XS, "IQ4_XS", 256, 136, true},
        {ggml_type::I8, "I8", 1, 1, false},          {ggml_type::I16, "I16", 1, 2, false},
        {ggml_type::I32, "I32", 1, 4, false},        {ggml_type::I64, "I64", 1, 8, false},
        {ggml_type::F64, "F64", 1, 8, false},        {ggml_type::IQ1_M, "IQ1_M", 256, 56, true},
        {ggml_type::BF16, "BF16", 1, 2, false},      {ggml_type::TQ1_0, "TQ1_0", 256, 54, true},
        {ggml_type::TQ2_0, "TQ2_0", 256, 66, true},  {ggml_type::MXFP4, "MXFP4", 32, 17, true},
    };
    for (const geo& g : all) {
        type_traits& tr = t[(size_t)g.type];
        tr.name = g.name;
        tr.block_size = g.bs;
        tr.type_size = g.ts;
        tr.is_quantized = g.q;
    }
}

table_t build(isa level) {
    table_t t{};
    fill_geometry(t);
    register_float_types(t.data(), level);
    register_legacy_types(t.data(), level);
    register_kquant_types(t.data(), level);
    register_iquant_types(t.data(), level);
    register_iq_lattice_types(t.data(), level);
    register_mxfp4_types(t.data(), level);
    register_ternary_types(t.data(), level);
    for (type_traits& tr : t) {
        if (tr.to_float) tr.supported = true;
        if (!tr.from_float && tr.from_float_ref) tr.from_float = tr.from_float_ref;
        if (!tr.vec_dot && tr.vec_dot_ref) { tr.vec_dot = tr.vec_dot_ref; tr.vec_dot_isa = isa::scalar; }
    }
    return t;
}

const table_t& table_for(isa level) {
    const isa best = best_isa();
    // Above the best level, or in the other architecture's chain: the best.
    if (!isa_at_least(best, level)) level = best;
    switch (level) {
        case isa::avx512: { static const table_t t = build(isa::avx512); return t; }
        case isa::avx2: { static const table_t t = build(isa::avx2); return t; }
        case isa::neon_dot: { static const table_t t = build(isa::neon_dot); return t; }
        case isa::neon: { static const table_t t = build(isa::neon); return t; }
        default: { static const table_t t = build(isa::scalar); return t; }
    }
}

}  // namespace

const type_traits& traits(ggml_type t) { return traits(t, best_isa()); }

const type_traits& traits(ggml_type t, isa level) {
    static const type_traits none{};
    const int i = (int)t;
    if (i < 0 || i >= (int)ggml_type::COUNT) return none;
    return table_for(level)[(size_t)i];
}

bool type_is_valid(int32_t t) {
    if (t < 0 || t >= (int32_t)ggml_type::COUNT) return false;
    return traits((ggml_type)t, isa::scalar).name != nullptr;
}

const char* type_name(ggml_type t) {
    const type_traits& tr = traits(t, isa::scalar);
    return tr.name ? tr.name : "unknown";
}

size_t row_size(ggml_type t, int64_t n) {
    const type_traits& tr = traits(t, isa::scalar);
    if (!tr.name || n < 0 || n % tr.block_size != 0) return 0;
    return (size_t)(n / tr.block_size) * tr.type_size;
}

// What the product's activations take at the running level: at most 4 bytes
// an element in a quantized or float format, or the packed tiles of a type
// with a packed product (padded to whole tiles and steps).
size_t packed_act_bytes_max(int64_t n_tok, int64_t n) {
    size_t most = sizeof(float) * (size_t)n_tok * (size_t)n;
    for (int t = 0; t < (int)ggml_type::COUNT; ++t) {
        const type_traits& tr = traits((ggml_type)t);
        if (!tr.gemm_packed && !tr.throughput_packed) continue;
        const int64_t cols = (n_tok + tr.pack_cols - 1) / tr.pack_cols * tr.pack_cols;
        most = std::max(most, sizeof(float) * (size_t)cols * packed_tile_floats(1, tr.pack_lanes, n));
    }
    return most;
}

}  // namespace lp
