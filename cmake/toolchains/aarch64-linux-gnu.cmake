# Cross-compiles for 64-bit ARM Linux with Debian's cross toolchain (g++-aarch64-linux-gnu):
#   cmake -S . -B build/arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
# (./build.sh arm64 installs the packages and runs this). The runtime's kernels pick NEON / dot-product / FP16 / BF16 /
# I8MM builds at run time from getauxval(AT_HWCAP), so one binary serves every ARMv8 CPU.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(LITE_CROSS_TRIPLE aarch64-linux-gnu CACHE STRING "GNU triple of the cross toolchain")
set(CMAKE_C_COMPILER ${LITE_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${LITE_CROSS_TRIPLE}-g++)
set(CMAKE_FIND_ROOT_PATH /usr/${LITE_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Tests run the binaries under user-mode emulation (Debian's qemu-user), with the cross sysroot's loader.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/${LITE_CROSS_TRIPLE})
