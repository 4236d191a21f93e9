// registry.cpp — see registry.h.
#include "registry.h"

#include "../common.h"

namespace lp {

const std::vector<gpu_device_desc>& backend_factory::devices() const {
    static const std::vector<gpu_device_desc> none;
    return none;
}

void* backend_factory::allocate(int index, size_t bytes, void** handle) const {
    (void)bytes;
    (void)handle;
    throw not_implemented_error(std::string("the ") + name() + " backend allocates no device memory (device " +
                                std::to_string(index) + ")");
}

const backend_factory& cpu_backend_factory();  // backend/cpu_backend.cpp

// Declares a backend's factory function (defined in the backend's folder)
// and adds its factory to the list.
#define LP_REGISTER_BACKEND(factory_fn)      \
    {                                        \
        const backend_factory& factory_fn(); \
        all.push_back(&factory_fn());        \
    }

const std::vector<const backend_factory*>& backend_factories() {
    static const std::vector<const backend_factory*> list = [] {
        std::vector<const backend_factory*> all{&cpu_backend_factory()};
        // One line per optional backend, under the definition its CMake
        // option sets (cmake/options.cmake):
#if defined(LP_ENABLE_VULKAN)
        LP_REGISTER_BACKEND(vulkan_backend_factory)
#endif
        return all;
    }();
    return list;
}

const backend_factory* find_backend(const std::string& name) {
    for (const backend_factory* f : backend_factories())
        if (name == f->name()) return f;
    return nullptr;
}

const std::vector<gpu_slot>& gpu_slots() {
    // Built once: each backend probes its devices once per process.
    static const std::vector<gpu_slot> slots = [] {
        std::vector<gpu_slot> out;
        for (const backend_factory* f : backend_factories()) {
            const std::vector<gpu_device_desc>& ds = f->devices();
            for (size_t i = 0; i < ds.size(); ++i) out.push_back(gpu_slot{f, (int)i, &ds[i]});
        }
        return out;
    }();
    return slots;
}

const gpu_slot& gpu_slot_of(device d) {
    const std::vector<gpu_slot>& s = gpu_slots();
    if (d.is_host() || d.id < 0 || d.id >= (int)s.size())
        throw value_error("device " + d.name() + " does not exist (" + gpu_count_phrase() + ")");
    return s[(size_t)d.id];
}

std::unique_ptr<backend> create_gpu_backend(device d) {
    const gpu_slot& s = gpu_slot_of(d);
    return s.factory->create(s.index, nullptr);
}

namespace {

// The backends that have devices of their own (all but the host's).
std::vector<const backend_factory*> gpu_backends() {
    std::vector<const backend_factory*> out;
    for (const backend_factory* f : backend_factories())
        if (f != &cpu_backend_factory()) out.push_back(f);
    return out;
}

}  // namespace

std::string no_gpu_reason() {
    if (!gpu_slots().empty()) return std::string();
    const std::vector<const backend_factory*> gpus = gpu_backends();
    // How to get one: the build option of the GPU backend there is so far.
    if (gpus.empty()) return "no GPU backend in this build (build with CMAKE_ARGS=\"-DLLAMAPY_VULKAN=ON\")";
    std::string why;
    for (const backend_factory* f : gpus) {
        const std::string w = f->why_no_device();
        why += std::string(why.empty() ? "" : "; ") + "no " + f->title() + " device found (" +
               (w.empty() ? "the loader reports none" : w) + ")";
    }
    return why;
}

std::string gpu_count_phrase() {
    const std::vector<const backend_factory*> gpus = gpu_backends();
    if (gpus.empty()) return "this build has no GPU backend";
    std::string out;
    for (const backend_factory* f : gpus)
        out += std::string(out.empty() ? "" : " and ") + std::to_string(f->devices().size()) + " " + f->title() +
               " device(s)";
    return out;
}

}  // namespace lp
