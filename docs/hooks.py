"""mkdocs hook: the repository's README.md is the site's home page.

The README links to the guides as `docs/guide/...` (right on GitHub); on the site, where
`docs/` is the root, those links drop the prefix.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files

README = Path(__file__).resolve().parents[1] / "README.md"


def on_files(files: Files, config) -> Files:
    text = README.read_text()
    text = re.sub(r"\]\(docs/", "](", text)
    files.append(File.generated(config, "index.md", content=text))
    return files
