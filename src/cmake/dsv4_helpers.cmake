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
    install(TARGETS ${target} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/dsv4/backends)
  endif()
endfunction()
