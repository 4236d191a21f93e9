// vk_runtime.h — the Vulkan side of the GPU backend: the devices the loader
// finds, and per device one compute context (logical device, compute queue,
// memory, pipelines built from the SPIR-V embedded at build time, and a
// command buffer that records a sequence of dispatches and submits it once).
//
// Memory: every buffer is host-visible and coherent (preferring memory that
// is also device-local: integrated GPUs, lavapipe, resizable BAR), mapped
// once, so uploads and downloads are plain copies and the host reads device
// buffers in place once the work that writes them has finished.
// Every Vulkan error is a C++ exception naming the call and the VkResult: a
// driver failure never ends the process.
// Not here: which op runs how (vulkan_backend.h), the shaders (shaders/).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

namespace lp::vk {

struct device_info {
    int index = 0;             // the device's number here (main_gpu, "gpu<index>")
    int physical = 0;          // the Vulkan physical device it runs on
    std::string name;
    std::string type;          // "discrete", "integrated", "virtual", "cpu", "other"
    std::string driver;        // driver name and info, where the driver reports them
    uint32_t api_version = 0;  // VK_MAKE_API_VERSION(...)
    uint64_t memory = 0;       // bytes of the largest device-local heap
    bool fp16 = false;         // shaderFloat16
    bool int8 = false;         // shaderInt8
    uint32_t subgroup_size = 0;
    // The shaders' subgroup variants can run: compute-stage subgroups with
    // basic and shuffle operations, a power-of-two size up to 64.
    // LLAMAPY_VULKAN_SUBGROUPS=0 turns them off (the portable shaders).
    bool subgroup_ops = false;
};

// The devices the Vulkan loader and its drivers report (empty when there is
// no loader, no driver or no device; the reason is in last_error()).
const std::vector<device_info>& devices();
// Why devices() is empty, or "".
const std::string& last_error();

// SPIR-V of one shader (shaders_spv.cpp, generated at build time).
struct spirv {
    const char* name;
    const uint32_t* words;
    size_t n_words;
};
const spirv* find_shader(const std::string& name);

class context;

// A storage buffer in host-visible memory, mapped. Movable, not copyable.
class buffer {
public:
    buffer() = default;
    // host_visible: mapped memory the host reads and writes in place (the
    // device-local kind when the device has such, e.g. resizable BAR or a
    // unified-memory GPU); else device-local memory that is not mapped
    // (data() is null), filled by context::upload: the weights.
    buffer(context& ctx, size_t bytes, bool host_visible = true);
    ~buffer();
    buffer(buffer&& o) noexcept;
    buffer& operator=(buffer&& o) noexcept;
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;

    size_t bytes() const { return bytes_; }
    void* data() { return map_; }
    const void* data() const { return map_; }
    VkBuffer handle() const { return buf_; }
    const context* owner() const { return ctx_; }

private:
    void release();
    context* ctx_ = nullptr;
    uint64_t charged_ = 0;  // bytes counted in the context's allocated()
    VkBuffer buf_ = VK_NULL_HANDLE;
    VkDeviceMemory mem_ = VK_NULL_HANDLE;
    void* map_ = nullptr;
    size_t bytes_ = 0;
};

// One dispatch: a shader, its storage buffers (bindings 0..n-1 in order),
// push constants (copied in: a dispatch may be recorded long before it is
// submitted) and the workgroup counts.
struct dispatch {
    std::string shader;
    std::vector<const buffer*> buffers;
    uint8_t push[128] = {};
    uint32_t push_bytes = 0;
    uint32_t groups[3] = {1, 1, 1};

    template <class T> void set_push(const T& v) {
        static_assert(sizeof(T) <= sizeof(push), "push constants over 128 bytes");
        std::memcpy(push, &v, sizeof(T));
        push_bytes = (uint32_t)sizeof(T);
    }
};

class context {
public:
    // The context of device `index` (created on first use, kept for the
    // process). Throws std::runtime_error when the device cannot be opened.
    static context& get(int index = 0);
    ~context();
    context(const context&) = delete;
    context& operator=(const context&) = delete;

    const device_info& info() const { return info_; }
    uint32_t max_groups(int axis) const { return max_groups_[axis]; }
    // Bytes of device memory this process holds on the device (all buffers).
    uint64_t allocated() const { return allocated_.load(); }
    // Runs the dispatches in order (a barrier between each and the next: each
    // may read what the one before wrote) in one command buffer, one submit,
    // and waits for it. Serialised per context.
    void run(const std::vector<dispatch>& work);
    // Copies bytes from host memory into dst at byte offset off through a
    // mapped staging buffer (in chunks), and waits. Serialised per context.
    void upload(const buffer& dst, size_t off, const void* src, size_t bytes);

private:
    friend class buffer;
    struct pipeline {
        VkShaderModule module = VK_NULL_HANDLE;
        VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
        VkPipelineLayout layout = VK_NULL_HANDLE;
        VkPipeline pipe = VK_NULL_HANDLE;
        uint32_t n_buffers = 0;
    };
    explicit context(const device_info& info);
    pipeline& get_pipeline(const char* shader, uint32_t n_buffers);
    uint32_t memory_type(uint32_t type_bits) const;
    uint32_t device_memory_type(uint32_t type_bits) const;
    void submit_and_wait();

    device_info info_;
    VkPhysicalDevice phys_ = VK_NULL_HANDLE;
    VkDevice dev_ = VK_NULL_HANDLE;
    VkQueue queue_ = VK_NULL_HANDLE;
    uint32_t queue_family_ = 0;
    VkCommandPool cmd_pool_ = VK_NULL_HANDLE;
    VkCommandBuffer cmd_ = VK_NULL_HANDLE;
    VkFence fence_ = VK_NULL_HANDLE;
    VkDescriptorPool desc_pool_ = VK_NULL_HANDLE;
    uint32_t desc_pool_sets_ = 0;
    VkPhysicalDeviceMemoryProperties mem_props_{};
    uint32_t max_groups_[3] = {65535, 65535, 65535};
    std::map<std::string, pipeline> pipelines_;
    std::mutex mutex_;
    std::atomic<uint64_t> allocated_{0};
};

}  // namespace lp::vk
