# Chooses the LibTorch libaccel builds against, with one switch:
#
#   -DACCEL_TORCH=        (empty, the default) the system's LibTorch through find_package(Torch):
#                         Debian's libtorch-dev 1.13.1.
#   -DACCEL_TORCH=<path>  any of: a libtorch archive unpacked or an install prefix (include/torch,
#                         lib/libtorch_cpu.so); a `torch` wheel unpacked (the directory holding torch/,
#                         or torch/ itself); a virtual environment with torch installed.
#
# Every line ends in one interface target, accel_torch, and these variables:
#   ACCEL_TORCH_VERSION   e.g. 2.11.0, or 1.13.0 (what Debian's 1.13.1 headers say)
#   ACCEL_TORCH_INCLUDE_DIRS  its headers (for code that needs only its version macros)
#   ACCEL_TORCH_LIB_DIR   where libtorch_cpu.so is (an rpath for what we install)
#   ACCEL_TORCH_SYSTEM_BLAS  TRUE when it calls the system's libblas.so.3 (Debian's does)
#   ACCEL_TORCH_CUDA      TRUE when that LibTorch carries CUDA (libtorch_cuda.so beside it)
#
# A path is not given to find_package(Torch): the wheel's TorchConfig.cmake is a CUDA build's and
# stops without a CUDA toolkit (pytorch#73427). Its targets are simple enough to declare here.

set(ACCEL_TORCH "" CACHE PATH
    "LibTorch to build against: empty for the system's; else a prefix, a libtorch archive, an unpacked torch wheel or a virtual environment")

function(_accel_torch_root path out)
  set(candidates "${path}" "${path}/torch")
  file(GLOB venv_torch LIST_DIRECTORIES true "${path}/lib/python3*/site-packages/torch")
  list(APPEND candidates ${venv_torch})
  foreach(dir IN LISTS candidates)
    if(EXISTS "${dir}/include/torch/csrc/api/include/torch/version.h" AND EXISTS "${dir}/lib/libtorch_cpu.so")
      get_filename_component(dir "${dir}" REALPATH)
      set(${out} "${dir}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR
    "ACCEL_TORCH=${path} holds no LibTorch: looked for include/torch/csrc/api/include/torch/version.h "
    "and lib/libtorch_cpu.so in ${candidates} (a libtorch archive, an unpacked torch wheel, or a "
    "virtual environment with torch installed; tools/fetch_torch.sh unpacks one under build/)")
endfunction()

function(_accel_torch_version version_h out)
  file(STRINGS "${version_h}" lines REGEX "#define TORCH_VERSION_(MAJOR|MINOR|PATCH) ")
  foreach(line IN LISTS lines)
    string(REGEX MATCH "TORCH_VERSION_(MAJOR|MINOR|PATCH) ([0-9]+)" _ "${line}")
    set(v_${CMAKE_MATCH_1} ${CMAKE_MATCH_2})
  endforeach()
  set(${out} "${v_MAJOR}.${v_MINOR}.${v_PATCH}" PARENT_SCOPE)
endfunction()

add_library(accel_torch INTERFACE)

if(ACCEL_TORCH STREQUAL "")
  find_package(Torch REQUIRED)
  target_link_libraries(accel_torch INTERFACE ${TORCH_LIBRARIES})
  target_compile_options(accel_torch INTERFACE ${TORCH_CXX_FLAGS})
  set(ACCEL_TORCH_INCLUDE_DIRS ${TORCH_INCLUDE_DIRS})
  # TorchConfigVersion.cmake says 1.13.0 for Debian's 1.13.1: the header is right.
  find_file(version_h torch/version.h PATHS ${TORCH_INCLUDE_DIRS} PATH_SUFFIXES torch/csrc/api/include NO_DEFAULT_PATH)
  _accel_torch_version("${version_h}" ACCEL_TORCH_VERSION)
  set(ACCEL_TORCH_LIB_DIR "")
  set(ACCEL_TORCH_CUDA FALSE)
  if(TARGET torch_cuda)
    set(ACCEL_TORCH_CUDA TRUE)
  endif()
