// params.h — the model and context options as Python sees them: one struct
// each (_engine.ModelParams, _engine.ContextParams, bound in bind_params.cpp),
// built from a params object and/or keyword arguments named after its fields,
// so no binding re-spells the option list.
#pragma once

#include <pybind11/pybind11.h>

#include "context.h"
#include "model/model.h"

namespace lp {

// params (a ModelParams / ContextParams or None) with the keyword arguments
// set on a copy, by field name; an unknown name is a TypeError naming it.
model_params model_params_from(const pybind11::object& params, const pybind11::kwargs& kw);
context_params context_params_from(const pybind11::object& params, const pybind11::kwargs& kw);

}  // namespace lp
