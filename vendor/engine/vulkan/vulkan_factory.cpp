// vulkan_factory.cpp — the Vulkan backend as the engine's registry sees it
// (backend/registry.h): the devices the loader finds, a vulkan_backend per
// device, mapped device memory for device_buffers, and the memory size the
// placement plan checks against (LLAMAPY_VULKAN_MEMORY=<bytes> stands in for
// every device's size: how tests play a small GPU).
// Not here: the ops (vulkan_backend.h), the Vulkan plumbing (vk_runtime.h).
#include <cstdlib>
#include <string>

#include "../backend/registry.h"
#include "../common.h"
#include "vk_runtime.h"
#include "vulkan_backend.h"

namespace lp {

namespace {

std::string version_string(uint32_t v) {
    return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
           std::to_string(VK_API_VERSION_PATCH(v));
}

class vulkan_factory final : public backend_factory {
public:
    const char* name() const override { return "vulkan"; }
    const char* title() const override { return "Vulkan"; }

    const std::vector<gpu_device_desc>& devices() const override {
        // Described once, from the runtime's one probe of the loader.
        static const std::vector<gpu_device_desc> descs = [] {
            std::vector<gpu_device_desc> out;
            for (const vk::device_info& v : vk::devices()) {
                gpu_device_desc d;
                d.name = v.name;
                d.type = v.type;
                d.driver = v.driver;
                d.api_version = version_string(v.api_version);
                d.memory = v.memory;
                d.fp16 = v.fp16;
                d.int8 = v.int8;
                d.subgroup_size = (int)v.subgroup_size;
                d.subgroup_ops = v.subgroup_ops;
                out.push_back(d);
            }
            return out;
        }();
        return descs;
    }
    std::string why_no_device() const override { return vk::last_error(); }

    std::unique_ptr<backend> create(int index, thread_pool* pool) const override {
        (void)pool;  // the work runs on the device
        return std::make_unique<vulkan_backend>(index);
    }

    void* allocate(int index, size_t bytes, void** handle) const override { return vulkan_alloc(index, bytes, handle); }
    void release(void* handle) const override { vulkan_free(handle); }

    uint64_t memory_bytes(int index) const override {
        if (const char* e = std::getenv("LLAMAPY_VULKAN_MEMORY")) {
            char* end = nullptr;
            const unsigned long long v = std::strtoull(e, &end, 10);
            if (end == e || *end)
                throw value_error(std::string("LLAMAPY_VULKAN_MEMORY must be a number of bytes, got '") + e + "'");
            return v;
        }
        return vulkan_heap_bytes(index);
    }
    uint64_t memory_used(int index) const override { return vulkan_allocated(index); }

    bool has_matmul(ggml_type t) const override { return vulkan_backend::has_matmul(t); }
    bool has_kv_store(ggml_type t) const override { return vulkan_backend::has_kv_store(t); }
};

}  // namespace

// Registered in backend/registry.cpp (LP_ENABLE_VULKAN builds).
const backend_factory& vulkan_backend_factory() {
    static const vulkan_factory f;
    return f;
}

}  // namespace lp
