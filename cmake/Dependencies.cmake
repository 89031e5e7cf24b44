# Every third-party package comes from Debian; scripts/install-deps.sh installs them. libtorch
# may also be a PyTorch 2.x install: -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;
# print(torch.utils.cmake_prefix_path)') (docs/gpu.md).
find_package(Torch REQUIRED)

# GPU support (docs/gpu.md): with a CUDA libtorch of version 2.9 or later, rannc-run and the
# profiler run on CUDA (torch_side/accelerator.cpp), and rannc-run uses NCCL when libtorch has it
# and nccl.h is found (runtime/nccl_group.cpp).
if(TARGET torch_cuda AND Torch_VERSION VERSION_GREATER_EQUAL 2.9)
  set(RANNC_CUDA_DEFAULT ON)
else()
  set(RANNC_CUDA_DEFAULT OFF)
endif()
option(RANNC_CUDA "run rannc-run and the profiler on CUDA GPUs (needs a CUDA libtorch >= 2.9)" ${RANNC_CUDA_DEFAULT})
set(RANNC_NCCL OFF)
if(RANNC_CUDA)
  get_target_property(_rannc_cuda_defs torch_cuda INTERFACE_COMPILE_DEFINITIONS)
  if(_rannc_cuda_defs MATCHES "USE_C10D_NCCL")
    # A pip wheel's NCCL headers are in site-packages/nvidia/*/include, beside torch/.
    get_filename_component(_rannc_site "${Torch_DIR}/../../../.." ABSOLUTE)
    file(GLOB _rannc_nccl_hints "${_rannc_site}/nvidia/*/include")
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_rannc_nccl_hints} ENV NCCL_INCLUDE_DIR)
    if(NCCL_INCLUDE_DIR)
      set(RANNC_NCCL ON)
    endif()
  endif()
  message(STATUS "rannc: GPU support on (libtorch ${Torch_VERSION}), NCCL ${RANNC_NCCL}")
endif()
# ProcessGroupGloo.hpp includes gloo's headers, which a pip wheel lacks: Debian's libgloo-dev,
# possibly unpacked under a CMAKE_PREFIX_PATH folder.
find_path(GLOO_INCLUDE_DIR gloo/rendezvous/store.h)
find_package(ONNX CONFIG REQUIRED)
# ONNX 1.17 (Debian 13) names its targets ONNX::onnx and ONNX::onnx_proto, 1.12 (Debian 12) onnx and
# onnx_proto: the plain names are the ones linked. The targets carry the ONNX_ML and ONNX_NAMESPACE
# definitions that 1.17's onnx/onnx_pb.h needs to include the ML protos.
foreach(_rannc_onnx onnx onnx_proto)
  if(NOT TARGET ${_rannc_onnx} AND TARGET ONNX::${_rannc_onnx})
    add_library(${_rannc_onnx} ALIAS ONNX::${_rannc_onnx})
  endif()
endforeach()
find_package(Protobuf REQUIRED)
find_package(OpenSSL REQUIRED)  # SHA-256 of model files
# .pt2 archives (support/zip_archive.h): Debian's libminizip-dev, found without pkg-config so that
# .deb files unpacked into a folder on CMAKE_PREFIX_PATH serve as well (docs/gpu.md).
find_path(MINIZIP_INCLUDE_DIR minizip/unzip.h REQUIRED)
find_library(MINIZIP_LIBRARY minizip REQUIRED)
add_library(rannc_minizip INTERFACE IMPORTED)
target_include_directories(rannc_minizip INTERFACE "${MINIZIP_INCLUDE_DIR}/minizip")
target_link_libraries(rannc_minizip INTERFACE "${MINIZIP_LIBRARY}")
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json 3.11 CONFIG REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)  # rannc-run: rank, rendezvous address, job teardown

find_path(METIS_INCLUDE_DIR metis.h REQUIRED)
find_library(METIS_LIBRARY metis REQUIRED)
add_library(METIS::METIS UNKNOWN IMPORTED)
set_target_properties(METIS::METIS PROPERTIES
  IMPORTED_LOCATION ${METIS_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${METIS_INCLUDE_DIR})

if(BUILD_TESTING OR NOT DEFINED BUILD_TESTING)
  # Catch2 2 (Debian 12) or 3 (Debian 13, whose <catch2/catch.hpp> is tests/catch2_compat's).
  find_package(Catch2 CONFIG REQUIRED)
endif()

# Precompiled torch headers: each translation unit that includes torch spends most of its 20-50 s
# parsing the same headers; one precompiled set per library that has several such units parses
# them once (docs/testing.md gives the build times). Off for a compiler that mishandles them.
option(RANNC_PRECOMPILE_TORCH "precompile the torch headers of the plugin and the runtime" ON)
function(rannc_precompile_torch_headers target)
  if(RANNC_PRECOMPILE_TORCH)
    target_precompile_headers(${target} PRIVATE <torch/script.h> ${ARGN})
  endif()
endfunction()
