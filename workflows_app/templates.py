"""The built-in workflow templates — chain, fan-out/fan-in, debate, review-loop — shipped in defs/workflows/.

A template is an ordinary workflow file; creating a workflow from one saves
its markdown (optionally under another name) through the same definition
services as the admin and the API, so it is checked against the team's agents.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from django.conf import settings

TEMPLATES_DIR = Path(settings.BASE_DIR) / "defs" / "workflows"
TEMPLATE_SLUGS = ("chain", "debate", "fan-out", "review-loop")  # the other file there is the demo's workflow
NAME_LINE = re.compile(r"^name:.*$", re.M)


@dataclass(frozen=True)
class Template:
    slug: str
    name: str
    description: str
    markdown: str

    def renamed(self, name: str) -> str:
        """The markdown with ``name`` as the workflow's name (its slug comes from it)."""
        return NAME_LINE.sub(f"name: {yaml.safe_dump(name, default_style=None).strip().removesuffix('...').strip()}",
                             self.markdown, count=1)


def workflow_templates() -> list[Template]:
    found = []
    for path in (TEMPLATES_DIR / f"{slug}.md" for slug in TEMPLATE_SLUGS):
        text = path.read_text(encoding="utf-8")
        front = yaml.safe_load(text.split("---", 2)[1]) or {}
        found.append(Template(path.stem, str(front.get("name", path.stem)), str(front.get("description", "")), text))
    return found


def workflow_template(slug: str) -> Template | None:
    return next((template for template in workflow_templates() if template.slug == slug), None)
