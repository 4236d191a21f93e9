// context.cpp — see context.h.
#include "context.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <unordered_set>

#include "backend/registry.h"
#include "common.h"
#include "cpu/features.h"

namespace lp {

namespace {

constexpr uint32_t kStateMagic = 0x5453504c;  // "LPST"
constexpr uint32_t kStateVersion = 2;

// flash_attn="auto" on the CPU backend. Decoders: flash, as llama.cpp's CPU
// backend turns it on whenever it is supported (here: every cache type). It
// was faster than the explicit path at every depth measured, most at long
// contexts (benchmarks/attention_kernels.py), and its work memory does not
// grow with n_ctx. Encoders: explicit. Their batches pack many sequences, and
// the explicit path gives a sequence the same bits whatever it is packed
// with (flash tiles follow cell indices, so packing moves its rounding);
// their sequences are short, where the paths' speeds are close.
// Several sequences (n_seq_max > 1: the server's slots): explicit, for the
// same reason. Their cells interleave in the shared pool, and a reply must be
// the same tokens as the request run alone; with flash, Gemma 3 amplified
// the moved rounding into different greedy tokens (3 of 8 test replies).
bool auto_flash_attn(const hparams& hp, const context_params& p) {
    return !hp.v.encoder && p.n_seq_max <= 1;
}

}  // namespace

context_params resolve_params(const model& m, context_params p) {
    const hparams& hp = m.hp();
    if (p.n_ctx < 0 || p.n_batch < 0 || p.n_ubatch < 0) throw value_error("n_ctx, n_batch and n_ubatch must be >= 0");
    if (p.n_ctx == 0) p.n_ctx = hp.n_ctx_train;
    if (p.n_ctx > ((int64_t)1 << 24)) throw value_error("n_ctx " + std::to_string(p.n_ctx) + " is too large");
    if (p.n_batch == 0) p.n_batch = 512;
    if (p.n_ubatch == 0) p.n_ubatch = 512;
    p.n_batch = std::min(p.n_batch, p.n_ctx);
    p.n_ubatch = std::min(p.n_ubatch, p.n_batch);
    if (p.n_seq_max < 1 || p.n_seq_max > kMaxSequences)
        throw value_error("n_seq_max must be in [1, " + std::to_string(kMaxSequences) + "], got " +
                          std::to_string(p.n_seq_max));
    if (p.n_threads <= 0) p.n_threads = default_n_threads();
    if (p.n_threads_batch <= 0) p.n_threads_batch = default_n_threads();
    if (p.n_threads > 1024 || p.n_threads_batch > 1024) throw value_error("too many threads");
    if (p.rope_freq_base < 0 || p.rope_freq_scale < 0) throw value_error("rope_freq_base/scale must be >= 0");
    for (int64_t il = 0; il < std::max<int64_t>(hp.n_layer, 1); ++il)  // every layer's (Gemma 4's differ)
        for (auto [t, dim, what] : {std::tuple{p.type_k, hp.layer_head_dim_k(il), "type_k"},
                                    std::tuple{p.type_v, hp.layer_head_dim_v(il), "type_v"}}) {
            const int64_t bs = traits(t).block_size;
            if (kv_cache_type_ok(t) && bs > 1 && dim % bs != 0)
                throw value_error(std::string(what) + "=" + type_name(t) + " needs head sizes that are a multiple of " +
                                  std::to_string(bs) + "; this model's is " + std::to_string(dim));
        }
    if (p.rope_scaling_type < -1 || p.rope_scaling_type > 2)
        throw value_error("rope_scaling_type must be -1 (model), 0 (none), 1 (linear) or 2 (yarn), got " +
                          std::to_string(p.rope_scaling_type));
    if (p.yarn_attn_factor < 0 || p.yarn_beta_fast < 0 || p.yarn_beta_slow < 0 || p.yarn_orig_ctx < 0)
        throw value_error("yarn_attn_factor, yarn_beta_fast, yarn_beta_slow and yarn_orig_ctx must be >= 0");
    // An encoder sees each sequence whole: a batch is evaluated in one pass.
    if (hp.v.encoder) p.n_ubatch = p.n_batch;
    if (p.pooling < -1 || p.pooling > 4) throw value_error("pooling_type must be in [-1, 4], got " + std::to_string(p.pooling));
    if (p.pooling == -1) p.pooling = hp.pooling < 0 ? 0 : hp.pooling;
    if (p.pooling == 4 && p.embeddings && !m.vocab_only() && !m.weights().has_classifier())
        throw value_error("pooling_type 4 (rank) needs a reranker's classifier head (tensor cls.output.weight); this " +
                          hp.arch + " model has none");
    if (p.flash_attn < -1 || p.flash_attn > 1)
        throw value_error("flash_attn must be -1 (auto), 0 (off) or 1 (on), got " + std::to_string(p.flash_attn));
    if (p.flash_attn == -1) p.flash_attn = auto_flash_attn(hp, p) ? 1 : 0;
    if (p.n_gpu_layers < -2)
        throw value_error("n_gpu_layers must be >= 0, -1 (all) or -2 (auto), got " + std::to_string(p.n_gpu_layers));
    if (p.main_gpu < 0) throw value_error("main_gpu must be >= 0, got " + std::to_string(p.main_gpu));
    if (p.split_mode != 0 && p.split_mode != 1)
        throw value_error("split_mode must be 0 (none: every GPU layer on main_gpu) or 1 (layer split across "
                          "devices), got " + std::to_string(p.split_mode) + " (row split is not supported)");
    for (float v : p.tensor_split)
        if (!std::isfinite(v) || v < 0)
            throw value_error("tensor_split: shares must be finite numbers >= 0, got " + std::to_string(v));
    return p;
}

namespace {

// A vocab_only model has no weights to evaluate (its options still resolve).
context_params for_context(const model& m, const context_params& p) {
    if (m.vocab_only()) throw value_error("the model was loaded with vocab_only=True; it cannot be evaluated");
    return resolve_params(m, p);
}

// The model's RoPE with the context's overrides, resolved as llama.cpp
// resolves them: an explicit scaling type decides whether YaRN's
// extrapolation mix is on (and "none" also drops any frequency scale);
// explicit YaRN values win over the model's.
rope_params scaled_rope(rope_params r, const context_params& p) {
    if (p.rope_freq_base > 0) r.freq_base = p.rope_freq_base;
    if (p.rope_freq_scale > 0) r.freq_scale = p.rope_freq_scale;
    if (p.rope_scaling_type == 0) {
        r.freq_scale = 1.0f;
        r.ext_factor = 0.0f;
    } else if (p.rope_scaling_type == 1) {
        r.ext_factor = 0.0f;
    } else if (p.rope_scaling_type == 2) {
        r.ext_factor = 1.0f;
    }
    if (p.yarn_ext_factor >= 0) r.ext_factor = p.yarn_ext_factor;
    if (p.yarn_attn_factor > 0) r.attn_factor = p.yarn_attn_factor;
    if (p.yarn_beta_fast > 0) r.beta_fast = p.yarn_beta_fast;
    if (p.yarn_beta_slow > 0) r.beta_slow = p.yarn_beta_slow;
    if (p.yarn_orig_ctx > 0) r.n_ctx_orig = p.yarn_orig_ctx;
    return r;
}

// Layer flags of the main cache: all layers (empty), or the global ones;
// never a layer that reuses another's cache (hparams::kv_layer).
std::vector<uint8_t> main_cache_layers(const hparams& hp, const context_params& p) {
    const bool window = window_cache_cells(hp, p) != 0;
    if (!window && hp.kv_layer.empty() && hp.n_recurrent() == 0) return {};
    std::vector<uint8_t> f((size_t)hp.n_layer);
    // (recurrent layers keep no KV cells: their memory is recurrent_state)
    for (size_t i = 0; i < f.size(); ++i)
        f[i] = (!window || !hp.swa_layers[i]) && hp.own_kv((int64_t)i) && !hp.is_recurrent((int64_t)i);
    return f;
}

// Layer flags of the window cache: the sliding-window layers with a cache of their own.
std::vector<uint8_t> window_cache_layers(const hparams& hp) {
    std::vector<uint8_t> f((size_t)hp.n_layer);
    for (size_t i = 0; i < f.size(); ++i) f[i] = hp.swa_layers[i] && hp.own_kv((int64_t)i);
    return f;
}

// Each layer's key / value widths in the cache (hparams::kv_width_k / _v).
std::vector<int64_t> kv_widths(const hparams& hp, bool values) {
    std::vector<int64_t> w((size_t)hp.n_layer);
    for (int64_t il = 0; il < hp.n_layer; ++il) w[(size_t)il] = values ? hp.kv_width_v(il) : hp.kv_width_k(il);
    return w;
}

// The head size every layer a cache holds shares (rotation_block's input),
// 0 when they differ: llama.cpp then rotates none of them.
int64_t shared_head_dim(const hparams& hp, const kv_cache& kv, bool values) {
    int64_t d = -1;
    for (int il = 0; il < (int)hp.n_layer; ++il) {
        if (!kv.holds(il)) continue;
        const int64_t h = values ? hp.layer_head_dim_v(il) : hp.layer_head_dim_k(il);
        if (d >= 0 && d != h) return 0;
        d = h;
    }
    return d < 0 ? 0 : d;
}

device gpu_of(const std::vector<device>& parts) {
    for (const device& d : parts)
        if (!d.is_host()) return d;
    return device::host();
}

// Rotation block of a quantized cache (0: none), as llama.cpp picks it: a head
// size that is a multiple of 64; keys in the largest power-of-two block that
// divides the head, values in blocks of 64.
int rotation_block(ggml_type t, int64_t head_dim, bool values) {
    if (traits(t).block_size <= 1 || head_dim % 64 != 0) return 0;
    if (values) return 64;
    int b = 64;
    while (head_dim % (2 * b) == 0 && 2 * b <= head_dim) b *= 2;
    return b;
}

template <class T> void put(std::vector<uint8_t>& out, T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
}

}  // namespace

context::context(std::shared_ptr<const model> m, const context_params& params)
    : model_(std::move(m)),
      p_(for_context(*model_, params)),
      parts_(place_parts(*model_, p_)),
      gpu_(gpu_of(parts_)),
      kv_((int)model_->hp().n_layer, model_->hp().v.encoder ? 1 : p_.n_ctx, kv_widths(model_->hp(), false),
          kv_widths(model_->hp(), true), p_.type_k, p_.type_v, main_cache_layers(model_->hp(), p_),
          kv_devices(), model_->hp().is_mla()),
      rstate_(model_->hp(), p_.n_seq_max, p_.n_state_checkpoints, layer_devices()),
      pool_(new thread_pool(p_.n_threads)),
      pool_batch_(p_.n_threads_batch != p_.n_threads ? new thread_pool(p_.n_threads_batch) : nullptr),
      rs_(model_->hp(), p_.n_ubatch, p_.n_ctx, gpu_),
      backend_(model_->hp(), p_.n_ubatch, p_.n_ctx, std::max(p_.n_threads, p_.n_threads_batch), attention_path()) {
    const hparams& hp = model_->hp();
    rope_[0] = scaled_rope(hp.rope, p_);
    if (const int64_t wc = window_cache_cells(hp, p_)) {
        kv_swa_.reset(new kv_cache((int)hp.n_layer, wc, kv_widths(hp, false), kv_widths(hp, true), p_.type_k,
                                   p_.type_v, window_cache_layers(hp), kv_devices(), hp.is_mla()));
        cells_swa_.resize((size_t)p_.n_batch);
    }
    swa_dropped_.assign((size_t)p_.n_seq_max, -1);
    if (!gpu_.is_host()) {
        // One backend per device, in the order the parts meet them.
        std::vector<device> made;
        part_be_.resize(parts_.size());
        for (size_t i = 0; i < parts_.size(); ++i) {
            const device d = parts_[i];
            if (d.is_host()) {
                part_be_[i] = &backend_;
                continue;
            }
            size_t g = 0;
            while (g < made.size() && !(made[g] == d)) ++g;
            if (g == made.size()) {
                made.push_back(d);
                gpu_backends_.push_back(create_gpu_backend(d));
            }
            part_be_[i] = gpu_backends_[g].get();
        }
        if (!p_.offload_kqv) kv_be_ = &backend_;
        // Weights kept on the host (override_tensor, n_cpu_moe) of the parts on a GPU.
        const std::vector<gguf_tensor_info>& ts = model_->file().tensors();
        std::vector<std::string> names;
        for (const gguf_tensor_info& t : ts) names.push_back(t.name);
        const std::vector<bool> kept = host_kept(names, hp.n_layer, p_);
        for (size_t i = 0; i < ts.size(); ++i)
            if (kept[i]) host_weights_.insert(model_->file().tensor_data(ts[i]));
    }
    // (Multi-head latent attention reads its values from the keys: no rotation of either.)
    if (p_.kv_rotation && !hp.is_mla()) {
        // per cache, from the head size its layers share (none when they differ)
        for (kv_cache* c : {&kv_, kv_swa_.get()}) {
            if (!c) continue;
            const int64_t dk = shared_head_dim(hp, *c, false), dv = shared_head_dim(hp, *c, true);
            c->set_rotation(dk ? rotation_block(p_.type_k, dk, false) : 0, dv ? rotation_block(p_.type_v, dv, true) : 0);
        }
    }
    // Frequency divisors: llama3-style rope_freqs, or phi3's long / short
    // factors chosen by the context length each sequence can reach.
    const model_weights& w = model_->weights();
    const std::vector<float>* ff = &w.rope_freqs;
    if (ff->empty() && !w.rope_long.empty())
        ff = (p_.n_ctx / p_.n_seq_max > hp.rope.n_ctx_orig) ? &w.rope_long : &w.rope_short;
    rope_[0].freq_factors = ff->empty() ? nullptr : ff->data();
    rope_[1] = rope_[0];
    if (hp.swa_rope_plain) {
        // the context's base, no frequency scaling, no YaRN (llama.cpp's olmo2 graph)
        rope_[1].freq_scale = 1.0f;
        rope_[1].ext_factor = 0.0f;
        rope_[1].attn_factor = 1.0f;
    } else {
        rope_[1].freq_base = hp.rope_freq_base_swa;
        rope_[1].freq_scale = hp.rope_freq_scale_swa;
    }
    // Gemma 4: its sliding-window layers rotate their own dims, without the
    // global layers' frequency divisors.
    if (hp.rope_n_rot_swa > 0) rope_[1].n_rot = hp.rope_n_rot_swa;
    if (hp.rope_freqs_global) rope_[1].freq_factors = nullptr;
    cells_.resize((size_t)p_.n_batch);
    first_seq_.resize((size_t)p_.n_batch);
    out_rows_.resize((size_t)p_.n_batch);
    seq_last_.resize((size_t)p_.n_seq_max);
    logits_ = std::make_shared<std::vector<float>>();
    embd_ = std::make_shared<std::vector<float>>();
    ensure_output_capacity(1);  // grows with the outputs a decode keeps
    pooling_ = p_.embeddings ? p_.pooling : 0;
    if (hp.v.encoder || pooling_ != 0) hidden_.resize((size_t)(p_.n_ubatch * hp.n_embd));
    if (pooling_ != 0) {
        embd_seq_.assign((size_t)(p_.n_seq_max * hp.n_embd), 0.0f);
        seq_n_rows_.assign((size_t)p_.n_seq_max, 0);
        seq_pos_.assign((size_t)p_.n_seq_max, 0);
    }
    if (pooling_ == 4) {  // rank
        cls_in_.assign((size_t)(p_.n_seq_max * hp.n_embd), 0.0f);
        cls_mid_.assign((size_t)(p_.n_seq_max * hp.n_embd), 0.0f);
        seq_score_.assign((size_t)(p_.n_seq_max * hp.n_cls_out), 0.0f);
    }
}

void context::ensure_output_capacity(int64_t n_out) {
    const hparams& hp = model_->hp();
    const size_t need = hp.v.encoder ? 0 : (size_t)n_out * (size_t)hp.n_vocab;  // encoders: no output head
    if (logits_.use_count() > 1) logits_ = unshared_logits(need);
    else if (logits_->size() < need) logits_ = std::make_shared<std::vector<float>>(need);
    if (p_.embeddings && embd_->size() < (size_t)n_out * (size_t)hp.n_embd)
        embd_ = std::make_shared<std::vector<float>>((size_t)n_out * (size_t)hp.n_embd);
}

// The arrays get_logits hands to Python keep a reference to the buffer they
// view, and a reader may still be using one (a server slot sampling from the
// last step's row while the next step starts): a decode never writes under
// them. It takes a buffer nobody else holds — a spare from earlier steps or a
// new one — and keeps the held one as a spare (small ones only: a prompt's
// every-row logits can be hundreds of MB; those are freed with their last
// reader). Two buffers alternate in steady state, no copy and no allocation.
std::shared_ptr<std::vector<float>> context::unshared_logits(size_t need) {
    constexpr size_t kSpareBytes = (size_t)32 << 20;
    std::shared_ptr<std::vector<float>> held = std::move(logits_), out;
    for (size_t i = 0; i < logits_spare_.size(); ++i)
        if (logits_spare_[i].use_count() == 1 && logits_spare_[i]->size() >= need) {
            out = std::move(logits_spare_[i]);
            logits_spare_.erase(logits_spare_.begin() + (std::ptrdiff_t)i);
            break;
        }
    if (!out) out = std::make_shared<std::vector<float>>(std::max(need, held->size() * sizeof(float) <= kSpareBytes
                                                                            ? held->size() : (size_t)0));
    if (held->size() * sizeof(float) <= kSpareBytes) logits_spare_.push_back(std::move(held));
    if (logits_spare_.size() > 2) logits_spare_.erase(logits_spare_.begin());
    return out;
}

void context::check_seq(int seq, const char* what) const {
    if (seq < 0 || seq >= p_.n_seq_max)
        throw value_error(std::string(what) + " " + std::to_string(seq) + " is out of range [0, " +
                          std::to_string(p_.n_seq_max) + ") (n_seq_max)");
}

void context::validate(const batch_view& b) const {
    const hparams& hp = model_->hp();
    if (b.n <= 0) throw value_error("decode: the batch is empty");
    if (b.n > p_.n_batch)
        throw value_error("decode: the batch has " + std::to_string(b.n) + " rows, more than n_batch " +
                          std::to_string(p_.n_batch));
    if ((b.tokens == nullptr) == (b.embd == nullptr))
        throw value_error("decode: give either tokens or embeddings");
    if (!b.pos || !b.seq_ids) throw value_error("decode: positions and sequence ids are required");
    if (!b.causal && b.n > p_.n_ubatch)
        throw value_error("decode: a non-causal batch (causal=False) must fit one micro-batch: " + std::to_string(b.n) +
                          " rows, n_ubatch " + std::to_string(p_.n_ubatch));
    const bool mrope = hp.n_pos_per_embd() == 4;
    if (mrope)
        for (int64_t i = b.n; i < 4 * b.n; ++i)
            if (b.pos[i] < 0)
                throw value_error("decode: M-RoPE position component " + std::to_string(i / b.n) + " of row " +
                                  std::to_string(i % b.n) + " is negative (" + std::to_string(b.pos[i]) + ")");
    for (int64_t i = 0; i < b.n; ++i) {
        if (b.tokens && (b.tokens[i] < 0 || b.tokens[i] >= hp.n_vocab))
            throw value_error("decode: token id " + std::to_string(b.tokens[i]) + " at row " + std::to_string(i) +
                              " is out of range [0, " + std::to_string(hp.n_vocab) + ")");
        if (b.pos[i] < 0)
            throw value_error("decode: position " + std::to_string(b.pos[i]) + " at row " + std::to_string(i) +
                              " is negative");
        const int32_t s0 = b.seq_begin ? b.seq_begin[i] : (int32_t)i;
        const int32_t s1 = b.seq_begin ? b.seq_begin[i + 1] : (int32_t)i + 1;
        if (s1 <= s0) throw value_error("decode: row " + std::to_string(i) + " belongs to no sequence");
        if (s1 - s0 > 1 && !rstate_.empty())
            throw value_error("decode: row " + std::to_string(i) + " belongs to several sequences; a model with "
                              "recurrent layers advances one sequence's state per row (evaluate it in one "
                              "sequence, then kv_seq_cp)");
        for (int32_t k = s0; k < s1; ++k) check_seq(b.seq_ids[k], "decode: sequence id");
    }
    // Positions of each sequence increase along the batch and follow the cache.
    std::vector<int32_t>& last = seq_last_;
    std::fill(last.begin(), last.end(), -2);  // -2: not seen yet
    for (int64_t i = 0; i < b.n; ++i) {
        const int32_t s0 = b.seq_begin ? b.seq_begin[i] : (int32_t)i;
        const int32_t s1 = b.seq_begin ? b.seq_begin[i + 1] : (int32_t)i + 1;
        for (int32_t k = s0; k < s1; ++k) {
            const int s = b.seq_ids[k];
            int32_t& l = last[(size_t)s];
            bool first = false;
            if (l == -2) l = kv_.seq_pos_max(s), first = true;
            // M-RoPE (see context.h): equal temporal positions within the
            // batch, and an embedding batch starting at the cache's last one.
            const bool equal_ok = mrope && (!first || (b.embd && l >= 0));
            if (b.pos[i] < l || (b.pos[i] == l && !equal_ok))
                throw value_error("decode: row " + std::to_string(i) + " puts position " + std::to_string(b.pos[i]) +
                                  " in sequence " + std::to_string(s) + ", which already reaches position " +
                                  std::to_string(l) +
                                  (mrope ? " (M-RoPE: temporal positions must not decrease, and token rows must start "
                                           "after the cached ones; kv_seq_rm to redo)"
                                         : " (positions must increase; kv_seq_rm to redo)"));
            l = b.pos[i];
        }
    }
}

namespace {
// The context this thread is decoding with (its tensor callback may run).
thread_local const context* tl_decoding = nullptr;

struct decoding_scope {
    explicit decoding_scope(const context* c) { tl_decoding = c; }
    ~decoding_scope() { tl_decoding = nullptr; }
};
}  // namespace

std::unique_lock<std::mutex> context::guard() const {
    if (tl_decoding == this)
        throw value_error("the context is in the middle of a decode: its tensor callback cannot use it");
    return std::unique_lock<std::mutex>(mutex_);
}

void context::decode(const batch_view& b) {
    std::unique_lock<std::mutex> lock = guard();
    decoding_scope busy(this);
    const hparams& hp = model_->hp();
    validate(b);
    if (hp.v.encoder) {
        decode_encoder(b);
        return;
    }
    kv_.find_free(b.n, cells_.data());  // throws (changing nothing) when the cache is full
    if (kv_swa_) place_in_window_cache(b);

    // Which rows want outputs. Pooled embeddings need every row's state, but
    // keep (and compute logits for) only the rows asked for explicitly.
    const bool pooled = pooling_ != 0;
    const bool all = !b.want && p_.embeddings && !pooled;
    int64_t n_out = 0;
    for (int64_t i = 0; i < b.n; ++i) n_out += b.want ? (b.want[i] != 0) : (all || i == b.n - 1);
    ensure_output_capacity(n_out);
    for (int64_t i = 0; i < b.n; ++i) first_seq_[(size_t)i] = b.seq_ids[b.seq_begin ? b.seq_begin[i] : i];
    // Recurrent layers: each sequence's position before the batch, and (for
    // several rows: prompt chunks, draft batches) a checkpoint there, so the
    // batch's tokens can be removed again without evaluating from the start.
    std::vector<int32_t> rs_start;
    if (!rstate_.empty()) {
        rs_start.assign((size_t)p_.n_seq_max, INT32_MIN);
        for (int64_t i = 0; i < b.n; ++i) rs_start[(size_t)first_seq_[(size_t)i]] = rstate_.pos(first_seq_[(size_t)i]);
        if (b.n > 1)
            for (int s = 0; s < p_.n_seq_max; ++s)
                if (rs_start[(size_t)s] != INT32_MIN) rstate_.checkpoint(s);
    }

    int64_t done = 0, out_done = 0;
    if (pooled) pool_begin();
    try {
        for (int64_t u0 = 0; u0 < b.n; u0 += p_.n_ubatch) {
            const int64_t u1 = std::min(b.n, u0 + p_.n_ubatch);
            ubatch ub;
            ub.n_tok = u1 - u0;
            ub.tokens = b.tokens ? b.tokens + u0 : nullptr;
            ub.embd = b.embd ? b.embd + u0 * hp.n_embd : nullptr;
            ub.pos = b.pos + u0;
            const bool mrope = hp.n_pos_per_embd() == 4;
            ub.pos_stride = mrope ? b.n : 0;
            const int32_t* pos_y = mrope ? b.pos + b.n + u0 : nullptr;  // height component of the ubatch's rows
            const int32_t* pos_x = mrope ? b.pos + 2 * b.n + u0 : nullptr;  // width
            ub.cells = cells_.data() + u0;
            ub.cells_swa = kv_swa_ ? cells_swa_.data() + u0 : nullptr;
            for (int64_t i = u0; i < u1; ++i) {
                const int32_t s0 = b.seq_begin ? b.seq_begin[i] : (int32_t)i;
                const int32_t s1 = b.seq_begin ? b.seq_begin[i + 1] : (int32_t)i + 1;
                const int32_t ey = mrope ? b.pos[b.n + i] : 0, ex = mrope ? b.pos[2 * b.n + i] : 0;
                kv_.occupy(cells_[(size_t)i], b.pos[i], b.seq_ids + s0, s1 - s0, ey, ex);
                if (kv_swa_) kv_swa_->occupy(cells_swa_[(size_t)i], b.pos[i], b.seq_ids + s0, s1 - s0, ey, ex);
                const bool w = b.want ? b.want[i] != 0 : (all || i == b.n - 1);
                if (w) out_rows_[(size_t)ub.n_out++] = (int32_t)(i - u0);
            }
            done = u1;
            ub.out_rows = out_rows_.data();
            ub.rstate = rstate_.empty() ? nullptr : &rstate_;
            ub.seq = first_seq_.data() + u0;
            for (int r = 0; r < 2; ++r) {
                if (rs_.mask[r].empty()) continue;
                const kv_cache& mc = (r == 1 && kv_swa_) ? *kv_swa_ : kv_;
                mc.build_mask(ub.n_tok, ub.pos, first_seq_.data() + u0, r == 0 ? 0 : hp.n_swa, rs_.mask[r].data(),
                              rs_.mask_words, rs_.mask_lo[r].data(), rs_.mask_hi[r].data(), b.causal, pos_y, pos_x);
            }
            backend_.use_pool((ub.n_tok > 1 && pool_batch_) ? *pool_batch_ : *pool_);
            pass ps(backend_, rs_, &tensor_cb_, ub.n_tok);
            if (!part_be_.empty()) ps.set_parts(&part_be_);
            ps.set_kv_backend(kv_be_);
            if (!host_weights_.empty()) ps.set_host_weights(&host_weights_, &backend_);
            if (pooled) {
                // Every row's state into hidden_, pooled, then the rows asked for are kept.
                for (int64_t i = 0; i < ub.n_tok; ++i) out_rows_[(size_t)i] = (int32_t)i;
                ub.n_out = ub.n_tok;
                decoder_forward(*model_, rope_, kv_, kv_swa_.get(), rs_, ub, ps, nullptr, hidden_.data());
                pool_rows(b, u0, ub.n_tok, hidden_.data());
                const int64_t first_kept = out_done;
                keep_rows(b, u0, ub.n_tok, hidden_.data(), out_done);
                if (out_done > first_kept) {
                    pass head(backend_, rs_, &tensor_cb_, out_done - first_kept);
                    if (!part_be_.empty()) head.set_parts(&part_be_);
                    if (!host_weights_.empty()) head.set_host_weights(&host_weights_, &backend_);
                    decoder_logits(*model_, embd_->data() + first_kept * hp.n_embd, head,
                                   logits_->data() + first_kept * hp.n_vocab);
                }
                continue;
            }
            float* lg = logits_->data() + out_done * hp.n_vocab;
            float* em = p_.embeddings ? embd_->data() + out_done * hp.n_embd : nullptr;
            decoder_forward(*model_, rope_, kv_, kv_swa_.get(), rs_, ub, ps, lg, em);
            out_done += ub.n_out;
        }
    } catch (...) {
        for (auto& g : gpu_backends_) g->discard();  // what the failed step recorded does not run
        // Undo: the rows of this batch leave the cache, no outputs remain.
        for (int64_t i = 0; i < done; ++i) {
            kv_.release(cells_[(size_t)i]);
            if (kv_swa_) kv_swa_->release(cells_swa_[(size_t)i]);
        }
        n_out_ = 0;
        if (pooled) pool_begin();
        if (!rstate_.empty()) rstate_after_batch(b, false, rs_start);
        throw;
    }
    if (pooled) pool_end();
    if (!rstate_.empty()) rstate_after_batch(b, true, rs_start);
    n_out_ = n_out;
}

const float* context::logits(int64_t i) const {
    if (model_->hp().v.encoder)
        throw value_error("model architecture '" + model_->hp().arch + "' is an encoder: it has no output head, "
                          "only embeddings");
    if (i < 0) i += n_out_;
    if (i < 0 || i >= n_out_)
        throw value_error("output " + std::to_string(i) + " is out of range: the last decode kept " +
                          std::to_string(n_out_) + " rows");
    return logits_->data() + i * model_->hp().n_vocab;
}

const float* context::embeddings(int64_t i) const {
    if (!p_.embeddings) throw value_error("the context was created without embeddings=True");
    if (i < 0) i += n_out_;
    if (i < 0 || i >= n_out_)
        throw value_error("output " + std::to_string(i) + " is out of range: the last decode kept " +
                          std::to_string(n_out_) + " rows");
    return embd_->data() + i * model_->hp().n_embd;
}

bool context::kv_seq_rm(int seq, int32_t p0, int32_t p1) {
    std::unique_lock<std::mutex> lock = guard();
    if (seq >= 0) check_seq(seq, "sequence id");
    if (!rstate_.empty()) {
        // All or nothing: every sequence concerned must be able to drop the range.
        for (int s = 0; s < p_.n_seq_max; ++s)
            if ((seq < 0 || s == seq) && !rstate_.can_rm(s, p0, p1, kv_.seq_pos_min(s))) return false;
        for (int s = 0; s < p_.n_seq_max; ++s)
            if (seq < 0 || s == seq) rstate_.rm(s, p0, p1, kv_.seq_pos_min(s));
    }
    kv_.seq_rm(seq, p0, p1);
    if (kv_swa_) {
        kv_swa_->seq_rm(seq, p0, p1);
        // A sequence removed from its start has nothing dropped any more.
        for (int s = 0; s < p_.n_seq_max; ++s)
            if ((seq < 0 || s == seq) && kv_.seq_pos_max(s) < 0) swa_dropped_[(size_t)s] = -1;
    }
    return true;
}

void context::kv_seq_cp(int src, int dst, int32_t p0, int32_t p1) {
    std::unique_lock<std::mutex> lock = guard();
    check_seq(src, "source sequence id");
    check_seq(dst, "destination sequence id");
    if (!rstate_.empty()) {
        // A state is all of its sequence: only a whole sequence can be copied.
        const int32_t P = rstate_.pos(src);
        if (P >= 0 && ((p0 > 0 && p0 > kv_.seq_pos_min(src)) || (p1 >= 0 && p1 <= P)))
            throw value_error("kv_seq_cp: a model with recurrent layers copies whole sequences only (positions " +
                              std::to_string(p0) + ".." + std::to_string(p1) + " of sequence " + std::to_string(src) +
                              ", which holds up to " + std::to_string(P) + ")");
        if (kv_.seq_pos_max(dst) >= 0)
            throw value_error("kv_seq_cp: with recurrent layers the destination sequence must be empty");
        rstate_.cp(src, dst);
    }
    kv_.seq_cp(src, dst, p0, p1);
    if (kv_swa_) {
        kv_swa_->seq_cp(src, dst, p0, p1);
        swa_dropped_[(size_t)dst] = std::max(swa_dropped_[(size_t)dst], swa_dropped_[(size_t)src]);
    }
}

void context::kv_seq_keep(int seq) {
    std::unique_lock<std::mutex> lock = guard();
    check_seq(seq, "sequence id");
    rstate_.keep(seq);
    kv_.seq_keep(seq);
    if (kv_swa_) {
        kv_swa_->seq_keep(seq);
        for (int s = 0; s < p_.n_seq_max; ++s)
            if (s != seq) swa_dropped_[(size_t)s] = -1;
    }
}

int32_t context::kv_seq_pos_max(int seq) const {
    std::unique_lock<std::mutex> lock = guard();
    check_seq(seq, "sequence id");
    return kv_.seq_pos_max(seq);
}

int32_t context::kv_seq_pos_min(int seq) const {
    std::unique_lock<std::mutex> lock = guard();
    check_seq(seq, "sequence id");
    return kv_.seq_pos_min(seq);
}

void context::kv_clear() {
    std::unique_lock<std::mutex> lock = guard();
    kv_.clear();
    rstate_.clear();
    if (kv_swa_) kv_swa_->clear();
    std::fill(swa_dropped_.begin(), swa_dropped_.end(), -1);
}

bool context::kv_swa_resumable(int seq, int32_t pos) const {
    std::unique_lock<std::mutex> lock = guard();
    check_seq(seq, "sequence id");
    // A row at pos sees positions > pos - n_swa: none of them may be dropped.
    const int32_t d = kv_swa_ ? swa_dropped_[(size_t)seq] : -1;
    return d < 0 || d <= pos - model_->hp().n_swa;
}

int32_t context::kv_seq_resume_pos(int seq, int32_t n) const {
    std::unique_lock<std::mutex> lock = guard();
    check_seq(seq, "sequence id");
    return rstate_.resume_at(seq, n);
}

size_t context::checkpoint_bytes() const {
    std::unique_lock<std::mutex> lock = guard();
    return rstate_.checkpoint_bytes();
}

// After a batch of a model with recurrent layers: on success each sequence's
// state is at its last row's position, with a checkpoint there for several
// rows (the end of a prompt: what the next turn's prompt starts from). On
// failure the rows left the cache (decode's undo), so each state goes back to
// the checkpoint before the batch, or, without one (a single row), the
// sequence is dropped whole: a state that includes rows the cache no longer
// holds is never kept.
void context::rstate_after_batch(const batch_view& b, bool ok, const std::vector<int32_t>& start) {
    if (ok) {
        for (int64_t i = 0; i < b.n; ++i) rstate_.set_pos(first_seq_[(size_t)i], b.pos[i]);
        if (b.n > 1)
            for (int s = 0; s < p_.n_seq_max; ++s)
                if (start[(size_t)s] != INT32_MIN) rstate_.checkpoint(s);
        return;
    }
    for (int s = 0; s < p_.n_seq_max; ++s) {
        const int32_t p = start[(size_t)s];
        if (p == INT32_MIN) continue;
        if (p < 0) rstate_.clear_seq(s);
        else if (!rstate_.restore(s, p)) {
            rstate_.clear_seq(s);
            kv_.seq_rm(s, -1, -1);
        }
    }
}

// Before a batch: checks that no row needs what the window cache dropped,
// drops from it what no row of this batch or later can see, and picks its
// cells (throws, having changed nothing else, when it is full).
void context::place_in_window_cache(const batch_view& b) {
    const int32_t n_swa = model_->hp().n_swa;
    std::vector<int32_t>& first = seq_last_;  // per sequence: its first position in the batch
    std::fill(first.begin(), first.end(), INT32_MAX);
    for (int64_t i = 0; i < b.n; ++i) {
        const int32_t s0 = b.seq_begin ? b.seq_begin[i] : (int32_t)i;
        const int32_t s1 = b.seq_begin ? b.seq_begin[i + 1] : (int32_t)i + 1;
        for (int32_t k = s0; k < s1; ++k) first[(size_t)b.seq_ids[k]] = std::min(first[(size_t)b.seq_ids[k]], b.pos[i]);
    }
    for (int s = 0; s < p_.n_seq_max; ++s) {
        const int32_t p = first[(size_t)s];
        if (p == INT32_MAX) continue;
        if (swa_dropped_[(size_t)s] >= 0 && swa_dropped_[(size_t)s] > p - n_swa)
            throw value_error("decode: sequence " + std::to_string(s) + " continues at position " + std::to_string(p) +
                              ", which sees positions from " + std::to_string(std::max(0, p - n_swa + 1)) +
                              " on, but the sliding-window cache already dropped those up to " +
                              std::to_string(swa_dropped_[(size_t)s]) +
                              " (evaluate the sequence again from its start, or create the context with swa_full=True)");
    }
    // first[s] becomes the position below which sequence s is no longer seen
    // (INT32_MIN for sequences not in the batch: nothing dropped).
    for (int s = 0; s < p_.n_seq_max; ++s) {
        int32_t& f = first[(size_t)s];
        f = f == INT32_MAX ? INT32_MIN : f - n_swa + 1;
    }
    kv_swa_->drop_before(first.data(), p_.n_seq_max, swa_dropped_.data());
    kv_swa_->find_free(b.n, cells_swa_.data());
}

// Layout: magic, version, n_vocab, n_embd, then the KV cache (kv_cache.cpp),
// a flag and, when set, the window cache and the dropped position of each
// sequence, then n_out, the logits (n_out, n_vocab), a flag and the
// embeddings (n_out, n_embd).
std::vector<uint8_t> context::state_get() const {
    std::unique_lock<std::mutex> lock = guard();
    const hparams& hp = model_->hp();
    std::vector<uint8_t> out;
    put<uint32_t>(out, kStateMagic);
    put<uint32_t>(out, kStateVersion);
    put<uint64_t>(out, (uint64_t)hp.n_vocab);
    put<uint64_t>(out, (uint64_t)hp.n_embd);
    kv_.write_state(out);
    put<uint8_t>(out, kv_swa_ ? 1 : 0);
    if (kv_swa_) {
        kv_swa_->write_state(out);
        for (int32_t d : swa_dropped_) put<int32_t>(out, d);
    }
    if (!rstate_.empty()) rstate_.write_state(out);  // (models with recurrent layers only)
    put<uint64_t>(out, (uint64_t)n_out_);
    const size_t nl = hp.v.encoder ? 0 : (size_t)n_out_ * (size_t)hp.n_vocab * sizeof(float);
    size_t at = out.size();
    out.resize(at + nl);
    if (nl) std::memcpy(out.data() + at, logits_->data(), nl);
    put<uint8_t>(out, p_.embeddings ? 1 : 0);
    if (p_.embeddings) {
        const size_t ne = (size_t)n_out_ * (size_t)hp.n_embd * sizeof(float);
        at = out.size();
        out.resize(at + ne);
        if (ne) std::memcpy(out.data() + at, embd_->data(), ne);
    }
    return out;
}

void context::state_set(const uint8_t* data, size_t size) {
    std::unique_lock<std::mutex> lock = guard();
    const hparams& hp = model_->hp();
    auto need = [&](size_t at, size_t k) {
        if (k > size || at > size - k) throw value_error("context state is truncated");
    };
    uint32_t magic = 0, version = 0;
    uint64_t nv = 0, ne = 0;
    need(0, 24);
    std::memcpy(&magic, data, 4);
    std::memcpy(&version, data + 4, 4);
    std::memcpy(&nv, data + 8, 8);
    std::memcpy(&ne, data + 16, 8);
    if (magic != kStateMagic) throw value_error("not a llamapy context state (bad magic)");
    if (version != kStateVersion) throw value_error("context state version " + std::to_string(version) + " is not supported");
    if (nv != (uint64_t)hp.n_vocab || ne != (uint64_t)hp.n_embd)
        throw value_error("context state was saved with another model");
    // Validate everything (cache section, then outputs) before changing anything.
    const size_t kv_at = 24;
    size_t at = kv_at + kv_.read_state(data + kv_at, size - kv_at, false);
    need(at, 1);
    if ((data[at++] != 0) != (kv_swa_ != nullptr))
        throw value_error("context state was saved by a context with another sliding-window cache layout (swa_full)");
    const size_t swa_at = at;
    std::vector<int32_t> dropped;
    if (kv_swa_) {
        at += kv_swa_->read_state(data + at, size - at, false);
        dropped.resize((size_t)p_.n_seq_max);
        need(at, dropped.size() * 4);
        std::memcpy(dropped.data(), data + at, dropped.size() * 4);
        at += dropped.size() * 4;
    }
    const size_t rs_at = at;
    if (!rstate_.empty()) at += rstate_.read_state(data + at, size - at, false);
    need(at, 8);
    uint64_t n_out = 0;
    std::memcpy(&n_out, data + at, 8);
    at += 8;
    if (n_out > (uint64_t)p_.n_batch) throw value_error("context state holds more outputs than n_batch");
    const size_t nl = hp.v.encoder ? 0 : (size_t)n_out * (size_t)hp.n_vocab * sizeof(float);
    need(at, nl);
    const size_t logits_at = at;
    at += nl;
    need(at, 1);
    const bool has_embd = data[at++] != 0;
    const size_t nb = has_embd ? (size_t)n_out * (size_t)hp.n_embd * sizeof(float) : 0;
    need(at, nb);
    if (at + nb != size) throw value_error("context state has trailing bytes");
    // Apply.
    kv_.read_state(data + kv_at, size - kv_at, true);
    if (kv_swa_) {
        kv_swa_->read_state(data + swa_at, size - swa_at, true);
        swa_dropped_ = dropped;
    }
    if (!rstate_.empty()) rstate_.read_state(data + rs_at, size - rs_at, true);
    ensure_output_capacity((int64_t)n_out);
    if (nl) std::memcpy(logits_->data(), data + logits_at, nl);
    if (has_embd && p_.embeddings && nb) std::memcpy(embd_->data(), data + at, nb);
    n_out_ = (int64_t)n_out;
}

void context::set_adapters(const std::vector<std::pair<std::shared_ptr<const lora_adapter>, float>>& adapters) {
    std::unique_lock<std::mutex> lock = guard();
    std::unordered_set<std::string> names;
    for (const auto& m : model_->matrices()) names.insert(m.first);
    for (const auto& [ad, scale] : adapters) {
        if (!ad) throw value_error("set_adapters: a null adapter");
        if (!std::isfinite(scale)) throw value_error("set_adapters: the scale of " + ad->path() + " is not finite");
        for (const auto& entry : ad->pairs())
            if (!names.count(entry.first))
                throw value_error("set_adapters: " + ad->path() + " is not an adapter of this model");
    }
    // The devices' copies of the adapters being replaced go first (a file
    // unmapped now may be mapped again at the same address).
    loras_.for_each_matrix([&](const weight_view& w) {
        for (auto& g : gpu_backends_) g->forget_weights(w.data);
    });
    loras_.set(*model_, adapters);
    rs_.loras = loras_.empty() ? nullptr : &loras_;
    // Work rows beside the activations (device memory when layers are on a GPU).
    rs_.lora_ax = float_buffer(rs_.x.where(), (size_t)(rs_.n_ubatch * loras_.max_rank()));
    rs_.lora_bax = float_buffer(rs_.x.where(), (size_t)(rs_.n_ubatch * loras_.max_out()));
}

void context::set_imatrix(bool on) {
    std::unique_lock<std::mutex> lock = guard();
    if (on && !gpu_.is_host())
        throw value_error("imatrix statistics are collected on the CPU: load the model with n_gpu_layers=0");
    imatrix_ = on ? std::make_unique<imatrix_collector>(model_->file()) : nullptr;
    rs_.imatrix = imatrix_.get();
}

std::vector<imatrix_entry> context::imatrix_entries() const {
    std::unique_lock<std::mutex> lock = guard();
    if (!imatrix_) throw value_error("imatrix statistics are off (set_imatrix(True) first)");
    return imatrix_->entries();
}

tensor_callback context::set_tensor_callback(tensor_callback cb) {
    std::unique_lock<std::mutex> lock = guard();
    std::swap(tensor_cb_, cb);
    return cb;
}

std::vector<device> context::layer_devices() const {
    if (parts_.empty()) return {};
    return std::vector<device>(parts_.begin() + 1, parts_.end() - 1);  // each layer's part
}

std::vector<device> context::kv_devices() const {
    if (parts_.empty() || model_->hp().v.encoder || !p_.offload_kqv) return {};
    return std::vector<device>(parts_.begin() + 1, parts_.end() - 1);  // each layer's part
}

placement_plan context::placement() const {
    std::unique_lock<std::mutex> lock = guard();
    uint64_t act = rs_.bytes() + backend_.scratch_bytes() + sizeof(float) * hidden_.size();
    for (const auto& g : gpu_backends_) act += g->scratch_bytes();
    return plan_parts(*model_, parts_, kv_, kv_swa_.get(), act, rs_.x.where(), part_host_bytes(*model_, p_));
}

}  // namespace lp
