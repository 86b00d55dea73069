"""Where the installed C++ SDK lives (the headers, libmslite.so, the CMake package and the pkg-config file that the
wheel carries in lite/sdk):

    cmake -Dmslite_DIR="$(python -m lite.sdk --cmake-dir)" ...      # then find_package(mslite), target mslite::lite
    PKG_CONFIG_PATH="$(python -m lite.sdk --pkgconfig-dir)" pkg-config --cflags --libs mslite
"""
from __future__ import annotations

import argparse
import os


def sdk_dir() -> str:
    """The SDK's prefix (include/, lib/); beside the compiled extension, which an editable install keeps in
    site-packages."""
    from . import _lite
    path = os.path.join(os.path.dirname(os.path.abspath(_lite.__file__)), "sdk")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no C++ SDK at {path}: this installation of lite was built without it")
    return path


def cmake_dir() -> str:
    return os.path.join(sdk_dir(), "lib", "cmake", "mslite")


def pkgconfig_dir() -> str:
    return os.path.join(sdk_dir(), "lib", "pkgconfig")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--prefix", action="store_true", help="the SDK's prefix (include/, lib/)")
    group.add_argument("--cmake-dir", action="store_true", help="the directory to give find_package as mslite_DIR")
    group.add_argument("--pkgconfig-dir", action="store_true", help="the directory to add to PKG_CONFIG_PATH")
    a = ap.parse_args()
    print(sdk_dir() if a.prefix else cmake_dir() if a.cmake_dir else pkgconfig_dir())


if __name__ == "__main__":
    main()
