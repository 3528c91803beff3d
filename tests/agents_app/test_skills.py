"""Skills: rules always in the prompt, references loaded when the task matches, skill_load, team rules."""

from agents_app.execution.journal import session_messages
import pytest

from agents_app.kinds import SKILL
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.skills import skill_text, skills_for, skills_section

pytestmark = [pytest.mark.django_db(transaction=True)]

CITATION = ("---\nname: citation-style\ndescription: How we cite sources.\n---\n\n"
            "Every claim carries a numbered marker like [1]. Worked examples: [examples](examples.md); "
            "datasets: [datasets](datasets.md).\n")
REFERENCES = {
    "examples.md": "Citing a journal paper: [1] Vaswani, A. (2017). Attention Is All You Need. arXiv.",
    "datasets.md": "Citing a dataset: name the publisher, the dataset title in full, the version and the date "
                   "you downloaded the data table.",
}
HOUSE = "---\nname: house-rules\nalways: true\n---\n\nNever promise delivery dates to customers.\n"


def skill(team, text, references=None):
    parsed = definition_parse(kind=SKILL, team=team, text=text)
    definition_save(kind=SKILL, team=team, parsed=parsed, references=references)


def test_rules_always_and_references_by_relevance(team_a, team_b):
    skill(team_a, CITATION, REFERENCES)
    skill(team_a, HOUSE)
    skill(team_b, HOUSE.replace("delivery dates", "anything"))
    skills = skills_for(team_id=team_a.id, names=["citation-style"])
    assert [(s.slug, s.always) for s in skills] == [("house-rules", True), ("citation-style", False)]
    assert [s.slug for s in skills_for(team_id=team_a.id, names=[])] == ["house-rules"]

    section = skills_section(skills, task="Cite the census dataset you downloaded in the report")
    assert section.startswith("### house-rules (team rules)\n\nNever promise delivery dates to customers.")
    assert "### citation-style\n\nEvery claim carries a numbered marker" in section
    assert "#### datasets.md\nCiting a dataset" in section
    assert "(More in this skill: examples.md — skill_load('citation-style', query) reads them.)" in section
    unrelated = skills_section(skills, task="Water the plants on the balcony")
    assert "####" not in unrelated and "(More in this skill: datasets.md, examples.md" in unrelated


def test_skill_load_orders_references_and_names_what_is_wrong(team_a):
    skill(team_a, CITATION.replace("[datasets](datasets.md)", "[datasets](datasets.md), [style](style.md)"),
          REFERENCES)
    skills = skills_for(team_id=team_a.id, names=["citation-style"])
    text = skill_text(skills, "citation-style", "how do I cite a journal paper")
    assert text.startswith("# citation-style\n\nEvery claim carries")
    assert text.index("## examples.md") < text.index("## datasets.md")
    assert text.endswith("[missing: the skill links to style.md, which it does not contain]")
    with pytest.raises(LookupError, match=r"^No skill 'nope' for this agent\. Its skills: citation-style\.$"):
        skill_text(skills, "nope")


@pytest.mark.worker
def test_an_agent_gets_its_skills_in_the_prompt_and_loads_one(team_a, celery_worker_process):
    from agents_app.execution.runs import run_start
    from agents_app.models import Session
    from tests.runs import agent, events, finish

    skill(team_a, CITATION, REFERENCES)
    skill(team_a, HOUSE)
    agent(team_a, "Writer", "skills:\n- citation-style\n")
    script = {"writer": [
        {"tool_calls": [{"name": "skill_load", "arguments": {"name": "citation-style", "query": "journal paper"}}]},
        {"tool_calls": [{"name": "skill_load", "arguments": {"name": "cooking"}}]},
        {"text": "cited"},
    ]}
    run = finish(run_start(team=team_a, agent="writer", input="Cite the dataset you downloaded", script=script))
    assert (run.status, run.result) == ("succeeded", "cited")
    system = session_messages(session_id=Session.objects.get(run=run).id)[0].content
    assert "## Skills\n\n### house-rules (team rules)\n\nNever promise delivery dates" in system
    assert "#### datasets.md\nCiting a dataset" in system and "#### examples.md" not in system
    loaded, refused = [e.data for e in events(run, "tool_result")]
    assert loaded["ok"] and loaded["content"].startswith("# citation-style") and "## examples.md" in loaded["content"]
    assert (refused["ok"], refused["content"]) == (
        False, "No skill 'cooking' for this agent. Its skills: house-rules, citation-style.")
