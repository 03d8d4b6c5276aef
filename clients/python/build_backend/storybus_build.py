"""The package's build backend (PEP 517 and PEP 660), standard library only.

storybus_client has no dependencies, and neither has its build: `pip install
./clients/python` works with no package index, where a setuptools build
would first download setuptools into its isolated build environment. It
builds the one pure-Python wheel the package needs from pyproject.toml's
[project] table and src/, an sdist of the folder, and an editable wheel that
points at src/. The wheel and the sdist carry LICENSE (Apache-2.0, a copy of
the repository's).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
LICENSE = ROOT / "LICENSE"
TAG = "py3-none-any"


def _project() -> dict[str, Any]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        project: dict[str, Any] = tomllib.load(f)["project"]
    return project


def _dist_name(project: dict[str, Any]) -> str:
    """The name as wheel and sdist file names spell it (PEP 427, PEP 625)."""
    return str(project["name"]).replace("-", "_").lower()


def _metadata(project: dict[str, Any]) -> str:
    """Core metadata 2.1 of the [project] table."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project.get('description', '')}",
        f"Requires-Python: {project.get('requires-python', '')}",
    ]
    lic = project.get("license", {})
    if isinstance(lic, dict) and "text" in lic:
        lines.append(f"License: {lic['text']}")
    lines += [f"Classifier: {c}" for c in project.get("classifiers", [])]
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    readme = project.get("readme")
    body = ""
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        body = "\n" + (ROOT / readme).read_text(encoding="utf-8")
    return "\n".join(lines) + "\n" + body


def _package_files() -> list[tuple[str, bytes]]:
    """The package's files, as (path in the wheel, content)."""
    out = []
    for path in sorted(SRC.rglob("*")):
        rel = path.relative_to(SRC).as_posix()
        if path.is_file() and "__pycache__" not in rel and not rel.endswith((".pyc", ".pyo")):
            out.append((rel, path.read_bytes()))
    return out


def _write_wheel(directory: str, files: list[tuple[str, bytes]]) -> str:
    project = _project()
    name, version = _dist_name(project), project["version"]
    info = f"{name}-{version}.dist-info"
    files = files + [
        (f"{info}/LICENSE", LICENSE.read_bytes()),
        (f"{info}/METADATA", _metadata(project).encode()),
        (f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: storybus_build\nRoot-Is-Purelib: true\nTag: {TAG}\n".encode()),
    ]
    record = []
    for path, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    filename = f"{name}-{version}-{TAG}.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            z.writestr(zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
    return filename


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    """Nothing: the build needs only the standard library."""
    return []


def get_requires_for_build_sdist(config_settings: dict[str, Any] | None = None) -> list[str]:
    """Nothing: the build needs only the standard library."""
    return []


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    """Nothing: the build needs only the standard library."""
    return []


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """Builds the wheel of src/ into wheel_directory and returns its name."""
    return _write_wheel(wheel_directory, _package_files())


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """Builds a wheel whose .pth file puts src/ on the path."""
    return _write_wheel(wheel_directory, [(f"{_dist_name(_project())}.pth", (str(SRC) + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    """Builds a source archive of the folder and returns its name."""
    project = _project()
    base = f"{_dist_name(project)}-{project['version']}"
    filename = f"{base}.tar.gz"
    keep = ["pyproject.toml", "README.md", "LICENSE", "build_backend", "src", "tests"]
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for top in keep:
            for path in sorted([ROOT / top, *(ROOT / top).rglob("*")] if (ROOT / top).is_dir() else [ROOT / top]):
                rel = path.relative_to(ROOT).as_posix()
                if "__pycache__" in rel or not path.is_file():
                    continue
                data = path.read_bytes()
                ti = tarfile.TarInfo(f"{base}/{rel}")
                ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
                tar.addfile(ti, io.BytesIO(data))
        pkg_info = _metadata(project).encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size, ti.mtime, ti.mode = len(pkg_info), 0, 0o644
        tar.addfile(ti, io.BytesIO(pkg_info))
    return filename
