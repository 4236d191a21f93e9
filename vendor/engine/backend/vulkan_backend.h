// vulkan_backend.h — the seam's operations (backend.h) on a Vulkan device.
//
// What exists: matmul for F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q4_K, Q5_K and Q6_K weights (the list)
// (activations converted on the host exactly as the CPU converts them, so
// the integer block sums are the CPU's), get_rows for the same types, and
// the row ops rms_norm, layer_norm, add, mul, scale, softcap, gelu_mul,
// silu_mul, gelu_quick_mul, rope, hadamard and copy; attention over a
// cache of any KV cache type (F32 softmax; cells in cell order on both
// paths). Everything else (the KV store, gather_rows, rope_table, LoRA terms, the other weight
// types: Q2_K, Q3_K, the IQ types) raises not_implemented_error naming it: the forward pass does not
// run on this backend yet, and nothing silently runs on the CPU instead.
//
// Operands are host rows (the seam's float pointers): each call uploads
// them into the device's host-visible buffers, runs, and copies the result
// back. Weights are uploaded once per weight_view (keyed by its data) and
// kept for the backend's life.
// Not here: the Vulkan plumbing (vulkan/vk_runtime.h), shaders (vulkan/shaders).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "backend.h"

namespace lp {

namespace vk {
class context;
class buffer;
}  // namespace vk

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
    void attention(const attention_args& a) override;
    void run_rows(const row_op* ops, int n_ops, int64_t n) override;
    size_t scratch_bytes() const override { return 0; }

    // Whether matmul / get_rows have a shader for weights of type t.
    static bool has_matmul(ggml_type t);

private:
    const vk::buffer& weights(const weight_view& w);
    const vk::buffer& gelu_tables();

    int index_;
    vk::context* ctx_;
    std::map<const void*, std::unique_ptr<vk::buffer>> weights_;
    std::unique_ptr<vk::buffer> tables_;
};

}  // namespace lp
