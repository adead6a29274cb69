# `cpack -G DEB` in a build tree: one Debian package, dmidx, of everything
# `cmake --install` installs (the static library, the headers, the CMake
# package config, dmidx.pc, the tools, LICENSE and NOTICE), under /usr.
#
# Depends is what dpkg-shlibdeps finds the tools link (libibverbs1,
# libmemcached11, libboost-context1.74.0, libstdc++6, ...) plus what an engine
# linking the static library needs: the -dev packages of its dependencies
# (their link-time .so names, and the .pc files and CMake configs that
# dmidx.pc and dmidxConfig.cmake ask for) and pkg-config, which
# dmidxConfig.cmake finds rdma-core and libmemcached with.

set(DMIDX_PACKAGE_MAINTAINER "The dmidx Authors" CACHE STRING
  "Maintainer field of the Debian package (\"Name <email>\")")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dmidx)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "The dmidx Authors")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "range indexes for disaggregated memory over one-sided RDMA")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${DMIDX_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The long description; CPack puts the summary above it.
set(dmidx_debian_contents
"This package holds the static library, its headers, its CMake package
config and pkg-config file")
if(DMIDX_WITH_VERBS)
  string(APPEND dmidx_debian_contents ", and the tools: dmidx-memnode (the
memory-node daemon), dmidx-cluster-check, and the YCSB bench dmidx-ycsb
with dmidx-ycsb-plot")
endif()
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
"dmidx is a C++20 library of range indexes for disaggregated memory: a
Sherman-style B+tree and a SMART-style adaptive radix tree, reached over
one-sided RDMA verbs (rdma-core), an in-process fabric or a virtual-time
simulator.
.
${dmidx_debian_contents}.")

set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(dmidx_debian_depends libboost-context-dev)
if(DMIDX_WITH_VERBS)
  list(APPEND dmidx_debian_depends libibverbs-dev libmemcached-dev pkg-config)
  # The plot script's Python; a verbs device needs its provider; a cluster
  # needs a memcached somewhere.
  set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-matplotlib, ibverbs-providers")
  set(CPACK_DEBIAN_PACKAGE_SUGGESTS "memcached")
endif()
string(JOIN ", " CPACK_DEBIAN_PACKAGE_DEPENDS ${dmidx_debian_depends})

include(CPack)
