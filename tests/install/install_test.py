#!/usr/bin/env python3
"""Install, relocate and consume libdsv4 as a user would, with the README's own commands.

1. readme/install.sh: a library-only build of a copy of the source tree, installed into a
   temporary prefix (the README's /opt/dsv4), and the installed `dsv4 info` run from there (RPATH).
2. readme/module.sh: the out-of-tree example module built against that install's module SDK,
   installed into it and selected by name.
3. Consumers built against the install by CMake find_package (consumer/CMakeLists.txt,
   consumer/build-cmake.sh) and by pkg-config (consumer/build-pkg-config.sh), and run.
4. The prefix is moved. The installed `dsv4` still runs (RPATH $ORIGIN/../lib), finds its modules
   in the moved tree and nothing in the configured one, even when another module appears there;
   the consumers built before the move run against the moved library; consumers built afresh
   against the moved prefix build (relocatable pkg-config and CMake files) and run.
5. add_subdirectory (engine/CMakeLists.txt, engine/build.sh): only the library and its modules are
   built (no tests, benchmarks, examples, CLI, mutants or CUDA module, no -Werror); the engine is
   installed with libdsv4, the install is moved, and the engine still runs.
6. readme/cli.sh with the moved install's bin/ on PATH; readme/decode.py with the moved install's
   Python package, which finds the library relative to itself.

Every check is reported; the test fails if any did.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import readme_snippets  # noqa: E402

README_PREFIX = "/opt/dsv4"
README_ENGINE_PREFIX = "/opt/engine"


class Checks:
    def __init__(self):
        self.failed = []

    def record(self, name, ok, detail=""):
        print(f"{'PASS' if ok else 'FAIL'}: {name}" + (f" -- {detail}" if detail and not ok else ""),
              flush=True)
        if not ok:
            self.failed.append(name)
        return ok


def run(cmd, cwd, env, what):
    """Runs cmd; prints its output when it fails. Returns the CompletedProcess."""
    print(f"$ ({cwd}) {' '.join(str(c) for c in cmd)}", flush=True)
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"--- {what}: exit status {p.returncode}\n{p.stdout}\n{p.stderr}---", flush=True)
    return p


def copy_source(source, dest):
    """The source tree as the README's commands see it: the files git would commit (tracked or
    not ignored), or, outside a git checkout, everything but build directories."""
    p = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       cwd=source, capture_output=True)
    if p.returncode != 0:
        def ignore(directory, names):
            top = Path(directory) == source
            return [n for n in names if n == "__pycache__" or (top and n.startswith("build"))]
        shutil.copytree(source, dest, ignore=ignore, symlinks=True)
        return
    for name in p.stdout.decode().split("\0"):
        path = source / name
        if not name or not (path.is_file() or path.is_symlink()):
            continue  # deleted in the working tree
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest / name, follow_symlinks=False)


def write_snippet(snippets, title, directory, prefixes):
    """Writes README block `title` into directory/<its file name>, with the README's example
    prefixes replaced by this test's; returns the path."""
    text = snippets[title]
    for readme_path, real in prefixes.items():
        text = text.replace(readme_path, str(real))
    path = Path(directory) / Path(title).name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def run_script(script, cwd, env, what):
    return run(["bash", "-eo", "pipefail", script], cwd, env, what)


