// vocab.h — a model's vocabulary and its tokenizer, matching llama.cpp's
// llama_tokenize / llama_token_to_piece / llama_detokenize token for token
// and byte for byte.
//
// Built from a plain vocab_data (the tokenizer.* metadata of a GGUF file;
// vocab_data_from_gguf() in vocab_gguf.cpp fills one), so it can be made from
// a file or from lists in tests. Tokenizer models:
//   "llama" -> SPM: score-ordered bigram merges over UTF-8 characters, ' ' as
//              U+2581, byte fallback to <0xXX> tokens;
//   "gpt2"  -> byte-level BPE: pre-tokenizer regexes (pretokenize.h), then
//              merges by rank; "whitespace" and "hybriddna" are BPE with
//              extra splitting (whitespace runs; <dna> spans as 6-mers);
//   "gemma4"-> BPE over raw UTF-8 with U+2581 for spaces, <0xXX> byte
//              fallback (as some BPE pre-tokenizers also ask for);
//   "bert"  -> WordPiece (vocab_wpm.cpp): BERT normalization (clean-up, CJK
//              splitting, accent stripping, lowercasing), whitespace and
//              punctuation splitting, greedy longest-match pieces; the vocab
//              holds word-initial pieces with a U+2581 prefix and
//              continuations bare, as llama.cpp's converter writes them;
//   "none"  -> no tokenizer (tokenize() throws).
//   "t5"    -> unigram (vocab_ugm.cpp): SentencePiece's normalization by the
//              precompiled charsmap, then the best-scoring segmentation;
//   "rwkv"  -> greedy longest match over the unescaped token texts;
//   "plamo2"-> best-scoring split over the token texts, UTF-8 byte fallback;
//   "test"  -> llama.cpp's test tokenizer: a hash of each 5 bytes, modulo
//              the vocabulary size; pieces are the ids in hex.
//
// Token attributes follow llama.cpp: the GGUF token types, then its load-time
// rules (tokens found by text as EOT/EOM/FIM/EOG become control, control
// tokens named "unused..." become unused, per-model lstrip/rstrip, ...).
// Special tokens: tokens with the control, user-defined or unknown attribute
// are cut out of the input before tokenizing, longest first; those with
// control or unknown only when parse_special is set, user-defined ones always
// (as llama.cpp and HF tokenizers do).
//
// Thread safety: a constructed vocab is immutable; all methods are const and
// may run concurrently.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lp {

using token_id = int32_t;
constexpr token_id token_null = -1;

// GGUF token types (tokenizer.ggml.token_type).
enum token_type : int32_t {
    token_type_undefined = 0, token_type_normal = 1, token_type_unknown = 2, token_type_control = 3,
    token_type_user_defined = 4, token_type_unused = 5, token_type_byte = 6,
};

// llama.cpp's token attributes (bit flags), derived from the types.
enum token_attr : uint32_t {
    token_attr_undefined = 0, token_attr_unknown = 1 << 0, token_attr_unused = 1 << 1,
    token_attr_normal = 1 << 2, token_attr_control = 1 << 3, token_attr_user_defined = 1 << 4,
    token_attr_byte = 1 << 5, token_attr_normalized = 1 << 6, token_attr_lstrip = 1 << 7,
    token_attr_rstrip = 1 << 8, token_attr_single_word = 1 << 9,
};

