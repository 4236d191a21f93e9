// vk_runtime.cpp — see vk_runtime.h.
#include "vk_runtime.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace lp::vk {

namespace {

// A zeroed Vulkan structure of the given type.
template <class T>
T make(VkStructureType type) {
    T v{};
    v.sType = type;
    return v;
}

const char* result_name(VkResult r) {
    switch (r) {
        case VK_SUCCESS: return "VK_SUCCESS";
        case VK_NOT_READY: return "VK_NOT_READY";
        case VK_TIMEOUT: return "VK_TIMEOUT";
        case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
        case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
        case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
        case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
        case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
        case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
        case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
        case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
        case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
        case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
        case VK_ERROR_FORMAT_NOT_SUPPORTED: return "VK_ERROR_FORMAT_NOT_SUPPORTED";
        case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
        case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
        default: return "VkResult error";
    }
}

void check(VkResult r, const char* what) {
    if (r == VK_SUCCESS) return;
    throw std::runtime_error(std::string("vulkan: ") + what + " failed: " + result_name(r) + " (" +
                             std::to_string((int)r) + ")");
}

struct instance_state {
    VkInstance instance = VK_NULL_HANDLE;
    std::vector<VkPhysicalDevice> phys;
    std::vector<device_info> infos;
    std::string error;
    // Never destroyed: the instance and the devices live until the process
    // ends (static destructors run in an order that could tear the instance
    // down under a live device; drivers free everything at exit anyway).
};

const char* type_name(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
        default: return "other";
    }
}

device_info describe(VkPhysicalDevice pd, int index) {
    device_info d;
    d.index = index;
    VkPhysicalDeviceProperties p{};
    vkGetPhysicalDeviceProperties(pd, &p);
    d.name = p.deviceName;
    d.type = type_name(p.deviceType);
    d.api_version = p.apiVersion;
    VkPhysicalDeviceMemoryProperties mp{};
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    for (uint32_t h = 0; h < mp.memoryHeapCount; ++h)
        if ((mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && mp.memoryHeaps[h].size > d.memory)
            d.memory = mp.memoryHeaps[h].size;
    // Subgroup size (1.1), driver name (1.2) and fp16 / int8 arithmetic (1.2):
    // asked for only where the device's version has the structures.
    auto sub = make<VkPhysicalDeviceSubgroupProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
    auto drv = make<VkPhysicalDeviceDriverProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES);
    auto p2 = make<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
    const bool v12 = p.apiVersion >= VK_API_VERSION_1_2;
    if (p.apiVersion >= VK_API_VERSION_1_1) {
        p2.pNext = &sub;
        if (v12) sub.pNext = &drv;
        vkGetPhysicalDeviceProperties2(pd, &p2);
        d.subgroup_size = sub.subgroupSize;
        const VkSubgroupFeatureFlags need =
            VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
        const uint32_t n = sub.subgroupSize;  // the shaders' 64-invocation workgroups hold whole subgroups
        d.subgroup_ops = (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) && (sub.supportedOperations & need) == need &&
                         n >= 1 && n <= 64 && (n & (n - 1)) == 0;
        if (const char* e = std::getenv("LLAMAPY_VULKAN_SUBGROUPS"); e && std::string(e) == "0") d.subgroup_ops = false;
        if (v12) d.driver = std::string(drv.driverName) + (drv.driverInfo[0] ? std::string(" ") + drv.driverInfo : "");
    }
    if (v12) {
        auto f16 = make<VkPhysicalDeviceShaderFloat16Int8Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES);
        auto f2 = make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
        f2.pNext = &f16;
        vkGetPhysicalDeviceFeatures2(pd, &f2);
        d.fp16 = f16.shaderFloat16;
        d.int8 = f16.shaderInt8;
    }
    return d;
}

