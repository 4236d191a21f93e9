// cpu_backend.cpp — see cpu_backend.h.
#include "cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../common.h"
#include "../cpu/delta_net.h"
#include "../cpu/features.h"
#include "../kv_cache.h"
#include "registry.h"

namespace lp {

namespace {

// The fast conversion of a cache type where it has one (F16, BF16, Q8_0),
// else the reference quantizer (Q4_0, Q5_0, IQ4_NL, ...: one row per token).
from_float_fn quantizer(ggml_type t) {
    const type_traits& tt = traits(t);
    return tt.from_float ? tt.from_float : tt.from_float_ref;
}

// One row op on row t.
LP_INLINE void apply(const row_op& o, int64_t t) {
    float* y = o.y + t * o.y_stride;
    const float* x = o.x ? o.x + t * o.x_stride : nullptr;
    switch (o.k) {
        case row_op::kind::rms_norm:
            for (int64_t g = 0; g < o.groups; ++g) rms_norm_row(x + g * o.n, o.w, y + g * o.n, o.n, o.f);
            break;
        case row_op::kind::layer_norm: layer_norm_row(x, o.w, o.b, y, o.n, o.f); break;
        case row_op::kind::add: add_row(y, x, o.n); break;
        case row_op::kind::mul:
            for (int64_t i = 0; i < o.n; ++i) y[i] *= x[i];
            break;
        case row_op::kind::scale: scale_row(y, o.n, o.f); break;
        case row_op::kind::softcap: softcap_row(y, o.n, o.f); break;
        case row_op::kind::gelu_mul: gelu_mul_row(y, x, o.n); break;
        case row_op::kind::silu_mul: silu_mul_row(y, x, o.n); break;
        case row_op::kind::gelu_quick_mul: gelu_quick_mul_row(y, x, o.n); break;
        case row_op::kind::rope: rope_apply(y, (int)o.groups, (int)o.n, o.a, o.style, x); break;
        case row_op::kind::hadamard: hadamard_blocks(y, o.n, o.a); break;
        case row_op::kind::copy:
            for (int64_t g = 0; g < o.groups; ++g)
                std::memcpy(y + g * o.y_group, x + g * o.x_group, sizeof(float) * (size_t)o.n);
            break;
        case row_op::kind::weighted_sum: {
            // each product rounded, then summed in slot order (llama.cpp: mul, then add the views)
            const float* w = o.w + t * o.groups;
            for (int64_t i = 0; i < o.n; ++i) y[i] = w[0] * x[i];
            for (int64_t g = 1; g < o.groups; ++g) {
                const float* xg = x + g * o.n;
                for (int64_t i = 0; i < o.n; ++i) y[i] += w[g] * xg[i];
            }
            break;
        }
        case row_op::kind::swiglu_oai:
            for (int64_t i = 0; i < o.n; ++i) {
                const float g = std::min(y[i], o.f), u = std::clamp(x[i], -o.f, o.f);
                y[i] = g / (1.0f + std::exp(o.f2 * (-g))) * (u + 1.0f);
            }
            break;
        // ggml's formulas: sigmoid 1 / (1 + e^-v); softplus ln(1 + e^v), v itself above 20
        case row_op::kind::sigmoid_mul:
            if (x) for (int64_t i = 0; i < o.n; ++i) y[i] *= 1.0f / (1.0f + std::exp(-x[i]));
            else for (int64_t i = 0; i < o.n; ++i) y[i] = 1.0f / (1.0f + std::exp(-y[i]));
            break;
        case row_op::kind::softplus_mul:
            for (int64_t i = 0; i < o.n; ++i) {
                const float v = y[i] + o.b[i];
                y[i] = (v > 20.0f ? v : std::log(1.0f + std::exp(v))) * o.w[i];
            }
            break;
        case row_op::kind::scale_by: scale_row(y, o.n, x[0]); break;
        case row_op::kind::kv_store: {
            uint8_t* d = o.dst + (size_t)o.cells[t] * o.dst_row_bytes;
            if (o.type == ggml_type::F32) std::memcpy(d, x, sizeof(float) * (size_t)o.n);
            else quantizer(o.type)(x, d, o.n);
            break;
        }
    }
}

}  // namespace

cpu_backend::cpu_backend(const hparams& hp, int64_t n_ub, int64_t n_cells, int n_threads, attention_path path)
    : kernels_(hp.v.encoder ? matmul_kernels::throughput : matmul_kernels::consistent) {
    // Quantized or packed activations of the widest input.
    const int64_t widest = std::max({hp.n_embd, hp.ffn_width() / 2, hp.n_head * hp.head_dim_v});
    mm_.act.reserve(packed_act_bytes_max(n_ub, widest) + 1024);
    if (hp.moe.n_expert > 0)
        moe_.reserve(n_ub * hp.moe.n_expert_used, hp.moe.n_expert, std::max(hp.n_embd, hp.moe.n_ff_exp));
    attn_.reserve(path, n_threads, n_cells, attention_shapes(hp));
}

std::vector<attention_shape> attention_shapes(const hparams& hp) {
    std::vector<attention_shape> out;
    for (int64_t il = 0; il < std::max<int64_t>(hp.n_layer, 1); ++il) {
        const int64_t kv = hp.shapes.empty() ? hp.n_head_kv : hp.shapes[(size_t)il].n_head_kv;
        const attention_shape s{(int)(hp.n_head / kv), (int)hp.layer_head_dim_k(il), (int)hp.layer_head_dim_v(il),
                                (int)kv};
        bool seen = false;
        for (const attention_shape& o : out)
            seen = seen || (o.n_gqa == s.n_gqa && o.head_dim_k == s.head_dim_k && o.head_dim_v == s.head_dim_v &&
                            o.n_head_kv == s.n_head_kv);
        if (!seen) out.push_back(s);
    }
    return out;
}

cpu_backend::cpu_backend(thread_pool& pool) : pool_(&pool) {}

template <class F> void cpu_backend::for_rows(int64_t n, const F& fn) {
    if (n == 1 || pool_->n_threads() == 1) {
        for (int64_t t = 0; t < n; ++t) fn(t);
        return;
    }
    pool_->parallel_for(n, [&](int64_t t, int) { fn(t); });
}

void cpu_backend::matmul(const weight_view& w, const float* x, int64_t xs, float* y, int64_t ys, int64_t n,
                         const lora_work& lora) {
    lp::matmul(w, x, xs, n, y, ys, *pool_, mm_, best_isa(), kernels_);
    if (!lora.terms) return;
    for (const lora_set::term& t : *lora.terms) {
        const int64_t rank = t.a.n_rows, n_out = t.b.n_rows;
        lp::matmul(t.a, x, xs, n, lora.ax, rank, *pool_, mm_, best_isa());
        lp::matmul(t.b, lora.ax, rank, n, lora.bax, n_out, *pool_, mm_, best_isa());
        for_rows(n, [&](int64_t r) {
            float* yr = y + r * ys;
            const float* br = lora.bax + r * n_out;
            for (int64_t i = 0; i < n_out; ++i) yr[i] += t.scale * br[i];
        });
    }
}

void cpu_backend::get_rows(const weight_view& table, const int32_t* ids, float* y, int64_t ys, int64_t n) {
    const to_float_fn to_float = traits(table.type).to_float;
    const uint8_t* base = static_cast<const uint8_t*>(table.data);
    for_rows(n, [&](int64_t t) { to_float(base + (size_t)ids[t] * table.row_stride, y + t * ys, table.n_cols); });
}

void cpu_backend::gather_rows(float* data, int64_t stride, int64_t n_cols, const int32_t* idx, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        if (idx[i] == i) continue;
        std::memcpy(data + i * stride, data + idx[i] * stride, sizeof(float) * (size_t)n_cols);
    }
}

