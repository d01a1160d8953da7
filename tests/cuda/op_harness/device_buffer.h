// The perf suites' device buffers: cuda/common/device_scratch.h's owned, uninitialized allocation (at least 16
// bytes), which the ceilings use too; suites fill them on the device (cuda/common/random_fill.cuh).
#pragma once
#include "cuda/common/device_scratch.h"

namespace flashseek::test {

using DeviceBuffer = cuda::DeviceScratch;

}  // namespace flashseek::test
