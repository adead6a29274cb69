# dmidx.pc: the flags an engine that does not use CMake builds with
# (`pkg-config --cflags --libs dmidx`), derived from the usage requirements of
# the library target, so the .pc and the CMake package config cannot disagree:
#
#   - a PkgConfig::NAME dependency becomes the module pkg_check_modules found
#     (Requires);
#   - an imported library (Boost::context) becomes -L<dir> -l<name>, -L left
#     out for the compiler's own link directories;
#   - Threads::Threads becomes the threads flag CMake found (none on glibc
#     2.34 and later, whose libc has the pthread functions), a plain library
#     name (m, dl) -l<name>;
#   - a public compile feature cxx_std_NN becomes the compiler's -std option
#     (the public headers need C++20: <span>), public compile definitions
#     become -D.
#
# A static library needs its private dependencies at every link, so they go
# to Requires and Libs; a shared one needs them only when linked statically,
# so they go to Requires.private and Libs.private. Any other kind of
# dependency (a path, a generator expression, a target built here) stops the
# configure with an error: the .pc would be silently wrong.

# _dmidx_pc_fail(MESSAGE...): the configure error every unmapped case gives.
function(_dmidx_pc_fail)
  string(JOIN "" message ${ARGN})
  message(FATAL_ERROR "dmidx.pc (cmake/dmidxPkgConfig.cmake): ${message}")
endfunction()

