# CUDA architectures: every generation flashseek supports. Override with -DCMAKE_CUDA_ARCHITECTURES=90a for a
# quick single-arch build on the GPU machine.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "80;89;90a;100a;120a")
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)
add_compile_definitions(FLASHSEEK_HAVE_CUDA=1)
