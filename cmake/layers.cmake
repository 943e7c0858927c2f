# The layers of libbspa (docs/design.md §3): one OBJECT library per folder, each compiled with
# a single include directory, its "view": a folder under the build tree holding links to the
# source folders the layer may use and to nothing else. Sources include repository-relative
# paths ("cache/pool.hpp"), so an #include across the layering (cache/ including a kernels/
# header, kernels/ including cache/, either including capi/) finds no file and fails to build.
# tests/layering checks that it does.
#
#   layer     may include
#   common    common
#   cache     common cache
#   kernels   common kernels
#   capi      common cache kernels capi (and the public header)
set(BSPA_LAYER_VIEWS ${PROJECT_BINARY_DIR}/layers CACHE INTERNAL "the include views of the layers")

# bspa_layer_view(LAYER FOLDER...): the view of LAYER with links to the FOLDERs.
function(bspa_layer_view layer)
  set(_view ${BSPA_LAYER_VIEWS}/${layer})
  file(MAKE_DIRECTORY ${_view})
  foreach(_folder IN LISTS ARGN)
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${_folder} ${_view}/${_folder} SYMBOLIC)
  endforeach()
endfunction()
bspa_layer_view(common common)
bspa_layer_view(cache common cache)
bspa_layer_view(kernels common kernels)
bspa_layer_view(capi common cache kernels capi)

# bspa_layer_objects(TARGET LAYER SOURCE...): an OBJECT library of libbspa compiled against
# LAYER's view, with the flags every part of the library shares.
function(bspa_layer_objects target layer)
  add_library(${target} OBJECT ${ARGN})
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${target} PRIVATE ${BSPA_LAYER_VIEWS}/${layer})
  target_compile_definitions(${target} PRIVATE BSPA_BUILDING_LIBRARY $<$<BOOL:${BSPA_HAVE_CUDA}>:BSPA_HAVE_CUDA>)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
  if(BSPA_HAVE_CUDA)
    # Headers only (cuda_runtime.h); libbspa itself links the static runtime.
    target_include_directories(${target} SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  endif()
endfunction()
