// placement.cpp — see placement.h.
#include "placement.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>

#include "backend/registry.h"
#include "common.h"
#include "kv_cache.h"
#include "model/blocks.h"

namespace lp {

namespace {

// The layer a tensor name belongs to ("blk.<il>." with il < n_layer), else -1.
int layer_of(const std::string& name, int64_t n_layer) {
    if (name.compare(0, 4, "blk.") != 0) return -1;
    const char* s = name.c_str() + 4;
    char* end = nullptr;
    const long il = std::strtol(s, &end, 10);
    if (end == s || *end != '.' || il < 0 || il >= n_layer) return -1;
    return (int)il;
}

}  // namespace

std::vector<placement_plan::device_total> placement_plan::totals() const {
    std::vector<device_total> out;
    auto at = [&](device d) -> device_total& {
        for (device_total& t : out)
            if (t.dev == d) return t;
        out.push_back(device_total{d});
        return out.back();
    };
    for (const part& p : parts) {
        at(p.weights).weight_bytes += p.weight_bytes;
        if (p.host_weight_bytes) at(device::host()).weight_bytes += p.host_weight_bytes;
        if (p.kv_bytes) at(p.kv).kv_bytes += p.kv_bytes;
    }
    at(compute).activation_bytes += activation_bytes;
    return out;
}

std::vector<device> part_devices(int64_t n_layer, int n_gpu_layers, const std::vector<device>& gpus,
                                 const std::vector<double>& shares) {
    std::vector<device> d((size_t)n_layer + 2, device::host());
    if (gpus.empty()) return d;
    const int64_t n = std::min<int64_t>(n_gpu_layers < 0 ? n_layer + 1 : n_gpu_layers, n_layer + 1);
    const int64_t first = std::max<int64_t>(0, n_layer - n);  // the first offloaded layer
    const int64_t n_parts = n_layer - first + (n > n_layer ? 1 : 0);
    std::vector<double> cum(gpus.size(), 0.0);
    double total = 0.0;
    for (size_t g = 0; g < gpus.size(); ++g) {
        total += g < shares.size() ? shares[g] : 0.0;
        cum[g] = total;
    }
    auto device_of = [&](int64_t k) {  // the k-th offloaded part
        if (total <= 0.0) return gpus.front();
        for (size_t g = 0; g < gpus.size(); ++g)
            if (cum[g] / total > (double)k / (double)n_parts) return gpus[g];
        return gpus.back();
    };
    for (int64_t il = first; il < n_layer; ++il) d[(size_t)il + 1] = device_of(il - first);
    if (n > n_layer) d.back() = device_of(n_parts - 1);
    return d;
}

std::vector<uint64_t> part_weight_bytes(const model& m) {
    const int64_t n_layer = m.hp().n_layer;
    std::vector<uint64_t> b((size_t)n_layer + 2, 0);
    for (const gguf_tensor_info& t : m.file().tensors()) {
        const int il = layer_of(t.name, n_layer);
        const size_t at = il >= 0 ? (size_t)il + 1 : t.name.compare(0, 6, "output") == 0 ? b.size() - 1 : 0;
        b[at] += t.nbytes;
    }
    return b;
}

std::vector<bool> host_kept(const std::vector<std::string>& names, int64_t n_layer, const context_params& p) {
    std::vector<bool> kept(names.size(), false);
    if (p.override_tensor.empty() && p.n_cpu_moe <= 0) return kept;
    std::vector<std::regex> res;
    for (const std::string& pat : p.override_tensor) res.emplace_back(pat, std::regex::ECMAScript);
    static const std::regex expert(R"(^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_(ch)?exps\.)");
    for (size_t i = 0; i < names.size(); ++i) {
        for (const std::regex& r : res)
            if (std::regex_search(names[i], r)) kept[i] = true;
        std::smatch mt;
        if (!kept[i] && p.n_cpu_moe > 0 && std::regex_search(names[i], mt, expert) &&
            std::stoll(mt[1].str()) < std::min<int64_t>(p.n_cpu_moe, n_layer))
            kept[i] = true;
    }
    return kept;
}

std::vector<uint64_t> part_host_bytes(const model& m, const context_params& p) {
    const int64_t n_layer = m.hp().n_layer;
    const std::vector<gguf_tensor_info>& ts = m.file().tensors();
    std::vector<std::string> names;
    for (const gguf_tensor_info& t : ts) names.push_back(t.name);
    const std::vector<bool> kept = host_kept(names, n_layer, p);
    std::vector<uint64_t> b((size_t)n_layer + 2, 0);
    for (size_t i = 0; i < ts.size(); ++i) {
        if (!kept[i]) continue;
        const int il = layer_of(ts[i].name, n_layer);
        const size_t at = il >= 0 ? (size_t)il + 1 : ts[i].name.compare(0, 6, "output") == 0 ? b.size() - 1 : 0;
        b[at] += ts[i].nbytes;
    }
    return b;
}

placement_plan plan_parts(const model& m, const std::vector<device>& part_dev, const kv_cache& kv_main,
                          const kv_cache* kv_swa, uint64_t activation_bytes, device compute,
                          const std::vector<uint64_t>& host_bytes) {
    const hparams& hp = m.hp();
    placement_plan plan;
    plan.compute = compute;
    plan.activation_bytes = activation_bytes;
    plan.parts.resize((size_t)hp.n_layer + 2);
    plan.parts.front().name = "input";
    plan.parts.back().name = "output";
    const std::vector<uint64_t> bytes = part_weight_bytes(m);
    for (size_t i = 0; i < plan.parts.size(); ++i) {
        plan.parts[i].weight_bytes = bytes[i];
        if (!part_dev.empty()) plan.parts[i].weights = part_dev[i];
        // what stays on the host of a part elsewhere (on the host it is all there anyway)
        if (i < host_bytes.size() && !plan.parts[i].weights.is_host()) {
            plan.parts[i].weight_bytes -= host_bytes[i];
            plan.parts[i].host_weight_bytes = host_bytes[i];
        }
    }
    for (int il = 0; il < (int)hp.n_layer; ++il) {
        placement_plan::part& p = plan.parts[(size_t)il + 1];
        p.name = "blk." + std::to_string(il);
        p.layer = il;
        p.kv = p.weights;
        if (kv_main.holds(il)) {
            p.kv = kv_main.where(il);
            p.kv_bytes = kv_main.layer_bytes(il);
        } else if (kv_swa && kv_swa->holds(il)) {
            p.kv = kv_swa->where(il);
            p.kv_bytes = kv_swa->layer_bytes(il);
        }
    }
    return plan;
}

int64_t window_cache_cells(const hparams& hp, const context_params& p) {
    if (hp.v.encoder || hp.n_swa <= 0 || p.swa_full) return 0;
    bool any = false, all = true;
    for (uint8_t f : hp.swa_layers) any = any || f, all = all && f;
    if (!any || all) return 0;
    const int64_t n = (int64_t)hp.n_swa * p.n_seq_max + p.n_batch;
    return n < p.n_ctx ? n : 0;
}

namespace {

// Bytes a context of m with p holds on GPU device `dev` when its parts are
// on the devices `parts` (wbytes: each part's weights): the weights of its
// parts; the KV cache rows of its layers (unless offload_kqv=false); and
// once any part is there the activation buffers (the activations' own, or
// the staging copy a second device makes of them) and the work memory of a
// step (staged inputs, converted activations, attention scores, logits of
// the rows of a micro-batch when the output part is there).
struct gpu_need {
    uint64_t weights = 0, kv = 0, work = 0;
    uint64_t total() const { return weights + kv + work; }
};
gpu_need gpu_bytes(const model& m, const context_params& p, const std::vector<device>& parts,
                   const std::vector<uint64_t>& wbytes, device dev, const std::vector<uint64_t>& host_bytes) {
    const hparams& hp = m.hp();
    gpu_need need;
    bool any = false;
    for (size_t i = 0; i < parts.size(); ++i)
        if (parts[i] == dev) {
            need.weights += wbytes[i] - host_bytes[i];
            any = true;
        }
    if (!any) return need;
    const bool kv_on_gpu = !hp.v.encoder && p.offload_kqv;
    if (kv_on_gpu) {
        const int64_t wc = window_cache_cells(hp, p);
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            if (!(parts[(size_t)il + 1] == dev)) continue;
            // each layer's own widths (0 for one that reuses another's cache)
            const uint64_t rows = row_size(p.type_k, hp.kv_width_k(il)) +
                                  (hp.is_mla() ? 0 : row_size(p.type_v, hp.kv_width_v(il)));
            need.kv += rows * (uint64_t)((wc && hp.swa_layers[(size_t)il]) ? wc : p.n_ctx);
        }
    }
    const uint64_t ub = (uint64_t)p.n_ubatch;
    need.work = run_state::activation_bytes(hp, p.n_ubatch);
    need.work += 32ull << 20;
    if (kv_on_gpu) need.work += sizeof(float) * ub * (uint64_t)hp.n_head * (uint64_t)p.n_ctx;  // attention scores
    if (parts.back() == dev && !hp.v.encoder) need.work += sizeof(float) * ub * (uint64_t)hp.n_vocab;
    return need;
}

std::string mib(uint64_t b) {
    char s[48];
    std::snprintf(s, sizeof s, "%.1f MiB", (double)b / (1 << 20));
    return s;
}

// Bytes of GPU device d's memory (as its backend reports it) and what is
// still free there.
uint64_t device_heap(device d) {
    const gpu_slot& s = gpu_slot_of(d);
    return s.factory->memory_bytes(s.index);
}
uint64_t device_free(device d) {
    const gpu_slot& s = gpu_slot_of(d);
    const uint64_t heap = s.factory->memory_bytes(s.index), used = s.factory->memory_used(s.index);
    return heap > used ? heap - used : 0;
}

// The GPU devices the GPU parts spread over and their shares (part_devices):
// main_gpu alone (split_mode 0, or one device), else every device, in
// proportion to tensor_split or, without shares, to each device's free
// memory (as llama.cpp's layer split). value_error for a main_gpu that does
// not exist.
void split_devices(const context_params& p, std::vector<device>& gpus, std::vector<double>& shares) {
    const size_t n_dev = gpu_slots().size();
    if (p.main_gpu >= (int)n_dev)
        throw value_error("main_gpu=" + std::to_string(p.main_gpu) + " but there are " + gpu_count_phrase());
    gpus.clear();
    shares.clear();
    if (p.split_mode == 0 || n_dev == 1) {
        gpus.push_back(device{device::kind::gpu, p.main_gpu});
        shares.push_back(1.0);
        return;
    }
    bool given = false;
    for (size_t i = 0; i < p.tensor_split.size() && i < n_dev; ++i) given = given || p.tensor_split[i] > 0;
    for (size_t i = 0; i < n_dev; ++i) {
        const device d{device::kind::gpu, (int)i};
        gpus.push_back(d);
        shares.push_back(given ? (i < p.tensor_split.size() ? p.tensor_split[i] : 0.0) : (double)device_free(d));
    }
}

// value_error when a device of `gpus` would hold the KV cache in a type its
// backend has no store for.
void check_kv_types(const model& m, const context_params& p, const std::vector<device>& gpus) {
    if (m.hp().v.encoder || !p.offload_kqv) return;
    for (const device& d : gpus) {
        const backend_factory& f = *gpu_slot_of(d).factory;
        for (ggml_type t : {p.type_k, p.type_v}) {
            if (f.has_kv_store(t)) continue;
            std::string have;
            for (ggml_type k : kKvCacheTypes)
                if (f.has_kv_store(k)) have += std::string(have.empty() ? "" : ", ") + type_name(k);
            throw value_error(std::string("n_gpu_layers: a ") + type_name(t) + " KV cache is not supported on the " +
                              f.title() + " backend yet (" + have +
                              " are; offload_kqv=False keeps the cache on the CPU)");
        }
    }
}

}  // namespace

