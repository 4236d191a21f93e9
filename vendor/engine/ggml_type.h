// ggml_type.h — the tensor element types of GGUF files and one trait table
// describing each: block geometry, conversion to/from float and the dot
// product kernels. Matrix drivers (cpu/matmul.h) only ever go through this
// table; they never switch on a type.
//
// Numbering and block layouts are those of GGUF files written by llama.cpp
// (ggml's `enum ggml_type`), so files are read bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lp {

enum class ggml_type : int32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3,
    // 4 and 5 were Q4_2 / Q4_3, removed from the format
    Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20,
    IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
    I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
    TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
    COUNT = 40,
};

// Which instruction-set level a kernel was written for. Two chains share the
// scalar bottom: x86 (avx2 < avx512) and aarch64 (neon < neon_dot, NEON plus
// the int8 dot-product instructions). Within a chain a CPU that supports a
// level supports the lower ones; levels of different chains are unrelated, so
// compare levels with isa_at_least(), never by their numbers.
enum class isa : int { scalar = 0, avx2 = 1, avx512 = 2, neon = 3, neon_dot = 4 };
const char* isa_name(isa level);
constexpr bool isa_is_arm(isa level) { return level == isa::neon || level == isa::neon_dot; }
// Whether kernels written for `want` may run where `have` is the level.
constexpr bool isa_at_least(isa have, isa want) {
    return want == isa::scalar || (isa_is_arm(have) == isa_is_arm(want) && (int)have >= (int)want);
}

// Dot product of one row of a weight type with one row of its activation type
// (vec_dot_type), over n elements (n a multiple of the block size).
using vec_dot_fn = void (*)(int64_t n, float* out, const void* w_row, const void* a_row);

// Tiled dot products: out[c * out_stride + r] = dot(w_row r, a_row c) for
// r < nr, c < nc, nr <= 4 and nc <= 4. Optional; lets a family reuse loads
// across rows and columns in batched matrix products.
using gemm_tile_fn = void (*)(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                              float* out, size_t out_stride, int nr, int nc);

// Panels: out[c * out_stride + r] = dot(w_row r, a_row c) for r < nr and
// c < nc <= the type's panel_cols (128 unless it says otherwise), in one
// call (nr <= 16 in mat-vec, <= the type's panel_rows in mat-mat), so a kernel can re-lay out the nr rows once for all nc columns
// (mat-mat) or stream them (nc == 1, mat-vec).
// Optional; where a type has one the driver uses it for both, and its results
// must not depend on nc.
using gemm_panel_fn = void (*)(int64_t n, const void* w, size_t w_stride, int nr, const void* a, size_t a_stride,
                               int nc, float* out, size_t out_stride);
constexpr int kPanelRows = 16, kPanelCols = 128;

// Packed mat-mat (the F32 / F16 kernels of the x86 levels): the driver packs
// the F32 activation rows once per product, pack_cols rows per tile, each
// tile pack_cols × pack_lanes × ceil(n / pack_lanes) floats, tiles back to
// back (pack_acts: nc <= pack_cols rows x, row stride xs floats, into one
// tile; values as the type's vec_dot_type holds them). gemm_packed then gives
// out[c * out_stride + r] = dot(w_row r, activation row c) for r < nr <=
// panel_rows and c < nc (any number), from `ap`, the tile holding activation
// row 0 — with vec_dot's bits.
using pack_acts_fn = void (*)(int64_t n, const float* x, int64_t xs, int nc, float* dst);
using gemm_packed_fn = void (*)(int64_t n, const void* w, size_t w_stride, int nr, const float* ap, int nc,
                                float* out, size_t out_stride);
// Floats of one packed tile of a row of n elements; the most bytes a
// product's converted or packed activations of n_tok rows take at the running
// level (what the engine reserves for them).
inline size_t packed_tile_floats(int pack_cols, int pack_lanes, int64_t n) {
    return (size_t)pack_cols * (size_t)pack_lanes * (size_t)((n + pack_lanes - 1) / pack_lanes);
}
size_t packed_act_bytes_max(int64_t n_tok, int64_t n);

// Bulk conversions over n elements (n a multiple of the block size).
using to_float_fn = void (*)(const void* src, float* dst, int64_t n);
using from_float_fn = void (*)(const float* src, void* dst, int64_t n);

struct type_traits {
    const char* name = nullptr;   // "Q4_K" — as gguf/llama.cpp spell it
    int64_t block_size = 0;       // elements per block
    size_t type_size = 0;         // bytes per block
    bool is_quantized = false;
    bool supported = false;       // we can read (dequantize) this type

    to_float_fn to_float = nullptr;       // exact dequantization
    from_float_fn from_float_ref = nullptr;  // reference quantization, nullptr if we have none
    from_float_fn from_float = nullptr;   // fast quantization used for activations (same output as ref)

