// bind_vision.cpp — _engine.VisionModel: a projector (mmproj) file's vision
// encoder. encode(pixels) takes one image chunk's preprocessed pixels,
// (3, H, W) or (1, 3, H, W) float32, and returns the projector output
// (n_tokens, n_embd_out) float32; the GIL is released while it runs.
// Fixed-size types take image_size x image_size; qwen2vl_merger any size in
// multiples of two patches. flash_attn picks the self-attention path.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>

#include "common.h"
#include "cpu/features.h"
#include "cpu/threadpool.h"
#include "vision/vision_model.h"

namespace py = pybind11;
using namespace lp;

namespace {

using farray = py::array_t<float, py::array::c_style>;

std::unique_ptr<vision_model> open_vision(const std::string& path, int n_threads, int flash_attn, int gpu) {
    if (n_threads < 1) n_threads = default_n_threads();
    if (n_threads > 1024) throw value_error("n_threads " + std::to_string(n_threads) + " is more than 1024");
    py::gil_scoped_release nogil;
    return std::make_unique<vision_model>(path, n_threads, flash_attn, gpu);
}

farray encode(vision_model& vm, const py::array& pixels) {
    if (!py::isinstance<py::array_t<float>>(pixels) || pixels.dtype().kind() != 'f' || pixels.itemsize() != 4)
        throw value_error("pixels must be a float32 array, got dtype " + std::string(py::str(pixels.dtype())));
    const int nd = (int)pixels.ndim();
    if (nd != 3 && nd != 4)
        throw value_error("pixels must have shape (3, H, W) or (1, 3, H, W), got " + std::to_string(nd) + " dimensions");
    if (nd == 4 && pixels.shape(0) != 1)
        throw value_error("pixels: a batch of " + std::to_string(pixels.shape(0)) +
                          " images in one chunk; these projector types take one image per chunk");
    const int64_t c = pixels.shape(nd - 3), h = pixels.shape(nd - 2), w = pixels.shape(nd - 1);
    if (c != 3) throw value_error("pixels must have 3 channels (RGB) first, got shape with " + std::to_string(c));
    farray px = farray::ensure(pixels);  // C-contiguous copy when needed
    const float* data = px.data();
    const patch_grid g = vm.grid_for(h, w);  // the size first: no pass over pixels it refuses
    for (int64_t i = 0; i < 3 * h * w; ++i)
        if (!std::isfinite(data[i])) throw value_error("pixels hold a NaN or infinite value at flat index " + std::to_string(i));
    farray out({(py::ssize_t)vm.n_tokens(g), (py::ssize_t)vm.n_out()});
    float* o = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        vm.encode(data, h, w, o);
    }
    return out;
}

}  // namespace

void bind_vision(py::module_& m) {
    py::class_<vision_model>(m, "VisionModel", "The vision encoder and projector of an mmproj GGUF file.")
        .def(py::init(&open_vision), py::arg("path"), py::arg("n_threads") = 0, py::arg("flash_attn") = -1,
             py::arg("gpu") = -1,
             "flash_attn: -1 auto, 0 off, 1 on (the self-attention path); gpu: -1 the CPU, else the Vulkan "
             "device that runs the encoder")
        .def_property_readonly("gpu", [](const vision_model& v) { return v.gpu(); },
                               "the Vulkan device the encoder runs on, or -1 (the CPU)")
        .def("encode", &encode, py::arg("pixels"),
             "One image chunk's pixels (3, H, W) or (1, 3, H, W) float32 -> (n_tokens, n_embd) float32.")
        .def_property_readonly("projector_type", [](const vision_model& v) { return v.model().hp().projector; })
        .def_property_readonly("n_embd", [](const vision_model& v) { return v.n_out(); },
                               "output width (the language model's n_embd)")
        .def_property_readonly("n_embd_vision", [](const vision_model& v) { return v.model().hp().n_embd; })
        .def_property_readonly("n_tokens", [](const vision_model& v) { return v.n_tokens_fixed(); },
                               "embeddings per image chunk (0: depends on the image size)")
        .def_property_readonly("dynamic_size", [](const vision_model& v) { return v.model().hp().dynamic_size; })
        .def_property_readonly("image_size", [](const vision_model& v) { return v.model().hp().image_size; })
        .def_property_readonly("patch_size", [](const vision_model& v) { return v.model().hp().patch_size; })
        .def_property_readonly("n_layer", [](const vision_model& v) { return v.model().hp().n_layer; })
        .def_property_readonly("n_layer_run", [](const vision_model& v) { return v.model().hp().n_layer_run; },
                               "vision blocks the forward pass runs")
        .def_property_readonly("feature_layers", [](const vision_model& v) { return v.model().hp().feature_layers; },
                               "the hidden states stacked before the projector (clip.vision.feature_layer), "
                               "ascending; [] when it takes the tower's output")
        .def_property_readonly("n_threads", [](const vision_model& v) { return v.n_threads(); })
        .def_property_readonly("flash_attn", [](const vision_model& v) { return v.flash_attn(); },
                               "the flash_attn option: -1 auto, 0 off, 1 on")
        .def("attention_path", [](const vision_model& v, int64_t h, int64_t w) {
                 return std::string(attention_path_name(v.path_for(v.grid_for(h, w))));
             }, py::arg("height"), py::arg("width"),
             "the attention path ('flash' / 'explicit') an image chunk of height x width pixels runs");
    m.attr("VISION_PROJECTOR_TYPES") = py::cast(supported_projector_names());
}
