# libaccel_cuda.so, the module with libaccel's NCCL process group (src/cuda/plugin.hpp says why it
# is a module), built where the chosen LibTorch has CUDA. Compiling it needs the headers of CUDA's
# runtime and of NCCL, and of cuBLAS, cuSPARSE and cuSOLVER (ATen's CUDA context includes them);
# a wheel's are found beside it (tools/fetch_torch.sh unpacks them), a toolkit's through
# CUDAToolkit_ROOT or /usr/local/cuda.
#   -DACCEL_CUDA=AUTO (default): build it when all of that is found, else say what is missing
#   -DACCEL_CUDA=ON: stop when it cannot be built;  -DACCEL_CUDA=OFF: never build it
set(ACCEL_CUDA AUTO CACHE STRING "Build libaccel's CUDA/NCCL part: AUTO, ON or OFF")
set_property(CACHE ACCEL_CUDA PROPERTY STRINGS AUTO ON OFF)

set(ACCEL_CUDA_BUILT FALSE)
set(missing "")
if(ACCEL_CUDA STREQUAL "OFF")
  set(missing "ACCEL_CUDA=OFF")
elseif(NOT ACCEL_TORCH_CUDA)
  set(missing "a LibTorch with CUDA (LibTorch ${ACCEL_TORCH_VERSION} has none)")
elseif(ACCEL_TORCH_VERSION VERSION_LESS 2.7)
  set(missing "LibTorch 2.7 or later (the CUDA part uses 2.x's c10d::Backend)")
else()
  file(GLOB wheel_includes LIST_DIRECTORIES true "${ACCEL_TORCH_ROOT}/../nvidia/*/include")
  set(hints ${wheel_includes} "$ENV{CUDAToolkit_ROOT}/include" /usr/local/cuda/include)
  set(ACCEL_CUDA_INCLUDE_DIRS "")
  # crt/host_config.h: cuda_runtime.h includes it, and a wheel's nvidia/cu13/include may lack it
  # (it comes with the nvcc package); a toolkit beside the wheel then supplies it.
  foreach(header cuda_runtime_api.h crt/host_config.h nccl.h cublas_v2.h cusparse.h cusolverDn.h)
    string(MAKE_C_IDENTIFIER "ACCEL_HEADER_${header}" var)
    find_path(${var} ${header} HINTS ${hints} NO_DEFAULT_PATH)
    if(${var})
      list(APPEND ACCEL_CUDA_INCLUDE_DIRS "${${var}}")
    else()
      list(APPEND missing ${header})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES ACCEL_CUDA_INCLUDE_DIRS)
  if(missing)
    string(REPLACE ";" ", " missing "the headers ${missing} (tools/fetch_torch.sh unpacks a wheel's)")
  endif()
endif()

if(missing STREQUAL "")
  add_library(accel_cuda MODULE src/cuda/nccl_plugin.cpp)
  set_target_properties(accel_cuda PROPERTIES OUTPUT_NAME accel_cuda PREFIX lib
                        INSTALL_RPATH "${ACCEL_TORCH_LIB_DIR}")
  target_include_directories(accel_cuda PRIVATE src)
  target_include_directories(accel_cuda SYSTEM PRIVATE ${ACCEL_CUDA_INCLUDE_DIRS})
  target_compile_definitions(accel_cuda PRIVATE USE_C10D_NCCL USE_CUDA)
  # libtorch_cuda.so needs cuBLAS, cuDNN, ... at run time, which a CPU machine may lack: the linker
  # is not asked to resolve their symbols here (the module is only loaded where they exist).
  target_link_libraries(accel_cuda PRIVATE accel_torch
    "${ACCEL_TORCH_LIB_DIR}/libtorch_cuda.so" "${ACCEL_TORCH_LIB_DIR}/libc10_cuda.so")
  target_link_options(accel_cuda PRIVATE LINKER:--allow-shlib-undefined LINKER:--no-undefined)
  add_dependencies(accel accel_cuda)
  target_compile_definitions(accel_core PRIVATE ACCEL_CUDA_PLUGIN="libaccel_cuda.so")
  install(TARGETS accel_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  set(ACCEL_CUDA_BUILT TRUE)
  message(STATUS "CUDA/NCCL part: libaccel_cuda.so (headers from ${ACCEL_CUDA_INCLUDE_DIRS})")
elseif(ACCEL_CUDA STREQUAL "ON")
  message(FATAL_ERROR "ACCEL_CUDA=ON but the CUDA/NCCL part cannot be built: needs ${missing}")
else()
  message(STATUS "CUDA/NCCL part not built: needs ${missing}")
endif()
