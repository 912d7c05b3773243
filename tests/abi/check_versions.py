#!/usr/bin/env python3
"""Every binding and build file says the library's version, the one in include/accel/accel.h.

The header's ACCEL_VERSION_MAJOR/MINOR/PATCH is the version; this fails naming each file that says
another (ctest abi.versions_in_step):

  bindings/rust/*/Cargo.toml     both crates' version (their own or the workspace's) and
                                 libaccel's requirement on libaccel-sys; Cargo.lock's two entries
  bindings/julia/Accel           Project.toml's version and Accel.jl's PACKAGE_VERSION
  bindings/go/accel              the tests' expected Version() (Go modules carry no version)
  include/accel/accel.hpp        the version its version() documents
  CMakeLists.txt                 project(VERSION), read from the header (or the same literal)
  pkgconfig/accel.pc.in          Version:, from project(VERSION) (or the same literal)

and that the range of library versions each binding accepts at load time holds the header's.
"""
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import gen_raw  # noqa: E402  (the header's one reader)


def main():
    major, minor, patch = gen_raw.parse_header(gen_raw.HEADER.read_text()).version
    version, number = f"{major}.{minor}.{patch}", major * 10000 + minor * 100 + patch
    problems = []

    def expect(path, what, found):
        if found != version:
            problems.append(f"{path}: {what} is {found!r}, accel.h says {version}")

    def in_range(path, what, low, end):
        if not low <= number < end:
            problems.append(f"{path}: {what} [{low}, {end}) does not hold accel.h's {number}")

    # Rust: the crates, the workspace they may inherit from, the requirement, the lock file.
    rust = ROOT / "bindings/rust"
    workspace = tomllib.loads((rust / "Cargo.toml").read_text())
    for crate in ("libaccel-sys", "libaccel"):
        manifest = rust / crate / "Cargo.toml"
        package = tomllib.loads(manifest.read_text())["package"]
        if package.get("version") == {"workspace": True}:
            expect(rust / "Cargo.toml", f"[workspace.package] version (which {crate} takes)",
                   workspace.get("workspace", {}).get("package", {}).get("version"))
        else:
            expect(manifest, "[package] version", package.get("version"))
    manifest = rust / "libaccel/Cargo.toml"
    requirement = tomllib.loads(manifest.read_text())["dependencies"]["libaccel-sys"]
    expect(manifest, "the requirement on libaccel-sys",
           requirement.get("version", "").lstrip("=^~") if isinstance(requirement, dict) else requirement)
    lock = tomllib.loads((rust / "Cargo.lock").read_text())
    for crate in ("libaccel-sys", "libaccel"):
        for entry in lock.get("package", []):
            if entry["name"] == crate:
                expect(rust / "Cargo.lock", f"{crate}'s entry", entry["version"])
    sys_lib = (rust / "libaccel-sys/src/lib.rs").read_text()
    low = re.search(r"SUPPORTED_VERSION_MIN: u32 = (\d+)", sys_lib)
    end = re.search(r"SUPPORTED_VERSION_END: u32 = (\d+)", sys_lib)
    if low and end:
        in_range(rust / "libaccel-sys/src/lib.rs", "SUPPORTED_VERSION_MIN..END",
                 int(low.group(1)), int(end.group(1)))
    else:
        problems.append(f"{rust / 'libaccel-sys/src/lib.rs'}: no SUPPORTED_VERSION_MIN/END found")

    # Julia.
    julia = ROOT / "bindings/julia/Accel"
    expect(julia / "Project.toml", "version",
           tomllib.loads((julia / "Project.toml").read_text()).get("version"))
    module = (julia / "src/Accel.jl").read_text()
    found = re.search(r'const PACKAGE_VERSION = v"([^"]+)"', module)
    expect(julia / "src/Accel.jl", "PACKAGE_VERSION", found.group(1) if found else None)
    found = re.search(r"const SUPPORTED_VERSIONS = \((\d+), (\d+)\)",
                      (julia / "src/library.jl").read_text())
    if found:
        in_range(julia / "src/library.jl", "SUPPORTED_VERSIONS", int(found.group(1)),
                 int(found.group(2)))
    else:
        problems.append(f"{julia / 'src/library.jl'}: no SUPPORTED_VERSIONS found")

    # Go: no version of its own; the tests' expectation of the loaded library, the accepted range.
    go = ROOT / "bindings/go/accel"
    for test in sorted(go.glob("*_test.go")):
        for m in re.finditer(r'Version\(\); got != "([^"]+)"', test.read_text()):
            expect(test, "the Version() the test expects", m.group(1))
    accel_go = (go / "accel.go").read_text()
    low = re.search(r"MinVersion = (\d+)", accel_go)
    end = re.search(r"MaxVersion = (\d+)", accel_go)
    if low and end:
        in_range(go / "accel.go", "MinVersion..MaxVersion", int(low.group(1)), int(end.group(1)))
    else:
        problems.append(f"{go / 'accel.go'}: no MinVersion/MaxVersion found")

    # C++ wrapper, CMake, pkg-config.
    hpp = ROOT / "include/accel/accel.hpp"
    for m in re.finditer(r"The library's version, \"([^\"]+)\"", hpp.read_text()):
        expect(hpp, "version()'s documented value", m.group(1))
    cmake = (ROOT / "CMakeLists.txt").read_text()
    project = re.search(r"project\(accel\s+VERSION\s+(\S+)", cmake)
    derived = "${ACCEL_VERSION_MAJOR}.${ACCEL_VERSION_MINOR}.${ACCEL_VERSION_PATCH}"
    if not project:
        problems.append("CMakeLists.txt: no project(accel VERSION ...)")
    elif project.group(1) != derived or "include/accel/accel.h" not in cmake:
        expect(ROOT / "CMakeLists.txt", "project(VERSION)", project.group(1))
    pc = ROOT / "pkgconfig/accel.pc.in"
    found = re.search(r"^Version:\s*(\S+)", pc.read_text(), re.M)
    if not found:
        problems.append(f"{pc}: no Version:")
    elif found.group(1) != "@PROJECT_VERSION@":
        expect(pc, "Version:", found.group(1))

    for p in problems:
        print(str(p).replace(str(ROOT) + "/", ""))
    print(f"accel.h says {version}: " + ("everything agrees" if not problems else
                                         f"{len(problems)} file(s) differ"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
