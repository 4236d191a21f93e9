// vulkan_backend.cpp — see vulkan_backend.h.
#include "vulkan_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "../common.h"
#include "../cpu/ops.h"
#include "../model/model.h"
#include "../vulkan/vk_runtime.h"

namespace lp {

namespace {

// The embedded shader variant of a weight type, or null.
const char* type_suffix(ggml_type t) {
    switch (t) {
        case ggml_type::F32: return "f32";
        case ggml_type::F16: return "f16";
        case ggml_type::BF16: return "bf16";
        case ggml_type::Q4_0: return "q4_0";
        case ggml_type::Q5_0: return "q5_0";
        case ggml_type::Q8_0: return "q8_0";
        case ggml_type::Q4_1: return "q4_1";
        case ggml_type::Q5_1: return "q5_1";
        case ggml_type::Q4_K: return "q4_k";
        case ggml_type::Q5_K: return "q5_k";
        case ggml_type::Q6_K: return "q6_k";
        default: return nullptr;
    }
}

[[noreturn]] void missing(const std::string& what) {
    throw not_implemented_error("the vulkan backend has no " + what + " yet");
}

// Workgroups along one axis for `n` items, within the device's limit (the
// shaders loop over the rest).
uint32_t groups_for(int64_t n, uint32_t limit) { return (uint32_t)std::max<int64_t>(1, std::min<int64_t>(n, limit)); }

}  // namespace

bool vulkan_backend::has_matmul(ggml_type t) { return type_suffix(t) != nullptr; }

vulkan_backend::vulkan_backend(int index) : index_(index), ctx_(&vk::context::get(index)) {}

vulkan_backend::~vulkan_backend() = default;

const vk::buffer& vulkan_backend::weights(const weight_view& w) {
    auto it = weights_.find(w.data);
    if (it != weights_.end()) return *it->second;
    const size_t bytes = w.row_stride * (size_t)w.n_rows;
    auto b = std::make_unique<vk::buffer>(*ctx_, bytes);
    std::memcpy(b->data(), w.data, bytes);
    return *weights_.emplace(w.data, std::move(b)).first->second;
}

const vk::buffer& vulkan_backend::gelu_tables() {
    if (!tables_) {
        // the CPU's own tables (cpu/ops.h), so GELU gives the CPU's values
        tables_ = std::make_unique<vk::buffer>(*ctx_, 2 * 65536 * sizeof(float));
        auto* t = static_cast<float*>(tables_->data());
        std::memcpy(t, gelu_f16_table(), 65536 * sizeof(float));
        std::memcpy(t + 65536, gelu_quick_f16_table(), 65536 * sizeof(float));
    }
    return *tables_;
}

void vulkan_backend::matmul(const weight_view& w, const float* x, int64_t xs, float* y, int64_t ys, int64_t n,
                            const lora_work& lora) {
    if (n <= 0 || w.n_rows <= 0) return;
    const char* suffix = type_suffix(w.type);
    if (!suffix) missing(std::string("matmul shader for ") + type_name(w.type) + " weights");
    if (lora.terms && !lora.terms->empty()) missing("LoRA terms in matmul");
    // Activations in the type's dot format, converted by the CPU's own
    // conversion (the same bytes the CPU kernels take).
    const type_traits& wt = traits(w.type);
    const ggml_type at = wt.vec_dot_type;
    const size_t a_row = row_size(at, w.n_cols);
    vk::buffer a(*ctx_, a_row * (size_t)n);
    auto* ab = static_cast<uint8_t*>(a.data());
    for (int64_t t = 0; t < n; ++t) {
        const float* xr = x + t * xs;
        uint8_t* dst = ab + (size_t)t * a_row;
        if (at == ggml_type::F32) {
            std::memcpy(dst, xr, a_row);
        } else {
            const type_traits& tt = traits(at);
            const from_float_fn conv = tt.from_float ? tt.from_float : tt.from_float_ref;
            if (!conv) missing(std::string("activation conversion to ") + type_name(at));
            conv(xr, dst, w.n_cols);
        }
    }
    vk::buffer out(*ctx_, sizeof(float) * (size_t)(n * w.n_rows));
    struct {
        uint32_t n_rows, n_cols, n_tok, w_row_bytes, a_row_bytes, y_stride;
    } pc{(uint32_t)w.n_rows, (uint32_t)w.n_cols, (uint32_t)n, (uint32_t)w.row_stride, (uint32_t)a_row,
         (uint32_t)w.n_rows};
    const std::string shader = std::string("matmul_") + suffix;
    vk::dispatch d{shader.c_str(), {&weights(w), &a, &out}, &pc, sizeof(pc),
                   {groups_for(w.n_rows, ctx_->max_groups(0)), groups_for(n, ctx_->max_groups(1)), 1}};
    ctx_->run({d});
    const auto* o = static_cast<const float*>(out.data());
    for (int64_t t = 0; t < n; ++t) std::memcpy(y + t * ys, o + t * w.n_rows, sizeof(float) * (size_t)w.n_rows);
}

void vulkan_backend::get_rows(const weight_view& table, const int32_t* ids, float* y, int64_t ys, int64_t n) {
    if (n <= 0) return;
    const char* suffix = type_suffix(table.type);
    if (!suffix) missing(std::string("get_rows shader for ") + type_name(table.type));
    vk::buffer idb(*ctx_, sizeof(int32_t) * (size_t)n);
    std::memcpy(idb.data(), ids, sizeof(int32_t) * (size_t)n);
    vk::buffer out(*ctx_, sizeof(float) * (size_t)(n * table.n_cols));
    struct {
        uint32_t n_ids, n_cols, row_bytes, y_stride;
    } pc{(uint32_t)n, (uint32_t)table.n_cols, (uint32_t)table.row_stride, (uint32_t)table.n_cols};
    const std::string shader = std::string("get_rows_") + suffix;
    vk::dispatch d{shader.c_str(), {&weights(table), &idb, &out}, &pc, sizeof(pc),
                   {groups_for(n, ctx_->max_groups(0)), 1, 1}};
    ctx_->run({d});
    const auto* o = static_cast<const float*>(out.data());
    for (int64_t t = 0; t < n; ++t)
        std::memcpy(y + t * ys, o + t * table.n_cols, sizeof(float) * (size_t)table.n_cols);
}

void vulkan_backend::gather_rows(float*, int64_t, int64_t, const int32_t*, int64_t) { missing("gather_rows"); }

void vulkan_backend::rope_table(const rope_params&, const int32_t*, int64_t, float*, int64_t) {
    missing("rope_table");
}

void vulkan_backend::attention(const attention_args& a) {
    if (a.n_tok <= 0) return;
    const int dk = a.head_dim_k, dv = a.head_dim_v;
    int32_t n_cells = 0;  // the cells any row sees lie below the largest hi
    for (int t = 0; t < a.n_tok; ++t) n_cells = std::max(n_cells, a.hi[t]);
    // Queries as the CPU's kernels see them: rounded to the keys' dot format.
    vk::buffer qb(*ctx_, sizeof(float) * (size_t)a.n_tok * a.n_head * dk);
    auto* qd = static_cast<float*>(qb.data());
    const ggml_type qfmt = a.type_k == ggml_type::F32 || a.type_k == ggml_type::F16 || a.type_k == ggml_type::BF16
                               ? a.type_k : traits(a.type_k).vec_dot_type;
    std::vector<uint8_t> tmp(row_size(qfmt, dk) + 64);
    for (int t = 0; t < a.n_tok; ++t)
        for (int h = 0; h < a.n_head; ++h) {
            const float* src = a.q + t * a.q_stride + (int64_t)h * dk;
            float* dst = qd + ((int64_t)t * a.n_head + h) * dk;
            if (qfmt == ggml_type::F32) {
                std::memcpy(dst, src, sizeof(float) * (size_t)dk);
                continue;
            }
            const type_traits& tt = traits(qfmt);
            const from_float_fn conv = tt.from_float ? tt.from_float : tt.from_float_ref;
            if (!conv || !tt.to_float) missing(std::string("query conversion to ") + type_name(qfmt));
            conv(src, tmp.data(), dk);
            tt.to_float(tmp.data(), dst, dk);
        }
    const size_t kb_bytes = a.k_row_bytes * (size_t)n_cells, vb_bytes = a.v_row_bytes * (size_t)n_cells;
    vk::buffer kb(*ctx_, std::max<size_t>(kb_bytes, 4)), vb(*ctx_, std::max<size_t>(vb_bytes, 4));
    if (kb_bytes) std::memcpy(kb.data(), a.k, kb_bytes);
    if (vb_bytes) std::memcpy(vb.data(), a.v, vb_bytes);
    vk::buffer mb(*ctx_, sizeof(uint64_t) * (size_t)(a.n_tok * a.mask_words));
    std::memcpy(mb.data(), a.mask, sizeof(uint64_t) * (size_t)(a.n_tok * a.mask_words));
    vk::buffer spans(*ctx_, sizeof(int32_t) * 2 * (size_t)a.n_tok);
    auto* sp = static_cast<int32_t*>(spans.data());
    for (int t = 0; t < a.n_tok; ++t) {
        sp[2 * t] = a.lo[t];
        sp[2 * t + 1] = a.hi[t];
    }
    vk::buffer scratch(*ctx_, sizeof(float) * std::max<size_t>(1, (size_t)a.n_tok * a.n_head * (size_t)n_cells));
    vk::buffer out(*ctx_, sizeof(float) * (size_t)a.n_tok * a.n_head * dv);
    struct {
        uint32_t n_tok, n_head, n_head_kv, dk, dv, type_k, type_v, k_row_bytes, v_row_bytes, mask_words, n_cells;
        float scale, softcap;
    } pc{(uint32_t)a.n_tok, (uint32_t)a.n_head, (uint32_t)a.n_head_kv, (uint32_t)dk, (uint32_t)dv,
         (uint32_t)a.type_k, (uint32_t)a.type_v, (uint32_t)a.k_row_bytes, (uint32_t)a.v_row_bytes,
         (uint32_t)a.mask_words, (uint32_t)n_cells, a.scale, a.softcap};
    vk::dispatch d{"attention", {&qb, &kb, &vb, &mb, &spans, &scratch, &out}, &pc, sizeof(pc),
                   {groups_for((int64_t)a.n_tok * a.n_head, ctx_->max_groups(0)), 1, 1}};
    ctx_->run({d});
    const auto* o = static_cast<const float*>(out.data());
    for (int t = 0; t < a.n_tok; ++t)
        std::memcpy(a.out + t * a.out_stride, o + (int64_t)t * a.n_head * dv, sizeof(float) * (size_t)a.n_head * dv);
}

void vulkan_backend::run_rows(const row_op* ops, int n_ops, int64_t n) {
    if (n <= 0) return;
    for (int k = 0; k < n_ops; ++k) {
        const row_op& o = ops[k];
        // the row's width (y) and the second operand's (x) in floats
        int64_t width = o.n, x_width = o.n;
        switch (o.k) {
            case row_op::kind::rms_norm: width = x_width = o.n * o.groups; break;
            case row_op::kind::rope: width = o.n * o.groups; x_width = o.a; break;
            case row_op::kind::layer_norm:
            case row_op::kind::add:
            case row_op::kind::mul:
            case row_op::kind::scale:
            case row_op::kind::softcap:
            case row_op::kind::gelu_mul:
            case row_op::kind::silu_mul:
            case row_op::kind::gelu_quick_mul:
            case row_op::kind::copy: break;
            case row_op::kind::hadamard: break;
            case row_op::kind::kv_store: missing("KV cache (kv_store row op)");
        }
        const bool in_place = o.x == o.y && o.x_stride == o.y_stride;
        const bool has_x = o.x && !in_place;
        vk::buffer yb(*ctx_, sizeof(float) * (size_t)(n * width));
        auto* yd = static_cast<float*>(yb.data());
        for (int64_t t = 0; t < n; ++t) std::memcpy(yd + t * width, o.y + t * o.y_stride, sizeof(float) * (size_t)width);
        const int64_t x_rows = has_x ? (o.x_stride == 0 ? 1 : n) : 0;
        vk::buffer xb(*ctx_, sizeof(float) * (size_t)std::max<int64_t>(1, x_rows * x_width));
        auto* xd = static_cast<float*>(xb.data());
        for (int64_t t = 0; t < x_rows; ++t)
            std::memcpy(xd + t * x_width, o.x + t * o.x_stride, sizeof(float) * (size_t)x_width);
        vk::buffer wb(*ctx_, sizeof(float) * (size_t)std::max<int64_t>(1, o.w ? o.n : 0));
        if (o.w) std::memcpy(wb.data(), o.w, sizeof(float) * (size_t)o.n);
        vk::buffer bb(*ctx_, sizeof(float) * (size_t)std::max<int64_t>(1, o.b ? o.n : 0));
        if (o.b) std::memcpy(bb.data(), o.b, sizeof(float) * (size_t)o.n);
        const bool gelu = o.k == row_op::kind::gelu_mul || o.k == row_op::kind::gelu_quick_mul;
        const vk::buffer& tables = gelu ? gelu_tables() : wb;  // any buffer where no table is read
        const uint32_t groups = (o.k == row_op::kind::rms_norm || o.k == row_op::kind::rope) ? (uint32_t)o.groups : 1;
        // x binding: y itself for a norm in place (or no x at all), else the x rows (one shared row: stride 0)
        const bool x_is_y = in_place || !o.x;
        const vk::buffer* xbind = x_is_y ? &yb : &xb;
        const uint32_t x_stride = (uint32_t)(x_is_y ? width : (x_rows > 1 ? x_width : 0));
        struct {
            uint32_t kind, n, groups, n_rows, y_stride, x_stride, flags;
            float f;
            uint32_t a;
        } pc{(uint32_t)o.k, (uint32_t)o.n, groups, (uint32_t)n, (uint32_t)width, x_stride,
             (uint32_t)((o.x ? 1u : 0u) | (o.w ? 2u : 0u) | (o.b ? 4u : 0u) | (o.style == rope_style::neox ? 8u : 0u)),
             o.k == row_op::kind::hadamard ? 1.0f / std::sqrt((float)o.a) : o.f, (uint32_t)o.a};
        vk::dispatch d{"row_ops", {&yb, xbind, &wb, &bb, &tables}, &pc, sizeof(pc),
                       {groups_for(n * groups, ctx_->max_groups(0)), 1, 1}};
        ctx_->run({d});
        for (int64_t t = 0; t < n; ++t) std::memcpy(o.y + t * o.y_stride, yd + t * width, sizeof(float) * (size_t)width);
    }
}

}  // namespace lp
