"""moesim's PEP 517 build backend: `pip install .` builds the Python module with CMake and packs it as a wheel.

Only the standard library: pip installs nothing to run it (pyproject.toml's requires is empty), so a clone
installs without a network. build_wheel configures the tree in MOESIM_PIP_BUILD_DIR (default build-pip/ in the
clone, kept so that a second install rebuilds only what changed; ccache serves the rest) for the interpreter that
runs pip (-DPython_EXECUTABLE), builds the moesim_python target alone (no tests, CUDA only with MOESIM_CUDA=ON),
and writes a wheel of python/moesim/*.py and the built _core module (and libmoesim_cuda.so beside it when CUDA
was built); MOESIM_PIP_CMAKE_ARGS adds configure arguments. build_sdist packs the tracked sources. Errors name
the command that failed and exit through pip.
Covered by scripts/pip-check.sh (a fresh virtual environment, `pip install .`, `import moesim` elsewhere).
"""
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(moesim VERSION ([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("moesim_build: CMakeLists.txt: expected `project(moesim VERSION X.Y.Z ...)`")
    return m.group(1)


def _tag():
    impl = "cp" if sys.implementation.name == "cpython" else sys.implementation.name[:2]
    py = f"{impl}{sys.version_info.major}{sys.version_info.minor}"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return py, py, plat


def _metadata():
    return (f"Metadata-Version: 2.1\nName: moesim\nVersion: {_version()}\n"
            "Summary: Mixture-of-experts routing balance and its cost on GPUs: the moesim library from Python\n"
            "Requires-Python: >=3.9\nRequires-Dist: numpy\n")


def _run(cmd, **kw):
    print("moesim_build: " + " ".join(cmd), flush=True)
    try:
        subprocess.run(cmd, check=True, **kw)
    except FileNotFoundError:
        raise RuntimeError(f"moesim_build: {cmd[0]} not found: install it (scripts/setup.sh installs what moesim needs)")
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"moesim_build: `{' '.join(cmd)}` failed with exit code {e.returncode}")


def _build_module():
    build = os.environ.get("MOESIM_PIP_BUILD_DIR") or os.path.join(ROOT, "build-pip")
    cuda = os.environ.get("MOESIM_CUDA", "OFF")
    cmake = shutil.which("cmake")
    if not cmake:
        raise RuntimeError("moesim_build: cmake not found: install it (Debian: apt-get install cmake; scripts/setup.sh)")
    configure = [cmake, "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DMOESIM_BUILD_TESTS=OFF",
                 "-DMOESIM_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}", f"-DMOESIM_CUDA={cuda}"]
    # More configure arguments, e.g. scripts/build.sh's -DMOESIM_WERROR=ON, so that ccache serves what it compiled.
    configure += os.environ.get("MOESIM_PIP_CMAKE_ARGS", "").split()
    _run(configure)
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        cache = f.read()
    if "MOESIM_HAS_PYTHON" in cache and not re.search(r"^MOESIM_HAS_PYTHON:\w+=ON$", cache, re.M):
        raise RuntimeError("moesim_build: CMake did not find pybind11 and the Python headers for " + sys.executable +
                           ": install pybind11-dev and python3-dev (scripts/setup.sh)")
    jobs = os.environ.get("MOESIM_PIP_JOBS") or str(os.cpu_count() or 2)
    _run([cmake, "--build", build, "--target", "moesim_python", "-j", jobs])
    package = os.path.join(build, "python", "moesim")
    cores = [f for f in os.listdir(package) if f.startswith("_core") and f.endswith(".so")]
    if len(cores) != 1:
        raise RuntimeError(f"moesim_build: expected one built _core module in {package}, found {cores}")
    extra = []
    cuda_lib = os.path.join(build, "libmoesim_cuda.so")
    if os.path.exists(cuda_lib):
        extra.append(("moesim/libmoesim_cuda.so", cuda_lib))
    return [(f"moesim/{cores[0]}", os.path.join(package, cores[0]))] + extra


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = [(f"moesim/{f}", os.path.join(ROOT, "python", "moesim", f))
             for f in sorted(os.listdir(os.path.join(ROOT, "python", "moesim"))) if f.endswith(".py")]
    files += _build_module()
    version = _version()
    py, abi, plat = _tag()
    dist_info = f"moesim-{version}.dist-info"
    name = f"moesim-{version}-{py}-{abi}-{plat}.whl"
    wheel_text = f"Wheel-Version: 1.0\nGenerator: moesim_build\nRoot-Is-Purelib: false\nTag: {py}-{abi}-{plat}\n"
    records = []
    path = os.path.join(wheel_directory, name)
    with zipfile.ZipFile(path + ".part", "w", zipfile.ZIP_DEFLATED) as z:
        for arc, src in files:
            with open(src, "rb") as f:
                data = f.read()
            info = zipfile.ZipInfo(arc)
            info.external_attr = (0o755 if arc.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            records.append(_record_line(arc, data))
        for arc, text in ((f"{dist_info}/METADATA", _metadata()), (f"{dist_info}/WHEEL", wheel_text),
                          (f"{dist_info}/top_level.txt", "moesim\n")):
            z.writestr(arc, text)
            records.append(_record_line(arc, text.encode()))
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerows(records + [[f"{dist_info}/RECORD", "", ""]])
        z.writestr(f"{dist_info}/RECORD", out.getvalue())
    os.replace(path + ".part", path)  # never half a wheel
    return name


def build_sdist(sdist_directory, config_settings=None):
    version = _version()
    base = f"moesim-{version}"
    try:
        listed = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], check=True, capture_output=True).stdout
        paths = [p for p in listed.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        raise RuntimeError("moesim_build: build_sdist packs the files git tracks: run it in a git clone")
    name = f"{base}.tar.gz"
    path = os.path.join(sdist_directory, name)
    with tarfile.open(path + ".part", "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for p in paths:
            full = os.path.join(ROOT, p)
            if os.path.isfile(full):
                tar.add(full, arcname=f"{base}/{p}", recursive=False)
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    os.replace(path + ".part", path)
    return name
