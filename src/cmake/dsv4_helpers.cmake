# Project-wide CMake helpers.

# dsv4_target_warnings(<target>): strict warnings for project code (errors with DSV4_WERROR).
function(dsv4_target_warnings target)
  target_compile_options(
    ${target} PRIVATE $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wshadow -Wno-unused-parameter>
  )
  if(DSV4_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:C,CXX>:-Werror>)
  endif()
endfunction()

# dsv4_add_backend(<name> SOURCES ... LINK ... DEFINES ... [OUTPUT_NAME n] [NO_INSTALL]): a backend
# module (MODULE library libdsv4-<name>.so) in the module directory. It sees the public and module
# ABI headers and backends/common, exports only its entry symbol, and never links libdsv4.
function(dsv4_add_backend name)
  cmake_parse_arguments(
    ARG
    "NO_INSTALL"
    "OUTPUT_NAME;OUTPUT_DIR"
    "SOURCES;LINK;DEFINES"
    ${ARGN}
  )
  set(target dsv4-backend-${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  if(NOT ARG_OUTPUT_NAME)
    set(ARG_OUTPUT_NAME dsv4-${name})
  endif()
  if(NOT ARG_OUTPUT_DIR)
    set(ARG_OUTPUT_DIR ${DSV4_OUTPUT_MODULEDIR})
  endif()
  set_target_properties(
    ${target}
    PROPERTIES OUTPUT_NAME ${ARG_OUTPUT_NAME}
               PREFIX lib
               LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIR}
  )
  target_include_directories(
    ${target} PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/backends/include
                      ${PROJECT_SOURCE_DIR}/backends
  )
  target_compile_definitions(${target} PRIVATE ${ARG_DEFINES})
  target_link_libraries(${target} PRIVATE ${ARG_LINK})
  if(NOT DSV4_SANITIZE)
    target_link_options(${target} PRIVATE -Wl,--no-undefined)
  endif()
  dsv4_target_warnings(${target})
  if(NOT ARG_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION ${DSV4_INSTALL_MODULEDIR} COMPONENT dsv4_runtime)
  endif()
endfunction()

# dsv4_install_rpath(<target>): an installed executable finds libdsv4 relative to itself
# ($ORIGIN/../lib), so the installed tree works wherever it is moved.
function(dsv4_install_rpath target)
  file(RELATIVE_PATH bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN/${bin_to_lib}")
endfunction()

# dsv4_module_abi_version(<var>): "major.minor" of the module ABI in dsv4_backend.h.
function(dsv4_module_abi_version var)
  file(STRINGS ${PROJECT_SOURCE_DIR}/backends/include/dsv4_backend.h lines
       REGEX "^#define DSV4_MODULE_ABI_(MAJOR|MINOR) "
  )
  foreach(part MAJOR MINOR)
    string(REGEX MATCH "DSV4_MODULE_ABI_${part} ([0-9]+)" match "${lines}")
    if(NOT match)
      message(FATAL_ERROR "dsv4_backend.h: DSV4_MODULE_ABI_${part} not found")
    endif()
    set(${part} ${CMAKE_MATCH_1})
  endforeach()
  set(${var}
      ${MAJOR}.${MINOR}
      PARENT_SCOPE
  )
endfunction()

# dsv4_pkg_config_paths(<prefix>): for .pc files in <libdir>/pkgconfig, <prefix>_PREFIX (the
# install prefix relative to ${pcfiledir}) and <prefix>_LIBDIR / <prefix>_INCLUDEDIR (relative to
# the prefix), so pkg-config answers for wherever the installed tree now lives.
function(dsv4_pkg_config_paths prefix)
  file(RELATIVE_PATH to_prefix ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
  file(RELATIVE_PATH to_lib ${CMAKE_INSTALL_PREFIX} ${CMAKE_INSTALL_FULL_LIBDIR})
  file(RELATIVE_PATH to_include ${CMAKE_INSTALL_PREFIX} ${CMAKE_INSTALL_FULL_INCLUDEDIR})
  set(${prefix}_PREFIX
      ${to_prefix}
      PARENT_SCOPE
  )
  set(${prefix}_LIBDIR
      ${to_lib}
      PARENT_SCOPE
  )
  set(${prefix}_INCLUDEDIR
      ${to_include}
      PARENT_SCOPE
  )
endfunction()
