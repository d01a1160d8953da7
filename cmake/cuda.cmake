# CUDA architectures: every generation flashseek supports. Override with -DCMAKE_CUDA_ARCHITECTURES=90a for a
# quick single-arch build on the GPU machine.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "80;89;90a;100a;120a")
endif()
enable_language(CUDA)
# CMake 3.25 has no C++20 dialect entry for nvcc and fails at generate time ("requires the language dialect
# CUDA20") once a target with .cu files inherits the C++20 standard: teach it the flag nvcc >= 12 accepts.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION OR CMAKE_CUDA20_STANDARD_COMPILE_OPTION STREQUAL "")
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
# fmt turns its constexpr support off under nvcc, which then breaks its own consteval format-string checks in
# .cu files (FS_CHECK, fmt::format); nvcc 13 handles the constexpr code, so switch it back on.
add_compile_options($<$<COMPILE_LANGUAGE:CUDA>:-DFMT_USE_CONSTEXPR=1>)
find_package(CUDAToolkit REQUIRED)
add_compile_definitions(FLASHSEEK_HAVE_CUDA=1)
# wgmma kernels exist only in the arch-specific sm_90a build; host code enables them only when it is compiled in.
if("90a" IN_LIST CMAKE_CUDA_ARCHITECTURES OR "90a-real" IN_LIST CMAKE_CUDA_ARCHITECTURES)
  add_compile_definitions(FLASHSEEK_SM90A_BUILD=1)
endif()
