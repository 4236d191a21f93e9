// lora.cpp — see lora.h.
#include "lora.h"

#include "common.h"

namespace lp {

namespace {

const char kA[] = ".lora_a", kB[] = ".lora_b";

bool ends_with(const std::string& s, const char* suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

std::string shape(const gguf_tensor_info& t) {
    return "[" + std::to_string(t.ne[0]) + ", " + std::to_string(t.ne[1]) + "]";
}

weight_view view(const gguf_file& f, const gguf_tensor_info& t) {
    const type_traits& tr = traits(t.type);
    if (!tr.supported || (!tr.vec_dot && !tr.vec_dot_ref))
        throw gguf_error("LoRA tensor " + t.name + " has type " + type_name(t.type) + ", which cannot be multiplied");
    if (t.ne[2] != 1 || t.ne[3] != 1 || t.ne[0] % tr.block_size != 0)
        throw gguf_error("LoRA tensor " + t.name + " has shape " + shape(t) + ", which does not fit type " +
                         type_name(t.type));
    weight_view w;
    w.type = t.type;
    w.n_cols = t.ne[0];
    w.n_rows = t.ne[1];
    w.data = f.tensor_data(t);
    w.row_stride = row_size(t.type, t.ne[0]);
    return w;
}

}  // namespace

std::shared_ptr<lora_adapter> lora_adapter::load(const std::string& path, const model& base) {
    std::shared_ptr<lora_adapter> ad(new lora_adapter());
    ad->file_ = gguf_file::open(path);
    const gguf_file& f = *ad->file_;
    const std::string what = "LoRA adapter " + path + ": ";
    if (f.get_string("general.type", "") != "adapter" || f.get_string("adapter.type", "") != "lora")
        throw gguf_error(what + "not a LoRA adapter (general.type must be 'adapter' and adapter.type 'lora')");
    const std::string arch = f.get_string("general.architecture", "");
    if (arch != base.hp().arch)
        throw gguf_error(what + "made for architecture '" + arch + "', the model is '" + base.hp().arch + "'");
    ad->alpha_ = (float)f.get_float("adapter.lora.alpha", 0.0);

    std::unordered_map<std::string, const weight_view*> base_mats;
    for (const auto& [name, w] : base.matrices()) base_mats[name] = w;
    for (const gguf_tensor_info& t : f.tensors()) {
        const bool is_a = ends_with(t.name, kA), is_b = ends_with(t.name, kB);
        if (!is_a && !is_b) throw gguf_error(what + "unexpected tensor " + t.name + " (only *.lora_a / *.lora_b)");
        const std::string name = t.name.substr(0, t.name.size() - std::strlen(kA));
        if (ad->pairs_.count(name)) continue;
        const gguf_tensor_info* ta = f.find_tensor(name + kA);
        const gguf_tensor_info* tb = f.find_tensor(name + kB);
        if (!ta || !tb) throw gguf_error(what + "tensor " + t.name + " has no " + (is_a ? "lora_b" : "lora_a") + " partner");
        auto it = base_mats.find(name);
        if (it == base_mats.end())
            throw gguf_error(what + "adapts " + name + ", which this model does not multiply with (or does not have)");
        const weight_view& w = *it->second;
        pair p{view(f, *ta), view(f, *tb)};
        // a: ne [n_in, rank], b: ne [rank, n_out]
        if (p.a.n_cols != w.n_cols || p.b.n_rows != w.n_rows || p.a.n_rows != p.b.n_cols)
            throw gguf_error(what + name + ": lora_a " + shape(*ta) + " and lora_b " + shape(*tb) +
                             " do not fit the base matrix [" + std::to_string(w.n_cols) + ", " +
                             std::to_string(w.n_rows) + "] (expected [n_in, rank] and [rank, n_out])");
        if (p.a.n_rows <= 0) throw gguf_error(what + name + ": rank 0");
        ad->pairs_[name] = p;
    }
    if (ad->pairs_.empty()) throw gguf_error(what + "has no LoRA tensors");
    return ad;
}

void lora_set::set(const model& base,
                   const std::vector<std::pair<std::shared_ptr<const lora_adapter>, float>>& adapters) {
    terms_.clear();
    keep_.clear();
    max_rank_ = max_out_ = 0;
    std::unordered_map<std::string, const weight_view*> base_mats;
    for (const auto& [name, w] : base.matrices()) base_mats[name] = w;
    for (const auto& [ad, s] : adapters) {
        if (!ad) continue;
        keep_.push_back(ad);
        for (const auto& [name, p] : ad->pairs()) {
            const weight_view* w = base_mats.at(name);
            const float scale = ad->alpha() != 0.0f ? s * ad->alpha() / (float)p.a.n_rows : s;
            terms_[w].push_back(term{p.a, p.b, scale});
            max_rank_ = std::max(max_rank_, p.a.n_rows);
            max_out_ = std::max(max_out_, p.b.n_rows);
        }
    }
}

}  // namespace lp
