// grammar_state.h — the recogniser: where a text (or a generation) stands in
// a grammar, and which next tokens can continue it.
//
// A position in the grammar is a set of stacks of element positions (as in
// llama.cpp): the top of each stack is a character set to match next, the
// frames below are where to resume when rules finish; an empty stack means
// the text can end here. Stacks are interned linked frames, so identical
// stacks are one id, and stack sets are interned into the states of an
// automaton built lazily as text arrives, with transitions keyed by code
// point class (grammar.h) and memoised. Matching a token is then one table
// lookup per code point once its states have been seen.
//
// Token filtering (allowed_tokens) walks the vocabulary trie
// (grammar_vocab.h) from the current state, dropping a subtree at its first
// impossible character and accepting a subtree whole when its characters
// cannot go wrong: every state has a "usual successor" (where most of the
// vocabulary's characters lead, often the state itself, as inside a JSON
// string) and the classes that lead there; a subtree of height h whose
// classes all do so along h usual steps is allowed as a block. Loops and
// bounded repetitions (a string of at most 40 characters) both qualify.
// Text arrives as UTF-8 bytes; a token may end inside a character, which the
// next token must finish.
//
// Not thread-safe: one state per generation. The grammar and the vocabulary
// it points to are shared and immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar.h"
#include "grammar_vocab.h"

namespace lp {

class grammar_state {
public:
    // `vocab` may be null for text-only matching.
    explicit grammar_state(std::shared_ptr<const grammar> g, std::shared_ptr<const grammar_vocab> vocab = nullptr);

    const grammar& get_grammar() const { return *g_; }
    const grammar_vocab* vocab() const { return v_.get(); }
    // Back to the start of the grammar.
    void reset();

    // ---- text
    // Appends `bytes` to the text if that keeps it a prefix of a sentence
    // (true); otherwise returns false and changes nothing.
    bool accept_bytes(std::string_view bytes);
    // The text so far is a whole sentence of the grammar.
    bool can_end() const { return pend_.empty() && nodes_[cur_].can_end; }
    // Some non-empty continuation exists (false once the grammar is finished).
    bool can_continue() const;

    // ---- tokens (need a vocabulary)
    // Would `token` continue the text? End-of-generation tokens: only when
    // the text can end.
    bool allows(int32_t token);
    // Appends the token's text; throws value_error if the token is not allowed.
    void accept_token(int32_t token);
    // All allowed tokens, in no particular order.
    void allowed_tokens(std::vector<int32_t>& out);

private:
    static constexpr int32_t kDead = -1;
    static constexpr int32_t kUnknown = -2;
    struct frame {
        uint32_t pos;    // element position in an alternative
        int32_t parent;  // frame below, -1 for none
    };
    struct node {
        std::vector<int32_t> stacks;  // sorted frame ids; -1 is the empty stack
        std::vector<int32_t> next;    // (n_classes) transitions, kUnknown until computed
        int32_t usual = kUnknown;     // the usual successor (kDead if none)
        uint64_t usual_bits = 0;      // class bits (vocab index) whose classes all lead to `usual`
        std::vector<uint64_t> chain;  // chain[h-1]: bits safe for h usual steps from here
        bool can_end = false;
    };
    struct vec_hash {
        size_t operator()(const std::vector<int32_t>& v) const;
    };

    int32_t frame_id(uint32_t pos, int32_t parent);
    void expand(uint32_t pos, int32_t parent, std::vector<int32_t>& out);
    int32_t intern(std::vector<int32_t>& stacks);
    int32_t start_node();
    int32_t step(int32_t n, int32_t cls);
    bool partial_possible(int32_t n, const utf8_partial& pend);
    void find_usual(int32_t n);
    uint64_t safe_bits(int32_t n, uint32_t height);
    // Runs a token from (n, pend); false if it cannot continue.
    bool run_token(int32_t token, int32_t& n, utf8_partial& pend);
    bool run_cps(const uint32_t* cps, size_t count, int32_t& n);
    void walk_children(uint32_t t, int32_t n, std::vector<int32_t>& out);
    void emit(uint32_t tok_begin, uint32_t tok_end, std::vector<int32_t>& out) const;
    void maybe_compact();

    std::shared_ptr<const grammar> g_;
    std::shared_ptr<const grammar_vocab> v_;
    std::shared_ptr<const grammar_vocab_index> idx_;

    std::vector<frame> frames_;
    std::unordered_map<uint64_t, int32_t> frame_ids_;
    std::vector<node> nodes_;
    std::unordered_map<std::vector<int32_t>, int32_t, vec_hash> node_ids_;
    int32_t start_ = kDead;
    int32_t cur_ = kDead;
    utf8_partial pend_;

    // scratch
    std::vector<std::pair<uint32_t, int32_t>> work_;
    std::unordered_set<uint64_t> seen_;
    std::vector<int32_t> out_stacks_;
    std::vector<uint32_t> cps_;
};

}  // namespace lp
