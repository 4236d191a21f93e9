// context.h — an inference context on a model: the KV cache, thread pools,
// activation memory (allocated up front for n_ubatch rows) and decode(batch),
// which evaluates a batch of tokens (or embedding rows) of any number of
// sequences in micro-batches and keeps the logits / final hidden states of
// the rows the caller asked for.
//
// Rules for a batch (checked before anything changes; a violation throws
// value_error and leaves the context as it was):
//   - 1 <= n <= n_batch rows; token ids in [0, n_vocab); positions >= 0;
//   - every row belongs to at least one sequence, ids in [0, n_seq_max);
//   - within a sequence, positions increase along the batch and start after
//     the last position the cache holds for it (kv_seq_rm first to redo);
//   - the cache has a free cell for every row;
//   - causal=false: the batch fits one micro-batch (n <= n_ubatch), as
//     llama.cpp requires, so that every row sees all the others.
// A row in several sequences attends to the cells of its first sequence.
//
// M-RoPE models (model hparams n_pos_per_embd() == 4, Qwen2-VL): a row has
// four positions, section-major: pos[i] temporal, pos[n + i] height,
// pos[2n + i] width, pos[3n + i] extra (text rows: all four equal; the
// tokens of an image share one temporal position). The cache keeps the
// temporal one (kv_seq_pos_max and the rules above read it) plus (height,
// width), which order the cells of one temporal position under the causal
// mask. The position rule is llama.cpp's for M-RoPE (llama_batch_allocr):
// within a sequence temporal positions never decrease along the batch
// (equal ones allowed); token rows start after the cache's last position,
// embedding rows at it or after (an image split over several decodes
// continues at its shared position).
//
// Not here: the forward pass (model/decoder.h), sampling, tokenization.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "backend/cpu_backend.h"
#include "context_params.h"
#include "cpu/threadpool.h"
#include "imatrix.h"
#include "kv_cache.h"
#include "lora.h"
#include "model/decoder.h"
#include "model/model.h"
#include "placement.h"
#include "recurrent_state.h"

namespace lp {

// p with every default filled in for model m (n_ctx 0 -> the training
// context, n_batch/n_ubatch capped, threads, pooling, flash_attn "auto"),
// checked: value_error names the first option that cannot work. The
// context runs on exactly these values (context::params()).
context_params resolve_params(const model& m, context_params p);

// A batch as the caller hands it (views; nothing is copied).
struct batch_view {
    int64_t n = 0;
    const int32_t* tokens = nullptr;      // (n) token ids, or null when embd is given
    const float* embd = nullptr;          // (n, n_embd) input embeddings, or null
    const int32_t* pos = nullptr;         // (n), or (4, n) section-major for M-RoPE models (above)
    const int32_t* seq_ids = nullptr;     // row i's sequences: seq_ids[seq_begin[i] .. seq_begin[i+1])
    const int32_t* seq_begin = nullptr;   // (n + 1); null: one sequence per row, seq_ids[i]
    const uint8_t* want = nullptr;        // (n) rows whose outputs are kept; null: the last row
                                          // (every row when the context keeps embeddings)
    // false: llama_set_causal_attn(false) for this batch — each row also sees
    // the rows (and cached cells) of its sequence at later positions; the
    // sliding window still hides what is older than the window. mtmd does
    // this for Gemma 3's image chunks (model hparams mm_non_causal).
    bool causal = true;
};

class context {
public:
    context(std::shared_ptr<const model> m, const context_params& p);

    const model& mdl() const { return *model_; }
    const kv_cache& kv() const { return kv_; }
    // RoPE as resolved for the global (0) and sliding-window (1) layers.
    const rope_params& rope(int which) const { return rope_[which ? 1 : 0]; }
    const context_params& params() const { return p_; }
    // The attention path this context runs (flash_attn resolved).
    lp::attention_path attention_path() const {
        return p_.flash_attn == 1 ? lp::attention_path::flash : lp::attention_path::explicit_softmax;
    }
    // Attention work memory held (it grows with n_ctx on the explicit path only).
    size_t attention_scratch_bytes() const { return backend_.attention_scratch_bytes(); }
    int64_t n_ctx() const { return p_.n_ctx; }

    // Evaluates a batch (see the rules above). Thread-safe; one at a time.
    void decode(const batch_view& b);

