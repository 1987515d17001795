# hoplite-pc.cmake - runs at install time (install(CODE) in CMakeLists.txt
# sets the HPL_PC_* variables, then includes this file).
#
# The prefix a build installs into is only known then: `cmake --install
# build --prefix P` must give a hoplite.pc that says P. So hoplite.pc.in is
# filled in here, from CMAKE_INSTALL_PREFIX as the install sees it (DESTDIR
# is not part of it: a staged install names the final prefix), and put in
# place with file(INSTALL), which honours DESTDIR and lists the file in
# install_manifest.txt like any other.
#
# Inputs: HPL_PC_TEMPLATE (hoplite.pc.in), HPL_PC_WORK (a scratch file in
# the build tree), HPL_PC_VERSION, and the GNUInstallDirs directories
# HPL_PC_LIBDIR_REL, HPL_PC_INCLUDEDIR_REL, HPL_PC_BINDIR_REL (relative to the
# prefix, or absolute).

foreach(d LIBDIR INCLUDEDIR BINDIR)
  if(IS_ABSOLUTE "${HPL_PC_${d}_REL}")
    set(HPL_PC_${d} "${HPL_PC_${d}_REL}")
  else()
    set(HPL_PC_${d} "\${prefix}/${HPL_PC_${d}_REL}")
  endif()
endforeach()
set(HPL_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
if(IS_ABSOLUTE "${HPL_PC_LIBDIR_REL}")
  set(hpl_pc_dest "${HPL_PC_LIBDIR_REL}/pkgconfig")
else()
  set(hpl_pc_dest "${CMAKE_INSTALL_PREFIX}/${HPL_PC_LIBDIR_REL}/pkgconfig")
endif()

configure_file("${HPL_PC_TEMPLATE}" "${HPL_PC_WORK}/hoplite.pc" @ONLY)
file(INSTALL DESTINATION "${hpl_pc_dest}" TYPE FILE FILES "${HPL_PC_WORK}/hoplite.pc")
# the scratch copy is not left behind (a root install would leave a file
# the next unprivileged one cannot overwrite)
file(REMOVE_RECURSE "${HPL_PC_WORK}")