void cpu_backend::rope_table(const rope_params& p, const int32_t* pos, int64_t pos_stride, float* out, int64_t n) {
    for_rows(n, [&](int64_t t) { rope_table_row(p, pos, pos_stride, t, out + t * p.n_rot); });
}

void cpu_backend::moe_route(const moe_route_args& a) { lp::moe_route(a, *pool_); }

void cpu_backend::moe_matmul(const experts_view& w, const float* x, int64_t xs, int x_div, const int32_t* ids,
                             int64_t n_slots, float* y, int64_t ys, const float* bias) {
    lp::moe_matmul(w, x, xs, x_div, ids, n_slots, y, ys, bias, *pool_, moe_, best_isa());
}

void cpu_backend::attention(const attention_args& a) {
    attention_args b = a;
    b.path = attn_.path;  // the path the scratch was reserved for (the context's flash_attn)
    lp::attention(b, *pool_, attn_);
}

// Channels / heads are independent and each walks all rows in order: split
// them over the threads (a decode step's one row has thousands of channels).
void cpu_backend::ssm_conv(const ssm_conv_args& a) {
    const int64_t n_jobs = std::min<int64_t>(a.n_ch, 8 * (int64_t)pool_->n_threads());
    const int64_t per = (a.n_ch + n_jobs - 1) / n_jobs;
    pool_->parallel_for(n_jobs, [&](int64_t j, int) { ssm_conv_ref(a, j * per, std::min(a.n_ch, (j + 1) * per)); });
}

void cpu_backend::gated_delta(const gated_delta_args& a) {
    if ((int)delta_work_.size() < pool_->n_threads()) delta_work_.resize((size_t)pool_->n_threads());
    pool_->parallel_for(a.n_head_v, [&](int64_t h, int th) {
        lp::gated_delta(a, (int)h, (int)h + 1, gated_delta_plan{}, delta_work_[(size_t)th]);
    });
}

void cpu_backend::ssm_scan(const ssm_scan_args& a) {
    pool_->parallel_for(a.n_head, [&](int64_t h, int) { lp::ssm_scan(a, (int)h, (int)h + 1); });
}

void cpu_backend::run_rows(const row_op* ops, int n_ops, int64_t n) {
    for_rows(n, [&](int64_t t) {
        for (int i = 0; i < n_ops; ++i) apply(ops[i], t);
    });
}

size_t cpu_backend::scratch_bytes() const {
    size_t delta = 0;
    for (const std::vector<float>& w : delta_work_) delta += sizeof(float) * w.capacity();
    return mm_.act.capacity() + moe_.bytes() + attn_.bytes() + delta;
}

namespace {

// The host backend in the registry (registry.h): no devices of its own (its
// memory is the host's), every readable weight type, every KV cache type.
class cpu_factory final : public backend_factory {
public:
    const char* name() const override { return "cpu"; }
    const char* title() const override { return "CPU"; }
    std::unique_ptr<backend> create(int index, thread_pool* pool) const override {
        if (index != 0 || !pool) throw value_error("the cpu backend runs on the host, over a thread pool");
        return std::make_unique<cpu_backend>(*pool);
    }
    bool has_matmul(ggml_type t) const override { return traits(t).vec_dot != nullptr; }
    bool has_kv_store(ggml_type t) const override { return kv_cache_type_ok(t); }
};

}  // namespace

const backend_factory& cpu_backend_factory() {
    static const cpu_factory f;
    return f;
}

}  // namespace lp
