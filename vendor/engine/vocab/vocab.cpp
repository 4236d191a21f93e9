// vocab.cpp — building a vocab from vocab_data (llama.cpp's defaults and
// special-token rules), token pieces and detokenization.
// Tokenizing itself is in vocab_tokenize.cpp.
#include "vocab/vocab.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

#include "common.h"
#include "vocab/pretokenize.h"
#include "vocab/unicode.h"
#include "vocab/vocab_impl.h"

namespace lp {

namespace {

const char* const k_space_marker = "\xE2\x96\x81";  // U+2581, SPM's visible space

bool in_list(const std::string& s, std::initializer_list<const char*> names) {
    for (const char* n : names) if (s == n) return true;
    return false;
}

bool contains_any(const std::string& s, std::initializer_list<const char*> subs) {
    for (const char* sub : subs) if (s.find(sub) != std::string::npos) return true;
    return false;
}

// llama_decode_text: GPT-2 codepoints back to bytes.
std::string bpe_decode_text(const std::string& text) {
    std::string out;
    for (uint32_t cpt : utf8_decode(text)) {
        const int b = unicode_to_byte(cpt);
        if (b >= 0) {
            out.push_back((char)b);
            continue;
        }
        std::string utf8;
        utf8_append(utf8, cpt);
        out += "[UNK_BYTE_0x";
        char hex[3];
        for (unsigned char c : utf8) {
            std::snprintf(hex, sizeof hex, "%02x", c);
            out += hex;
        }
        out += text + "]";
    }
    return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (true) {
        const size_t hit = s.find(from, pos);
        if (hit == std::string::npos) break;
        out.append(s, pos, hit - pos);
        out += to;
        pos = hit + from.size();
    }
    out.append(s, pos, std::string::npos);
    return out;
}

}  // namespace

vocab::~vocab() = default;

vocab::vocab(vocab_data d, const std::function<void(const std::string&)>& log) : impl_(new impl) {
    auto warn = [&](const std::string& msg) { if (log) log(msg); };
    model_ = d.model;
    pre_ = d.pre;

    if (d.model == "none" || d.model == "no_vocab") {
        kind_ = kind::none;
        load_tokens(d);
        return;
    }
    if (d.model == "llama") {
        kind_ = kind::spm;
        bos_ = 1; eos_ = 2; unk_ = 0;
        add_space_prefix_ = true; add_bos_ = true; add_eos_ = false; clean_spaces_ = false;
    } else if (in_list(d.model, {"gpt2", "gemma4", "whitespace", "hybriddna"})) {
        // Byte-level BPE; "gemma4" is BPE over raw UTF-8 with U+2581 for
        // spaces and no default special ids, and always uses its own
        // pre-tokenizer; "whitespace" and "hybriddna" are BPE with extra
        // splitting (tokenize_bpe_model in vocab_tokenize.cpp).
        kind_ = kind::bpe;
        if (d.model == "gemma4") {
            pre_ = "gemma4";
        } else {
            bos_ = 11; eos_ = 11;
        }
        add_space_prefix_ = false;
        const pre_options o = pre_tokenizer::options_for(pre_, &pre_known_);
        ignore_merges_ = o.ignore_merges;
        clean_spaces_ = o.clean_spaces;
        escape_whitespace_ = o.escape_whitespace;
        gemma4_ = o.gemma4;
        if (o.add_bos) add_bos_ = true;
        if (o.add_sep) add_sep_ = true;
        if (o.no_bos) bos_ = token_null;
        if (pre_ == "whitespace") wpm_lowercase_ = false;  // the BPE normalizer does not lowercase
    } else if (d.model == "bert") {
        // llama.cpp's defaults: [CLS] 101 as BOS, [SEP] 102 added at the end.
        kind_ = kind::wpm;
        bos_ = 101; unk_ = 100; sep_ = 102; pad_ = 0; mask_ = 103;
        add_bos_ = true; add_sep_ = true;
        // llamapy's keys, else llama.cpp's (tokenizer.ggml.normalizer.*); absent: lowercase
        const int lower = d.wpm_lowercase >= 0 ? d.wpm_lowercase : d.normalizer_lowercase;
        const int strip = d.wpm_strip_accents >= 0 ? d.wpm_strip_accents : d.normalizer_strip_accents;
        wpm_lowercase_ = lower != 0;
        wpm_strip_accents_ = strip >= 0 ? strip != 0 : wpm_lowercase_;
    } else if (d.model == "t5") {
        kind_ = kind::ugm;
        eos_ = 1; unk_ = 2; pad_ = 0;
        add_bos_ = false; add_eos_ = true; add_space_prefix_ = false; clean_spaces_ = false;
    } else if (d.model == "rwkv") {
        kind_ = kind::rwkv;  // no default special tokens, nothing added
    } else if (d.model == "plamo2") {
        kind_ = kind::plamo2;
        bos_ = 1; eos_ = 2; unk_ = 0; pad_ = 3;
    } else if (d.model == "test") {
        kind_ = kind::test;  // no special tokens, nothing added
    } else {
        throw value_error("unknown tokenizer model '" + d.model + "'");
    }
    if (d.add_space_prefix >= 0) add_space_prefix_ = d.add_space_prefix != 0;
    if (d.remove_extra_whitespaces >= 0) remove_extra_whitespaces_ = d.remove_extra_whitespaces != 0;

    load_tokens(d);
    if (kind_ == kind::ugm) build_ugm(d);  // from the GGUF token types, as llama.cpp builds it
    if (kind_ == kind::rwkv) build_rwkv();
    if (kind_ == kind::plamo2) build_plamo2();

    if (kind_ == kind::bpe) {
        pre_tok_ = pre_tokenizer::for_name(pre_, &pre_known_);
        if (!pre_known_)
            warn("unknown pre-tokenizer '" + pre_ + "': using 'default' (tokenization may differ from the model's)");
        if (model_ == "whitespace" && d.normalizer_lowercase >= 0) wpm_lowercase_ = d.normalizer_lowercase != 0;
        if (model_ == "hybriddna") strip_dna_markers();
        // Byte fallback of words that do not merge into tokens: the one-byte
        // token (GPT-2 byte codepoints) or, over raw UTF-8, "<0xXX>".
        static const char* hex = "0123456789ABCDEF";
        for (int b = 0; b < 256; ++b) {
            const char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
            byte_tokens_[b] = pre_tok_->byte_encode() ? text_to_token(std::string(1, (char)b)) : text_to_token(name);
        }
        // Symbols: every token text and every merge part and result.
        impl& m = *impl_;
        auto sym = [&m](std::string_view s) -> int32_t {
            const int32_t found = m.sym_of(s);
            if (found >= 0) return found;
            m.sym_text.emplace_back(s);
            m.sym_token.push_back(token_null);
            const int32_t id = (int32_t)m.sym_text.size() - 1;
            m.sym_index.emplace(std::string_view(m.sym_text.back()), id);
            return id;
        };
        m.sym_index.reserve(text_.size() + d.merges.size());
        for (const std::string& t : text_) sym(t);
        m.merges.reserve(d.merges.size());
        std::string joined;
        for (size_t r = 0; r < d.merges.size(); ++r) {
            const std::string& line = d.merges[r];
            const size_t sp = line.find(' ', 1);
            if (sp == std::string::npos) continue;  // no parts: can never apply
            const std::string_view first(line.data(), sp), second(line.data() + sp + 1, line.size() - sp - 1);
            if (first.empty() || second.empty()) continue;
            const int32_t a = sym(first), b = sym(second);
            joined.assign(first);
            joined.append(second);
            const int32_t c = sym(joined);
            m.merges.emplace(impl::pair_key(a, b), impl::merge{(int32_t)r, c});  // first rank wins
        }
        n_merges_ = d.merges.size();
        for (size_t s = 0; s < m.sym_text.size(); ++s) m.sym_token[s] = text_to_token(m.sym_text[s]);
    }

    // The newline token, found before special tokens are known (as llama.cpp does).
    if (kind_ == kind::spm) {
        linefeed_ = spm_byte_token('\n');
    } else if (kind_ == kind::wpm) {
        linefeed_ = pad_;  // llama.cpp's choice (whitespace never becomes a token)
        for (const std::string& t : text_) wpm_max_len_ = std::max(wpm_max_len_, t.size());
    } else if (kind_ == kind::test) {
        linefeed_ = n_tokens() > 0 ? (token_id)('\n' % n_tokens()) : pad_;  // what "\n" tokenizes to
    } else if (kind_ == kind::ugm || kind_ == kind::rwkv || kind_ == kind::plamo2) {
        std::vector<token_id> nl;
        if (kind_ == kind::ugm) tokenize_ugm("\n", nl);
        else if (kind_ == kind::rwkv) tokenize_rwkv("\n", nl);
        else tokenize_plamo2("\n", nl);
        linefeed_ = nl.empty() ? pad_ : nl[0];
    } else {
        std::vector<token_id> nl;
        tokenize_bpe_model("\n", nl);
        linefeed_ = nl.empty() ? pad_ : nl[0];
    }

    load_specials(d, log);
    // A model type's default ids can lie past the end of a small vocabulary.
    for (token_id* id : {&bos_, &eos_, &unk_, &sep_, &pad_, &mask_, &linefeed_})
        if (*id >= n_tokens()) *id = token_null;
    build_special_matcher();
    build_pieces();

    // Per-model token attributes that GGUF files do not carry.
    auto set_attr = [&](const char* text, uint32_t bit, bool on) {
        const token_id id = text_to_token(text);
        if (id == token_null) return;
        attr_[id] = on ? (attr_[id] | bit) : (attr_[id] & ~bit);
    };
    std::string name_lower = d.general_name;
    std::transform(name_lower.begin(), name_lower.end(), name_lower.begin(),
                   [](unsigned char c) { return (char)std::tolower(c); });
    if (contains_any(d.pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
        contains_any(d.general_arch, {"nomic-bert-moe", "jina-bert-v3"})) {
        set_attr("<mask>", token_attr_lstrip, true);
    } else if (contains_any(name_lower, {"phi-3", "phi3"})) {
        for (token_id id : impl_->specials) attr_[id] |= token_attr_rstrip;
        set_attr("</s>", token_attr_rstrip, true);
        for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(t, token_attr_rstrip, false);
    } else if (contains_any(name_lower, {"modern-bert"})) {
        set_attr("[MASK]", token_attr_lstrip, true);
    }
}

void vocab::load_tokens(const vocab_data& d) {
    const size_t n = d.tokens.size();
    // Fewer scores or types than tokens is an error; more are ignored (as llama.cpp does).
    if (!d.scores.empty() && d.scores.size() < n)
        throw value_error("vocab: " + std::to_string(d.scores.size()) + " scores for " + std::to_string(n) + " tokens");
    if (!d.token_types.empty() && d.token_types.size() < n)
        throw value_error("vocab: " + std::to_string(d.token_types.size()) + " token types for " + std::to_string(n) + " tokens");
    if (n > (size_t)INT32_MAX) throw value_error("vocab: too many tokens");
    text_.resize(n);
    score_.assign(n, 0.0f);
    attr_.assign(n, token_attr_normal);
    for (size_t i = 0; i < n; ++i) {
        text_[i] = d.tokens[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : d.tokens[i];
        if (!d.scores.empty()) score_[i] = d.scores[i];
        if (!d.token_types.empty()) {
            switch (d.token_types[i]) {
                case token_type_unknown: attr_[i] = token_attr_unknown; break;
                case token_type_unused: attr_[i] = token_attr_unused; break;
                case token_type_normal: attr_[i] = token_attr_normal; break;
                case token_type_control: attr_[i] = token_attr_control; break;
                case token_type_user_defined: attr_[i] = token_attr_user_defined; break;
                case token_type_byte: attr_[i] = token_attr_byte; break;
                default: attr_[i] = token_attr_undefined; break;
            }
        }
    }
    text_index_.reserve(n);
    for (size_t i = 0; i < n; ++i) text_index_[std::string_view(text_[i])] = (token_id)i;  // later duplicates win
    byte_tokens_.assign(256, token_null);
    if (kind_ == kind::spm) {
        static const char* hex = "0123456789ABCDEF";
        for (int b = 0; b < 256; ++b) {
            const char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
            token_id id = text_to_token(name);
            if (id == token_null) id = text_to_token(std::string(1, (char)b));
            byte_tokens_[b] = id;
        }
    }
}

void vocab::load_specials(const vocab_data& d, const std::function<void(const std::string&)>& log) {
    auto warn = [&](const std::string& msg) { if (log) log(msg); };
    const token_id n = n_tokens();
    auto take = [&](token_id& dst, token_id v, const char* what) {
        if (v < 0) return;
        if (v >= n) warn(std::string("bad special token: ") + what + " = " + std::to_string(v) + ", using default");
        else dst = v;
    };
    take(bos_, d.bos_id, "bos"); take(eos_, d.eos_id, "eos"); take(eot_, d.eot_id, "eot");
    take(eom_, d.eom_id, "eom"); take(unk_, d.unk_id, "unk"); take(sep_, d.sep_id, "sep");
    take(pad_, d.pad_id, "pad"); take(mask_, d.mask_id, "mask");
    take(fim_pre_, d.fim_pre_id, "fim_pre"); take(fim_suf_, d.fim_suf_id, "fim_suf");
    take(fim_mid_, d.fim_mid_id, "fim_mid"); take(fim_pad_, d.fim_pad_id, "fim_pad");
    take(fim_rep_, d.fim_rep_id, "fim_rep"); take(fim_sep_, d.fim_sep_id, "fim_sep");
    // A tokenizer model's default ids (gpt2: 11, bert: 100..103, ...) may lie
    // outside a small vocabulary: then there is no such token.
    const std::pair<token_id*, const char*> defaults[] = {{&bos_, "bos"}, {&eos_, "eos"}, {&eot_, "eot"},
                                                          {&eom_, "eom"}, {&unk_, "unk"}, {&sep_, "sep"},
                                                          {&pad_, "pad"}, {&mask_, "mask"}};
    for (const auto& [id, what] : defaults)
        if (*id != token_null && (*id < 0 || *id >= n)) {
            warn(std::string("default ") + what + " token id " + std::to_string(*id) + " is outside the vocabulary (" +
                 std::to_string(n) + " tokens): none");
            *id = token_null;
        }
    if (d.add_bos >= 0) add_bos_ = d.add_bos != 0;
    if (d.add_eos >= 0) add_eos_ = d.add_eos != 0;
    if (d.add_sep >= 0) add_sep_ = d.add_sep != 0;
    if (gemma4_) add_bos_ = true;  // llama.cpp overrides Gemma 4 files that say false

    // llama.cpp finds some special tokens by text, taking the first match in
    // its text->id hash map's iteration order. Where several candidates
    // exist, rebuild that map the same way to visit them in the same order.
    std::vector<std::string_view> order;  // filled on first ambiguity
    auto first_present = [&](std::initializer_list<const char*> texts) -> token_id {
        std::vector<token_id> found;
        for (const char* t : texts) {
            const token_id id = text_to_token(t);
            if (id != token_null) found.push_back(id);
        }
        if (found.size() <= 1) return found.empty() ? token_null : found[0];
        if (order.empty()) {
            std::unordered_map<std::string, token_id> replica;
            for (token_id i = 0; i < n; ++i) replica[text_[i]] = i;
            for (const auto& kv : replica) order.push_back(text_[kv.second]);
        }
        for (std::string_view t : order) {
            const token_id id = text_to_token(t);
            if (std::find(found.begin(), found.end(), id) != found.end()) return id;
        }
        return found[0];
    };
    // A token found by its text is made a control token (the bit is added,
    // as llama.cpp does: a user-defined "</s>" becomes control + user-defined).
    auto make_control = [&](token_id id) {
        if (attr_[id] & token_attr_control) return;
        warn("control-looking token " + std::to_string(id) + " '" + text_[id] + "' was not control-type; overriding");
        attr_[id] |= token_attr_control;
    };
    auto detect = [&](token_id& dst, std::initializer_list<const char*> texts) {
        if (dst != token_null) return;
        dst = first_present(texts);
        if (dst != token_null) make_control(dst);
    };
    detect(eot_, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
                  "<EOT>", "_<EOT>", "[EOT]", "<\uFF5Cend\u2581of\u2581sentence\uFF5C>", "<end_of_utterance>"});
    detect(eom_, {"<|eom_id|>"});
    detect(fim_pre_, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uFF5Cfim\u2581begin\uFF5C>", "<PRE>",
                      "\u2581<PRE>", "<|code_prefix|>", "<|prefix|>"});
    detect(fim_suf_, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uFF5Cfim\u2581hole\uFF5C>", "<SUF>",
                      "\u2581<SUF>", "<|code_suffix|>", "<|suffix|>"});
    detect(fim_mid_, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uFF5Cfim\u2581end\uFF5C>", "<MID>",
                      "\u2581<MID>", "<|code_middle|>", "<|middle|>"});
    detect(fim_pad_, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
    detect(fim_rep_, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
    detect(fim_sep_, {"<|file_sep|>"});

    // Control tokens named "unused..." are unused: never parsed from text
    // (they stay control), and counted apart by llama.cpp.
    for (token_id id = 0; id < n; ++id)
        if ((attr_[id] & token_attr_control) && text_[id].find("unused") != std::string::npos)
            attr_[id] |= token_attr_unused;

    // End-of-generation tokens: the FIM pad/repo/separator tokens, every token
    // with one of these texts (made control), then EOS/EOT/EOM.
    std::set<token_id> eog;
    for (token_id id : {fim_pad_, fim_rep_, fim_sep_}) if (id != token_null) eog.insert(id);
    for (const char* t : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                          "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]",
                          "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                          "<\uFF5Cend\u2581of\u2581sentence\uFF5C>", "[e~["}) {
        const token_id id = text_to_token(t);
        if (id == token_null) continue;
        eog.insert(id);
        make_control(id);
    }
    // gpt-oss: these are always rendered.
    for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
        const token_id id = text_to_token(t);
        if (id != token_null) attr_[id] = token_attr_user_defined;
    }
    for (token_id id : {eos_, eot_, eom_}) if (id != token_null) eog.insert(id);
    {  // o200k_harmony and solar-open: "<|end|>" ends a message, not the generation.
        bool has_return = false, has_call = false, has_flush = false;
        token_id end_id = token_null;
        for (token_id id : eog) {
            const std::string& t = text_[id];
            if (t == "<|return|>") has_return = true;
            else if (t == "<|call|>" || t == "<|calls|>") has_call = true;
            else if (t == "<|flush|>") has_flush = true;
            else if (t == "<|end|>") end_id = id;
        }
        if (end_id != token_null && has_call && (has_return || has_flush)) {
            eog.erase(end_id);
            attr_[end_id] = token_attr_user_defined;
        }
    }
    {  // Gemma 4 and PLaMo 2 have "</s>" as a plain token.
        bool has_marker = false;
        token_id s_id = token_null;
        for (token_id id : eog) {
            const std::string& t = text_[id];
            if (t == "<|tool_response>" || t == "<|plamo:eos|>") has_marker = true;
            else if (t == "</s>") s_id = id;
        }
        if (has_marker && s_id != token_null) {
            eog.erase(s_id);
            attr_[s_id] = token_attr_normal;
        }
    }
    eog_ids_.assign(eog.begin(), eog.end());
    is_eog_.assign(n, false);
    for (token_id id : eog_ids_) is_eog_[id] = true;

    // Special tokens in llama.cpp's order: std::sort by text length, longest
    // first, from ascending ids (the same call gives the same order for ties).
    impl& m = *impl_;
    m.specials.clear();
    for (token_id id = 0; id < n; ++id)
        if (attr_[id] & (token_attr_control | token_attr_user_defined | token_attr_unknown)) m.specials.push_back(id);
    std::sort(m.specials.begin(), m.specials.end(),
              [&](token_id a, token_id b) { return text_[a].size() > text_[b].size(); });
}

void vocab::build_special_matcher() {
    impl& m = *impl_;
    m.special_rank.assign(text_.size(), -1);
    for (size_t r = 0; r < m.specials.size(); ++r) {
        const token_id id = m.specials[r];
        m.special_rank[id] = (int32_t)r;
        const std::string& t = text_[id];
        int32_t node = 0;
        for (unsigned char c : t) {
            auto& next = m.trie[node].next;
            auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(c, (int32_t)INT32_MIN));
            if (it != next.end() && it->first == c) {
                node = it->second;
            } else {
                const int32_t child = (int32_t)m.trie.size();
                m.trie[node].next.insert(it, {c, child});  // before push_back: `next` is a reference into trie
                m.trie.emplace_back();
                node = child;
            }
        }
        m.trie[node].ends.push_back(id);
        if (!t.empty()) m.first_byte[(unsigned char)t[0]] = true;
    }
}

std::string vocab::piece_for(token_id id) const {
    const uint32_t a = attr_[id];
    const std::string& t = text_[id];
    // Byte tokens are "<0xXX>": the two hex digits after "<0x".
    auto byte_piece = [&t]() {
        const std::string hex = t.size() >= 5 ? t.substr(3, 2) : std::string();
        return std::string(1, (char)std::strtol(hex.c_str(), nullptr, 16));
    };
    if (kind_ == kind::spm || kind_ == kind::ugm) {
        if (a & (token_attr_unknown | token_attr_control | token_attr_user_defined)) return t;
        if (a & token_attr_normal) return replace_all(t, k_space_marker, " ");
        if (a & token_attr_byte) return byte_piece();
        return std::string();
    }
    if (kind_ == kind::bpe) {
        if (a & (token_attr_unknown | token_attr_control | token_attr_user_defined)) return t;
        if (a & token_attr_normal) return escape_whitespace_ ? replace_all(t, k_space_marker, " ") : bpe_decode_text(t);
        if (a & token_attr_byte) return byte_piece();
        return std::string();
    }
    if (kind_ == kind::rwkv) return rwkv_unescape(t);
    if (kind_ == kind::test) {
        char hex[16];
        std::snprintf(hex, sizeof hex, "%x", (unsigned)id);
        return hex;
    }
    if (kind_ == kind::plamo2) {  // "<0xXX>" byte tokens are their byte; the rest their text
        const bool hex = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
                         std::isxdigit((unsigned char)t[3]) && std::isxdigit((unsigned char)t[4]);
        return (a & token_attr_byte) && hex ? byte_piece() : t;
    }
    if (kind_ == kind::wpm) {  // word-initial pieces carry U+2581: a space
        if (a & (token_attr_unknown | token_attr_control | token_attr_user_defined)) return t;
        if (a & token_attr_normal) return replace_all(t, k_space_marker, " ");
        return std::string();
    }
    return std::string();
}

void vocab::build_pieces() {
    piece_.resize(text_.size());
    for (size_t i = 0; i < text_.size(); ++i) piece_[i] = piece_for((token_id)i);
}

const std::string& vocab::token_to_piece(token_id id, bool special) const {
    static const std::string empty;
    if (id < 0 || id >= n_tokens()) throw value_error("token id " + std::to_string(id) + " out of range");
    if (!special && (attr_[id] & (token_attr_unknown | token_attr_control))) return empty;
    if (kind_ == kind::none) return empty;
    return piece_[id];
}

std::string vocab::detokenize(const std::vector<token_id>& ids, bool remove_special, bool unparse_special) const {
    if (kind_ == kind::none) return std::string();
    size_t first = 0, last = ids.size();
    bool remove_space = add_space_prefix_;
    if (remove_special && add_bos_ && last > first && ids[first] == bos_) {
        remove_space = false;
        ++first;
    }
    if (remove_special && add_eos_ && last > first && ids[last - 1] == eos_) --last;
    std::string text;
    for (size_t i = first; i < last; ++i) {
        const std::string& piece = token_to_piece(ids[i], unparse_special);
        size_t skip = 0;
        if (remove_space && !piece.empty() && piece[0] == ' ') skip = 1;
        text.append(piece, skip, std::string::npos);
        remove_space = false;
    }
    if (!clean_spaces_ || text.empty()) return text;

    // Three in-place passes over the buffer, as llama.cpp makes them.
    char* t = &text[0];
    // 1. " ?", " !", " .", " ," lose the space.
    int32_t total1 = (int32_t)text.size(), total = 1;
    for (int32_t i = 1; i < total1; ++i) {
        const char x = t[i];
        if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
        t[total++] = x;
    }
    // 2. " ' " loses both spaces.
    const int32_t total2 = total;
    total = 1;
    for (int32_t i = 1; i < total2; ++i) {
        const char x = t[i];
        if (x == '\'' && i + 1 < total2 && t[i - 1] == ' ' && t[i + 1] == ' ') {
            --total;
            t[++i] = '\0';
        }
        t[total++] = x;
    }
    // 3. " 's", " 'm", " 're", " 've" lose the space.
    const int32_t total3 = total;
    total = 1;
    for (int32_t i = 1; i < total3; ++i) {
        const char x = t[i];
        if (t[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
            const char x1 = t[i + 1];
            if (x1 == 's' || x1 == 'm') {
                --total;
            } else if (x1 != 't' && x1 != 'd' && i + 2 < total3) {
                const char x2 = t[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --total;
            }
        }
        t[total++] = x;
    }
    text.resize((size_t)total);
    return text;
}

void vocab::strip_dna_markers() {
    // hybriddna k-mers (the tokens after <oov>) end in U+E000, which keeps
    // them apart from equal base-vocabulary texts when looked up; their
    // shown text drops it. The index keeps the marked texts (in dna_keys_).
    static const std::string marker = "\xEE\x80\x80";
    const token_id oov = text_to_token("<oov>");
    if (oov == token_null) return;
    for (token_id id = oov + 1; id < n_tokens(); ++id) {
        std::string& t = text_[id];
        if (t.size() <= marker.size() || t.compare(t.size() - marker.size(), marker.size(), marker) != 0) continue;
        auto it = text_index_.find(t);
        const bool owns_key = it != text_index_.end() && it->second == id && it->first.data() == t.data();
        if (!owns_key) continue;  // a duplicate text (llama.cpp refuses those): leave it
        text_index_.erase(it);
        dna_keys_.push_back(t);
        text_index_[std::string_view(dna_keys_.back())] = id;
        t.erase(t.size() - marker.size());
    }
}

const std::string& vocab::token_text(token_id id) const {
    if (id < 0 || id >= n_tokens()) throw value_error("token id " + std::to_string(id) + " out of range");
    return text_[id];
}

float vocab::token_score(token_id id) const {
    if (id < 0 || id >= n_tokens()) throw value_error("token id " + std::to_string(id) + " out of range");
    return score_[id];
}

uint32_t vocab::token_attrs(token_id id) const {
    if (id < 0 || id >= n_tokens()) throw value_error("token id " + std::to_string(id) + " out of range");
    return attr_[id];
}

token_id vocab::text_to_token(std::string_view text) const {
    auto it = text_index_.find(text);
    return it == text_index_.end() ? token_null : it->second;
}

bool vocab::is_eog(token_id id) const { return id >= 0 && id < (token_id)is_eog_.size() && is_eog_[id]; }

token_id vocab::spm_byte_token(uint8_t b) const { return byte_tokens_.empty() ? token_null : byte_tokens_[b]; }

}  // namespace lp
