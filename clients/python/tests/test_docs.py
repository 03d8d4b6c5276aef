"""The documentation's Python examples run against a real `storybus dev`
and print what the pages say they print."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from conftest import REPO, Bus

DEV_URL = 'bus_url = "http://127.0.0.1:8080"'


def examples(page: Path) -> list[tuple[str, str]]:
    """Each Python block of the page with the output shown after it."""
    text = page.read_text()
    found = re.findall(r"```python\n(.*?)```\n\nIt prints:\n\n```text\n(.*?)```", text, re.S)
    assert len(found) == text.count("```python\n"), f"{page}: a Python block without its output"
    return found


def run(code: str, bus: Bus) -> str:
    """Runs an example against the test's bus, as pasted against storybus dev."""
    assert DEV_URL in code, "the example does not use storybus dev's address"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.replace(DEV_URL, f'bus_url = "{bus.url}"'), "example", "exec"), {})
    return out.getvalue()


@pytest.mark.parametrize("page", ["docs/producers.md", "docs/consumers.md", "clients/python/README.md"])
def test_the_examples_print_what_the_pages_say(page: str, bus: Bus, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the examples' outbox folder
    blocks = examples(REPO / page)
    assert blocks, f"{page} has no Python example"
    for code, printed in blocks:
        assert run(code, bus) == printed
        # Once more: the example runs the same after itself.
        assert run(code, bus) == printed
