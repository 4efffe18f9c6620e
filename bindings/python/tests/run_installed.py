#!/usr/bin/python3
"""Runs Python (the test suite, an example) against an installed copy of the dsv4 package, from a
fresh directory outside the source tree, with no DSV4_LIBRARY or PYTHONPATH pointing at the
sources. The ctests python_installed, python_pip_venv and python_vllm_step use it.

  run_installed.py --mode cmake --build BUILD [--cmake CMAKE] -- ARGS...
      `cmake --install BUILD --prefix <tmp>/prefix`; python3 ARGS with PYTHONPATH = the
      installed package's directory (the package finds libdsv4 through its generated _paths.py).
  run_installed.py --mode pip --build BUILD -- ARGS...
      python3 -m venv --system-site-packages --without-pip <tmp>/venv (the system pip serves it);
      `pip install --no-index --no-build-isolation` of a copy of bindings/python with
      DSV4_LIBRARY = BUILD's library (the path the package then records); <tmp>/venv/bin/python
      ARGS without DSV4_LIBRARY.

Environment kept: DSV4_PYREF_LIBRARY (the tests' float64 reference) and DSV4_TEST_SEED.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bindings/python


def run(command, env, cwd):
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, env=env, cwd=cwd).returncode


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("DSV4_LIBRARY", "PYTHONPATH", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def install_cmake(args, work, env):
    prefix = os.path.join(work, "prefix")
    if run([args.cmake, "--install", args.build, "--prefix", prefix], env, work):
        sys.exit("cmake --install failed")
    packages = glob.glob(os.path.join(prefix, "lib", "python*", "*-packages", "dsv4"))
    if len(packages) != 1:
        sys.exit("expected one installed dsv4 package under %s, found %r" % (prefix, packages))
    env["PYTHONPATH"] = os.path.dirname(packages[0])
    env["DSV4_EXPECT_INSTALLED"] = prefix
    return sys.executable


def install_pip(args, work, env):
    venv = os.path.join(work, "venv")
    if run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], env,
           work):
        sys.exit("python3 -m venv failed (Debian: python3-venv)")
    source = os.path.join(work, "source")  # pip builds in the tree it installs: not ours
    shutil.copytree(SOURCE, source, ignore=shutil.ignore_patterns(
        "__pycache__", "build", "*.egg-info", "_paths.py"))
    library = os.path.join(args.build, "lib", "libdsv4.so.0")
    python = os.path.join(venv, "bin", "python")
    pip_env = dict(env, DSV4_LIBRARY=library, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    if run([python, "-m", "pip", "install", "--quiet", "--no-index", "--no-build-isolation",
            "--no-deps", source], pip_env, work):
        sys.exit("pip install failed")
    env["DSV4_EXPECT_INSTALLED"] = venv
    return python


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("cmake", "pip"), required=True)
    parser.add_argument("--build", required=True, help="the CMake build directory")
    parser.add_argument("--cmake", default="cmake")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.args[1:] if args.args[:1] == ["--"] else args.args
    args.build = os.path.abspath(args.build)
    work = tempfile.mkdtemp(prefix="dsv4-python-%s-" % args.mode)
    try:
        env = clean_env()
        python = (install_cmake if args.mode == "cmake" else install_pip)(args, work, env)
        cwd = os.path.join(work, "run")
        os.mkdir(cwd)
        return run([python] + command, env, cwd)
    finally:
        if args.keep:
            print("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
