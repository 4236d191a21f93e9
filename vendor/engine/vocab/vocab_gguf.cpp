// vocab_gguf.cpp — tokenizer.ggml.* metadata -> vocab_data.
#include "vocab/vocab_gguf.h"

#include "common.h"
#include "gguf/gguf.h"

namespace lp {

namespace {

const gguf_array* array_of(const gguf_file& f, const char* key, gguf_type elem, bool required) {
    const gguf_kv* kv = f.find_kv(key);
    if (!kv) {
        if (required) throw gguf_error(std::string("missing metadata key ") + key);
        return nullptr;
    }
    if (kv->type != gguf_type::ARRAY || kv->array.elem_type != elem)
        throw gguf_error(std::string("metadata key ") + key + " should be an array of " + gguf_type_name(elem));
    return &kv->array;
}

std::vector<std::string> strings_of(const gguf_file& f, const gguf_array* a) {
    std::vector<std::string> out;
    if (!a) return out;
    out.reserve(a->count);
    for (uint64_t i = 0; i < a->count; ++i) out.push_back(f.string_value(f.string_at(a->elem_pos[i])));
    return out;
}

template <class T>
std::vector<T> numbers_of(const gguf_file& f, const gguf_array* a) {
    std::vector<T> out;
    if (!a) return out;
    out.resize(a->count);
    if (a->count) std::memcpy(out.data(), f.bytes() + a->data_pos, a->count * sizeof(T));
    return out;
}

int flag_of(const gguf_file& f, const char* key) {
    if (!f.has_key(key)) return -1;
    return f.get_bool(key, false) ? 1 : 0;
}

token_id id_of(const gguf_file& f, const char* key, token_id current) {
    const int64_t v = f.get_int(key, -1);
    if (v < 0) return current;
    return v > INT32_MAX ? INT32_MAX : (token_id)v;  // out of range: vocab warns and keeps the default
}

}  // namespace

vocab_data vocab_data_from_gguf(const gguf_file& f) {
    vocab_data d;
    if (!f.has_key("tokenizer.ggml.model")) throw gguf_error("missing metadata key tokenizer.ggml.model");
    d.model = f.get_string("tokenizer.ggml.model", "");
    d.pre = f.get_string("tokenizer.ggml.pre", "");
    d.general_name = f.get_string("general.name", "");
    d.general_arch = f.get_string("general.architecture", "");
    const bool none = d.model == "none" || d.model == "no_vocab";
    d.tokens = strings_of(f, array_of(f, "tokenizer.ggml.tokens", gguf_type::STRING, !none));
    // Scores may be stored as I32 too (llama.cpp reads both).
    if (const gguf_kv* kv = f.find_kv("tokenizer.ggml.scores"); kv && kv->type == gguf_type::ARRAY &&
                                                                kv->array.elem_type == gguf_type::I32) {
        for (int32_t v : numbers_of<int32_t>(f, &kv->array)) d.scores.push_back((float)v);
    } else {
        d.scores = numbers_of<float>(f, array_of(f, "tokenizer.ggml.scores", gguf_type::F32, false));
    }
    d.token_types = numbers_of<int32_t>(f, array_of(f, "tokenizer.ggml.token_type", gguf_type::I32, false));
    // BPE models need merges; Kimi K2's pre-tokenizer does without (as in llama.cpp).
    if (d.model == "gpt2" || d.model == "gemma4" || d.model == "whitespace" || d.model == "hybriddna") {
        const bool required = d.model == "gemma4" || d.pre != "kimi-k2";
        d.merges = strings_of(f, array_of(f, "tokenizer.ggml.merges", gguf_type::STRING, required));
    }

    if (const gguf_kv* kv = f.find_kv("tokenizer.ggml.precompiled_charsmap")) {
        if (kv->type != gguf_type::ARRAY || (kv->array.elem_type != gguf_type::U8 && kv->array.elem_type != gguf_type::I8))
            throw gguf_error("metadata key tokenizer.ggml.precompiled_charsmap should be an array of bytes");
        d.charsmap = numbers_of<uint8_t>(f, &kv->array);
    }

    d.bos_id = id_of(f, "tokenizer.ggml.bos_token_id", -1);
    d.eos_id = id_of(f, "tokenizer.ggml.eos_token_id", -1);
    d.eot_id = id_of(f, "tokenizer.ggml.eot_token_id", -1);
    d.eom_id = id_of(f, "tokenizer.ggml.eom_token_id", -1);
    d.unk_id = id_of(f, "tokenizer.ggml.unknown_token_id", -1);
    d.sep_id = id_of(f, "tokenizer.ggml.seperator_token_id", -1);  // sic: the key's spelling
    d.pad_id = id_of(f, "tokenizer.ggml.padding_token_id", -1);
    d.mask_id = id_of(f, "tokenizer.ggml.mask_token_id", -1);
    d.fim_pre_id = id_of(f, "tokenizer.ggml.fim_pre_token_id", -1);
    d.fim_suf_id = id_of(f, "tokenizer.ggml.fim_suf_token_id", -1);
    d.fim_mid_id = id_of(f, "tokenizer.ggml.fim_mid_token_id", -1);
    d.fim_pad_id = id_of(f, "tokenizer.ggml.fim_pad_token_id", -1);
    d.fim_rep_id = id_of(f, "tokenizer.ggml.fim_rep_token_id", -1);
    d.fim_sep_id = id_of(f, "tokenizer.ggml.fim_sep_token_id", -1);
    // Older names of the FIM keys; read after the new ones, as llama.cpp does.
    d.fim_pre_id = id_of(f, "tokenizer.ggml.prefix_token_id", d.fim_pre_id);
    d.fim_suf_id = id_of(f, "tokenizer.ggml.suffix_token_id", d.fim_suf_id);
    d.fim_mid_id = id_of(f, "tokenizer.ggml.middle_token_id", d.fim_mid_id);

    d.add_bos = flag_of(f, "tokenizer.ggml.add_bos_token");
    d.add_eos = flag_of(f, "tokenizer.ggml.add_eos_token");
    d.add_sep = flag_of(f, "tokenizer.ggml.add_sep_token");
    d.add_space_prefix = flag_of(f, "tokenizer.ggml.add_space_prefix");
    d.remove_extra_whitespaces = flag_of(f, "tokenizer.ggml.remove_extra_whitespaces");
    d.wpm_lowercase = flag_of(f, "tokenizer.wordpiece.lowercase");
    d.normalizer_lowercase = flag_of(f, "tokenizer.ggml.normalizer.lowercase");
    d.normalizer_strip_accents = flag_of(f, "tokenizer.ggml.normalizer.strip_accents");
    d.wpm_strip_accents = flag_of(f, "tokenizer.wordpiece.strip_accents");
    return d;
}

}  // namespace lp