    // Outputs of the last decode, in batch order of the rows that wanted them.
    int64_t n_outputs() const { return n_out_; }
    const float* logits(int64_t i) const;      // (n_vocab) of output i
    const float* embeddings(int64_t i) const;  // (n_embd) of output i; throws unless embeddings=true
    // With pooling (mean / cls / last): the pooled vector (n_embd) of sequence
    // `seq` over its rows in the last decode; throws if it had none there.
    // With pooling rank (4, rerankers): the classifier's n_cls_out scores.
    const float* embeddings_seq(int seq) const;
    int64_t n_embd_seq() const;                // floats embeddings_seq gives: n_embd, or n_cls_out for rank
    int pooling() const { return pooling_; }   // resolved pooling type (0 none .. 3 last, 4 rank)
    // The storage behind logits()/embeddings(): replaced (never freed under a
    // holder) when it must grow, so views handed out stay valid memory.
    std::shared_ptr<std::vector<float>> logits_storage() const { return logits_; }
    std::shared_ptr<std::vector<float>> embd_storage() const { return embd_; }

    // KV cache sequence operations (see kv_cache.h); sequence ids are checked.
    // kv_seq_rm returns false, changing nothing, when a model with recurrent
    // layers cannot remove that range (recurrent_state.h: a suffix needs a
    // checkpoint at its start; llama.cpp's seq_rm answers the same): the
    // caller then evaluates the sequence again from its start.
    bool kv_seq_rm(int seq, int32_t p0, int32_t p1);
    void kv_seq_cp(int src, int dst, int32_t p0, int32_t p1);
    void kv_seq_keep(int seq);
    int32_t kv_seq_pos_max(int seq) const;
    int32_t kv_seq_pos_min(int seq) const;
    void kv_clear();
    int64_t kv_n_used() const { return kv_.n_used(); }
    // Cells of the sliding-window layers' own cache (0: they share the main cache).
    int64_t kv_swa_cells() const { return kv_swa_ ? kv_swa_->n_cells() : 0; }
    // Bytes of keys and values held, both caches.
    size_t kv_bytes() const { return kv_.bytes() + (kv_swa_ ? kv_swa_->bytes() : 0); }
    // Whether sequence seq can continue at position pos (after kv_seq_rm of
    // what follows): false when the window cache already dropped positions
    // that position needs.
    bool kv_swa_resumable(int seq, int32_t pos) const;
    // The largest m <= n at which sequence seq can continue keeping its
    // positions [0, m): n for attention-only models; for recurrent ones where
    // the live state or a checkpoint ends (recurrent_state::resume_at), 0 at worst.
    int32_t kv_seq_resume_pos(int seq, int32_t n) const;
    // The recurrent layers' per-sequence state (empty for other models).
    const recurrent_state& rstate() const { return rstate_; }
    size_t recurrent_bytes() const { return rstate_.bytes(); }
    size_t checkpoint_bytes() const;

    // LoRA adapters applied from the next decode on (each with its scale);
    // an empty list removes them. Adapters must be for this context's model.
    // The KV cache is left as it is: clear it if its rows should be recomputed.
    void set_adapters(const std::vector<std::pair<std::shared_ptr<const lora_adapter>, float>>& adapters);
    bool has_adapters() const { return !loras_.empty(); }
    bool has_tensor_callback() const { return (bool)tensor_cb_; }

    // Debug hook: from the next decode on, cb receives the named
    // intermediates of every forward pass (blocks.h: llama.cpp's graph names,
    // rows x cols floats, valid during the call only); an empty function
    // removes it. Costs nothing while unset. Returns the previous one. The
    // callback must not use this context (value_error); a callback that
    // needs a lock other threads hold while they wait for it (Python's GIL)
    // deadlocks, so use a context with a callback from one thread.
    tensor_callback set_tensor_callback(tensor_callback cb);

    // The importance-matrix statistics (imatrix.h): on, from the next decode
    // every layer's product inputs are summed (value_error with layers on a
    // GPU); off drops what was summed. Costs one null check per product while off.
    void set_imatrix(bool on);
    bool imatrix_on() const { return imatrix_ != nullptr; }
    std::vector<imatrix_entry> imatrix_entries() const;

    // Which device holds each layer's weights and KV cache, and the bytes
    // per device (placement.h).
    placement_plan placement() const;

