"""Skills in a session (SPEC §3.4): rules always in the prompt, references loaded by relevance.

A skill is a ``SKILL.md`` (its body: the rules) with reference files beside
it, linked from the body as ``[text](path)``. An agent's prompt gets the body
of every skill it lists, and of the team's rules — skills whose frontmatter
says ``always: true`` — and, of their references, those that match the task
(cosine of all-MiniLM-L6-v2 embeddings ≥ ``MATCH``, the best ``MAX_LOADED``,
each cut at ``REFERENCE_CHARS``); the others are listed by name for
``skill_load``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agents_app.models import Skill

LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
MATCH = 0.45
MAX_LOADED = 2
REFERENCE_CHARS = 4000
LOAD_CHARS = 30_000


@dataclass
class SkillDoc:
    slug: str
    name: str
    description: str
    body: str
    references: dict[str, str] = field(default_factory=dict)
    always: bool = False

    @property
    def missing_links(self) -> list[str]:
        """Paths linked from the body that are not among the skill's files (external links aside)."""
        return [path for path in LINK_RE.findall(self.body)
                if "://" not in path and not path.startswith("#") and path not in self.references]


def skills_for(*, team_id: int, names: list[str], run=None, team_has_skills: bool = True) -> list[SkillDoc]:
    """The agent's skills (by slug or name) and the team's rules, in that order, each once.

    With ``run``: each at the version the run pinned (pinning the ones it uses now). ``team_has_skills``
    False: the caller knows the team has no skill rows now (read with its own reads), so none are read.
    """
    if run is not None:
        return _skills_pinned(run, names, team_has_skills=team_has_skills)
    rows = list(Skill.objects.filter(team_id=team_id).order_by("slug"))
    wanted = [row for name in names for row in rows if name in (row.slug, row.name)]
    always = [row for row in rows if (row.extra or {}).get("always") is True and row not in wanted]
    return [SkillDoc(row.slug, row.name, row.description, row.body, dict(row.references or {}),
                     always=(row.extra or {}).get("always") is True) for row in [*always, *wanted]]


def _skills_pinned(run, names: list[str], *, team_has_skills: bool) -> list[SkillDoc]:
    from agents_app.kinds import SKILL
    from agents_app.execution.versions import definitions_pinned, pins_record

    rows = {row.slug: row for row in Skill.objects.filter(team_id=run.team_id)} if team_has_skills else {}
    held = [key.split(":", 1)[1] for key in run.versions or {} if key.startswith("skill:")]  # deleted since?
    found = definitions_pinned(run=run, kind=SKILL, slugs=sorted({*rows, *held}), rows=rows, pin=False)
    docs = {slug: SkillDoc(slug, pinned.spec.get("name", slug), pinned.spec.get("description", ""), pinned.body,
                           pinned.references, always=pinned.extra.get("always") is True)
            for slug, pinned in sorted(found.items())}
    wanted = [doc.slug for name in names for doc in docs.values() if name in (doc.slug, doc.name)]
    used = list(dict.fromkeys([*[slug for slug, doc in docs.items() if doc.always and slug not in wanted], *wanted]))
    pins_record(run=run, pins={found[slug].key: found[slug].number for slug in used})
    return [docs[slug] for slug in used]


def _ranked_references(skill: SkillDoc, query: str) -> list[tuple[float, str]]:
    from tools_app.discovery import _cosine, _vector

    if not skill.references or not query.strip():
        return []
    paths = sorted(skill.references)
    vectors = _vector([f"{path}: {skill.references[path][:2000]}" for path in paths] + [query])
    return sorted(((_cosine(vector, vectors[-1]), path) for path, vector in zip(paths, vectors)), reverse=True)


def skills_section(skills: list[SkillDoc], *, task: str) -> str:
    """The prompt's "Skills" section: every skill's rules, the references that match the task."""
    parts = []
    for skill in skills:
        lines = [f"### {skill.name}" + (" (team rules)" if skill.always else ""), skill.body.strip()]
        ranked = _ranked_references(skill, task)
        loaded = [path for score, path in ranked if score >= MATCH][:MAX_LOADED]
        for path in loaded:
            text = skill.references[path]
            cut = f"\n[cut: {len(text):,} characters, skill_load gives all]" if len(text) > REFERENCE_CHARS else ""
            lines.append(f"#### {path}\n{text[:REFERENCE_CHARS]}{cut}")
        others = [path for path in sorted(skill.references) if path not in loaded]
        if others:
            lines.append(f"(More in this skill: {', '.join(others)} — skill_load('{skill.slug}', query) reads them.)")
        parts.append("\n\n".join(lines))
    return "\n\n".join(parts)


def skill_text(skills: list[SkillDoc], name: str, query: str = "") -> str:
    """What ``skill_load`` returns: the skill's rules and its references, the most relevant first."""
    skill = next((skill for skill in skills if name in (skill.slug, skill.name)), None)
    if skill is None:
        available = ", ".join(skill.slug for skill in skills) or "none"
        raise LookupError(f"No skill {name!r} for this agent. Its skills: {available}.")
    order = [path for _, path in _ranked_references(skill, query)] if query.strip() else sorted(skill.references)
    parts, used = [f"# {skill.name}\n\n{skill.body.strip()}"], 0
    for path in order:
        text = skill.references[path]
        if used + len(text) > LOAD_CHARS:
            parts.append(f"## {path}\n[not loaded: {len(text):,} characters would pass the {LOAD_CHARS:,} limit]")
            continue
        used += len(text)
        parts.append(f"## {path}\n\n{text}")
    if skill.missing_links:
        parts.append(f"[missing: the skill links to {', '.join(skill.missing_links)}, which it does not contain]")
    return "\n\n".join(parts)
