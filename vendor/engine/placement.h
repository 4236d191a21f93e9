// placement.h — which device holds what: per layer, the device of its
// weights and of its KV cache rows, and from that the bytes each device
// needs (weights + KV cache + activation buffers). Today every part is on
// the CPU; n_gpu_layers will move layers to a GPU by filling the same plan,
// and the context will then allocate and run each layer where it says.
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
#include "model/model.h"

namespace lp {

class kv_cache;

struct placement_plan {
    struct part {
        std::string name;      // "input", "blk.<il>", "output"
        int layer = -1;        // il, or -1 for input / output
        device weights;        // where its weights live
        device kv;             // where its KV cache rows live (layers only)
        uint64_t weight_bytes = 0;
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

// The plan of a CPU-only context: every part on the host. kv_main holds the
// layers it holds; kv_swa (or null) the sliding-window ones.
placement_plan plan_cpu(const model& m, const kv_cache& kv_main, const kv_cache* kv_swa, uint64_t activation_bytes);

}  // namespace lp
