"""The C++ SDK the package installs (issue 35): a project outside the tree finds it with find_package(mslite) (and
with pkg-config), builds against the public headers and libmslite.so, and runs a model through Model and
ModelParallelRunner with the same results as the Python API."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import lite.sdk
from model_zoo.tiny import small_cnn
from parity import convert, load

PROJECT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sdk_project")


@pytest.fixture(scope="module")
def model_and_input(tmp_path_factory):
    d = tmp_path_factory.mktemp("sdk")
    path = convert(small_cnn(), str(d))
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    x.tofile(d / "input.bin")
    return path, str(d / "input.bin"), load(path).predict([x])[0].get_data_to_numpy()


def test_sdk_layout():
    prefix = lite.sdk.sdk_dir()
    for rel in ("include/lite/model.h", "include/lite/model_parallel_runner.h", "include/lite/model_group.h",
                "lib/cmake/mslite/mslite-config.cmake", "lib/cmake/mslite/mslite-config-version.cmake",
                "lib/pkgconfig/mslite.pc"):
        assert os.path.isfile(os.path.join(prefix, rel)), rel
    assert any(f.startswith("libmslite.so") for f in os.listdir(os.path.join(prefix, "lib")))
    out = subprocess.run([sys.executable, "-m", "lite.sdk", "--cmake-dir"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == lite.sdk.cmake_dir()
    # Every include directory the exported target names exists (a stray one fails find_package on a clean machine).
    targets = open(os.path.join(lite.sdk.cmake_dir(), "mslite-targets.cmake")).read()
    line = next(ln for ln in targets.splitlines() if "INTERFACE_INCLUDE_DIRECTORIES" in ln)
    import_prefix = os.path.abspath(os.path.join(lite.sdk.cmake_dir(), *[".."] * 5))   # lite/sdk/lib/cmake/mslite
    for d in line.split('"')[1].split(";"):
        assert os.path.isdir(d.replace("${_IMPORT_PREFIX}", import_prefix)), d


def test_outside_project_with_find_package(model_and_input, tmp_path):
    model, inp, want = model_and_input
    src = tmp_path / "src"
    shutil.copytree(PROJECT, src)
    build = tmp_path / "build"
    cmake = shutil.which("cmake")
    subprocess.run([cmake, "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                    f"-Dmslite_DIR={lite.sdk.cmake_dir()}"], check=True, capture_output=True)
    subprocess.run([cmake, "--build", str(build)], check=True, capture_output=True)
    out_path = tmp_path / "out.bin"
    run = subprocess.run([str(build / "sdk_user"), model, inp, str(out_path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "lite 0.1.0" in run.stdout and "ok 2 workers" in run.stdout and "refused: invalid .ms file" in run.stdout
    np.testing.assert_array_equal(np.fromfile(out_path, np.float32).reshape(want.shape), want)


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="pkg-config is not installed")
def test_outside_project_with_pkg_config(model_and_input, tmp_path):
    model, inp, want = model_and_input
    env = {**os.environ, "PKG_CONFIG_PATH": lite.sdk.pkgconfig_dir()}
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mslite"], capture_output=True, text=True, env=env,
                           check=True).stdout.split()
    exe = tmp_path / "sdk_user"
    subprocess.run(["c++", "-O1", os.path.join(PROJECT, "main.cc"), "-o", str(exe), *flags, "-pthread"], check=True,
                   capture_output=True)
    run = subprocess.run([str(exe), model, inp, str(tmp_path / "out.bin")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    np.testing.assert_array_equal(np.fromfile(tmp_path / "out.bin", np.float32).reshape(want.shape), want)
