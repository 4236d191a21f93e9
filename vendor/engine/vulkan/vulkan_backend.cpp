// vulkan_backend.cpp — see vulkan_backend.h.
#include "vulkan_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>

#include "../common.h"
#include "../cpu/ops.h"
#include "../model/model.h"
#include "vk_runtime.h"

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
        case ggml_type::MXFP4: return "mxfp4";
        case ggml_type::TQ1_0: return "tq1_0";
        case ggml_type::TQ2_0: return "tq2_0";
        case ggml_type::IQ4_NL: return "iq4_nl";
        case ggml_type::IQ4_XS: return "iq4_xs";
        case ggml_type::IQ2_XXS: return "iq2_xxs";
        case ggml_type::IQ2_XS: return "iq2_xs";
        case ggml_type::IQ2_S: return "iq2_s";
        case ggml_type::IQ3_XXS: return "iq3_xxs";
        case ggml_type::IQ3_S: return "iq3_s";
        case ggml_type::IQ1_S: return "iq1_s";
        case ggml_type::IQ1_M: return "iq1_m";
        default: return nullptr;
    }
}

// Types convert.comp writes (its header lists them).
bool convertible(ggml_type t) {
    switch (t) {
        case ggml_type::F32:
        case ggml_type::F16:
        case ggml_type::BF16:
        case ggml_type::Q4_0:
        case ggml_type::Q4_1:
        case ggml_type::Q5_0:
        case ggml_type::Q5_1:
        case ggml_type::Q8_0:
        case ggml_type::Q8_1:
        case ggml_type::Q8_K:
        case ggml_type::IQ4_NL: return true;
        default: return false;
    }
}

[[noreturn]] void missing(const std::string& what) {
    throw not_implemented_error("the vulkan backend has no " + what + " yet");
}

// Workgroups along one axis for `n` items, within the device's limit (the
// shaders loop over the rest).
uint32_t groups_for(int64_t n, uint32_t limit) { return (uint32_t)std::max<int64_t>(1, std::min<int64_t>(n, limit)); }

// Bytes of n rows of `width` floats, `stride` floats apart (stride 0: one shared row).
size_t rows_bytes(int64_t n, int64_t stride, int64_t width) {
    if (n <= 0 || width <= 0) return 0;
    return sizeof(float) * (size_t)((stride == 0 ? 0 : (n - 1) * stride) + width);
}

uint32_t u32(int64_t v) { return (uint32_t)v; }

// Elements per invocation of convert.comp for type t.
int64_t convert_unit(ggml_type t) {
    return t == ggml_type::Q8_K ? 256 : (t == ggml_type::F32 ? 1 : (t == ggml_type::F16 || t == ggml_type::BF16) ? 2 : 32);
}
uint32_t float_off(const vulkan_backend::span& s) { return (uint32_t)(s.off / sizeof(float)); }

// --- device memory: pointers into device_buffers allocated on a GPU ----------

struct registry {
    std::mutex m;
    std::map<const uint8_t*, vk::buffer*> by_base;
};
registry& reg() {
    static registry* r = new registry;  // never destroyed: buffers may outlive static destruction order
    return *r;
}

// The device buffer holding [p, p + bytes), or null.
vk::buffer* device_memory(const void* p, size_t bytes, size_t* off) {
    registry& r = reg();
    std::lock_guard<std::mutex> lock(r.m);
    const auto* b = static_cast<const uint8_t*>(p);
    auto it = r.by_base.upper_bound(b);
    if (it == r.by_base.begin()) return nullptr;
    --it;
    const size_t at = (size_t)(b - it->first);
    if (at >= it->second->bytes()) return nullptr;
    if (at + bytes > it->second->bytes())
        throw std::logic_error("vulkan: an operand runs past the end of its device buffer");
    *off = at;
    return it->second;
}

}  // namespace

void* vulkan_alloc(int index, size_t bytes, void** handle) {
    auto* b = new vk::buffer(vk::context::get(index), bytes);
    registry& r = reg();
    std::lock_guard<std::mutex> lock(r.m);
    r.by_base[static_cast<const uint8_t*>(b->data())] = b;
    *handle = b;
    return b->data();
}

void vulkan_free(void* handle) {
    auto* b = static_cast<vk::buffer*>(handle);
    if (!b) return;
    {
        registry& r = reg();
        std::lock_guard<std::mutex> lock(r.m);
        r.by_base.erase(static_cast<const uint8_t*>(b->data()));
    }
    delete b;
}

uint64_t vulkan_allocated(int index) { return vk::context::get(index).allocated(); }

uint64_t vulkan_heap_bytes(int index) {
    const auto& ds = vk::devices();
    if (index < 0 || index >= (int)ds.size()) return 0;
    return ds[(size_t)index].memory;
}

bool vulkan_backend::has_matmul(ggml_type t) { return type_suffix(t) != nullptr; }

bool vulkan_backend::runs_matmul(ggml_type t) { return has_matmul(t) || traits(t).to_float != nullptr; }

bool vulkan_backend::has_kv_store(ggml_type t) { return convertible(t) && t != ggml_type::Q8_1 && t != ggml_type::Q8_K; }

vulkan_backend::vulkan_backend(int index)
    : index_(index), ctx_(&vk::context::get(index)), sg_(ctx_->info().subgroup_ops ? "_sg" : "") {}

vulkan_backend::~vulkan_backend() { discard(); }

size_t vulkan_backend::scratch_bytes() const {
    size_t b = 0;
    for (const auto& c : arena_) b += c->bytes();
    return b;
}

