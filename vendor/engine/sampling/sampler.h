// sampler.h — the token sampler chain, run natively over the vocabulary so the
// Python layer never loops over logits.
//
// Order (the one llama-cpp-python 0.3.x builds, so the same settings behave the
// same): logit bias → repetition penalties → grammar → [greedy | mirostat
// v1/v2 | top-k → typical → top-p → min-p → temperature → random draw].
// temperature == 0 means greedy; temperature < 0 means "draw from the raw
// softmax" (no truncation); mirostat ignores the temperature, as there.
//
// Seeded draws give llama.cpp's tokens: each stage keeps, reorders and
// normalises the candidates as llama.cpp's sampler of that name does (float
// softmax sums in the candidates' current order; min-p keeps the order of
// an unsorted list; the draw walks the candidates in their current order), and
// the random numbers come from a 32-bit Mersenne twister seeded with the seed
// (0xFFFFFFFF: a random one), one uniform double per draw (std::
// discrete_distribution for mirostat).
//
// Grammar constraints (grammar_state.h): greedy takes the best token and
// checks it, filtering the vocabulary only when the grammar rejects it (the
// same answer, one token check per step). A random draw sees only allowed
// tokens, as llama.cpp's grammar stage removes the rest before truncation:
// with top-k, the best tokens are checked in order until k are allowed (the
// same top-k); otherwise, or when too few of them are, the vocabulary is
// filtered.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lp {

class grammar_state;

struct sampler_params {
    float temperature = 0.8f;
    int32_t top_k = 40;          // <= 0: off
    float top_p = 0.95f;         // >= 1: off
    float min_p = 0.05f;         // <= 0: off
    float typical_p = 1.0f;      // >= 1: off
    float repeat_penalty = 1.0f; // 1: off
    float frequency_penalty = 0.0f;
    float presence_penalty = 0.0f;
    int32_t penalty_last_n = 64; // tokens of history the penalties see; 0: off, -1: whole history
    int32_t mirostat = 0;        // 0 off, 1 v1, 2 v2
    float mirostat_tau = 5.0f;
    float mirostat_eta = 0.1f;
    int32_t min_keep = 1;        // truncation samplers keep at least this many candidates
    uint64_t seed = 0xFFFFFFFFu;
};

// A candidate token during sampling.
struct token_prob {
    int32_t id;
    float logit;
    float p;
};

class sampler {
public:
    sampler(const sampler_params& params, int32_t n_vocab);
    ~sampler();

    // Bias added to the logit of a token before anything else (OpenAI's
    // logit_bias). -inf bans a token.
    void set_logit_bias(const std::vector<std::pair<int32_t, float>>& bias);
    // Tokens the penalties treat as already seen (the prompt, typically).
    void set_history(const std::vector<int32_t>& tokens);
    // Picks the next token from raw logits (n_vocab floats; not modified).
    int32_t sample(const float* logits);
    // Records a token as generated (feeds the penalties and mirostat, and
    // advances the grammar, which must allow it).
    void accept(int32_t token);
    // Constrains sampling to a grammar (null: unconstrained). The state's
    // vocabulary must have n_vocab tokens.
    void set_grammar(std::unique_ptr<grammar_state> g);
    grammar_state* grammar_constraint() { return grammar_.get(); }
    // Greedy steps whose best token the grammar rejected (each cost a vocabulary filter).
    int64_t n_grammar_fallbacks() const { return n_grammar_fallbacks_; }
    void reseed(uint64_t seed);
    const sampler_params& params() const { return p_; }
    int32_t n_vocab() const { return n_vocab_; }

private:
    const float* adjusted_logits(const float* logits);
    // The chain over all tokens, or over `allowed` only when not null.
    int32_t sample_chain(const float* adjusted, const std::vector<int32_t>* allowed);
    void build_candidates(const float* adjusted, const std::vector<int32_t>* allowed);
    bool allowed_top_k(const float* adjusted);  // candidates = top-k of the grammar's tokens, if cheap
    int32_t run_stages();                       // the chain on the candidates built
    void record(int32_t token);
    void sort_desc();               // candidates by logit, descending
    void softmax(bool sort);        // fills p (float sums, as llama.cpp); sorts first when asked
    void top_k(int32_t k);
    void top_p(float p);
    void min_p(float p);
    void typical(float p);
    void temperature(float t);
    int32_t draw();                 // llama.cpp's dist stage
    int32_t discrete_draw();        // std::discrete_distribution over p (llama.cpp's mirostat draw)
    int32_t mirostat_v1();
    int32_t mirostat_v2();

    sampler_params p_;
    int32_t n_vocab_;
    std::vector<token_prob> cand_;  // (n_candidates)
    std::vector<float> work_;       // (n_vocab) logits after bias/penalties
    bool sorted_ = false;           // cand_ sorted by logit, descending
    std::vector<std::pair<int32_t, float>> bias_;
    std::deque<int32_t> history_;
    std::mt19937 rng_;
    float mirostat_mu_;
    std::unique_ptr<grammar_state> grammar_;
    std::vector<int32_t> allowed_;  // (n_allowed) the grammar's allowed tokens
    std::vector<uint8_t> mask_;     // (n_vocab) scratch: allowed flags, to list them in id order
    int64_t n_grammar_fallbacks_ = 0;
};

// Log-probabilities for the logprobs APIs, computed natively: the
// log-softmax of `logits` at `chosen`, and the n largest (id, logprob) pairs.
struct logprob_result {
    float chosen_logprob;
    std::vector<std::pair<int32_t, float>> top;
};
logprob_result compute_logprobs(const float* logits, int32_t n_vocab, int32_t chosen, int32_t n_top);

// Greedy choice (ties → lowest id), used on its own by the fast greedy path.
int32_t argmax(const float* logits, int32_t n_vocab);

}  // namespace lp
