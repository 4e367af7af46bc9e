# `cmake --install build [--prefix P]`: the SDK as a package other programs build against.
#   P/include/hypic/{kernels,runtime,dsl,sdk}/...   headers (included as "sdk/agent.h", as in this tree)
#   P/lib/libhypic_*.a                               the static libraries
#   P/lib/cmake/hypic/hypicConfig.cmake              find_package(hypic): targets hypic::sdk, hypic::runtime, ...
#   P/lib/pkgconfig/hypic.pc                         pkg-config --cflags --libs hypic
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(HYPIC_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/hypic)
set(HYPIC_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/hypic)

# Library targets and their names in the package (hypic::<name>), lowest first.
set(HYPIC_PACKAGE_LIBS hypic_base hypic_kernels hypic_text hypic_runtime hypic_backends hypic_dsl hypic_sdk)
if(HYPIC_CUDA)
  list(INSERT HYPIC_PACKAGE_LIBS 2 hypic_kernels_cuda)
  list(INSERT HYPIC_PACKAGE_LIBS 5 hypic_runtime_cuda)
endif()
foreach(lib IN LISTS HYPIC_PACKAGE_LIBS)
  string(REPLACE "hypic_" "" short ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${short})
  target_include_directories(${lib} PUBLIC $<INSTALL_INTERFACE:${HYPIC_INSTALL_INCLUDEDIR}>)
  add_library(hypic::${short} ALIAS ${lib})
endforeach()

install(TARGETS ${HYPIC_PACKAGE_LIBS} EXPORT hypicTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
set(_hypic_header_excludes)
if(NOT HYPIC_CUDA)
  set(_hypic_header_excludes PATTERN cuda EXCLUDE)
endif()
install(DIRECTORY kernels runtime dsl sdk DESTINATION ${HYPIC_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh" ${_hypic_header_excludes})
install(EXPORT hypicTargets NAMESPACE hypic:: DESTINATION ${HYPIC_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/hypicConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/hypicConfig.cmake INSTALL_DESTINATION ${HYPIC_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/hypicConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/hypicConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/hypicConfigVersion.cmake
        DESTINATION ${HYPIC_INSTALL_CMAKEDIR})

# pkg-config: every library, highest first as a static link needs, and the Debian packages' own .pc files.
set(HYPIC_PC_LIBS "")
list(REVERSE HYPIC_PACKAGE_LIBS)
foreach(lib IN LISTS HYPIC_PACKAGE_LIBS)
  string(APPEND HYPIC_PC_LIBS " -l${lib}")
endforeach()
list(REVERSE HYPIC_PACKAGE_LIBS)
set(HYPIC_PC_EXTRA_LIBS "")
if(HYPIC_CUDA)
  set(HYPIC_PC_EXTRA_LIBS "-L${CUDAToolkit_LIBRARY_DIR} -lcublasLt -lcublas -lcudart")
endif()
# Relocatable: the prefix is found from the .pc file's own place, so `cmake --install --prefix` anywhere works.
file(RELATIVE_PATH HYPIC_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(${CMAKE_CURRENT_LIST_DIR}/hypic.pc.in ${CMAKE_CURRENT_BINARY_DIR}/hypic.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/hypic.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