    ggml_type vec_dot_type = ggml_type::F32;  // activation format the dot kernels take
    vec_dot_fn vec_dot_ref = nullptr;    // scalar reference, always compiled
    vec_dot_fn vec_dot = nullptr;        // best kernel for the table's ISA level
    gemm_tile_fn gemm_tile = nullptr;    // optional tiled kernel for the table's ISA level
    gemm_panel_fn gemm_panel = nullptr;  // optional panel kernel (takes precedence over gemm_tile)
    // Optional panel that sums in another order than vec_dot and the tiles
    // (so its rows differ from theirs in the last bits) and is faster at
    // mat-mat: taken only by products asked for matmul_kernels::throughput
    // (cpu/matmul.h), then for every batch size (its nc == 1 is its own
    // mat-vec), so the batch still never changes a row's bits there. It
    // takes panel_rows rows per call in mat-vec too.
    gemm_panel_fn throughput_panel = nullptr;
    // Weight rows per gemm_panel call in mat-mat (a multiple of kPanelRows;
    // mat-vec calls always take kPanelRows). More rows per call amortise work
    // a panel does once per call on the activations (the float panels widen
    // or copy them).
    int panel_rows = kPanelRows;
    // Activation rows per gemm_panel call in mat-mat. More columns per call
    // amortise work a panel does once per call on the weights (the AVX2 F16
    // panel converts its rows to F32), until a K block's activations no
    // longer fit L2.
    int panel_cols = kPanelCols;
    // Up to this many activation rows, mat-mat runs the mat-vec kernel once per
    // activation row over row groups that stay in cache (cpu/matmul.cpp): below
    // it the tiles / panels, built to amortise unpacking over many columns, cost
    // more than the few extra passes over cached weights. Measured per type.
    int matvec_batch_max = 3;
    // Optional, for those small batches: the mat-vec kernel over up to 4
    // activation rows at once (any number of weight rows; tile signature),
    // same bits per row as vec_dot, each weight block unpacked once for all.
    gemm_tile_fn matvec_cols = nullptr;
    // Mat-vec (one activation row) through matvec_cols too, where that kernel
    // streams a row faster than vec_dot / the tile / the panel do (same bits).
    bool matvec_by_cols = false;
    // Optional packed mat-mat (see pack_acts_fn); where a type has it, the
    // driver uses it for mat-mat instead of gemm_panel / gemm_tile.
    pack_acts_fn pack_acts = nullptr;
    gemm_packed_fn gemm_packed = nullptr;
    // Optional, on the same packed tiles: each (row, column) pair summed in
    // one chain over the packed order (every lane's steps in turn) instead of
    // vec_dot's per-lane chains and their tree, so no lane merging (on
    // MiniLM's K = 384 that merging was ~15 % of the product). Other bits
    // than gemm_packed: taken only for matmul_kernels::throughput, then for
    // every batch size (n_tok == 1 included), like throughput_panel.
    gemm_packed_fn throughput_packed = nullptr;
    int pack_cols = 0;   // activation rows per packed tile
    int pack_lanes = 0;  // lanes of vec_dot's accumulator: the packing's step
    isa vec_dot_isa = isa::scalar;       // the level vec_dot was written for
};

// The table for the best ISA level the running CPU supports (capped by what
// was compiled in). Built once, thread-safe.
const type_traits& traits(ggml_type t);
// The table for a given level (for tests comparing paths). A level above what
// the CPU supports returns the table of the best supported level.
const type_traits& traits(ggml_type t, isa level);

bool type_is_valid(int32_t t);        // a known enum value
const char* type_name(ggml_type t);   // "Q4_K", or "unknown"
// Bytes of a row of n elements; 0 if n is not a multiple of the block size.
size_t row_size(ggml_type t, int64_t n);

// Each quantization family fills its entries of a table for one ISA level.
// `level` is already capped to what the CPU and the build support.
void register_float_types(type_traits* table, isa level);    // quants/float.cpp: F32 F16 BF16
void register_legacy_types(type_traits* table, isa level);   // quants/legacy.cpp: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1
void register_kquant_types(type_traits* table, isa level);   // quants/kquants.cpp: Q2_K..Q6_K Q8_K
void register_iquant_types(type_traits* table, isa level);   // quants/iquants.cpp: IQ4_NL IQ4_XS
void register_iq_lattice_types(type_traits* table, isa level);  // quants/iq_lattice.cpp: IQ2_*, IQ3_*, IQ1_*
void register_mxfp4_types(type_traits* table, isa level);    // quants/mxfp4.cpp: MXFP4
void register_ternary_types(type_traits* table, isa level);  // quants/ternary.cpp: TQ1_0 TQ2_0

}  // namespace lp