// The devices in use: all usable ones, or those LLAMAPY_VK_VISIBLE_DEVICES
// (alias GGML_VK_VISIBLE_DEVICES, as llama.cpp spells it) lists by their
// number among the usable ones, in that order. A number may appear twice:
// each entry is its own logical device (own queue, own memory accounting),
// which lets one GPU, or lavapipe in CI, stand for several to test layer
// splits. A bad list leaves no device and says why in `error`.
std::vector<device_info> visible_devices(const std::vector<device_info>& usable, std::string& error) {
    const char* name = "LLAMAPY_VK_VISIBLE_DEVICES";
    const char* v = std::getenv(name);
    if (!v) {
        name = "GGML_VK_VISIBLE_DEVICES";
        v = std::getenv(name);
    }
    if (!v || !*v) return usable;
    std::vector<device_info> out;
    const char* s = v;
    for (;;) {
        char* end = nullptr;
        const long i = std::strtol(s, &end, 10);
        if (end == s || i < 0 || i >= (long)usable.size() || (*end != ',' && *end != '\0')) {
            error = std::string(name) + "='" + v + "': expected comma-separated device numbers below " +
                    std::to_string(usable.size()) + " (the usable Vulkan devices)";
            return {};
        }
        out.push_back(usable[(size_t)i]);
        if (*end == '\0') break;
        s = end + 1;
    }
    return out;
}

instance_state& state() {
    static instance_state& s = *new instance_state([] {
        instance_state st;
        auto app = make<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
        app.pApplicationName = "llamapy";
        app.pEngineName = "llamapy";
        app.apiVersion = VK_API_VERSION_1_1;
        auto ci = make<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
        ci.pApplicationInfo = &app;
        VkResult r = vkCreateInstance(&ci, nullptr, &st.instance);
        if (r != VK_SUCCESS) {
            st.instance = VK_NULL_HANDLE;
            st.error = std::string("vkCreateInstance failed: ") + result_name(r) +
                       " (no Vulkan driver? on Debian/Ubuntu: mesa-vulkan-drivers, or the GPU vendor's driver)";
            return st;
        }
        uint32_t n = 0;
        r = vkEnumeratePhysicalDevices(st.instance, &n, nullptr);
        if (r == VK_SUCCESS && n > 0) {
            st.phys.resize(n);
            r = vkEnumeratePhysicalDevices(st.instance, &n, st.phys.data());
            st.phys.resize(n);
        }
        if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
            st.error = std::string("vkEnumeratePhysicalDevices failed: ") + result_name(r);
            st.phys.clear();
        }
        std::vector<device_info> usable;
        for (size_t i = 0; i < st.phys.size(); ++i) {
            device_info d = describe(st.phys[i], (int)i);
            if (d.api_version < VK_API_VERSION_1_1) continue;  // the shaders target Vulkan 1.1
            d.physical = (int)i;
            usable.push_back(d);
        }
        st.infos = visible_devices(usable, st.error);
        for (size_t i = 0; i < st.infos.size(); ++i) st.infos[i].index = (int)i;
        if (st.infos.empty() && st.error.empty()) st.error = "the Vulkan loader found no device with Vulkan 1.1";
        return st;
    }());
    return s;
}

}  // namespace

const std::vector<device_info>& devices() { return state().infos; }
const std::string& last_error() { return state().error; }

// --- buffer --------------------------------------------------------------------

buffer::buffer(context& ctx, size_t bytes, bool host_visible) : ctx_(&ctx), bytes_(bytes) {
    const VkDeviceSize size = (bytes + 15) & ~(VkDeviceSize)15;  // never 0; whole words for the shaders
    auto bi = make<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
    bi.size = size ? size : 16;
    bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    check(vkCreateBuffer(ctx.dev_, &bi, nullptr, &buf_), "vkCreateBuffer");
    VkMemoryRequirements req{};
    vkGetBufferMemoryRequirements(ctx.dev_, buf_, &req);
    auto ai = make<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = host_visible ? ctx.memory_type(req.memoryTypeBits) : ctx.device_memory_type(req.memoryTypeBits);
    const VkResult r = vkAllocateMemory(ctx.dev_, &ai, nullptr, &mem_);
    if (r != VK_SUCCESS) {
        vkDestroyBuffer(ctx.dev_, buf_, nullptr);
        buf_ = VK_NULL_HANDLE;
        throw std::runtime_error("vulkan: allocating " + std::to_string((unsigned long long)req.size) +
                                 " bytes on " + ctx.info().name + " failed: " + result_name(r));
    }
    check(vkBindBufferMemory(ctx.dev_, buf_, mem_, 0), "vkBindBufferMemory");
    if (host_visible) check(vkMapMemory(ctx.dev_, mem_, 0, VK_WHOLE_SIZE, 0, &map_), "vkMapMemory");
    charged_ = req.size;
    ctx.allocated_ += charged_;
}

