// pretokenize.h — byte-level BPE pre-tokenization: split text into words by
// the sequence of regexes a model's `tokenizer.ggml.pre` names, the way
// llama.cpp does (each regex splits the pieces the previous one produced;
// text between matches stays a piece of its own), then map each word's bytes
// to GPT-2's printable codepoints.
//
// Two patterns (GPT-2's and Llama 3's) run through hand-written splitters
// that follow llama.cpp's own; the rest go through the regex engine
// (regex.h). Not here: merging (bpe in vocab.cpp), special tokens.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "vocab/regex.h"

namespace lp {

class pre_tokenizer {
public:
    // Build the splitter for a `tokenizer.ggml.pre` name. Unknown names fall
    // back to "default" and set *known = false.
    static std::shared_ptr<const pre_tokenizer> for_name(const std::string& pre, bool* known);
    // Build one from explicit patterns (tests, new models).
    explicit pre_tokenizer(const std::vector<std::string>& patterns);

    // Words of `text`, each in GPT-2 byte-to-unicode form.
    std::vector<std::string> split(std::string_view text) const;

    // Word boundaries only: lengths (in codepoints of utf8_decode(text)) of
    // consecutive pieces; exposed for tests.
    std::vector<size_t> split_offsets(const std::vector<uint32_t>& cpts) const;

    const std::vector<std::string>& patterns() const { return patterns_; }

private:
    enum class step_kind { regex, gpt2, llama3 };
    struct step {
        step_kind kind;
        std::unique_ptr<pretok_regex> re;
    };
    std::vector<std::string> patterns_;
    std::vector<step> steps_;
};

// Names llama.cpp recognises for tokenizer.ggml.pre (for docs and tests).
std::vector<std::string> known_pre_tokenizer_names();

}  // namespace lp