# _dmidx_pc_location(TARGET OUT): the file an imported library links.
function(_dmidx_pc_location target out)
  get_target_property(configurations ${target} IMPORTED_CONFIGURATIONS)
  string(TOUPPER "${CMAKE_BUILD_TYPE}" build_type)
  if(build_type IN_LIST configurations)
    list(PREPEND configurations ${build_type})
  endif()
  foreach(configuration IN LISTS configurations)
    get_target_property(location ${target} IMPORTED_LOCATION_${configuration})
    if(location)
      set(${out} ${location} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  get_target_property(location ${target} IMPORTED_LOCATION)
  if(NOT location)
    _dmidx_pc_fail("imported library ${target} has no IMPORTED_LOCATION")
  endif()
  set(${out} ${location} PARENT_SCOPE)
endfunction()

# _dmidx_pc_link_terms(ITEM MODULES_VAR LIBS_VAR): appends to the lists named
# MODULES_VAR (pkg-config modules) and LIBS_VAR (linker flags) what linking
# ITEM needs, following an imported target's own link interface.
function(_dmidx_pc_link_terms item modules_var libs_var)
  set(modules ${${modules_var}})
  set(libs ${${libs_var}})
  if(item MATCHES "\\$<")
    _dmidx_pc_fail("cannot follow the generator expression '${item}' (link it under if() instead)")
  elseif(item STREQUAL "Threads::Threads")
    list(APPEND libs ${CMAKE_THREAD_LIBS_INIT})
  elseif(item MATCHES "^PkgConfig::(.+)$")
    set(module ${${CMAKE_MATCH_1}_MODULE_NAME})
    if(NOT module)
      _dmidx_pc_fail("${item} names no module found by pkg_check_modules(${CMAKE_MATCH_1} ...)")
    endif()
    list(APPEND modules ${module})
  elseif(TARGET ${item})
    get_target_property(imported ${item} IMPORTED)
    get_target_property(type ${item} TYPE)
    if(NOT imported)
      _dmidx_pc_fail("${item} is built by this project and not installed")
    endif()
    if(type MATCHES "^(SHARED|STATIC|UNKNOWN)_LIBRARY$")
      _dmidx_pc_location(${item} location)
      get_filename_component(directory ${location} DIRECTORY)
      get_filename_component(name ${location} NAME)
      if(NOT name MATCHES "^lib(.+)\\.(so|a)(\\.[0-9.]+)?$")
        _dmidx_pc_fail("${item} links ${location}, not a lib<name>.so or .a that -l finds")
      endif()
      if(NOT directory IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
        list(APPEND libs -L${directory})
      endif()
      list(APPEND libs -l${CMAKE_MATCH_1})
    elseif(NOT type STREQUAL "INTERFACE_LIBRARY")
      _dmidx_pc_fail("${item} is a ${type}, which a .pc cannot name")
    endif()
    get_target_property(links ${item} INTERFACE_LINK_LIBRARIES)
    foreach(link IN LISTS links)
      if(link)
        _dmidx_pc_link_terms(${link} modules libs)
      endif()
    endforeach()
  elseif(item MATCHES "^[A-Za-z0-9_+.-]+$")
    list(APPEND libs -l${item})
  else()
    _dmidx_pc_fail("'${item}' is neither a target nor a library name")
  endif()
  set(${modules_var} ${modules} PARENT_SCOPE)
  set(${libs_var} ${libs} PARENT_SCOPE)
endfunction()

# _dmidx_pc_relative(DIR OUT): DIR (a GNUInstallDirs value) as the .pc writes
# it: under ${prefix} when relative, as it is when absolute.
function(_dmidx_pc_relative dir out)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "\${prefix}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

# _dmidx_pc_links(TARGET): sets PUBLIC_MODULES, PUBLIC_LIBS, PRIVATE_MODULES
# and PRIVATE_LIBS in the caller from TARGET's link libraries.
function(_dmidx_pc_links target)
  get_target_property(type ${target} TYPE)
  get_target_property(links ${target} LINK_LIBRARIES)
  get_target_property(interface ${target} INTERFACE_LINK_LIBRARIES)
  set(public_modules)
  set(public_libs)
  set(private_modules)
  set(private_libs)
  foreach(link IN LISTS links)
    # A static library's private dependencies are in its interface too, as
    # $<LINK_ONLY:...>; only a bare entry is public.
    if(link IN_LIST interface OR type STREQUAL "STATIC_LIBRARY")
      _dmidx_pc_link_terms(${link} public_modules public_libs)
    else()
      _dmidx_pc_link_terms(${link} private_modules private_libs)
    endif()
  endforeach()
  foreach(link IN LISTS interface)
    if(NOT link IN_LIST links AND NOT link MATCHES "^\\$<LINK_ONLY:")
      _dmidx_pc_fail("${target} has interface-only link item '${link}'")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES public_modules)
  list(REMOVE_DUPLICATES private_modules)
  foreach(list IN ITEMS public_modules public_libs private_modules private_libs)
    string(TOUPPER ${list} name)
    set(${name} ${${list}} PARENT_SCOPE)
  endforeach()
endfunction()

# _dmidx_pc_cflags(TARGET OUT): TARGET's public compile features and
# definitions as compiler flags.
function(_dmidx_pc_cflags target out)
  set(cflags)
  get_target_property(features ${target} INTERFACE_COMPILE_FEATURES)
  foreach(feature IN LISTS features)
    if(feature MATCHES "^cxx_std_([0-9]+)$")
      set(option ${CMAKE_CXX${CMAKE_MATCH_1}_STANDARD_COMPILE_OPTION})
      if(NOT option)
        _dmidx_pc_fail("${CMAKE_CXX_COMPILER_ID} has no option for ${feature}")
      endif()
      list(APPEND cflags ${option})
    elseif(feature)
      _dmidx_pc_fail("compile feature ${feature} has no compiler option")
    endif()
  endforeach()
  get_target_property(definitions ${target} INTERFACE_COMPILE_DEFINITIONS)
  foreach(definition IN LISTS definitions)
    if(definition MATCHES "\\$<")
      _dmidx_pc_fail("cannot follow the compile definition '${definition}'")
    elseif(definition)
      list(APPEND cflags -D${definition})
    endif()
  endforeach()
  get_target_property(options ${target} INTERFACE_COMPILE_OPTIONS)
  if(options)
    _dmidx_pc_fail("${target} has public compile options, which it does not map: ${options}")
  endif()
  set(${out} ${cflags} PARENT_SCOPE)
endfunction()

# dmidx_pkg_config(TARGET): writes ${PROJECT_BINARY_DIR}/dmidx.pc for the
# library TARGET and installs it to ${CMAKE_INSTALL_LIBDIR}/pkgconfig.
function(dmidx_pkg_config target)
  _dmidx_pc_links(${target})
  _dmidx_pc_cflags(${target} cflags)
  string(JOIN " " DMIDX_PC_REQUIRES ${PUBLIC_MODULES})
  string(JOIN " " DMIDX_PC_REQUIRES_PRIVATE ${PRIVATE_MODULES})
  string(JOIN " " DMIDX_PC_LIBS ${PUBLIC_LIBS})
  string(JOIN " " DMIDX_PC_LIBS_PRIVATE ${PRIVATE_LIBS})
  string(JOIN " " DMIDX_PC_CFLAGS ${cflags})

  get_target_property(type ${target} TYPE)
  string(REPLACE "_LIBRARY" "" DMIDX_PC_LIBRARY_TYPE "${type}")
  string(TOLOWER "${DMIDX_PC_LIBRARY_TYPE}" DMIDX_PC_LIBRARY_TYPE)
  get_target_property(DMIDX_PC_LIBRARY_NAME ${target} OUTPUT_NAME)
  if(NOT DMIDX_PC_LIBRARY_NAME)
    set(DMIDX_PC_LIBRARY_NAME ${target})
  endif()

  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    _dmidx_pc_fail("CMAKE_INSTALL_LIBDIR must be relative to the prefix, not ${CMAKE_INSTALL_LIBDIR}")
  endif()
  file(RELATIVE_PATH DMIDX_PC_PREFIX_FROM_PCFILEDIR
    "${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "${CMAKE_INSTALL_PREFIX}")
  string(REGEX REPLACE "/$" "" DMIDX_PC_PREFIX_FROM_PCFILEDIR "${DMIDX_PC_PREFIX_FROM_PCFILEDIR}")
  _dmidx_pc_relative("${CMAKE_INSTALL_LIBDIR}" DMIDX_PC_LIBDIR)
  _dmidx_pc_relative("${CMAKE_INSTALL_INCLUDEDIR}" DMIDX_PC_INCLUDEDIR)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/dmidx.pc.in ${PROJECT_BINARY_DIR}/dmidx.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/dmidx.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endfunction()
