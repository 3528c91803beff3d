"""The built-in workflow templates — chain, fan-out/fan-in, debate, review-loop.

They ship read-only with the code, as package data in
``workflows_app/builtin_templates/`` (see pyproject's package-data), never in
a team's definitions folder: a team deleting or editing its own ``chain``
workflow changes nothing for anyone's templates. A template is an ordinary
workflow file; creating a workflow from one saves its markdown (optionally
under another name) into the team through the same definition services as
the admin and the API, so it is checked against the team's agents.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

import yaml

from mas_core.definitions.yaml_loader import yaml_load

TEMPLATES_PACKAGE = "workflows_app"
TEMPLATES_FOLDER = "builtin_templates"
TEMPLATE_SLUGS = ("chain", "debate", "fan-out", "review-loop")
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


def templates_folder():
    """Where the templates are installed (a Traversable: a folder, or a place inside a zip)."""
    return resources.files(TEMPLATES_PACKAGE) / TEMPLATES_FOLDER


@functools.cache
def _load() -> tuple[Template, ...]:
    # Read once per process: package data does not change while the server runs.
    found = []
    for slug in TEMPLATE_SLUGS:
        text = (templates_folder() / f"{slug}.md").read_text(encoding="utf-8")
        front = yaml_load(text.split("---", 2)[1])[0] or {}
        found.append(Template(slug, str(front.get("name", slug)), str(front.get("description", "")), text))
    return tuple(found)


def workflow_templates() -> list[Template]:
    return list(_load())


def workflow_template(slug: str) -> Template | None:
    return next((template for template in _load() if template.slug == slug), None)
