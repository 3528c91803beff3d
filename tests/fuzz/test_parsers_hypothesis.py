"""hypothesis on the parsers: no input crashes them, every rejection is a clear error.

The markdown parser of every definition kind, the workflow graph validator and the planner's plan parser
get random text, random YAML frontmatter of the wrong shapes, and random step graphs (cycles, unknown
dependencies, bad references). Each either accepts, or raises its documented error with a message that
says what is wrong (and, for markdown, where: the file and line or field).
"""

import json

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mas_core.definitions.kinds import KINDS, KINDS_BY_NAME
from mas_core.definitions.markdown import DefinitionError, parse_definition
from workflows_app.engine.dag import validate_graph
from workflows_app.orchestrate import PlanError, plan_parse
from workflows_app.specs import WorkflowStep

KIND_LIST = list(KINDS.values()) if isinstance(KINDS, dict) else list(KINDS)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False),
                    st.text(max_size=20))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                      max_leaves=12)
KEYS = st.sampled_from(["name", "description", "model", "tier", "tools", "steps", "inputs", "transport", "url",
                        "command", "env", "type", "models", "trigger", "schedule", "channel", "memory", "limits",
                        "escalation", "custom_tools", "mcp_servers", "skills", "extra_key"])
FRONTMATTER = st.dictionaries(KEYS, VALUES, max_size=8)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


def check_parse(kind, text):
    try:
        parse_definition(kind, text, path=f"{kind.folder}/x.md", context={"known_agents": {"a", "b"}})
    except DefinitionError as error:
        message = str(error)
        assert message.startswith(f"{kind.folder}/x.md") and len(message) > len(f"{kind.folder}/x.md: ")


@SETTINGS
@given(kind=st.sampled_from(KIND_LIST), text=st.text(max_size=300))
@example(kind=KIND_LIST[0], text="---\n")
@example(kind=KIND_LIST[0], text="---\nname: [unclosed\n---\n")
@example(kind=KIND_LIST[0], text="---\n- a list\n---\n")
def test_any_text_is_parsed_or_refused_with_a_located_message(kind, text):
    check_parse(kind, text)


@SETTINGS
@given(kind=st.sampled_from(KIND_LIST), front=FRONTMATTER, body=st.text(max_size=50))
# Found by this test: an agent whose model was a list crashed the parser (TypeError, a 500 over the API).
@example(kind=KINDS_BY_NAME["agent"], front={"name": "x", "model": ["a"]}, body="")
def test_frontmatter_of_any_shape_is_parsed_or_refused_with_a_located_message(kind, front, body):
    text = "---\n" + yaml.safe_dump(front, allow_unicode=True) + "---\n" + body
    check_parse(kind, text)


STEP_IDS = st.sampled_from(["s1", "s2", "s3", "s4", "bad id!", ""])


@st.composite
def step_graphs(draw):
    steps = []
    for _ in range(draw(st.integers(1, 5))):
        step_id = draw(STEP_IDS)
        deps = draw(st.lists(STEP_IDS, max_size=3))
        refs = draw(st.lists(st.sampled_from(["{topic}", "{s1.out}", "{s2.x}", "{nope}", "{s3.out}"]), max_size=3))
        steps.append({"id": step_id, "agent": draw(st.sampled_from(["a", "b", "ghost"])), "depends_on": deps,
                      "prompt": " ".join(refs), "outputs": draw(st.lists(st.sampled_from(["out", "x"]), max_size=2))})
    return steps


@SETTINGS
@given(graph=step_graphs())
@example(graph=[{"id": "s1", "agent": "a", "depends_on": ["s2"], "prompt": "", "outputs": []},
                {"id": "s2", "agent": "a", "depends_on": ["s1"], "prompt": "", "outputs": []}])
def test_the_workflow_validator_names_each_problem(graph):
    try:
        steps = [WorkflowStep.model_validate(step) for step in graph]
    except ValueError as error:  # pydantic names the field
        assert "id" in str(error) or "agent" in str(error)
        return
    errors = validate_graph(steps, inputs=["topic"], known_agents={"a", "b"})
    for error in errors:
        assert error.loc.startswith("steps") and error.message
    ids = [step.id for step in steps]
    if any(step.agent == "ghost" for step in steps):
        assert any("agent 'ghost' does not exist" in e.message for e in errors)
    if len(set(ids)) != len(ids):
        assert any("duplicate step id" in e.message for e in errors)


@SETTINGS
@given(payload=st.one_of(st.text(max_size=200), VALUES.map(json.dumps),
                         st.lists(st.dictionaries(st.sampled_from(["id", "agent", "task", "depends_on", "x"]),
                                                  VALUES, max_size=5), max_size=4).map(json.dumps)))
@example(payload='```json\n{"subtasks": [{"id": "a", "agent": "a", "task": "t", "depends_on": ["a"]}]}\n```')
def test_the_plan_parser_accepts_or_says_what_is_wrong(payload):
    try:
        plan = plan_parse(payload, agents={"a", "b"})
    except PlanError as error:
        assert str(error).startswith(("the plan is not JSON", "the plan does not match its schema",
                                      "the plan is not valid", "the plan may not name"))
        return
    assert 1 <= len(plan.subtasks) <= 20 and all(s.agent in {"a", "b"} for s in plan.subtasks)


def test_an_agent_whose_model_is_a_list_is_a_422_over_the_api(team_a, api_for, db):
    editor = api_for(team_a, "editor")
    assert editor.post("/api/agents", {"name": "Lead"}).status_code == 201
    response = editor.put("/api/agents/lead/markdown", "---\nname: Lead\nmodel:\n- a\n---\n",
                          content_type="text/markdown")
    assert response.status_code == 422, response.content
    assert "model" in json.dumps(response.json())
