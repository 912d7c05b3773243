// JSON text exactly as Python's json.dumps(value, indent=2, sort_keys=True) writes it: floats as
// repr() ("0.1", "1e-05", "2.0", "NaN"), integers as integers, non-ASCII escaped as \uXXXX, keys
// in code-point order. trainer_state.json is written this way, so files compare byte for byte.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace accel::trainer {

// Python's repr() of a float.
std::string python_float_repr(double v);

// Python's round(v, 4) (correctly rounded, halves to even on the exact binary value).
double python_round4(double v);

std::string python_json_dumps(const nlohmann::json& value);

}  // namespace accel::trainer
