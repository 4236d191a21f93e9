// context_params.h — the options of an inference context (the binding's
// _engine.ContextParams), in one struct: the context runs on them, the
// placement plan (placement.h) sizes and places its parts from them.
// Not here: resolving the model-dependent defaults (context.h resolve_params).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ggml_type.h"

namespace lp {

struct context_params {
    int64_t n_ctx = 512;          // KV cells (0: the model's training context)
    int64_t n_batch = 512;        // most rows one decode() accepts
    int64_t n_ubatch = 512;       // rows evaluated at once
    int n_seq_max = 1;            // sequence ids are below this (at most kMaxSequences)
    int n_threads = 0;            // threads for single-row decodes (0: physical cores)
    int n_threads_batch = 0;      // threads for larger batches (0: physical cores)
    ggml_type type_k = ggml_type::F16;
    ggml_type type_v = ggml_type::F16;
    // Attention path (cpu/attention.h): 1 flash (fused, tiled; work memory
    // independent of n_ctx), 0 the explicit softmax path, -1 auto (resolved
    // when the context is created; see context::attention_path()).
    int flash_attn = -1;
    bool embeddings = false;      // keep final hidden states of output rows
    int pooling = -1;             // with embeddings: llama.cpp's pooling type (0 none, 1 mean, 2 cls,
                                  // 3 last); -1: the model's (none when it declares none)
    float rope_freq_base = 0.0f;  // 0: from the model
    float rope_freq_scale = 0.0f; // 0: from the model
    // RoPE scaling (llama.cpp's numbering): -1 the model's, 0 none, 1 linear, 2 YaRN.
    int rope_scaling_type = -1;
    float yarn_ext_factor = -1.0f;  // < 0: 1 with YaRN, else 0
    float yarn_attn_factor = 0.0f;  // 0: the model's (1 when it names none)
    float yarn_beta_fast = 0.0f;    // 0: the model's (32)
    float yarn_beta_slow = 0.0f;    // 0: the model's (1)
    int yarn_orig_ctx = 0;          // 0: the model's original context length
    // Sliding-window layers keep a full-size cache (llama.cpp's swa_full)
    // instead of one of window × sequences + n_batch cells. The small cache
    // cannot rewind a sequence further back than its window reaches (decode
    // then raises; kv_swa_resumable says beforehand).
    bool swa_full = false;
    // Models with recurrent layers (Qwen3.5): copies of each sequence's state
    // kept so that a suffix can be removed (prefix reuse, rejected draft
    // tokens) without evaluating from the start (recurrent_state.h); like
    // llama.cpp's ctx_checkpoints. Each is one sequence's whole state.
    int n_state_checkpoints = 8;
    // Hadamard rotation of a quantized cache (kv_cache.h), on as in llama.cpp
    // whenever a cache type is quantized and the head size a multiple of 64.
    bool kv_rotation = true;
    // GPU offload (a build with a GPU backend, backend/registry.h):
    // n_gpu_layers as llama.cpp counts it (placement.h: part_devices; -1 all,
    // -2 "auto": as many as fit in the device's memory, resolved to a count
    // when the context is created), on GPU device main_gpu. Before anything
    // is allocated the plan is checked against the device's free memory (as
    // its backend reports it; the Vulkan backend's LLAMAPY_VULKAN_MEMORY=<bytes>
    // stands in for the device's size): one that does not fit raises
    // value_error naming bytes needed and free.
    // When any layer is on the GPU the KV cache and the activation buffers
    // are in its memory (mapped, so layers left on the CPU use them in place).
    int n_gpu_layers = 0;
    int main_gpu = 0;
    // offload_kqv=false (llama.cpp's): the KV cache stays in host memory and
    // the attention over it (cache stores, Hadamard rotations, the attention
    // itself) runs on the CPU, the rest of a GPU layer on the GPU. Any cache
    // type the CPU takes then works with GPU layers.
    bool offload_kqv = true;
    // How GPU parts spread over several GPU devices: 0 (none) all on
    // main_gpu; 1 (layer, the default) consecutive parts split across the
    // devices in proportion to tensor_split (one share per device; empty or
    // all zero: each device's free memory), as llama.cpp's layer split.
    int split_mode = 1;
    std::vector<float> tensor_split;
    // Weights kept in host memory, their products run on the CPU, although
    // their layer is on a GPU (llama.cpp's way of running a big mixture of
    // experts on a small GPU): override_tensor holds the regular expressions
    // (ECMAScript, searched in the tensor name) of llama.cpp's
    // --override-tensor "<regex>=CPU"; n_cpu_moe keeps the expert tensors of
    // the first n_cpu_moe layers (its --n-cpu-moe). placement.h host_kept.
    std::vector<std::string> override_tensor;
    int n_cpu_moe = 0;
};

}  // namespace lp