std::vector<device> place_parts(const model& m, context_params& p) {
    if (p.n_gpu_layers == 0) return {};
    const int64_t n_layer = m.hp().n_layer;
    if (const std::string why = no_gpu_reason(); !why.empty())
        throw value_error("n_gpu_layers=" + std::to_string(p.n_gpu_layers) + ": " + why);
    std::vector<device> gpus;
    std::vector<double> shares;
    split_devices(p, gpus, shares);
    check_kv_types(m, p, gpus);
    const std::vector<uint64_t> wb = part_weight_bytes(m), hb = part_host_bytes(m, p);
    // The first device a plan does not fit (-1: it fits everywhere).
    auto misfit = [&](const std::vector<device>& parts) {
        for (size_t g = 0; g < gpus.size(); ++g) {
            const uint64_t heap = device_heap(gpus[g]);
            if (gpu_bytes(m, p, parts, wb, gpus[g], hb).total() + heap / 20 > device_free(gpus[g])) return (int)g;
        }
        return -1;
    };
    if (p.n_gpu_layers == -2) {
        int n = (int)n_layer + 1;
        while (n > 0 && misfit(part_devices(n_layer, n, gpus, shares)) >= 0) --n;
        p.n_gpu_layers = n;
        if (n == 0) return {};
    } else {
        const std::vector<device> parts = part_devices(n_layer, p.n_gpu_layers, gpus, shares);
        if (const int g = misfit(parts); g >= 0) {
            const device d = gpus[(size_t)g];
            const gpu_need need = gpu_bytes(m, p, parts, wb, d, hb);
            const uint64_t heap = device_heap(d);
            throw value_error("n_gpu_layers=" + std::to_string(p.n_gpu_layers) + " needs " + mib(need.total()) + " on " +
                              gpu_slot_of(d).desc->name + (gpus.size() > 1 ? " (" + d.name() + ")" : "") +
                              " (weights " + mib(need.weights) + ", KV cache " + mib(need.kv) +
                              ", activations and work memory " + mib(need.work) + ") plus a margin of " +
                              mib(heap / 20) + ", but " + mib(device_free(d)) + " of " + mib(heap) +
                              " are free; offload fewer layers (n_gpu_layers='auto' picks the most that fit) or use a "
                              "smaller n_ctx");
        }
    }
    return part_devices(n_layer, p.n_gpu_layers, gpus, shares);
}

std::vector<device> planned_part_devices(int64_t n_layer, const context_params& p) {
    std::vector<device> host((size_t)n_layer + 2, device::host());
    if (p.n_gpu_layers == 0 || gpu_slots().empty()) return host;
    std::vector<device> gpus;
    std::vector<double> shares;
    split_devices(p, gpus, shares);
    return part_devices(n_layer, p.n_gpu_layers == -2 ? -1 : p.n_gpu_layers, gpus, shares);
}

}  // namespace lp
