// vocab_wpm.cpp — BERT's WordPiece tokenizer, as Hugging Face tokenizers runs
// it (BertNormalizer, BertPreTokenizer, WordPiece), on the vocabulary layout
// llama.cpp's converter writes ("▁piece" for word-initial pieces, "piece" for
// "##piece" continuations, special tokens unchanged):
//   1. normalize: drop NUL, U+FFFD and control codepoints (Cc Cf Co Cs), turn
//      whitespace into ' ', put spaces around CJK ideographs; with accent
//      stripping, NFD and drop nonspacing marks (Mn); with lowercasing, map
//      each codepoint to its lowercase;
//   2. split into words at whitespace, each punctuation codepoint (ASCII
//      punctuation and symbols, Unicode P*) being a word of its own;
//   3. per word, greedy longest-match-first pieces; a word with a piece that
//      matches nothing, or over 100 codepoints, becomes [UNK] as a whole.
// [CLS] / [SEP] around the text are added by vocab::tokenize.
#include <string>
#include <vector>

#include "vocab/unicode.h"
#include "vocab/unicode_norm.h"
#include "vocab/vocab.h"

namespace lp {

namespace {

constexpr size_t kMaxWordChars = 100;              // WordPiece's max_input_chars_per_word
const char* const k_word_prefix = "\xE2\x96\x81";  // U+2581 on word-initial pieces
constexpr size_t kPrefixBytes = 3;

// Hugging Face tokenizers' is_chinese_char (its range 0x2B920.. differs from
// the Unicode block start 0x2B820; we follow the tokenizer).
bool is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_bert_punct(uint32_t c) {
    if (c < 0x80) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
                         (c >= 0x7B && c <= 0x7E);
    return (cpt_flags(c) & cpt_flag_punctuation) != 0;
}

}  // namespace

void vocab::tokenize_wpm(std::string_view raw, std::vector<token_id>& out) const {
    // 1. Normalize.
    std::vector<uint32_t> text;
    text.reserve(raw.size() + 8);
    bool ascii = true;
    for (uint32_t c : utf8_decode(raw)) {
        const bool ws_exempt = c == '\t' || c == '\n' || c == '\r';
        const uint16_t f = cpt_flags(c);
        // (Unassigned codepoints stay: the tokenizer's category tables do not know them as "other".)
        if (c == 0 || c == 0xFFFD || (!ws_exempt && (f & cpt_flag_control))) continue;
        if (ws_exempt || (f & cpt_flag_whitespace)) {
            text.push_back(' ');
        } else if (is_cjk(c)) {
            text.push_back(' ');
            text.push_back(c);
            text.push_back(' ');
        } else {
            text.push_back(c);
        }
        ascii = ascii && c < 0x80;
    }
    if (wpm_strip_accents_ && !ascii) {
        std::vector<uint32_t> nfd = unicode_nfd(text);
        text.clear();
        for (uint32_t c : nfd)
            if (!cpt_is_nonspacing_mark(c)) text.push_back(c);
    }
    if (wpm_lowercase_) {
        std::vector<uint32_t> lower;
        lower.reserve(text.size());
        for (uint32_t c : text) cpt_append_lower(c, lower);
        text.swap(lower);
    }

    // 2 + 3. Words and their pieces. word = U+2581 + the word's UTF-8;
    // bounds[i] = byte offset (after the prefix) where codepoint i starts.
    std::string word(k_word_prefix);
    std::vector<uint32_t> bounds{0};
    auto piece_id = [&](size_t b0, size_t b1) -> token_id {
        const std::string_view v = b0 == 0 ? std::string_view(word.data(), kPrefixBytes + b1)
                                           : std::string_view(word.data() + kPrefixBytes + b0, b1 - b0);
        if (v.size() > wpm_max_len_) return token_null;
        const token_id id = text_to_token(v);
        if (id == token_null || (attr_[id] & (token_attr_control | token_attr_unknown))) return token_null;
        return id;
    };
    auto flush = [&]() {
        const size_t n = bounds.size() - 1;  // codepoints
        if (n == 0) return;
        const size_t mark = out.size();
        bool bad = n > kMaxWordChars;
        for (size_t start = 0; start < n && !bad;) {
            size_t end = n;
            token_id id = token_null;
            for (; end > start; --end) {
                id = piece_id(bounds[start], bounds[end]);
                if (id != token_null) break;
            }
            if (id == token_null) bad = true;
            else out.push_back(id);
            start = end;
        }
        if (bad) {
            out.resize(mark);
            if (unk_ != token_null) out.push_back(unk_);
        }
        word.resize(kPrefixBytes);
        bounds.resize(1);
    };
    auto append = [&](uint32_t c) {
        utf8_append(word, c);
        bounds.push_back((uint32_t)(word.size() - kPrefixBytes));
    };
    for (uint32_t c : text) {
        if (c == ' ' || cpt_is_whitespace(c)) {
            flush();
        } else if (is_bert_punct(c)) {
            flush();
            append(c);
            flush();
        } else {
            append(c);
        }
    }
    flush();
}

}  // namespace lp