else()
  _accel_torch_root("${ACCEL_TORCH}" root)
  # From 2.10 on the macros live in torch/headeronly/version.h, which version.h includes.
  set(version_h "${root}/include/torch/headeronly/version.h")
  if(NOT EXISTS "${version_h}")
    set(version_h "${root}/include/torch/csrc/api/include/torch/version.h")
  endif()
  _accel_torch_version("${version_h}" ACCEL_TORCH_VERSION)
  set(ACCEL_TORCH_ROOT "${root}")
  set(ACCEL_TORCH_LIB_DIR "${root}/lib")

  # Our other dependencies (yaml-cpp, the C++ runtime) use the C++11 string ABI; a LibTorch
  # built with the old one cannot link with them. Every Linux wheel from 2.7 on uses the new one.
  set(abi "")
  file(GLOB torch_configs "${root}/share/cmake/Torch/TorchConfig.cmake")
  if(torch_configs)
    file(STRINGS "${torch_configs}" abi_lines REGEX "_GLIBCXX_USE_CXX11_ABI=[01]")
    string(REGEX MATCH "_GLIBCXX_USE_CXX11_ABI=([01])" _ "${abi_lines}")
    set(abi "${CMAKE_MATCH_1}")
  endif()
  if(abi STREQUAL "0")
    message(FATAL_ERROR
      "LibTorch ${ACCEL_TORCH_VERSION} at ${root} uses the pre-C++11 string ABI "
      "(_GLIBCXX_USE_CXX11_ABI=0) and cannot link with the system's C++ libraries: use torch 2.7 "
      "or later (every Linux wheel since uses the C++11 ABI) or a cxx11-abi libtorch archive")
  endif()
  if(ACCEL_TORCH_VERSION VERSION_LESS 2.7 AND NOT ACCEL_TORCH_VERSION MATCHES "^1[.]13[.]")
    message(WARNING "LibTorch ${ACCEL_TORCH_VERSION} is neither 1.13 nor 2.7 or later, the lines libaccel is tested against")
  endif()

  # A wheel finds CUDA's libraries through $ORIGIN/../../nvidia/*/lib; in 2.11 (at least) even
  # libtorch_cpu.so needs libcudart and libcupti. The linker must see them to check symbols.
  set(link_dirs "${root}/lib")
  file(GLOB nvidia_libs LIST_DIRECTORIES true "${root}/../nvidia/*/lib")
  foreach(dir IN LISTS nvidia_libs)
    get_filename_component(dir "${dir}" REALPATH)
    list(APPEND link_dirs "${dir}")
  endforeach()
  list(JOIN link_dirs ":" link_path)

  set(ACCEL_TORCH_INCLUDE_DIRS "${root}/include" "${root}/include/torch/csrc/api/include")
  target_include_directories(accel_torch SYSTEM INTERFACE ${ACCEL_TORCH_INCLUDE_DIRS})
  target_link_libraries(accel_torch INTERFACE "${root}/lib/libtorch_cpu.so" "${root}/lib/libc10.so")
  target_link_options(accel_torch INTERFACE "LINKER:-rpath-link,${link_path}")
  target_compile_definitions(accel_torch INTERFACE
    _GLIBCXX_USE_CXX11_ABI=1 USE_DISTRIBUTED USE_C10D_GLOO)
  set(ACCEL_TORCH_CUDA FALSE)
  if(EXISTS "${root}/lib/libtorch_cuda.so")
    set(ACCEL_TORCH_CUDA TRUE)
  endif()
endif()

# Debian's LibTorch calls the system's BLAS (libblas.so.3, an alternative tools/setup.sh points at
# OpenBLAS's OpenMP build); the wheels carry MKL inside libtorch_cpu.so and load no libblas.
set(ACCEL_TORCH_SYSTEM_BLAS FALSE)
if(ACCEL_TORCH_LIB_DIR)
  set(torch_cpu_so "${ACCEL_TORCH_LIB_DIR}/libtorch_cpu.so")
else()
  get_target_property(torch_cpu_so torch_cpu LOCATION)
endif()
execute_process(COMMAND readelf -d "${torch_cpu_so}" OUTPUT_VARIABLE torch_cpu_dynamic ERROR_QUIET)
if(torch_cpu_dynamic MATCHES "NEEDED[^\n]*\\[libblas\\.so")
  set(ACCEL_TORCH_SYSTEM_BLAS TRUE)
endif()

# The 2.x line's ProcessGroupGloo.hpp includes gloo's headers, which no wheel ships. Only its
# declarations are needed: every gloo object in it is held through a pointer and we call nothing
# of gloo's inline code (runtime/compat/gloo_group.cpp), so Debian's libgloo-dev serves for that
# one file. It is never linked: the gloo that runs is the one inside libtorch_cpu.so.
find_path(ACCEL_GLOO_INCLUDE_DIR gloo/rendezvous/store.h)
if(NOT ACCEL_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "gloo's headers (gloo/rendezvous/store.h) were not found: install libgloo-dev")
endif()
# Named only when elsewhere than the compiler's own path (-isystem /usr/include would break
# libstdc++'s #include_next).
if(NOT ACCEL_GLOO_INCLUDE_DIR STREQUAL "/usr/include")
  target_include_directories(accel_torch SYSTEM INTERFACE "${ACCEL_GLOO_INCLUDE_DIR}")
endif()

message(STATUS "LibTorch ${ACCEL_TORCH_VERSION}: ${torch_cpu_so} (CUDA in it: ${ACCEL_TORCH_CUDA}; system BLAS: ${ACCEL_TORCH_SYSTEM_BLAS})")
