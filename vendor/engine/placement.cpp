// placement.cpp — see placement.h.
#include "placement.h"

#include <algorithm>
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

placement_plan plan_parts(const model& m, const std::vector<device>& part_dev, const kv_cache& kv_main,
                          const kv_cache* kv_swa, uint64_t activation_bytes, device compute) {
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
    }
    for (int il = 0; il < (int)hp.n_layer; ++il) {
        placement_plan::part& p = plan.parts[(size_t)il + 1];
        p.name = "blk." + std::to_string(il);
        p.layer = il;
        p.kv = p.weights;
        if (kv_main.holds(il)) {
            p.kv = kv_main.where(il);
            p.kv_bytes = kv_main.layer_bytes();
        } else if (kv_swa && kv_swa->holds(il)) {
            p.kv = kv_swa->where(il);
            p.kv_bytes = kv_swa->layer_bytes();
        }
    }
    return plan;
}

}  // namespace lp
