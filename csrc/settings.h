// Process-wide launch settings, read by the CUDA launchers at each launch (so a CUDA graph keeps
// what was set when it was captured), and the C entry points fp8ops/_native.py reaches through
// ctypes: the settings and the pure launch-shape functions, so that CPU tests can pin them.
#pragma once

// A plain C entry point of the library (fp8ops/_native.py), visible although the build hides the
// rest.
#define FP8OPS_C_API extern "C" __attribute__((visibility("default")))

namespace fp8ops {

// Programmatic dependent launch: on by default (fp8ops.set_pdl).
bool pdl_enabled();

}  // namespace fp8ops