buffer::~buffer() { release(); }

buffer::buffer(buffer&& o) noexcept
    : ctx_(o.ctx_), charged_(o.charged_), buf_(o.buf_), mem_(o.mem_), map_(o.map_), bytes_(o.bytes_) {
    o.charged_ = 0;
    o.buf_ = VK_NULL_HANDLE;
    o.mem_ = VK_NULL_HANDLE;
    o.map_ = nullptr;
    o.bytes_ = 0;
}

buffer& buffer::operator=(buffer&& o) noexcept {
    if (this != &o) {
        release();
        ctx_ = o.ctx_;
        charged_ = o.charged_;
        o.charged_ = 0;
        buf_ = o.buf_;
        mem_ = o.mem_;
        map_ = o.map_;
        bytes_ = o.bytes_;
        o.buf_ = VK_NULL_HANDLE;
        o.mem_ = VK_NULL_HANDLE;
        o.map_ = nullptr;
        o.bytes_ = 0;
    }
    return *this;
}

void buffer::release() {
    if (!ctx_) return;
    if (buf_) vkDestroyBuffer(ctx_->dev_, buf_, nullptr);
    if (mem_) {
        if (map_) vkUnmapMemory(ctx_->dev_, mem_);
        vkFreeMemory(ctx_->dev_, mem_, nullptr);
    }
    buf_ = VK_NULL_HANDLE;
    mem_ = VK_NULL_HANDLE;
    map_ = nullptr;
    ctx_->allocated_ -= charged_;
    charged_ = 0;
}

// --- context -------------------------------------------------------------------

context& context::get(int index) {
    static std::mutex m;
    // contexts live for the process (see instance_state): never destroyed
    static auto& made = *new std::map<int, context*>();
    std::lock_guard<std::mutex> lock(m);
    auto it = made.find(index);
    if (it != made.end()) return *it->second;
    const auto& devs = devices();
    const device_info* info = nullptr;
    for (const auto& d : devs)
        if (d.index == index) info = &d;
    if (!info)
        throw std::runtime_error("vulkan: no device " + std::to_string(index) +
                                 (devs.empty() ? " (" + last_error() + ")" : " (" + std::to_string(devs.size()) +
                                                                                 " found)"));
    context* c = new context(*info);
    made.emplace(index, c);
    return *c;
}

context::context(const device_info& info) : info_(info) {
    phys_ = state().phys[(size_t)info.physical];
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qf(nq);
    vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, qf.data());
    bool found = false;
    for (uint32_t i = 0; i < nq && !found; ++i)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
            queue_family_ = i;
            found = true;
        }
    if (!found) throw std::runtime_error("vulkan: " + info.name + " has no compute queue");
    const float prio = 1.0f;
    auto qi = make<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
    qi.queueFamilyIndex = queue_family_;
    qi.queueCount = 1;
    qi.pQueuePriorities = &prio;
    auto di = make<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    check(vkCreateDevice(phys_, &di, nullptr, &dev_), "vkCreateDevice");
    vkGetDeviceQueue(dev_, queue_family_, 0, &queue_);
    auto pi = make<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
    pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pi.queueFamilyIndex = queue_family_;
    check(vkCreateCommandPool(dev_, &pi, nullptr, &cmd_pool_), "vkCreateCommandPool");
    auto ci = make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
    ci.commandPool = cmd_pool_;
    ci.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ci.commandBufferCount = 1;
    check(vkAllocateCommandBuffers(dev_, &ci, &cmd_), "vkAllocateCommandBuffers");
    auto fi = make<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
    check(vkCreateFence(dev_, &fi, nullptr, &fence_), "vkCreateFence");
    vkGetPhysicalDeviceMemoryProperties(phys_, &mem_props_);
    VkPhysicalDeviceProperties p{};
    vkGetPhysicalDeviceProperties(phys_, &p);
    for (int a = 0; a < 3; ++a) max_groups_[a] = p.limits.maxComputeWorkGroupCount[a];
}

