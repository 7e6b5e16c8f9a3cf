"""The README's examples with outputs run as doctests (the tour's placeholders do not)."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import stackdist

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_examples_with_outputs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    checked = [b for b in blocks if re.search(r"^>>> .*\n(?!>>>|\.\.\.)\S", b, flags=re.MULTILINE)]
    assert checked, "the README should hold at least one example with its output"
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for i, block in enumerate(checked):
        test = parser.get_doctest(block, {"stackdist": stackdist}, f"README block {i}", str(README), 0)
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0 and result.attempted >= 4


def test_readme_starts_with_the_two_commands_ci_runs():
    first = README.read_text().splitlines()[:2]
    assert all(line.startswith("    python3 -m venv .venv && ") for line in first)
    assert "stackdist plan" in first[0] and "pytest" in first[1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert first[1].strip() in ci