def module_paths(info_json):
    return [m["path"] for m in info_json.get("modules", [])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, type=Path, help="scratch directory (emptied)")
    parser.add_argument("--source", type=Path, default=REPO, help="libdsv4 source to install")
    parser.add_argument("--cc", default=os.environ.get("CC", "cc"))
    parser.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    args = parser.parse_args()
    source = args.source.resolve()
    work = args.work.resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    checks = Checks()
    snippets = readme_snippets.titled(REPO / "README.md")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSV4_", "PKG_CONFIG"))}
    # Unoptimised builds (CMAKE_BUILD_TYPE from the environment is CMake's default for the
    # commands that set none): this test is about installing, not speed.
    env.update(CC=args.cc, CXX=args.cxx, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2),
               CMAKE_BUILD_TYPE="Debug")
    if shutil.which("ninja"):
        env["CMAKE_GENERATOR"] = "Ninja"
    for var in ("CMAKE_PREFIX_PATH", "CMAKE_INSTALL_PREFIX", "LD_LIBRARY_PATH"):
        env.pop(var, None)

    src = work / "src"
    copy_source(source, src)
    prefix = work / "prefix"  # the README's /opt/dsv4, as configured
    moved = work / "moved"    # where the installed tree goes
    app_c = snippets["examples/c/readme_example.c"]

    # 1. The library-only build and install.
    script = write_snippet(snippets, "readme/install.sh", work / "scripts",
                           {README_PREFIX: prefix})
    p = run_script(script, src, env, "readme/install.sh")
    checks.record("library-only build and install, then dsv4 info (readme/install.sh)",
                  p.returncode == 0, p.stderr[-400:])
    if not (prefix / "lib" / "libdsv4.so.0").exists():
        return finish(checks, work)
    p = run([prefix / "bin" / "dsv4", "--version"], work, env, "installed dsv4")
    checks.record("the installed dsv4 runs (RPATH)", p.returncode == 0, p.stderr[-400:])
    pc = prefix / "lib" / "pkgconfig" / "dsv4.pc"
    checks.record("dsv4.pc has no absolute paths", pc.exists() and str(prefix) not in pc.read_text(),
                  pc.read_text() if pc.exists() else "missing")

    # 2. The example module against the install's module SDK.
    script = write_snippet(snippets, "readme/module.sh", work / "scripts", {README_PREFIX: prefix})
    p = run_script(script, src, env, "readme/module.sh")
    checks.record("example module built against the module SDK and selected (readme/module.sh)",
                  p.returncode == 0 and "selected: example" in p.stdout, p.stdout[-400:])

    # The same module through pkg-config's module SDK, found through --module-dir.
    pc_module = work / "module-pc"
    pc_module.mkdir()
    pc_env = dict(env, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    p = run(["sh", "-c", f"{args.cc} -std=c99 -shared -fPIC -Wl,--no-undefined "
             f"$(pkg-config --cflags dsv4-module) {REPO / 'examples/module/example_module.c'} "
             f"-o {pc_module / 'libdsv4-example.so'} -lm"], work, pc_env, "pkg-config module")
    q = run([prefix / "bin" / "dsv4", "--module-dir", pc_module, "--backend", "example",
             "--no-progress", "info"], work, env, "pkg-config module loaded")
    checks.record("example module built with pkg-config dsv4-module and loaded",
                  p.returncode == 0 and q.returncode == 0 and f"{pc_module}/libdsv4-example.so"
                  in q.stdout, p.stderr[-300:] + q.stdout[-300:])

    # 3. Consumers against the install.
    def build_consumers(tag, install):
        ok = {}
        d = work / f"consumer-cmake-{tag}"
        write_snippet(snippets, "consumer/CMakeLists.txt", d, {})
        (d / "app.c").write_text(app_c)
        script = write_snippet(snippets, "consumer/build-cmake.sh", d, {README_PREFIX: install})
        p = run_script(script, d, env, f"consumer/build-cmake.sh ({tag})")
        ok["cmake"] = checks.record(f"find_package consumer builds and runs against the {tag} "
                                    "install", p.returncode == 0, p.stderr[-400:])
        d = work / f"consumer-pc-{tag}"
        d.mkdir()
        (d / "app.c").write_text(app_c)
        script = write_snippet(snippets, "consumer/build-pkg-config.sh", d,
                               {README_PREFIX: install})
        p = run_script(script, d, env, f"consumer/build-pkg-config.sh ({tag})")
        ok["pkg-config"] = checks.record(f"pkg-config consumer builds and runs against the {tag} "
                                         "install", p.returncode == 0, p.stderr[-400:])
        return {"cmake": work / f"consumer-cmake-{tag}" / "build" / "app",
                "pkg-config": work / f"consumer-pc-{tag}" / "app"}

    before = build_consumers("installed", prefix)

    # 4. Move the installed tree.
    prefix.rename(moved)
    p = run([moved / "bin" / "dsv4", "--version"], work, env, "moved dsv4")
    checks.record("the moved dsv4 runs (RPATH relative to itself)", p.returncode == 0,
                  p.stderr[-400:])
    p = run([moved / "bin" / "dsv4", "--json", "--no-progress", "info"], work, env, "dsv4 info")
    info = json.loads(p.stdout) if p.returncode == 0 else {}
    paths = module_paths(info)
    names = sorted(m["name"] for m in info.get("modules", []))
    # cpu and example, plus the GPU modules the build found toolchains for: HIP wherever hipcc is
    # installed, OpenCL and Level Zero where their modules were built.
    backends = moved / "lib" / "dsv4" / "backends"
    own = ["cpu", "example"] + (["hip"] if shutil.which("hipcc") else [])
    own += [n for n in ("level-zero", "opencl") if (backends / f"libdsv4-{n}.so").exists()]
    checks.record("the moved install lists its own modules (cpu, example, any GPU module built) "
                  "and only those",
                  names == sorted(own) and all(x.startswith(f"{moved}/") for x in paths),
                  f"{names} {paths}")

    # The consumers built before the move, against the moved library; the loader's debug lines
    # name every directory it considers and every module it loads.
    run_env = dict(env, LD_LIBRARY_PATH=str(moved / "lib"), DSV4_LOG_LEVEL="debug")

    def loader_log(exe, what, **extra):
        p = run([exe], work, dict(run_env, **extra), what)
        return p.returncode == 0, p.stderr

    for how, exe in before.items():
        ok, log = loader_log(exe, f"{how} consumer after the move")
        checks.record(f"{how} consumer built before the move runs on the moved install's modules",
                      ok and f"backend cpu ({moved}/" in log, log[-600:])
        checks.record(f"{how} consumer: the loader does not consider the configured install "
                      "directory of a moved install", ok and f"{prefix}/" not in log, log[-600:])
        ok, log = loader_log(exe, how, DSV4_BACKEND="example")
        checks.record(f"{how} consumer runs on the example module of the moved install",
                      ok and f"backend example ({moved}/" in log, log[-600:])

    # Another install's module appears in the configured directory: never loaded.
    other = prefix / "lib" / "dsv4" / "backends"
    other.mkdir(parents=True)
    shutil.copy(moved / "lib" / "dsv4" / "backends" / "libdsv4-cpu.so", other / "libdsv4-other.so")
    ok, log = loader_log(before["cmake"], "another install's module")
    checks.record("a module in the configured install directory is not loaded by a moved install",
                  ok and f"{prefix}/" not in log, log[-600:])
    build_consumers("moved", moved)

    # The installed Python package finds the moved library relative to itself.
    packages = sorted(moved.glob("lib/python3*/*-packages"))
    if packages:
        d = work / "python"
        script = write_snippet(snippets, "readme/decode.py", d, {})
        p = run([sys.executable, script], d, dict(env, PYTHONPATH=str(packages[0])), "Python")
        checks.record("the installed Python package runs readme/decode.py after the move",
                      p.returncode == 0, p.stderr[-400:])
    else:
        checks.record("the install holds the Python package", False, "no lib/python3*/*-packages")

    # 5. add_subdirectory.
    engine = work / "engine"
    write_snippet(snippets, "engine/CMakeLists.txt", engine, {})
    (engine / "app.c").write_text(app_c)
    (engine / "third_party").mkdir()
    (engine / "third_party" / "libdsv4").symlink_to(src)
    engine_prefix, engine_moved = work / "engine-prefix", work / "engine-moved"
    script = write_snippet(snippets, "engine/build.sh", engine,
                           {README_ENGINE_PREFIX: engine_prefix})
    p = run_script(script, engine, env, "engine/build.sh")
    checks.record("add_subdirectory engine builds, runs and installs (engine/build.sh)",
                  p.returncode == 0, p.stderr[-400:])
    build = engine / "build"
    if (build / "CMakeCache.txt").exists():
        p = run(["cmake", "--build", build, "--target", "help"], engine, env, "targets")
        targets = p.stdout
        unwanted = re.findall(r"^\S*(?:_test|bench|mutant|example_|dsv4-cli|cuda|Experimental|"
                              r"Nightly|Continuous)\S*", targets, re.M)
        checks.record("add_subdirectory builds no tests, benchmarks, examples, CLI, mutants, CUDA "
                      "module or dashboard targets", p.returncode == 0 and not unwanted,
                      " ".join(sorted(set(unwanted))[:20]))
        if env.get("CMAKE_GENERATOR") == "Ninja":
            p = run(["ninja", "-C", build, "-t", "commands"], engine, env, "commands")
            werror = [line for line in p.stdout.splitlines() if "-Werror" in line]
            checks.record("add_subdirectory compiles nothing with -Werror",
                          p.returncode == 0 and not werror, werror[0][:300] if werror else "")
    if engine_prefix.exists():
        extra = sorted(str(x.relative_to(engine_prefix)) for x in engine_prefix.glob("lib/python*"))
        checks.record("add_subdirectory installs no Python package", not extra, " ".join(extra))
        engine_prefix.rename(engine_moved)
        p = run([engine_moved / "bin" / "engine"], work, dict(env, DSV4_LOG_LEVEL="info"),
                "moved engine")
        checks.record("the installed engine runs after its prefix moved, on its own modules",
                      p.returncode == 0 and f"({engine_moved}/" in p.stderr, p.stderr[-400:])

    # 6. The README's tool commands against the moved install.
    d = work / "cli"
    script = write_snippet(snippets, "readme/cli.sh", d, {})
    p = run_script(script, d, dict(env, PATH=f"{moved / 'bin'}:{env['PATH']}"), "readme/cli.sh")
    ok = p.returncode == 0
    if ok:
        try:
            ok = json.loads((d / "info.json").read_text())["selection"]["selected"] is not None
        except (OSError, ValueError, KeyError, TypeError):
            ok = False
    checks.record("the README's dsv4 commands run against the moved install (readme/cli.sh)", ok,
                  p.stderr[-400:])
    return finish(checks, work)


def finish(checks, work):
    if checks.failed:
        print(f"\n{len(checks.failed)} check(s) failed (the trees are kept in {work}):\n  " +
              "\n  ".join(checks.failed))
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print("\nall install checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
