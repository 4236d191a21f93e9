// placement.h — which device holds what: per part (the input embeddings,
// each repeating layer, the output norm and head), the device that runs it
// and holds its weights, the device of its KV cache rows, and from that the
// bytes each device needs (weights + KV cache + activation buffers).
// n_gpu_layers fills it as llama.cpp means it (part_devices); place_parts
// checks a plan against the devices' memory before the context allocates
// anything; the context then allocates and runs each part where it says.
// Devices and their memory come from the backend registry
// (backend/registry.h): nothing here names a backend.
//
// Weights are counted from the file's tensors: "blk.<il>.*" belong to layer
// il; "output*" (output norm and head) to the output part; everything else
// (token embeddings, position / token-type embeddings, their norm, RoPE
// frequency tensors) to the input part. The parts add up to every tensor
// byte of the file.
// Not here: allocating (backend/buffer.h), running (context.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "context_params.h"
#include "model/model.h"

namespace lp {

class kv_cache;

struct placement_plan {
    struct part {
        std::string name;      // "input", "blk.<il>", "output"
        int layer = -1;        // il, or -1 for input / output
        device weights;        // where its weights live
        device kv;             // where its KV cache rows live (layers only)
        uint64_t weight_bytes = 0;       // on `weights`, minus what stays on the host:
        uint64_t host_weight_bytes = 0;  // weights kept in host memory (override_tensor, n_cpu_moe)
        uint64_t kv_bytes = 0;
    };
    struct device_total {
        device dev;
        uint64_t weight_bytes = 0, kv_bytes = 0, activation_bytes = 0;
        uint64_t total() const { return weight_bytes + kv_bytes + activation_bytes; }
    };
    std::vector<part> parts;     // input, blk.0 .. blk.<n_layer-1>, output
    device compute;              // where the activation buffers live
    uint64_t activation_bytes = 0;

    // Bytes per device, in order of first appearance.
    std::vector<device_total> totals() const;
};

// The device of each part (input, blk.0 .. blk.<n_layer-1>, output) for
// n_gpu_layers as llama.cpp counts it: 0 none on a GPU; N the last N
// repeating layers; N > n_layer the output part too; -1 every layer and the
// output. The input part (embedding lookups from the mapped file) stays on
// the host, as in llama.cpp.
// The offloaded parts are split in order across `gpus` in proportion to
// `shares` (as many, non-negative, with a positive sum; llama.cpp's
// tensor_split): the k-th of n offloaded parts goes to the first device
// whose cumulative share exceeds k / n, so consecutive layers stay together
// and the last device takes the output part.
std::vector<device> part_devices(int64_t n_layer, int n_gpu_layers, const std::vector<device>& gpus,
                                 const std::vector<double>& shares);
inline std::vector<device> part_devices(int64_t n_layer, int n_gpu_layers, device gpu) {
    return part_devices(n_layer, n_gpu_layers, {gpu}, {1.0});
}
// Tensor bytes of each part, in part order (the file's tensors: see above).
std::vector<uint64_t> part_weight_bytes(const model& m);

// Which of the tensors `names` of a model with n_layer layers stay in host
// memory whatever their part's device (context_params override_tensor and
// n_cpu_moe): a name matching one of the patterns, or an expert tensor
// (blk.<il>.ffn_{gate,up,down,gate_up}_exps) of a layer il < n_cpu_moe.
std::vector<bool> host_kept(const std::vector<std::string>& names, int64_t n_layer, const context_params& p);
// The bytes of each part that host_kept keeps on the host, in part order.
std::vector<uint64_t> part_host_bytes(const model& m, const context_params& p);

// The plan: part i runs on part_dev[i] (n_layer + 2 entries; empty: all on
// the host). kv_main holds the layers it holds; kv_swa (or null) the
// sliding-window ones; each layer's cache rows are where its cache keeps them.
// compute: where the activation buffers live.
// host_bytes: each part's bytes kept on the host (part_host_bytes; empty: none).
placement_plan plan_parts(const model& m, const std::vector<device>& part_dev, const kv_cache& kv_main,
                          const kv_cache* kv_swa, uint64_t activation_bytes, device compute,
                          const std::vector<uint64_t>& host_bytes = {});

// Cells of a separate cache for the sliding-window layers: enough for every
// sequence's window plus one batch (whose rows are all placed before any is
// evaluated); 0 when there is no such layer, swa_full asks for full size, or
// the window cache would not be smaller.
int64_t window_cache_cells(const hparams& hp, const context_params& p);

// The device of each part for a context of m with p (empty: all on the
// host), n_gpu_layers resolved ("auto": the most that fit) and checked
// against each device's free memory before anything is allocated:
// value_error naming the bytes needed and free when the plan does not fit,
// or why there is no GPU. p: resolved (context.h resolve_params).
std::vector<device> place_parts(const model& m, context_params& p);

// The device of each part (input, blk.0 .. blk.<n_layer-1>, output) that a
// context with p would place on this process's GPU devices (n_gpu_layers
// "auto" taken as all; no memory check): what llamapy.plan_memory predicts
// from, by the same rule the context uses. All host without a GPU backend or
// device; value_error for a main_gpu that does not exist.
std::vector<device> planned_part_devices(int64_t n_layer, const context_params& p);

}  // namespace lp
