# Cross-compiles for 64-bit ARM Android with the Android NDK (r23 or newer): a thin wrapper over the NDK's own
# toolchain file with this project's defaults.
#   ANDROID_NDK=/path/to/android-ndk-r27 cmake -S . -B build/android-arm64 -G Ninja \
#     -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/android-arm64.cmake -DPython_EXECUTABLE=$(which python)
#   cmake --build build/android-arm64      # lite_core, benchmark_lite, libmslite.so (no Python extension)
# The NDK comes from ANDROID_NDK (or -DANDROID_NDK=..., or ANDROID_NDK_HOME / ANDROID_NDK_ROOT); -DANDROID_ABI and
# -DANDROID_PLATFORM (and -DANDROID_STL) override the defaults below: arm64-v8a, API level 24 (Android 7.0),
# c++_static. Untested: the NDK is not a Debian package and is not downloaded here or in CI (docs/arm64.md); the
# emulated tests use the Linux build (aarch64-linux-gnu.cmake).
if(NOT ANDROID_NDK)
  foreach(var ANDROID_NDK ANDROID_NDK_HOME ANDROID_NDK_ROOT)
    if(DEFINED ENV{${var}} AND NOT "$ENV{${var}}" STREQUAL "")
      set(ANDROID_NDK "$ENV{${var}}")
      break()
    endif()
  endforeach()
endif()
if(NOT ANDROID_NDK)
  message(FATAL_ERROR "cmake/toolchains/android-arm64.cmake: the Android NDK was not found. Set ANDROID_NDK to its "
                      "directory (the one holding build/cmake/android.toolchain.cmake), e.g. "
                      "ANDROID_NDK=$HOME/Android/Sdk/ndk/27.2.12479018 cmake ...")
endif()
file(TO_CMAKE_PATH "${ANDROID_NDK}" ANDROID_NDK)
if(NOT EXISTS "${ANDROID_NDK}/build/cmake/android.toolchain.cmake")
  message(FATAL_ERROR "cmake/toolchains/android-arm64.cmake: ANDROID_NDK='${ANDROID_NDK}' has no "
                      "build/cmake/android.toolchain.cmake; is it an NDK (r23 or newer)?")
endif()
# The NDK's toolchain file runs again for every try_compile project: pass the NDK on to them.
set(ENV{ANDROID_NDK} "${ANDROID_NDK}")
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES ANDROID_NDK)

if(NOT ANDROID_ABI)
  set(ANDROID_ABI arm64-v8a)
endif()
if(NOT ANDROID_PLATFORM)
  set(ANDROID_PLATFORM android-24)
endif()
if(NOT ANDROID_STL)
  set(ANDROID_STL c++_static)   # benchmark_lite and libmslite.so carry their C++ library: nothing else to push
endif()
include("${ANDROID_NDK}/build/cmake/android.toolchain.cmake")
