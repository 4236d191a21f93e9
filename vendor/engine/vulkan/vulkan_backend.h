// vulkan_backend.h — the seam's operations (backend.h) on a Vulkan device.
//
// What exists: matmul for F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
// Q5_K, Q6_K, MXFP4, TQ1_0, TQ2_0, IQ4_NL, IQ4_XS and the grid i-quants
// (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M: shaders/iq_lattice.glsl) weights
// (activations converted on the device by the CPU's reference formulas:
// shaders/convert.comp) with LoRA terms, the expert products of
// mixture-of-experts layers for the same types (matmul.comp's MOE variant) and
// their routing (moe_route.comp), get_rows for the same types, gather_rows,
// every row op, the KV cache store for every KV cache type, attention over a
// cache of any KV cache type (F32 softmax; cells in cell order on both paths;
// attention sinks), and rope_table (the angles are computed on the host with
// the CPU's functions: they are an input of the step, as the masks are), and
// the recurrent layers' ops of Qwen3.5's gated delta-net: ssm_conv and
// gated_delta (F32, the sequential form, token by token: ssm_conv.comp,
// gated_delta.comp) on state slots in device memory (recurrent_state.h).
// Missing, each raising not_implemented_error naming it (nothing silently runs
// on the CPU instead): routing over more than 512 experts or to more than 32
// per row. Weights of the types without a shader (Q2_K, Q3_K) are
// dequantized to F16 when they are uploaded and multiplied by the F16 shader
// (the Python side says so when it places such a layer on the device).
//
// Execution is deferred: each op records its dispatches, and sync() submits
// everything recorded since the last sync as one command buffer and waits.
// The forward pass syncs at the end of a step and where the placement plan
// hands the activations to another backend (blocks.h: pass::part).
//
// Operands: memory allocated on this device (device_buffer on gpu: the run
// state, the KV cache) is bound in place, at an offset. Any other pointer
// is host memory: staged into a per-step arena on first use within a step
// (a range already staged is bound where it was staged, so an op reads what
// an earlier op of the step wrote there), and copied back at sync when an
// op wrote it. Weights are uploaded once per weight_view (keyed by its data)
// and kept for the backend's life.
// Not here: the Vulkan plumbing (vk_runtime.h), shaders (shaders/), how the
// engine finds this backend (vulkan_factory.cpp, backend/registry.h).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "../backend/backend.h"

namespace lp {

namespace vk {
class context;
class buffer;
struct dispatch;
}  // namespace vk

// device_buffer's allocator for Vulkan device `index` (through the factory,
// vulkan_factory.cpp): a mapped,
// host-visible buffer, registered so the backend binds pointers into it in
// place. *handle receives what vulkan_free takes.
void* vulkan_alloc(int index, size_t bytes, void** handle);
void vulkan_free(void* handle);
// Bytes this process holds on Vulkan device `index`, and the size of its
// largest device-local heap.
uint64_t vulkan_allocated(int index);
uint64_t vulkan_heap_bytes(int index);

class vulkan_backend final : public backend {
public:
    // On Vulkan device `index` (vk::devices()); throws std::runtime_error
    // when there is no such device.
    explicit vulkan_backend(int index = 0);
    ~vulkan_backend() override;

    device dev() const override { return device{device::kind::gpu, index_}; }
    const char* name() const override { return "vulkan"; }
    void matmul(const weight_view& w, const float* x, int64_t xs, float* y, int64_t ys, int64_t n,
                const lora_work& lora) override;
    void get_rows(const weight_view& table, const int32_t* ids, float* y, int64_t ys, int64_t n) override;
    void gather_rows(float* data, int64_t stride, int64_t n_cols, const int32_t* idx, int64_t n) override;
    void rope_table(const rope_params& p, const int32_t* pos, int64_t pos_stride, float* out, int64_t n) override;
    void moe_route(const moe_route_args& a) override;
    void moe_matmul(const experts_view& w, const float* x, int64_t xs, int x_div, const int32_t* ids, int64_t n_slots,
                    float* y, int64_t ys, const float* bias) override;
    void attention(const attention_args& a) override;
    void ssm_conv(const ssm_conv_args& a) override;
    void gated_delta(const gated_delta_args& a) override;
    void ssm_scan(const ssm_scan_args& a) override;
    void run_rows(const row_op* ops, int n_ops, int64_t n) override;
    void sync() override;
    void discard() override;
    size_t scratch_bytes() const override;

    // Whether matmul / get_rows have a shader for weights of type t, and
    // whether the KV cache store has one for cache type t.
    static bool has_matmul(ggml_type t);
    // Whether weights of type t run at all (a shader, or the F16 fallback).
    static bool runs_matmul(ggml_type t);
    static bool has_kv_store(ggml_type t);
    // Uploads w now (the context uploads its layers' weights when it is
    // created, so a plan that does not fit fails there); bytes it holds.
    void upload(const weight_view& w) { weights(w); }
    void forget_weights(const void* data) override;
    uint64_t weight_bytes() const { return weight_bytes_; }

    // A range of a device buffer: the buffer and a byte offset in it.
    struct span {
        const vk::buffer* buf = nullptr;
        size_t off = 0;
    };

private:
    // One operand of an op: a host or device range; `write`: the op writes it.
    struct operand {
        const void* p;
        size_t bytes;
        bool write;
        span at;
    };
    // Resolves the operands of one op (device memory in place, host memory
    // staged; see the file comment). May sync first when a host range
    // overlaps a staged one only in part.
    void bind(operand* ops, int n);
    span scratch(size_t bytes);
    void record(vk::dispatch&& d);
    // Records the conversion of n rows of x (n_cols floats, xs apart) to
    // format `at` (convert.comp) into the arena: the converted rows, *a_row
    // bytes apart (F32: x itself).
    span dot_activations(ggml_type at, const span& x, int64_t xs, int64_t n_cols, int64_t n, size_t* a_row);
    // A weight matrix on the device: its bytes, type and row size there
    // (a type without a shader is stored dequantized to F16).
    struct dev_weights {
        std::unique_ptr<vk::buffer> buf;
        ggml_type type;
        size_t row_bytes;
    };
    const dev_weights& weights(const weight_view& w);
    // A small F32 weight of a layer (a convolution kernel, Mamba-2's A and D,
    // Gemma 4's per-expert scales: n floats, the model's for its life) on the
    // device: uploaded once, as the matrices are, rather than staged at every step.
    const vk::buffer& f32_weight(const float* data, int64_t n);
    // Two such weights of n floats side by side in one buffer (a then b; b
    // null: a alone), for a shader that has no binding to spare (ssm_scan's A
    // and D): cached per pair, apart from the single weights.
    const vk::buffer& f32_weight_pair(const float* a, const float* b, int64_t n);
    const vk::buffer& gelu_tables();

    int index_;
    vk::context* ctx_;
    const char* sg_;  // "_sg": the subgroup variants of the shaders with reductions (device_info::subgroup_ops), or ""
    std::map<const void*, dev_weights> weights_;
    std::map<std::pair<const float*, const float*>, std::unique_ptr<vk::buffer>> weight_pairs_;
    uint64_t weight_bytes_ = 0;
    std::unique_ptr<vk::buffer> tables_;

    // This step's work: recorded dispatches, staged host ranges, the arena.
    std::vector<vk::dispatch> pending_;
    struct staged {
        const uint8_t* host;
        size_t bytes;
        span at;
        bool write;  // copied back at sync
    };
    std::vector<staged> staged_;
    std::vector<std::unique_ptr<vk::buffer>> arena_;
    size_t arena_chunk_ = 0, arena_used_ = 0;
};

}  // namespace lp
