"""Tool discovery: hybrid ranking, the offered set above the threshold, and tool_search in a real run."""

import json

import pytest

from tools_app.discovery import fuse, offered_names, rank, text_ranking, vector_ranking

TOOLS = [
    ("send_email", "Send an email message to a recipient with a subject and body."),
    ("create_invoice", "Create a customer invoice with line items and a due date."),
    ("weather_forecast", "Get the weather forecast for a city for the next days."),
    ("translate_text", "Translate text from one language into another."),
    ("resize_image", "Resize or crop an image file to given dimensions."),
    ("book_flight", "Search and book airline flights between two airports."),
    ("stock_quote", "Get the latest price of a stock ticker on the exchange."),
    ("unit_convert", "Convert quantities between units: length, mass, temperature."),
]


def test_reciprocal_rank_fusion_rewards_agreement():
    assert fuse(["a", "b", "c"], ["b", "a", "d"]) == ["a", "b", "c", "d"]
    assert fuse(["x"], []) == ["x"]


@pytest.mark.django_db
def test_full_text_and_vectors_each_find_the_right_tool_and_the_hybrid_ranks_it_first():
    assert text_ranking("send an email to Bob", TOOLS)[0] == "send_email"
    assert text_ranking("zzz qqq", TOOLS) == []
    # No shared word: only the embeddings know that rain is weather.
    assert vector_ranking("will it rain in Paris tomorrow?", TOOLS)[0] == "weather_forecast"
    assert rank("will it rain in Paris tomorrow?", TOOLS)[0] == "weather_forecast"
    assert rank("bill the customer for March", TOOLS)[0] == "create_invoice"
    assert sorted(rank("anything", TOOLS)) == sorted(name for name, _ in TOOLS)  # every tool, once


@pytest.mark.django_db
def test_above_the_threshold_only_the_top_k_are_offered(settings):
    settings.MAS_TOOL_DISCOVERY_THRESHOLD = 5
    settings.MAS_TOOL_DISCOVERY_K = 2
    tools = [*TOOLS, ("tool_search", "Find more of your tools.")]
    offered = offered_names("what is the stock price of AAPL?", tools)
    assert offered[:2] == ["tool_search", "stock_quote"] and len(offered) == 3 and offered[2] in dict(TOOLS)
    settings.MAS_TOOL_DISCOVERY_THRESHOLD = 50
    assert offered_names("x", tools) is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_an_agent_with_many_tools_sees_the_relevant_ones_and_finds_others(team_a, celery_worker_process):
    from agents_app.execution.runs import run_start
    from tests.runs import agent, call, events, finish

    # 18 safe built-ins + the MCP-free custom tools below: over the default threshold of 24.
    custom = "".join(
        f"- name: {name}\n  description: {json.dumps(description)}\n  prompt: 'Do it: {{{{x}}}}'\n"
        f"  parameters:\n    x:\n      type: string\n"
        for name, description in TOOLS)
    agent(team_a, "Clerk", f"custom_tools:\n{custom}")
    script = {"clerk": [call("tool_search", query="convert miles to kilometres", limit=1),
                        {"text": "found it"}]}
    run = finish(run_start(team=team_a, agent="clerk", input="Email the team about the invoice", script=script))
    assert (run.status, run.result) == ("succeeded", "found it")
    first, second = [e.data for e in events(run, "llm_request")]
    assert first["tools"] == 10 + 2  # tool_search and set_output, then the 10 most relevant
    assert second["tools"] == first["tools"] + 1  # unit_convert, found, is offered from then on
    [found] = [e.data["content"] for e in events(run, "tool_result")]
    assert found.startswith("1 tool(s) now available:\n- unit_convert: Convert quantities")