context::~context() {
    if (!dev_) return;
    vkDeviceWaitIdle(dev_);
    for (auto& [name, p] : pipelines_) {
        vkDestroyPipeline(dev_, p.pipe, nullptr);
        vkDestroyPipelineLayout(dev_, p.layout, nullptr);
        vkDestroyDescriptorSetLayout(dev_, p.set_layout, nullptr);
        vkDestroyShaderModule(dev_, p.module, nullptr);
    }
    if (desc_pool_) vkDestroyDescriptorPool(dev_, desc_pool_, nullptr);
    if (fence_) vkDestroyFence(dev_, fence_, nullptr);
    if (cmd_pool_) vkDestroyCommandPool(dev_, cmd_pool_, nullptr);
    vkDestroyDevice(dev_, nullptr);
}

uint32_t context::memory_type(uint32_t type_bits) const {
    const VkMemoryPropertyFlags need = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int fallback = -1;
    for (uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i) {
        if (!(type_bits & (1u << i))) continue;
        const VkMemoryPropertyFlags f = mem_props_.memoryTypes[i].propertyFlags;
        if ((f & need) != need) continue;
        if (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) return i;
        if (fallback < 0) fallback = (int)i;
    }
    if (fallback < 0) throw std::runtime_error("vulkan: " + info_.name + " has no host-visible coherent memory");
    return (uint32_t)fallback;
}

