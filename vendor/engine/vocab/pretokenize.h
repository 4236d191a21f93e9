// pretokenize.h — byte-level BPE pre-tokenization: split text into words by
// the sequence of regexes a model's `tokenizer.ggml.pre` names, the way
// llama.cpp does (each regex splits the pieces the previous one produced;
// text between matches stays a piece of its own), then map each word's bytes
// to GPT-2's printable codepoints.
//
// The patterns llama.cpp runs through its own code (GPT-2's, Llama 3's,
// Qwen 2's and 3.5's, Kimi K2's, AFMoE's digits, newline runs) run through
// hand-written splitters that follow it (pretokenize_split.h); the rest go
// through the regex engine (regex.h). Not here: merging (vocab_tokenize.cpp),
// special tokens.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "vocab/regex.h"

namespace lp {

// What a pre-tokenizer name implies for the vocabulary, beyond splitting
// (llama.cpp sets these by the same name).
struct pre_options {
    bool ignore_merges = false;      // a word that is a token is taken whole
    bool add_bos = false;            // add BOS by default
    bool clean_spaces = true;        // llama_detokenize cleans spaces before punctuation
    bool add_sep = false;            // add SEP by default
    bool no_bos = false;             // there is no default BOS id
    bool escape_whitespace = false;  // ' ' becomes U+2581 before splitting (SPM-style BPE)
    bool gemma4 = false;             // Gemma 4: add BOS even when the file says not; newline words whole
};

class pre_tokenizer {
public:
    // Build the splitter for a `tokenizer.ggml.pre` name. Unknown names fall
    // back to "default" and set *known = false.
    static std::shared_ptr<const pre_tokenizer> for_name(const std::string& pre, bool* known);
    // The settings of a name ("default"'s, with *known = false, if unknown).
    static pre_options options_for(const std::string& pre, bool* known);
    // Build one from explicit patterns (tests, new models). Without
    // byte_encode, words stay raw UTF-8 instead of GPT-2's byte codepoints.
    explicit pre_tokenizer(const std::vector<std::string>& patterns, bool byte_encode = true);

    // Words of `text`, each in GPT-2 byte-to-unicode form (or raw UTF-8).
    std::vector<std::string> split(std::string_view text) const;

    // Word boundaries only: lengths (in codepoints of utf8_decode(text)) of
    // consecutive pieces; exposed for tests.
    std::vector<size_t> split_offsets(const std::vector<uint32_t>& cpts) const;

    const std::vector<std::string>& patterns() const { return patterns_; }
    bool byte_encode() const { return byte_encode_; }

private:
    enum class step_kind { regex, gpt2, llama3, qwen2, qwen35, kimi_k2, afmoe_digits, newlines };
    struct step {
        step_kind kind;
        std::unique_ptr<pretok_regex> re;
    };
    std::vector<std::string> patterns_;
    bool byte_encode_ = true;
    std::vector<step> steps_;
};

// Names llama.cpp recognises for tokenizer.ggml.pre (for docs and tests).
std::vector<std::string> known_pre_tokenizer_names();

}  // namespace lp