const vulkan_backend::dev_weights& vulkan_backend::weights(const weight_view& w) {
    auto it = weights_.find(w.data);
    if (it != weights_.end()) return it->second;
    // Weights live in device-local memory (a discrete GPU's own), uploaded
    // once through a staging buffer; only the shaders read them.
    dev_weights dw{nullptr, w.type, w.row_stride};
    if (has_matmul(w.type)) {
        const size_t bytes = w.row_stride * (size_t)w.n_rows;
        dw.buf = std::make_unique<vk::buffer>(*ctx_, bytes, false);
        ctx_->upload(*dw.buf, 0, w.data, bytes);
    } else {
        // No shader for the type: dequantized (the CPU's to_float) to F16 rows.
        const type_traits& tt = traits(w.type);
        if (!tt.to_float) missing(std::string("matmul for ") + type_name(w.type) + " weights");
        dw.type = ggml_type::F16;
        dw.row_bytes = row_size(ggml_type::F16, w.n_cols);
        std::vector<uint8_t> f16(dw.row_bytes * (size_t)w.n_rows);
        std::vector<float> row((size_t)w.n_cols);
        for (int64_t r = 0; r < w.n_rows; ++r) {
            tt.to_float(static_cast<const uint8_t*>(w.data) + (size_t)r * w.row_stride, row.data(), w.n_cols);
            traits(ggml_type::F16).from_float_ref(row.data(), f16.data() + (size_t)r * dw.row_bytes, w.n_cols);
        }
        dw.buf = std::make_unique<vk::buffer>(*ctx_, f16.size(), false);
        ctx_->upload(*dw.buf, 0, f16.data(), f16.size());
    }
    weight_bytes_ += dw.buf->bytes();
    return weights_.emplace(w.data, std::move(dw)).first->second;
}

const vk::buffer& vulkan_backend::f32_weight(const float* data, int64_t n) {
    weight_view w;
    w.type = ggml_type::F32;
    w.n_rows = 1;
    w.n_cols = n;
    w.data = data;
    w.row_stride = sizeof(float) * (size_t)n;
    return *weights(w).buf;
}

const vk::buffer& vulkan_backend::f32_weight_pair(const float* a, const float* b, int64_t n) {
    std::unique_ptr<vk::buffer>& buf = weight_pairs_[{a, b}];
    if (!buf) {
        std::vector<float> both(a, a + n);
        if (b) both.insert(both.end(), b, b + n);
        buf = std::make_unique<vk::buffer>(*ctx_, sizeof(float) * both.size(), false);
        ctx_->upload(*buf, 0, both.data(), sizeof(float) * both.size());
        weight_bytes_ += buf->bytes();
    }
    return *buf;
}

