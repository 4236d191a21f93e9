// placement.cpp — see placement.h.
#include "placement.h"

#include <cstdlib>
#include <cstring>

#include "kv_cache.h"

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
        if (p.kv_bytes) at(p.kv).kv_bytes += p.kv_bytes;
    }
    at(compute).activation_bytes += activation_bytes;
    return out;
}

placement_plan plan_cpu(const model& m, const kv_cache& kv_main, const kv_cache* kv_swa, uint64_t activation_bytes) {
    const hparams& hp = m.hp();
    placement_plan plan;
    plan.compute = device::host();
    plan.activation_bytes = activation_bytes;
    plan.parts.resize((size_t)hp.n_layer + 2);
    plan.parts.front().name = "input";
    plan.parts.back().name = "output";
    for (int il = 0; il < (int)hp.n_layer; ++il) {
        placement_plan::part& p = plan.parts[(size_t)il + 1];
        p.name = "blk." + std::to_string(il);
        p.layer = il;
        if (kv_main.holds(il)) {
            p.kv = kv_main.where();
            p.kv_bytes = kv_main.layer_bytes();
        } else if (kv_swa && kv_swa->holds(il)) {
            p.kv = kv_swa->where();
            p.kv_bytes = kv_swa->layer_bytes();
        }
    }
    for (const gguf_tensor_info& t : m.file().tensors()) {
        const int il = layer_of(t.name, hp.n_layer);
        placement_plan::part& p = il >= 0 ? plan.parts[(size_t)il + 1]
                                  : t.name.compare(0, 6, "output") == 0 ? plan.parts.back()
                                                                        : plan.parts.front();
        p.weight_bytes += t.nbytes;
    }
    return plan;
}

}  // namespace lp