// For buffers only the device reads: device-local memory, preferably a kind
// the host cannot map (a discrete GPU's own memory), else any device-local
// kind (unified memory, lavapipe), else what memory_type gives.
uint32_t context::device_memory_type(uint32_t type_bits) const {
    int any_local = -1;
    for (uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i) {
        if (!(type_bits & (1u << i))) continue;
        const VkMemoryPropertyFlags f = mem_props_.memoryTypes[i].propertyFlags;
        if (!(f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) continue;
        if (!(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) return i;
        if (any_local < 0) any_local = (int)i;
    }
    return any_local >= 0 ? (uint32_t)any_local : memory_type(type_bits);
}

void context::submit_and_wait() {
    check(vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
    auto si = make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cmd_;
    check(vkQueueSubmit(queue_, 1, &si, fence_), "vkQueueSubmit");
    // Ten minutes for one submit (a whole forward pass of a big batch on a
    // CPU driver such as lavapipe takes minutes): a hung device is an error,
    // not a hang.
    const VkResult r = vkWaitForFences(dev_, 1, &fence_, VK_TRUE, 600ull * 1000 * 1000 * 1000);
    vkResetFences(dev_, 1, &fence_);
    check(r, "waiting for the GPU (vkWaitForFences)");
}

void context::upload(const buffer& dst, size_t off, const void* src, size_t bytes) {
    if (bytes == 0) return;
    if (off + bytes > dst.bytes()) throw std::logic_error("vulkan: upload past the end of a buffer");
    constexpr size_t kChunk = (size_t)64 << 20;
    buffer staging(*this, std::min(bytes, kChunk));
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t done = 0; done < bytes;) {
        const size_t n = std::min(bytes - done, kChunk);
        std::memcpy(staging.data(), static_cast<const uint8_t*>(src) + done, n);
        check(vkResetCommandBuffer(cmd_, 0), "vkResetCommandBuffer");
        auto bi = make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
        bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        check(vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer");
        VkBufferCopy region{0, (VkDeviceSize)(off + done), (VkDeviceSize)n};
        vkCmdCopyBuffer(cmd_, staging.handle(), dst.handle(), 1, &region);
        // later dispatches read what the copy wrote
        auto mb = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
        mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
        mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT;
        vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                             nullptr, 0, nullptr);
        submit_and_wait();
        done += n;
    }
}

context::pipeline& context::get_pipeline(const char* shader, uint32_t n_buffers) {
    auto it = pipelines_.find(shader);
    if (it != pipelines_.end()) {
        if (it->second.n_buffers != n_buffers)
            throw std::logic_error(std::string("vulkan: shader ") + shader + " bound with a different buffer count");
        return it->second;
    }
    const spirv* code = find_shader(shader);
    if (!code) throw std::logic_error(std::string("vulkan: no embedded shader '") + shader + "'");
    pipeline p;
    p.n_buffers = n_buffers;
    auto mi = make<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
    mi.codeSize = code->n_words * 4;
    mi.pCode = code->words;
    check(vkCreateShaderModule(dev_, &mi, nullptr, &p.module), "vkCreateShaderModule");
    std::vector<VkDescriptorSetLayoutBinding> b(n_buffers);
    for (uint32_t i = 0; i < n_buffers; ++i) {
        b[i] = {};
        b[i].binding = i;
        b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        b[i].descriptorCount = 1;
        b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    auto li = make<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
    li.bindingCount = n_buffers;
    li.pBindings = b.data();
    check(vkCreateDescriptorSetLayout(dev_, &li, nullptr, &p.set_layout), "vkCreateDescriptorSetLayout");
    VkPushConstantRange pr{VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
    auto pli = make<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
    pli.setLayoutCount = 1;
    pli.pSetLayouts = &p.set_layout;
    pli.pushConstantRangeCount = 1;
    pli.pPushConstantRanges = &pr;
    check(vkCreatePipelineLayout(dev_, &pli, nullptr, &p.layout), "vkCreatePipelineLayout");
    auto ci = make<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
    ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = p.module;
    ci.stage.pName = "main";
    ci.layout = p.layout;
    check(vkCreateComputePipelines(dev_, VK_NULL_HANDLE, 1, &ci, nullptr, &p.pipe), "vkCreateComputePipelines");
    return pipelines_.emplace(shader, p).first->second;
}

void context::run(const std::vector<dispatch>& work) {
    if (work.empty()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    // One descriptor set per dispatch from a pool reset per run.
    if (desc_pool_sets_ < work.size()) {
        if (desc_pool_) vkDestroyDescriptorPool(dev_, desc_pool_, nullptr);
        desc_pool_ = VK_NULL_HANDLE;
        uint32_t sets = 64;
        while (sets < work.size()) sets *= 2;
        VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, sets * 8};
        auto pi = make<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
        pi.maxSets = sets;
        pi.poolSizeCount = 1;
        pi.pPoolSizes = &ps;
        check(vkCreateDescriptorPool(dev_, &pi, nullptr, &desc_pool_), "vkCreateDescriptorPool");
        desc_pool_sets_ = sets;
    }
    check(vkResetDescriptorPool(dev_, desc_pool_, 0), "vkResetDescriptorPool");
    check(vkResetCommandBuffer(cmd_, 0), "vkResetCommandBuffer");
    auto bi = make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer");
    for (size_t k = 0; k < work.size(); ++k) {
        const dispatch& d = work[k];
        if (d.buffers.size() > 8) throw std::logic_error("vulkan: more than 8 buffers in one dispatch");
        if (d.push_bytes > 128) throw std::logic_error("vulkan: push constants over 128 bytes");
        for (int a = 0; a < 3; ++a)
            if (d.groups[a] == 0 || d.groups[a] > max_groups_[a])
                throw std::logic_error("vulkan: bad workgroup count for " + d.shader);
        pipeline& p = get_pipeline(d.shader.c_str(), (uint32_t)d.buffers.size());
        auto ai = make<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
        ai.descriptorPool = desc_pool_;
        ai.descriptorSetCount = 1;
        ai.pSetLayouts = &p.set_layout;
        VkDescriptorSet set = VK_NULL_HANDLE;
        check(vkAllocateDescriptorSets(dev_, &ai, &set), "vkAllocateDescriptorSets");
        VkDescriptorBufferInfo infos[8];
        VkWriteDescriptorSet writes[8];
        for (size_t i = 0; i < d.buffers.size(); ++i) {
            infos[i] = {d.buffers[i]->handle(), 0, VK_WHOLE_SIZE};
            writes[i] = make<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
            writes[i].dstSet = set;
            writes[i].dstBinding = (uint32_t)i;
            writes[i].descriptorCount = 1;
            writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
            writes[i].pBufferInfo = &infos[i];
        }
        vkUpdateDescriptorSets(dev_, (uint32_t)d.buffers.size(), writes, 0, nullptr);
        vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipe);
        vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
        if (d.push_bytes) vkCmdPushConstants(cmd_, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, d.push_bytes, d.push);
        vkCmdDispatch(cmd_, d.groups[0], d.groups[1], d.groups[2]);
        // the next dispatch (or the host, after the fence) reads what this one wrote
        auto mb = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
        mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
        const bool last = k + 1 == work.size();
        mb.dstAccessMask = last ? VK_ACCESS_HOST_READ_BIT : (VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
        vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                             last ? VK_PIPELINE_STAGE_HOST_BIT : VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                             nullptr, 0, nullptr);
    }
    submit_and_wait();
}

}  // namespace lp::vk