// The tokenizer metadata of a model. Ids of -1 and flags of -1 mean "absent
// from the metadata": llama.cpp's defaults for the model type then apply.
struct vocab_data {
    std::string model = "llama";        // tokenizer.ggml.model
    std::string pre;                    // tokenizer.ggml.pre ("" if absent)
    std::vector<std::string> tokens;    // tokenizer.ggml.tokens
    std::vector<float> scores;          // tokenizer.ggml.scores (may be empty)
    std::vector<int32_t> token_types;   // tokenizer.ggml.token_type (may be empty)
    std::vector<std::string> merges;    // tokenizer.ggml.merges ("a b")
    std::vector<uint8_t> charsmap;      // tokenizer.ggml.precompiled_charsmap (t5)
    token_id bos_id = -1, eos_id = -1, unk_id = -1, sep_id = -1, pad_id = -1, mask_id = -1;
    token_id eot_id = -1, eom_id = -1;
    token_id fim_pre_id = -1, fim_suf_id = -1, fim_mid_id = -1, fim_pad_id = -1, fim_rep_id = -1, fim_sep_id = -1;
    int add_bos = -1, add_eos = -1, add_sep = -1;  // tokenizer.ggml.add_{bos,eos,sep}_token
    int add_space_prefix = -1;                      // tokenizer.ggml.add_space_prefix
    int wpm_lowercase = -1;       // tokenizer.wordpiece.lowercase (llamapy's key; absent: true, as llama.cpp)
    int wpm_strip_accents = -1;   // tokenizer.wordpiece.strip_accents (absent: same as lowercase, as HF)
    int remove_extra_whitespaces = -1;              // tokenizer.ggml.remove_extra_whitespaces
    int normalizer_lowercase = -1;                  // tokenizer.ggml.normalizer.lowercase (bert, "whitespace")
    int normalizer_strip_accents = -1;              // tokenizer.ggml.normalizer.strip_accents (bert)
    std::string general_name;           // general.name (some models' token attributes depend on it)
    std::string general_arch;           // general.architecture
};

class pre_tokenizer;

std::string rwkv_unescape(const std::string& escaped);  // RWKV token text -> its bytes

class vocab {
public:
    enum class kind { none, spm, bpe, wpm, ugm, rwkv, plamo2, test };

    // Validates and indexes the data; throws lp::value_error on bad input
    // (unknown model, mismatched array lengths). `log` receives warnings
    // (e.g. an unknown pre-tokenizer name, which falls back to "default").
    explicit vocab(vocab_data data, const std::function<void(const std::string&)>& log = {});
    ~vocab();
    vocab(const vocab&) = delete;
    vocab& operator=(const vocab&) = delete;

    // llama_tokenize: add_special adds BOS/EOS as the model asks;
    // parse_special turns control-token texts in `text` into their ids.
    std::vector<token_id> tokenize(std::string_view text, bool add_special, bool parse_special) const;

    // llama_token_to_piece with lstrip = 0: the token's bytes; control and
    // unknown tokens are empty unless `special`. Throws for ids out of range.
    const std::string& token_to_piece(token_id id, bool special) const;

    // llama_detokenize: remove_special drops a leading BOS / trailing EOS the
    // model adds; unparse_special renders control tokens; applies the leading
    // space removal (SPM with add_space_prefix) and, for models that ask for
    // it, clean-up of spaces before punctuation.
    std::string detokenize(const std::vector<token_id>& ids, bool remove_special, bool unparse_special) const;

    kind type() const { return kind_; }
    const std::string& model_name() const { return model_; }
    const std::string& pre_name() const { return pre_; }   // as given
    bool pre_known() const { return pre_known_; }        // false: fell back to "default"
    int32_t n_tokens() const { return (int32_t)text_.size(); }
    const std::string& token_text(token_id id) const;
    float token_score(token_id id) const;
    uint32_t token_attrs(token_id id) const;
    token_id text_to_token(std::string_view text) const;  // exact match, token_null if none
    bool is_eog(token_id id) const;
    const std::vector<token_id>& eog_ids() const { return eog_ids_; }

