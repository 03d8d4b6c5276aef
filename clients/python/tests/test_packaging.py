"""The build backend makes a wheel that installs the whole package, typed,
with nothing to download."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build_backend"))
import storybus_build  # noqa: E402


def test_the_build_needs_nothing() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["build-system"]["requires"] == []
    assert pyproject["project"]["dependencies"] == []
    assert storybus_build.get_requires_for_build_wheel() == []


def test_the_wheel_holds_the_typed_package_and_a_true_record(tmp_path: Path) -> None:
    name = storybus_build.build_wheel(str(tmp_path))
    assert name == "storybus_client-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(tmp_path / name) as z:
        names = set(z.namelist())
        sources = {p.relative_to(ROOT / "src").as_posix() for p in (ROOT / "src").rglob("*.py")}
        assert sources <= names and "storybus_client/py.typed" in names
        assert not [n for n in names if "__pycache__" in n]
        meta = z.read("storybus_client-0.1.0.dist-info/METADATA").decode()
        assert "Name: storybus-client\n" in meta and "Requires-Python: >=3.11\n" in meta
        assert "Requires-Dist" not in meta
        record = z.read("storybus_client-0.1.0.dist-info/RECORD").decode().splitlines()
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            if path.endswith("RECORD"):
                continue
            data = z.read(path)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data)
        assert {line.split(",")[0] for line in record} == names
        assert z.read("storybus_client-0.1.0.dist-info/LICENSE") == (ROOT.parents[1] / "LICENSE").read_bytes()
        z.extractall(tmp_path / "site")
    # The unpacked wheel imports on its own, outside the source tree.
    out = subprocess.run([sys.executable, "-c", "import storybus_client as s; print(s.__version__, s.__file__)"],
                         cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "site")}, capture_output=True, text=True,
                         check=True)
    version, path = out.stdout.split()
    assert version == "0.1.0" and path.startswith(str(tmp_path / "site"))


def test_the_sdist_holds_what_builds_the_wheel(tmp_path: Path) -> None:
    name = storybus_build.build_sdist(str(tmp_path))
    with tarfile.open(tmp_path / name) as tar:
        names = set(tar.getnames())
    base = "storybus_client-0.1.0/"
    for need in ["pyproject.toml", "README.md", "LICENSE", "PKG-INFO", "build_backend/storybus_build.py",
                 "src/storybus_client/__init__.py", "src/storybus_client/py.typed"]:
        assert base + need in names
    # Unpacked elsewhere, the sdist builds the wheel, license included, with its own backend.
    with tarfile.open(tmp_path / name) as tar:
        # The archive just built; the data filter where this Python has it.
        tar.extractall(tmp_path / "unpacked", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    unpacked = tmp_path / "unpacked" / base
    (tmp_path / "wheel").mkdir()
    subprocess.run([sys.executable, "-c", "import sys, storybus_build; print(storybus_build.build_wheel(sys.argv[1]))",
                    str(tmp_path / "wheel")], cwd=tmp_path, env={"PYTHONPATH": str(unpacked / "build_backend")},
                   capture_output=True, text=True, check=True)
    with zipfile.ZipFile(tmp_path / "wheel" / "storybus_client-0.1.0-py3-none-any.whl") as z:
        assert z.read("storybus_client-0.1.0.dist-info/LICENSE") == (ROOT / "LICENSE").read_bytes()


def test_the_license_is_the_repository_s() -> None:
    """clients/python/LICENSE, which the wheel and the sdist carry, is a copy of the repository's."""
    assert (ROOT / "LICENSE").read_bytes() == (ROOT.parents[1] / "LICENSE").read_bytes()


def test_the_version_is_the_project_s() -> None:
    import storybus_client

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert storybus_client.__version__ == pyproject["project"]["version"]


def test_every_public_name_has_a_docstring() -> None:
    import inspect

    import storybus_client

    missing = []
    for name in storybus_client.__all__:
        obj = getattr(storybus_client, name)
        if inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isfunction(obj):
            if not inspect.getdoc(obj):
                missing.append(name)
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_"):
                    continue
                if isinstance(member, property | staticmethod | classmethod) or inspect.isfunction(member):
                    if not (member.__doc__ if not isinstance(member, staticmethod | classmethod) else member.__func__.__doc__):
                        missing.append(f"{name}.{attr}")
    assert missing == []