void vulkan_backend::forget_weights(const void* data) {
    auto it = weights_.find(data);
    if (it == weights_.end()) return;
    sync();  // recorded work may still read the copy
    weight_bytes_ -= it->second.buf->bytes();
    weights_.erase(it);
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

// --- the step: arena, staging, recording, sync ---------------------------------

vulkan_backend::span vulkan_backend::scratch(size_t bytes) {
    bytes = (std::max<size_t>(bytes, 4) + 255) & ~(size_t)255;  // 256-byte aligned pieces
    while (arena_chunk_ < arena_.size() && arena_used_ + bytes > arena_[arena_chunk_]->bytes()) {
        ++arena_chunk_;
        arena_used_ = 0;
    }
    if (arena_chunk_ == arena_.size()) {
        arena_.push_back(std::make_unique<vk::buffer>(*ctx_, std::max<size_t>(bytes, (size_t)32 << 20)));
        arena_used_ = 0;
    }
    span s{arena_[arena_chunk_].get(), arena_used_};
    arena_used_ += bytes;
    return s;
}

void vulkan_backend::bind(operand* ops, int n) {
    for (int attempt = 0; attempt < 2; ++attempt) {
        bool conflict = false;
        for (int i = 0; i < n; ++i) {
            operand& o = ops[i];
            o.at = span{};
            if (!o.p || o.bytes == 0) continue;
            size_t off = 0;
            if (vk::buffer* b = device_memory(o.p, o.bytes, &off); b && b->owner() == ctx_) {
                o.at = span{b, off};
                continue;
            }
            // Host memory, or another device's (mapped; a layer split hands
            // activations across, and that device's work has finished: the
            // pass syncs it at the part boundary): staged like host memory.
            const auto* h = static_cast<const uint8_t*>(o.p);
            for (staged& s : staged_) {
                const bool inside = h >= s.host && h + o.bytes <= s.host + s.bytes;
                const bool overlaps = h < s.host + s.bytes && s.host < h + o.bytes;
                if (inside) {
                    o.at = span{s.at.buf, s.at.off + (size_t)(h - s.host)};
                    s.write = s.write || o.write;
                    break;
                }
                if (overlaps) conflict = true;
            }
        }
        if (conflict && attempt == 0) {
            sync();  // a fresh start: nothing staged, so the ranges below merge freely
            continue;
        }
        // Unresolved host ranges: staged as the merged intervals they cover.
        std::vector<int> open;
        for (int i = 0; i < n; ++i)
            if (ops[i].p && ops[i].bytes && !ops[i].at.buf) open.push_back(i);
        std::sort(open.begin(), open.end(), [&](int a, int b) { return ops[a].p < ops[b].p; });
        for (size_t k = 0; k < open.size();) {
            const auto* lo = static_cast<const uint8_t*>(ops[open[k]].p);
            const uint8_t* hi = lo + ops[open[k]].bytes;
            bool write = ops[open[k]].write;
            size_t e = k + 1;
            for (; e < open.size(); ++e) {
                const auto* p = static_cast<const uint8_t*>(ops[open[e]].p);
                if (p >= hi) break;
                hi = std::max(hi, p + ops[open[e]].bytes);
                write = write || ops[open[e]].write;
            }
            const size_t bytes = (size_t)(hi - lo);
            const span at = scratch(bytes);
            std::memcpy(static_cast<uint8_t*>(const_cast<void*>(at.buf->data())) + at.off, lo, bytes);
            staged_.push_back(staged{lo, bytes, at, write});
            for (size_t j = k; j < e; ++j) {
                operand& o = ops[open[j]];
                o.at = span{at.buf, at.off + (size_t)(static_cast<const uint8_t*>(o.p) - lo)};
            }
            k = e;
        }
        return;
    }
}

void vulkan_backend::record(vk::dispatch&& d) { pending_.push_back(std::move(d)); }

void vulkan_backend::sync() {
    if (!pending_.empty()) {
        std::vector<vk::dispatch> work;
        work.swap(pending_);
        try {
            ctx_->run(work);
        } catch (...) {
            discard();
            throw;
        }
    }
    for (const staged& s : staged_)
        if (s.write)
            std::memcpy(const_cast<uint8_t*>(s.host), static_cast<const uint8_t*>(s.at.buf->data()) + s.at.off,
                        s.bytes);
    staged_.clear();
    arena_chunk_ = 0;
    arena_used_ = 0;
}

void vulkan_backend::discard() {
    pending_.clear();
    staged_.clear();
    arena_chunk_ = 0;
    arena_used_ = 0;
}

// --- ops -------------------------------------------------------------------------

vulkan_backend::span vulkan_backend::dot_activations(ggml_type at, const span& x, int64_t xs, int64_t n_cols,
                                                     int64_t n, size_t* a_row) {
    if (at == ggml_type::F32) {  // F32 weights read x in place
        *a_row = sizeof(float) * (size_t)xs;
        return x;
    }
    *a_row = (row_size(at, n_cols) + 3) & ~(size_t)3;  // word-aligned rows
    const span a = scratch(*a_row * (size_t)n);
    struct {
        uint32_t type, n, n_rows, x_off, x_stride, d_off, d_row_bytes, c_off, f_off, f_stride, mode, flags;
    } pc{(uint32_t)at, u32(n_cols), u32(n), float_off(x), u32(xs), (uint32_t)a.off, (uint32_t)*a_row, 0, 0, 0, 0, 0};
    vk::dispatch d;
    d.shader = "convert";
    d.buffers = {x.buf, a.buf, a.buf, a.buf};
    d.set_push(pc);
    const int64_t be = convert_unit(at);
    d.groups[0] = groups_for((n * ((n_cols + be - 1) / be) + 63) / 64, ctx_->max_groups(0));
    record(std::move(d));
    return a;
}

namespace {

// Invocations per weight row in matmul.comp: the row's blocks (elements for
// float types), a power of two up to 64.
uint32_t matmul_lanes(ggml_type t, int64_t n_cols) {
    const int64_t units = traits(t).block_size > 1 ? n_cols / traits(t).block_size : n_cols;
    uint32_t lanes = 1;
    while (lanes < 64 && (int64_t)lanes < units) lanes *= 2;
    return lanes;
}

// The format matmul.comp takes activations in for weights stored as t.
ggml_type dot_format(ggml_type t) {
    const ggml_type at = traits(t).vec_dot_type;
    if (!convertible(at)) missing(std::string("activation conversion to ") + type_name(at));
    return at;
}

}  // namespace

void vulkan_backend::matmul(const weight_view& w, const float* x, int64_t xs, float* y, int64_t ys, int64_t n,
                            const lora_work& lora) {
    if (n <= 0 || w.n_rows <= 0) return;
    const dev_weights& dw = weights(w);
    const ggml_type at = dot_format(dw.type);
    operand ops[2] = {{x, rows_bytes(n, xs, w.n_cols), false, {}}, {y, rows_bytes(n, ys, w.n_rows), true, {}}};
    bind(ops, 2);
    const span ya = ops[1].at;
    size_t a_row = 0;
    const span a = dot_activations(at, ops[0].at, xs, w.n_cols, n, &a_row);
    const uint32_t lanes = matmul_lanes(dw.type, w.n_cols);
    struct {
        uint32_t n_rows, n_cols, n_tok, w_row_bytes, a_row_bytes, y_stride, a_off, y_off, lanes;
    } pc{u32(w.n_rows), u32(w.n_cols), u32(n), (uint32_t)dw.row_bytes, (uint32_t)a_row, u32(ys), (uint32_t)a.off,
         float_off(ya), lanes};
    vk::dispatch d;
    d.shader = std::string("matmul_") + type_suffix(dw.type) + sg_;
    d.buffers = {dw.buf.get(), a.buf, ya.buf};
    d.set_push(pc);
    d.groups[0] = groups_for((w.n_rows + 64 / lanes - 1) / (64 / lanes), ctx_->max_groups(0));
    constexpr int64_t kTokenTile = 8;  // matmul.comp's TT: tokens per workgroup
    d.groups[1] = groups_for((n + kTokenTile - 1) / kTokenTile, ctx_->max_groups(1));
    record(std::move(d));
    if (!lora.terms) return;
    // The LoRA terms as the CPU adds them: y += scale · B (A x), term by term.
    for (const lora_set::term& t : *lora.terms) {
        const int64_t rank = t.a.n_rows, n_out = t.b.n_rows;
        matmul(t.a, x, xs, lora.ax, rank, n, {});
        matmul(t.b, lora.ax, rank, lora.bax, n_out, n, {});
        row_op ops[2];
        ops[0].k = row_op::kind::scale;
        ops[0].y = lora.bax;
        ops[0].y_stride = n_out;
        ops[0].n = n_out;
        ops[0].f = t.scale;
        ops[1].k = row_op::kind::add;
        ops[1].y = y;
        ops[1].y_stride = ys;
        ops[1].x = lora.bax;
        ops[1].x_stride = n_out;
        ops[1].n = n_out;
        run_rows(ops, 2, n);
    }
}

void vulkan_backend::get_rows(const weight_view& table, const int32_t* ids, float* y, int64_t ys, int64_t n) {
    if (n <= 0) return;
    const dev_weights& dw = weights(table);
    const vk::buffer& wb = *dw.buf;
    const char* suffix = type_suffix(dw.type);
    operand ops[2] = {{ids, sizeof(int32_t) * (size_t)n, false, {}}, {y, rows_bytes(n, ys, table.n_cols), true, {}}};
    bind(ops, 2);
    struct {
        uint32_t n_ids, n_cols, row_bytes, y_stride, ids_off, y_off;
    } pc{u32(n), u32(table.n_cols), (uint32_t)dw.row_bytes, u32(ys), (uint32_t)(ops[0].at.off / 4),
         float_off(ops[1].at)};
    vk::dispatch d;
    d.shader = std::string("get_rows_") + suffix;
    d.buffers = {&wb, ops[0].at.buf, ops[1].at.buf};
    d.set_push(pc);
    d.groups[0] = groups_for(n, ctx_->max_groups(0));
    record(std::move(d));
}

void vulkan_backend::gather_rows(float* data, int64_t stride, int64_t n_cols, const int32_t* idx, int64_t n) {
    if (n <= 0) return;
    const int64_t last = idx[n - 1];  // ascending: the highest row read
    operand ops[2] = {{data, rows_bytes(last + 1, stride, n_cols), true, {}}, {idx, sizeof(int32_t) * (size_t)n, false, {}}};
    bind(ops, 2);
    struct {
        uint32_t off, stride, n_cols, n, idx_off;
    } pc{float_off(ops[0].at), u32(stride), u32(n_cols), u32(n), (uint32_t)(ops[1].at.off / 4)};
    vk::dispatch d;
    d.shader = "gather";
    d.buffers = {ops[0].at.buf, ops[1].at.buf};
    d.set_push(pc);
    record(std::move(d));
}

void vulkan_backend::rope_table(const rope_params& p, const int32_t* pos, int64_t pos_stride, float* out, int64_t n) {
    // The angles of this step's positions, with the CPU's sin / cos (a GPU's
    // differ in the last bits): an input of the step, like the masks. A
    // device-resident table is written only after its readers finished.
    size_t off = 0;
    if (device_memory(out, rows_bytes(n, p.n_rot, p.n_rot), &off)) sync();
    for (int64_t t = 0; t < n; ++t) rope_table_row(p, pos, pos_stride, t, out + t * p.n_rot);
}

void vulkan_backend::moe_route(const moe_route_args& a) {
    if (a.n_tok <= 0) return;
    // the CPU's argument checks (cpu/moe.cpp), then moe_route.comp's limits
    if (a.k <= 0 || a.k > a.n_expert) throw value_error("moe_route: experts per row out of range");
    if (a.n_group > 1 && (a.n_group > 256 || a.n_expert % a.n_group != 0 || a.n_group_used <= 0 ||
                          a.n_group_used > a.n_group))
        throw value_error("moe_route: bad expert groups");
    if (a.n_expert > 512) missing("routing over more than 512 experts");
    if (a.k > 32) missing("routing to more than 32 experts per row");
    operand ops[4] = {{a.logits, rows_bytes(a.n_tok, a.logits_stride, a.n_expert), false, {}},
                      {a.bias, a.bias ? sizeof(float) * (size_t)a.n_expert : 0, false, {}},
                      {a.ids, sizeof(int32_t) * (size_t)(a.n_tok * a.k), true, {}},
                      {a.weights, sizeof(float) * (size_t)(a.n_tok * a.k), true, {}}};
    bind(ops, 4);
    struct {
        uint32_t n_tok, n_expert, k, logits_off, logits_stride, bias_off, gating, n_group, n_group_used, norm;
        float scale;
        uint32_t ids_off, w_off, es_off;
    } pc{u32(a.n_tok), u32(a.n_expert), (uint32_t)a.k, float_off(ops[0].at), u32(a.logits_stride),
         ops[1].at.buf ? float_off(ops[1].at) : 0xffffffffu, (uint32_t)a.gating, (uint32_t)std::max(a.n_group, 0),
         (uint32_t)std::max(a.n_group_used, 0), a.norm ? 1u : 0u, a.scale, (uint32_t)(ops[2].at.off / 4),
         float_off(ops[3].at), a.expert_scale ? 0u : 0xffffffffu};
    // Gemma 4's per-expert output scales: a weight of the layer (f32_weight)
    const vk::buffer* es = a.expert_scale ? &f32_weight(a.expert_scale, a.n_expert) : nullptr;
    vk::dispatch d;
    d.shader = "moe_route";
    d.buffers = {ops[0].at.buf, ops[1].at.buf ? ops[1].at.buf : ops[0].at.buf, ops[2].at.buf, ops[3].at.buf,
                 es ? es : ops[0].at.buf};  // no scales: any buffer stands for them
    d.set_push(pc);
    d.groups[0] = groups_for(a.n_tok, ctx_->max_groups(0));
    record(std::move(d));
}

void vulkan_backend::moe_matmul(const experts_view& w, const float* x, int64_t xs, int x_div, const int32_t* ids,
                                int64_t n_slots, float* y, int64_t ys, const float* bias) {
    if (w.n_expert <= 0 || w.all.n_rows % w.n_expert != 0)
        throw value_error("moe_matmul: " + std::to_string(w.all.n_rows) + " rows do not split into " +
                          std::to_string(w.n_expert) + " experts");
    if (n_slots <= 0) return;
    if (x_div < 1 || n_slots % x_div != 0) throw value_error("moe_matmul: the slots do not split into x's rows");
    size_t at_dev = 0;
    if (!device_memory(ids, sizeof(int32_t) * (size_t)n_slots, &at_dev)) {
        // Host ids (the op tests) are checked as the CPU checks them; ids on
        // the device come from moe_route, in range by construction (the
        // shader writes a NaN row for one that is not, and reads nothing).
        for (int64_t s = 0; s < n_slots; ++s)
            if (ids[s] < 0 || ids[s] >= w.n_expert)
                throw value_error("moe_matmul: slot " + std::to_string(s) + " names expert " + std::to_string(ids[s]) +
                                  " of " + std::to_string(w.n_expert));
    }
    const int64_t R = w.rows(), K = w.all.n_cols, n_x = n_slots / x_div;
    const dev_weights& dw = weights(w.all);
    const ggml_type at = dot_format(dw.type);
    operand ops[4] = {{x, rows_bytes(n_x, xs, K), false, {}},
                      {ids, sizeof(int32_t) * (size_t)n_slots, false, {}},
                      {y, rows_bytes(n_slots, ys, R), true, {}},
                      {bias, bias ? sizeof(float) * (size_t)(w.n_expert * R) : 0, false, {}}};
    bind(ops, 4);
    size_t a_row = 0;
    const span a = dot_activations(at, ops[0].at, xs, K, n_x, &a_row);
    const uint32_t lanes = matmul_lanes(dw.type, K);
    struct {
        uint32_t n_rows, n_cols, n_tok, w_row_bytes, a_row_bytes, y_stride, a_off, y_off, lanes;
        uint32_t n_expert, ids_off, x_div, bias_off;
    } pc{u32(R), u32(K), u32(n_slots), (uint32_t)dw.row_bytes, (uint32_t)a_row, u32(ys), (uint32_t)a.off,
         float_off(ops[2].at), lanes, u32(w.n_expert), (uint32_t)(ops[1].at.off / 4), (uint32_t)x_div,
         ops[3].at.buf ? float_off(ops[3].at) : 0xffffffffu};
    vk::dispatch d;
    d.shader = std::string("moe_matmul_") + type_suffix(dw.type) + sg_;
    d.buffers = {dw.buf.get(), a.buf, ops[2].at.buf, ops[1].at.buf, ops[3].at.buf ? ops[3].at.buf : ops[2].at.buf};
    d.set_push(pc);
    d.groups[0] = groups_for((R + 64 / lanes - 1) / (64 / lanes), ctx_->max_groups(0));
    d.groups[1] = groups_for(n_slots, ctx_->max_groups(1));  // one slot per workgroup column (matmul.comp's MOE)
    record(std::move(d));
}

void vulkan_backend::attention(const attention_args& a) {
    if (a.n_tok <= 0) return;
    const int dk = a.head_dim_k, dv = a.head_dim_v;
    int32_t n_cells = 0;  // the cells any row sees lie below the largest hi
    for (int t = 0; t < a.n_tok; ++t) n_cells = std::max(n_cells, a.hi[t]);
    const int64_t qw = (int64_t)a.n_head * dk, ow = (int64_t)a.n_head * dv;
    operand ops[7] = {
        {a.q, rows_bytes(a.n_tok, a.q_stride, qw), false, {}},
        {a.k, a.k_row_bytes * (size_t)n_cells, false, {}},
        {a.v, a.v_row_bytes * (size_t)n_cells, false, {}},
        {a.mask, sizeof(uint64_t) * (size_t)(a.n_tok * a.mask_words), false, {}},
        {a.lo, sizeof(int32_t) * (size_t)a.n_tok, false, {}},
        {a.hi, sizeof(int32_t) * (size_t)a.n_tok, false, {}},
        {a.out, rows_bytes(a.n_tok, a.out_stride, ow), true, {}},
    };
    bind(ops, 7);
    if (n_cells > 0 && (!ops[1].at.buf || !ops[2].at.buf)) throw value_error("vulkan attention: no keys or values");
    std::vector<vk::dispatch> work;
    // Queries as the CPU's kernels see them: rounded to the keys' dot format.
    const ggml_type qfmt = a.type_k == ggml_type::F32 || a.type_k == ggml_type::F16 || a.type_k == ggml_type::BF16
                               ? a.type_k : traits(a.type_k).vec_dot_type;
    span q = ops[0].at;
    int64_t q_stride = a.q_stride;
    if (qfmt != ggml_type::F32) {
        if (qfmt != ggml_type::F16 && qfmt != ggml_type::BF16 && qfmt != ggml_type::Q8_0 && qfmt != ggml_type::Q8_1)
            missing(std::string("query conversion to ") + type_name(qfmt));
        q = scratch(sizeof(float) * (size_t)(a.n_tok * qw));
        q_stride = qw;
        struct {
            uint32_t type, n, n_rows, x_off, x_stride, d_off, d_row_bytes, c_off, f_off, f_stride, mode, flags;
        } pc{(uint32_t)qfmt, u32(qw), u32(a.n_tok), float_off(ops[0].at), u32(a.q_stride), 0, 0, 0, float_off(q),
             u32(qw), 1, 0};
        vk::dispatch d;
        d.shader = "convert";
        d.buffers = {ops[0].at.buf, q.buf, q.buf, q.buf};
        d.set_push(pc);
        const int64_t be = convert_unit(qfmt);
        d.groups[0] = groups_for(((int64_t)a.n_tok * ((qw + be - 1) / be) + 63) / 64, ctx_->max_groups(0));
        work.push_back(std::move(d));
    }
    // The scores' scratch, after the sink logits when there are sinks: they
    // are weights (host memory, or mapped device memory no op writes), copied
    // in now, which keeps the shader at 8 storage buffers.
    const size_t n_sink = a.sinks ? (size_t)a.n_head : 0;
    const span sc = scratch(sizeof(float) * (n_sink + std::max<size_t>(1, (size_t)a.n_tok * a.n_head * (size_t)n_cells)));
    if (n_sink)
        std::memcpy(static_cast<uint8_t*>(const_cast<void*>(sc.buf->data())) + sc.off, a.sinks, sizeof(float) * n_sink);
    const vk::buffer* kb = ops[1].at.buf ? ops[1].at.buf : sc.buf;  // no cells: any buffer, nothing is read
    const vk::buffer* vb = ops[2].at.buf ? ops[2].at.buf : sc.buf;
    struct {
        uint32_t n_tok, n_head, n_head_kv, dk, dv, type_k, type_v, k_row_bytes, v_row_bytes, mask_words, n_cells;
        float scale, softcap;
        uint32_t q_off, q_stride, k_off, v_off, mask_off, lo_off, hi_off, sc_off, o_off, o_stride;
        uint32_t sink_off;  // attention.comp's NO_SINK (all ones): none
    } pc{(uint32_t)a.n_tok, (uint32_t)a.n_head, (uint32_t)a.n_head_kv, (uint32_t)dk, (uint32_t)dv,
         (uint32_t)a.type_k, (uint32_t)a.type_v, (uint32_t)a.k_row_bytes, (uint32_t)a.v_row_bytes,
         (uint32_t)a.mask_words, (uint32_t)n_cells, a.scale, a.softcap, float_off(q), u32(q_stride),
         (uint32_t)ops[1].at.off, (uint32_t)ops[2].at.off, (uint32_t)(ops[3].at.off / 4), (uint32_t)(ops[4].at.off / 4),
         (uint32_t)(ops[5].at.off / 4), float_off(sc) + (uint32_t)n_sink, float_off(ops[6].at), u32(a.out_stride),
         n_sink ? float_off(sc) : 0xffffffffu};
    vk::dispatch d;
    d.shader = std::string("attention") + sg_;
    auto any = [&](const span& s) { return s.buf ? s.buf : sc.buf; };  // empty operands: nothing is read
    d.buffers = {q.buf, kb, vb, any(ops[3].at), any(ops[4].at), any(ops[5].at), sc.buf, ops[6].at.buf};
    d.set_push(pc);
    d.groups[0] = groups_for((int64_t)a.n_tok * a.n_head, ctx_->max_groups(0));
    work.push_back(std::move(d));
    for (auto& k : work) record(std::move(k));
}

// The recurrent layers' ops (the short convolution, Qwen3.5's gated delta
// rule, Mamba-2's scan): the state slots are operands like any other (device
// memory in place: recurrent_state keeps a device layer's state on its device;
// host memory staged and copied back). The shaders walk the rows in order per
// channel / per state column / per state row (ssm_conv.comp, gated_delta.comp,
// ssm_scan.comp), each row on the slot it names. The slot
// ids are an input of the step as the masks are (host memory, or device
// memory no op writes): read here for the checks and for the extent of the
// state the rows reach.
namespace {
// The highest slot the rows name; throws on a negative one.
int64_t top_slot(const int32_t* slot, int64_t n, const char* op) {
    int32_t top = 0;
    for (int64_t t = 0; t < n; ++t) {
        if (slot[t] < 0) throw value_error(std::string(op) + ": negative state slot");
        top = std::max(top, slot[t]);
    }
    return top;
}
}  // namespace

void vulkan_backend::ssm_conv(const ssm_conv_args& a) {
    if (a.n_tok <= 0 || a.n_ch <= 0) return;
    if (a.d_conv < 1) throw value_error("ssm_conv: kernel width below 1");
    const int64_t nt = a.d_conv - 1, n_slot = top_slot(a.slot, a.n_tok, "ssm_conv") + 1;
    const vk::buffer& wb = f32_weight(a.w, a.n_ch * a.d_conv);
    operand ops[4] = {{a.x, rows_bytes(a.n_tok, a.x_stride, a.n_ch), false, {}},
                      {a.y, rows_bytes(a.n_tok, a.y_stride, a.n_ch), true, {}},
                      {a.state, rows_bytes(n_slot, a.state_stride, a.n_ch * nt), true, {}},
                      {a.slot, sizeof(int32_t) * (size_t)a.n_tok, false, {}}};
    bind(ops, 4);
    struct {
        uint32_t n_tok, n_ch, d_conv, x_off, x_stride, y_off, y_stride, w_off, st_off, st_stride, slot_off;
    } pc{u32(a.n_tok), u32(a.n_ch), (uint32_t)a.d_conv, float_off(ops[0].at), u32(a.x_stride), float_off(ops[1].at),
         u32(a.y_stride), 0, ops[2].at.buf ? float_off(ops[2].at) : 0, u32(a.state_stride),
         (uint32_t)(ops[3].at.off / 4)};
    vk::dispatch d;
    d.shader = "ssm_conv";
    // d_conv 1 keeps no tail: any buffer stands for the empty state
    d.buffers = {ops[0].at.buf, ops[1].at.buf, &wb, ops[2].at.buf ? ops[2].at.buf : ops[1].at.buf, ops[3].at.buf};
    d.set_push(pc);
    d.groups[0] = groups_for((a.n_ch + 63) / 64, ctx_->max_groups(0));
    record(std::move(d));
}

void vulkan_backend::gated_delta(const gated_delta_args& a) {
    if (a.n_tok <= 0 || a.n_head_v <= 0 || a.head_dim <= 0) return;
    if (a.n_head_k <= 0 || a.n_head_v % a.n_head_k != 0)
        throw value_error("gated_delta: the value heads must be a multiple of the key heads");
    const int64_t S = a.head_dim, Hv = a.n_head_v, n_slot = top_slot(a.slot, a.n_tok, "gated_delta") + 1;
    operand ops[8] = {{a.q, rows_bytes(a.n_tok, a.qk_stride, a.n_head_k * S), false, {}},
                      {a.k, rows_bytes(a.n_tok, a.qk_stride, a.n_head_k * S), false, {}},
                      {a.v, rows_bytes(a.n_tok, a.v_stride, Hv * S), false, {}},
                      {a.g, rows_bytes(a.n_tok, a.gb_stride, Hv), false, {}},
                      {a.beta, rows_bytes(a.n_tok, a.gb_stride, Hv), false, {}},
                      {a.out, rows_bytes(a.n_tok, a.out_stride, Hv * S), true, {}},
                      {a.state, rows_bytes(n_slot, a.state_stride, Hv * S * S), true, {}},
                      {a.slot, sizeof(int32_t) * (size_t)a.n_tok, false, {}}};
    bind(ops, 8);
    struct {
        uint32_t n_tok, n_head_k, n_head_v, head_dim;
        uint32_t q_off, k_off, qk_stride, v_off, v_stride;
        uint32_t g_off, b_off, gb_stride, o_off, o_stride;
        uint32_t st_off, st_stride, slot_off;
        float scale;
    } pc{u32(a.n_tok), (uint32_t)a.n_head_k, (uint32_t)a.n_head_v, (uint32_t)a.head_dim, float_off(ops[0].at),
         float_off(ops[1].at), u32(a.qk_stride), float_off(ops[2].at), u32(a.v_stride), float_off(ops[3].at),
         float_off(ops[4].at), u32(a.gb_stride), float_off(ops[5].at), u32(a.out_stride), float_off(ops[6].at),
         u32(a.state_stride), (uint32_t)(ops[7].at.off / 4), a.scale};
    vk::dispatch d;
    d.shader = "gated_delta";
    d.buffers = {ops[0].at.buf, ops[1].at.buf, ops[2].at.buf, ops[3].at.buf,
                 ops[4].at.buf, ops[5].at.buf, ops[6].at.buf, ops[7].at.buf};
    d.set_push(pc);
    d.groups[0] = groups_for((Hv * S + 63) / 64, ctx_->max_groups(0));  // one invocation per (head, state column)
    record(std::move(d));
}

void vulkan_backend::ssm_scan(const ssm_scan_args& a) {
    if (a.n_tok <= 0 || a.n_head <= 0 || a.head_dim <= 0 || a.d_state <= 0) return;
    if (a.n_group <= 0 || a.n_head % a.n_group != 0)
        throw value_error("ssm_scan: the heads must split into the groups");
    const int64_t H = a.n_head, P = a.head_dim, N = a.d_state, GN = (int64_t)a.n_group * N;
    const int64_t n_slot = top_slot(a.slot, a.n_tok, "ssm_scan") + 1;
    // A and D are weights of the layer: uploaded once, side by side (the
    // dispatch's eight bindings are all taken otherwise).
    const vk::buffer& ad = f32_weight_pair(a.A, a.D, H);
    // (x, B and C are usually columns of one row block: bind stages that as one range)
    operand ops[7] = {{a.x, rows_bytes(a.n_tok, a.x_stride, H * P), false, {}},
                      {a.dt, rows_bytes(a.n_tok, a.dt_stride, H), false, {}},
                      {a.B, rows_bytes(a.n_tok, a.bc_stride, GN), false, {}},
                      {a.C, rows_bytes(a.n_tok, a.bc_stride, GN), false, {}},
                      {a.y, rows_bytes(a.n_tok, a.y_stride, H * P), true, {}},
                      {a.state, rows_bytes(n_slot, a.state_stride, H * P * N), true, {}},
                      {a.slot, sizeof(int32_t) * (size_t)a.n_tok, false, {}}};
    bind(ops, 7);
    struct {
        uint32_t n_tok, n_head, head_dim, d_state, n_group;
        uint32_t x_off, x_stride, dt_off, dt_stride, a_off;
        uint32_t b_off, c_off, bc_stride, d_off;
        uint32_t y_off, y_stride, st_off, st_stride, slot_off;
    } pc{u32(a.n_tok), (uint32_t)H, (uint32_t)P, (uint32_t)N, (uint32_t)a.n_group,
         float_off(ops[0].at), u32(a.x_stride), float_off(ops[1].at), u32(a.dt_stride), 0,  // A at 0, D at H
         float_off(ops[2].at), float_off(ops[3].at), u32(a.bc_stride), a.D ? (uint32_t)H : 0xffffffffu,
         float_off(ops[4].at), u32(a.y_stride), float_off(ops[5].at), u32(a.state_stride),
         (uint32_t)(ops[6].at.off / 4)};
    vk::dispatch d;
    d.shader = "ssm_scan";
    d.buffers = {ops[0].at.buf, ops[1].at.buf, &ad, ops[2].at.buf, ops[3].at.buf, ops[4].at.buf, ops[5].at.buf,
                 ops[6].at.buf};
    d.set_push(pc);
    d.groups[0] = groups_for((H * P + 63) / 64, ctx_->max_groups(0));  // one invocation per (head, state row)
    record(std::move(d));
}

void vulkan_backend::run_rows(const row_op* ops, int n_ops, int64_t n) {
    if (n <= 0) return;
    for (int k = 0; k < n_ops; ++k) {
        const row_op& o = ops[k];
        if (o.k == row_op::kind::kv_store) {
            if (!has_kv_store(o.type)) missing(std::string("KV cache store for ") + type_name(o.type) + " caches");
            int32_t top = 0;
            for (int64_t t = 0; t < n; ++t) top = std::max(top, o.cells[t]);
            operand io[3] = {{o.x, rows_bytes(n, o.x_stride, o.n), false, {}},
                             {o.cells, sizeof(int32_t) * (size_t)n, false, {}},
                             {o.dst, o.dst_row_bytes * (size_t)(top + 1), true, {}}};
            bind(io, 3);
            if (io[2].at.off % 4) throw std::logic_error("vulkan kv_store: cache rows must start on a word");
            struct {
                uint32_t type, n, n_rows, x_off, x_stride, d_off, d_row_bytes, c_off, f_off, f_stride, mode, flags;
            } pc{(uint32_t)o.type, u32(o.n), u32(n), float_off(io[0].at), u32(o.x_stride), (uint32_t)io[2].at.off,
                 (uint32_t)o.dst_row_bytes, (uint32_t)(io[1].at.off / 4), 0, 0, 0, 1};
            vk::dispatch d;
            d.shader = "convert";
            d.buffers = {io[0].at.buf, io[2].at.buf, io[1].at.buf, io[2].at.buf};
            d.set_push(pc);
            const int64_t be = convert_unit(o.type);
            d.groups[0] = groups_for((n * ((o.n + be - 1) / be) + 63) / 64, ctx_->max_groups(0));
            record(std::move(d));
            continue;
        }
        // Workgroups per row (norm groups, heads, copied pieces; weighted_sum's
        // groups are its summands), the distance between groups in y and x,
        // and the row's width (y) and the second operand's (x) in floats.
        const bool grouped =
            o.k == row_op::kind::rms_norm || o.k == row_op::kind::rope || o.k == row_op::kind::copy;
        const int64_t per_row = grouped ? std::max<int64_t>(1, o.groups) : 1;
        const bool copy_groups = o.k == row_op::kind::copy && per_row > 1;
        const int64_t y_group = copy_groups ? o.y_group : o.n, x_group = copy_groups ? o.x_group : o.n;
        int64_t width = o.n, x_width = o.n;
        if (o.k == row_op::kind::rms_norm) width = x_width = o.n * o.groups;
        if (o.k == row_op::kind::rope) {
            width = o.n * o.groups;
            x_width = o.a;
        }
        if (copy_groups) {
            width = (per_row - 1) * y_group + o.n;
            x_width = (per_row - 1) * x_group + o.n;
        }
        if (o.k == row_op::kind::scale_by) x_width = 1;  // one scalar per row
        // w: a norm's weight (n floats shared by every row), or weighted_sum's
        // per-row weights (groups floats at w + t * groups)
        const bool wsum = o.k == row_op::kind::weighted_sum;
        if (wsum) x_width = o.n * o.groups;
        const size_t w_bytes = !o.w ? 0 : wsum ? rows_bytes(n, o.groups, o.groups) : sizeof(float) * (size_t)o.n;
        const bool x_is_y = !o.x || (o.x == o.y && o.x_stride == o.y_stride);
        if (wsum && (x_is_y || !o.w)) throw value_error("weighted_sum needs x and w, and x other than y");
        operand io[4] = {{o.y, rows_bytes(n, o.y_stride, width), true, {}},
                         {x_is_y ? nullptr : o.x, x_is_y ? 0 : rows_bytes(n, o.x_stride, x_width), false, {}},
                         {o.w, w_bytes, false, {}},
                         {o.b, o.b ? sizeof(float) * (size_t)o.n : 0, false, {}}};
        bind(io, 4);
        const span y = io[0].at, x = x_is_y ? io[0].at : io[1].at;
        const bool gelu = o.k == row_op::kind::gelu_mul || o.k == row_op::kind::gelu_quick_mul;
        const vk::buffer* tables = gelu ? &gelu_tables() : y.buf;  // any buffer where no table is read
        struct {
            uint32_t kind, n, groups, n_rows, y_stride, x_stride, flags;
            float f;
            uint32_t a;
            uint32_t y_off, x_off, wn_off, bn_off;
            float f2;
            uint32_t y_group, x_group;
        } pc{(uint32_t)o.k, u32(o.n), u32(wsum ? o.groups : per_row), u32(n), u32(o.y_stride),
             u32(x_is_y ? o.y_stride : o.x_stride),
             (uint32_t)((o.x ? 1u : 0u) | (o.w ? 2u : 0u) | (o.b ? 4u : 0u) | (o.style == rope_style::neox ? 8u : 0u)),
             o.k == row_op::kind::hadamard ? 1.0f / std::sqrt((float)o.a) : o.f, (uint32_t)o.a, float_off(y),
             float_off(x), io[2].at.buf ? float_off(io[2].at) : 0, io[3].at.buf ? float_off(io[3].at) : 0, o.f2,
             u32(y_group), u32(x_group)};
        vk::dispatch d;
        d.shader = std::string("row_ops") + sg_;
        d.buffers = {y.buf, x.buf, io[2].at.buf ? io[2].at.buf : y.buf, io[3].at.buf ? io[3].at.buf : y.buf, tables};
        d.set_push(pc);
        d.groups[0] = groups_for(n * per_row, ctx_->max_groups(0));
        record(std::move(d));
    }
}

}  // namespace lp
