// buffer.cpp — see buffer.h.
#include "buffer.h"

#include <new>
#include <utility>

#include "../common.h"
#include "registry.h"

namespace lp {

namespace {
constexpr std::align_val_t kHostAlign{64};
}

device_buffer::device_buffer(device where, size_t n_bytes) : where_(where) {
    if (!where.is_host()) {
        // The device's backend allocates (registry.h); a device that does
        // not exist is a value_error naming it.
        const gpu_slot& s = gpu_slot_of(where);
        if (n_bytes == 0) return;
        data_ = s.factory->allocate(s.index, n_bytes, &handle_);
        bytes_ = n_bytes;
        return;
    }
    if (n_bytes == 0) return;
    data_ = ::operator new(n_bytes, kHostAlign);
    bytes_ = n_bytes;
}

device_buffer::~device_buffer() { release(); }

void device_buffer::release() {
    if (handle_) {
        gpu_slot_of(where_).factory->release(handle_);
        handle_ = nullptr;
        data_ = nullptr;
    }
    if (data_) ::operator delete(data_, kHostAlign);
    data_ = nullptr;
    bytes_ = 0;
}

device_buffer::device_buffer(device_buffer&& o) noexcept
    : where_(o.where_), data_(std::exchange(o.data_, nullptr)), handle_(std::exchange(o.handle_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)) {}

device_buffer& device_buffer::operator=(device_buffer&& o) noexcept {
    if (this != &o) {
        release();
        where_ = o.where_;
        data_ = std::exchange(o.data_, nullptr);
        handle_ = std::exchange(o.handle_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
}

}  // namespace lp