    token_id bos() const { return bos_; }
    token_id eos() const { return eos_; }
    token_id eot() const { return eot_; }
    token_id eom() const { return eom_; }
    token_id unk() const { return unk_; }
    token_id sep() const { return sep_; }
    token_id pad() const { return pad_; }
    token_id mask() const { return mask_; }
    token_id nl() const { return linefeed_; }
    token_id fim_pre() const { return fim_pre_; }
    token_id fim_suf() const { return fim_suf_; }
    token_id fim_mid() const { return fim_mid_; }
    token_id fim_pad() const { return fim_pad_; }
    token_id fim_rep() const { return fim_rep_; }
    token_id fim_sep() const { return fim_sep_; }
    bool add_bos() const { return add_bos_; }
    bool add_eos() const { return add_eos_; }
    bool add_sep() const { return add_sep_; }
    bool add_space_prefix() const { return add_space_prefix_; }
    bool clean_spaces() const { return clean_spaces_; }
    size_t n_merges() const { return n_merges_; }

    // Split text into raw pieces and special tokens (exposed for tests).
    struct fragment {
        token_id token;          // token_null for raw text
        size_t offset, length;   // raw text: bytes of the input
    };
    std::vector<fragment> partition(std::string_view text, bool parse_special) const;

private:
    struct impl;
    void load_tokens(const vocab_data& d);
    void load_specials(const vocab_data& d, const std::function<void(const std::string&)>& log);
    void build_special_matcher();
    void build_pieces();
    std::string piece_for(token_id id) const;
    void tokenize_spm(std::string_view text, std::vector<token_id>& out) const;
    void tokenize_bpe(std::string_view text, std::vector<token_id>& out) const;
    void tokenize_bpe_model(std::string_view text, std::vector<token_id>& out) const;  // per tokenizer model
    void strip_dna_markers();
    void tokenize_wpm(std::string_view text, std::vector<token_id>& out) const;
    void build_ugm(const vocab_data& d);
    void tokenize_ugm(std::string_view text, std::vector<token_id>& out) const;
    void ugm_normalize(std::string_view in, std::string& out) const;
    void build_rwkv();
    void tokenize_rwkv(std::string_view text, std::vector<token_id>& out) const;
    void build_plamo2();
    void tokenize_plamo2(std::string_view text, std::vector<token_id>& out) const;
    token_id spm_byte_token(uint8_t b) const;

    kind kind_ = kind::none;
    std::string model_, pre_;
    bool pre_known_ = true;

    std::vector<std::string> text_;         // (n_tokens) token texts
    std::vector<float> score_;              // (n_tokens)
    std::vector<uint32_t> attr_;            // (n_tokens) token_attr bits
    std::vector<std::string> piece_;        // (n_tokens) token_to_piece(id, special=true)
    std::unordered_map<std::string_view, token_id> text_index_;  // views into text_
    size_t n_merges_ = 0;

    token_id bos_ = token_null, eos_ = token_null, eot_ = token_null, eom_ = token_null;
    token_id unk_ = token_null, sep_ = token_null, pad_ = token_null, mask_ = token_null;
    token_id linefeed_ = token_null;
    token_id fim_pre_ = token_null, fim_suf_ = token_null, fim_mid_ = token_null;
    token_id fim_pad_ = token_null, fim_rep_ = token_null, fim_sep_ = token_null;
    std::vector<token_id> eog_ids_;
    std::vector<bool> is_eog_;

    bool add_space_prefix_ = false, add_bos_ = false, add_eos_ = false, add_sep_ = false;
    bool ignore_merges_ = false, clean_spaces_ = false, remove_extra_whitespaces_ = false;
    bool escape_whitespace_ = false;        // BPE: ' ' -> U+2581 before splitting; pieces back
    bool gemma4_ = false;                   // Gemma 4's pre-tokenizer: BOS always, newline words whole
    std::deque<std::string> dna_keys_;      // hybriddna: k-mer texts with their marker (index keys)
    std::vector<token_id> byte_tokens_;     // (256) SPM <0xXX> tokens, token_null if absent
    bool wpm_lowercase_ = true, wpm_strip_accents_ = true;  // WordPiece normalization
    size_t wpm_max_len_ = 0;                // WordPiece: bytes of the longest token text

    std::shared_ptr<const pre_tokenizer> pre_tok_;
    std::unique_ptr<impl> impl_;            // BPE ranks and the special-token trie
};

}  // namespace lp
