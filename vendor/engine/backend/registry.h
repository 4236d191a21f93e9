// registry.h — the backends this build has, each known to the rest of the
// engine only through its factory: the devices it finds, how to create a
// backend on one, how to allocate and measure memory there, and which ops it
// has kernels for. The context, the placement plan, the vision encoder, the
// device buffers and the Python bindings ask the registry; none of them names
// a backend. Adding one (CUDA, Metal) is its folder (a backend.h
// implementation and a factory) and one registration line in registry.cpp.
//
// GPU devices: device{gpu, i} (buffer.h) is the i-th device over all non-host
// backends, in registration order ("gpu0", "gpu1", ...; main_gpu counts the
// same way). With one GPU backend that is its own device order.
// Not here: the ops (backend.h), which part runs on which device (placement.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../ggml_type.h"
#include "backend.h"

namespace lp {

class thread_pool;

// One device a GPU backend finds, as _engine.gpu_devices() describes it.
struct gpu_device_desc {
    std::string name;          // as the driver names it
    std::string type;          // "discrete", "integrated", "virtual", "cpu", "other"
    std::string driver;        // driver name and version, where the driver reports them
    std::string api_version;   // of the device's API ("1.3.255")
    uint64_t memory = 0;       // bytes of its largest device-local heap
    bool fp16 = false;         // 16-bit float arithmetic in kernels
    bool int8 = false;         // 8-bit integer arithmetic in kernels
    int subgroup_size = 0;     // threads that exchange values without shared memory
    bool subgroup_ops = false; // the backend's subgroup kernels run on it
};

// What a backend tells the engine about itself. The CPU's (the host, the
// reference) has no devices and allocates nothing: device_buffer owns host
// memory itself.
class backend_factory {
public:
    virtual ~backend_factory() = default;
    // "cpu", "vulkan": _engine.backends(), the op tests' backend argument.
    virtual const char* name() const = 0;
    // "CPU", "Vulkan": in messages ("2 Vulkan device(s)").
    virtual const char* title() const = 0;
    // The devices this process finds (probed on first use); why none, when
    // there are none ("" otherwise).
    virtual const std::vector<gpu_device_desc>& devices() const;
    virtual std::string why_no_device() const { return std::string(); }
    // A backend on its device `index`. The host backend runs on `pool`
    // without reserved work memory (single ops: the op tests); a GPU
    // backend runs on its device and takes no pool (null).
    virtual std::unique_ptr<backend> create(int index, thread_pool* pool) const = 0;
    // n bytes of memory on device `index` that the host can address (mapped)
    // and that this backend's ops bind in place; *handle receives what
    // release() takes.
    virtual void* allocate(int index, size_t bytes, void** handle) const;
    virtual void release(void* handle) const { (void)handle; }
    // The size of device `index`'s memory and what this process holds there.
    virtual uint64_t memory_bytes(int index) const { (void)index; return 0; }
    virtual uint64_t memory_used(int index) const { (void)index; return 0; }
    // Which ops it has: a matmul kernel of its own for weights of type t
    // (other readable types it runs through a fallback), and a KV cache store
    // for cache type t.
    virtual bool has_matmul(ggml_type t) const = 0;
    virtual bool has_kv_store(ggml_type t) const = 0;
};

// The compiled backends, the CPU first; the one named `name`, or null.
const std::vector<const backend_factory*>& backend_factories();
const backend_factory* find_backend(const std::string& name);

// A GPU device: its backend and its index among that backend's devices.
struct gpu_slot {
    const backend_factory* factory = nullptr;
    int index = 0;
    const gpu_device_desc* desc = nullptr;
};
// Every GPU device of every compiled backend (see the file comment).
const std::vector<gpu_slot>& gpu_slots();
// The slot of device d (a GPU device); value_error when there is none.
const gpu_slot& gpu_slot_of(device d);
// A backend on GPU device d.
std::unique_ptr<backend> create_gpu_backend(device d);

// Why no layer can go to a GPU in this process ("" when one can): no GPU
// backend in this build, or none of them found a device (and why not).
std::string no_gpu_reason();
// "1 Vulkan device(s)": how many GPU devices there are, per backend (for
// messages about a device number out of range).
std::string gpu_count_phrase();

}  // namespace lp
