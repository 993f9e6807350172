"""Fenced blocks: tags, fences nested in lists, prompts; and the package's public names."""

from __future__ import annotations

import doccheck
import pytest
from doccheck import code_blocks

DOC = """# title

```bash
a
```

~~~toml
x = 1
~~~

- item

  ````
  b \\
    c
  ```
  ````

```{.sh}
d
```

``` python extra words
e
```
"""


def test_blocks_tags_and_lines() -> None:
    blocks = code_blocks(DOC)
    assert [(b.tag, b.first_line, b.lines) for b in blocks] == [
        ("bash", 4, ("a",)),
        ("toml", 8, ("x = 1",)),
        ("", 14, ("b \\", "  c", "```")),
        ("sh", 20, ("d",)),
        ("python", 24, ("e",)),
    ]
    assert [b.is_shell for b in blocks] == [True, False, True, True, False]


def test_unclosed_fence_runs_to_the_end() -> None:
    [block] = code_blocks("text\n```sh\na\nb")
    assert block.lines == ("a", "b")


@pytest.mark.parametrize(
    ("lines", "script"),
    [
        (("a", "b"), "a\nb"),
        (("$ a --x", "output", "$ b \\", "  --y", "more output"), "a --x\n\nb \\\n  --y\n"),
        (("  $ a", "$", "out"), "a\n\n"),
    ],
    ids=["no_prompts", "prompts_and_output", "indented_and_empty_prompt"],
)
def test_prompts(lines: tuple[str, ...], script: str) -> None:
    assert doccheck.CodeBlock("console", 1, lines).script() == script


@pytest.mark.parametrize("name", doccheck.__all__)
def test_public_names_import_and_have_docstrings(name: str) -> None:
    obj = getattr(doccheck, name)
    if callable(obj):
        assert (obj.__doc__ or "").strip(), name
