# Every third-party package comes from Debian; scripts/install-deps.sh installs them.
find_package(Torch REQUIRED)
find_package(ONNX CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(OpenSSL REQUIRED)  # SHA-256 of model files
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
  find_package(Catch2 2 CONFIG REQUIRED)
endif()