    // The KV cache and the last outputs as bytes, and back.
    std::vector<uint8_t> state_get() const;
    void state_set(const uint8_t* data, size_t size);

private:
    // Locks the context; value_error when called from inside this context's
    // own decode (its tensor callback), which would otherwise deadlock.
    std::unique_lock<std::mutex> guard() const;
    void check_seq(int seq, const char* what) const;
    void validate(const batch_view& b) const;
    void ensure_output_capacity(int64_t n_out);
    std::shared_ptr<std::vector<float>> unshared_logits(size_t need);
    void place_in_window_cache(const batch_view& b);
    // Encoders and pooled embeddings (context_embd.cpp).
    void decode_encoder(const batch_view& b);
    void pool_begin();
    void pool_rows(const batch_view& b, int64_t row0, int64_t n, const float* h);
    void pool_end();
    void classify_pooled();  // rank: the classifier head over the pooled sequences
    void keep_rows(const batch_view& b, int64_t row0, int64_t n, const float* h, int64_t& out_at);

    std::shared_ptr<const model> model_;
    context_params p_;
    std::vector<device> parts_;        // the device of each part (placement.h), n_gpu_layers resolved
    device gpu_;                       // the activations' device: the first GPU part's, or the host when none is
    kv_cache kv_;                      // every layer, or the global ones when kv_swa_ exists
    std::unique_ptr<kv_cache> kv_swa_;  // the sliding-window layers (window-sized), or null
    std::vector<int32_t> cells_swa_;    // (n_batch) window-cache cell of each batch row
    std::vector<int32_t> swa_dropped_;  // (n_seq_max) highest position the window cache dropped, -1: none
    recurrent_state rstate_;            // the recurrent layers' states (empty for attention-only models)
    void rstate_after_batch(const batch_view& b, bool ok, const std::vector<int32_t>& start);
    std::unique_ptr<thread_pool> pool_;        // n_threads
    std::unique_ptr<thread_pool> pool_batch_;  // n_threads_batch (null: same as pool_)
    run_state rs_;
    cpu_backend backend_;              // runs the parts on the host
    std::vector<std::unique_ptr<backend>> gpu_backends_;  // one per GPU device of the parts (empty: none)
    std::vector<backend*> part_be_;    // the backend of each part (empty: backend_ for all)
    backend* kv_be_ = nullptr;         // attends over the cache when not the part's backend (offload_kqv=false)
    // The data of the weights kept in host memory although their part is on
    // a GPU (override_tensor, n_cpu_moe): their products run on backend_.
    std::unordered_set<const void*> host_weights_;
    // Where each layer's KV cache rows live: on the layer's device, or the
    // host with offload_kqv=false; encoders keep no cache (host).
    std::vector<device> kv_devices() const;
    // The device of each layer's part (empty: all on the host): where its
    // recurrent state lives (the layer's ops advance it there, offload_kqv
    // or not).
    std::vector<device> layer_devices() const;
    tensor_callback tensor_cb_;        // debug hook, empty when unset
    std::unique_ptr<imatrix_collector> imatrix_;  // null unless set_imatrix(true)
    lora_set loras_;
    rope_params rope_[2];                      // global / sliding-window layers
    mutable std::mutex mutex_;

    // Per-decode bookkeeping, sized for n_batch rows up front.
    std::vector<int32_t> cells_;     // (n_batch) cache cell of each row
    std::vector<int32_t> first_seq_; // (n_batch) first sequence of each row
    std::vector<int32_t> out_rows_;  // (n_batch) rows of a micro-batch that want outputs
    mutable std::vector<int32_t> seq_last_;  // (n_seq_max) last position per sequence, while validating

    int64_t n_out_ = 0;
    std::shared_ptr<std::vector<float>> logits_;  // (capacity, n_vocab)
    // Buffers the last decodes wrote while something still held them (see
    // ensure_output_capacity); reused once nobody else does.
    std::vector<std::shared_ptr<std::vector<float>>> logits_spare_;
    std::shared_ptr<std::vector<float>> embd_;    // (capacity, n_embd) when embeddings

    // Embeddings of whole sequences (context_embd.cpp).
    int pooling_ = 0;                    // resolved pooling type
    std::vector<float> hidden_;          // (n_ubatch, n_embd) every row's state (encoders, pooling)
    std::vector<float> embd_seq_;        // (n_seq_max, n_embd) pooled vector of each sequence
    std::vector<int32_t> seq_n_rows_;    // (n_seq_max) rows pooled into each sequence by the last decode
    std::vector<int32_t> seq_pos_;       // (n_seq_max) position of the row cls / last pooling kept
    // Rank pooling (rerankers): the pooled rows gathered for the classifier
    // head, its hidden rows, and each sequence's scores.
    std::vector<float> cls_in_;          // (n_seq_max, n_embd)
    std::vector<float> cls_mid_;         // (n_seq_max, n_embd)
    std::vector<float> seq_score_;       // (n_seq_max, n_cls_out)
};

}  // namespace lp
