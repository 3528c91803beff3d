"""Each trigger kind starts a run: a cron schedule (once per minute, however often beat ticks), a channel message."""

from datetime import UTC, datetime

import pytest

from workflows_app.kinds import WORKFLOW
from mas_core.definitions.markdown import DefinitionError
from agents_app.execution.runs import run_start
from agents_app.models import Activation, Run
from memory_app.board import channel_publish
from tests.runs import agent, define
from workflows_app.models import Workflow, WorkflowRun
from workflows_app.triggers import cron_matches, schedules_fire

pytestmark = [pytest.mark.django_db(transaction=True)]

SCHEDULED = ("---\nname: Morning\ntrigger: schedule\nschedule: '*/15 6 * * 1-5'\ninputs: [when]\nsteps:\n"
             "- id: brief\n  agent: lead\n  prompt: 'Brief for {when}'\n---\n")
ON_NEWS = ("---\nname: On news\ntrigger: channel\nchannel: news\ninputs: [headline, extra]\nsteps:\n"
           "- id: react\n  agent: lead\n  prompt: 'React to {headline}{extra}'\n---\n")


class Sent:
    """The activations made ready for workers, oldest first (none runs: these runs only need to start)."""

    def ids(self) -> list[str]:
        return [str(pk) for pk in Activation.objects.filter(status="ready").order_by("created_at")
                .values_list("id", flat=True)]

    def __iter__(self):
        return iter(self.ids())

    def __len__(self):
        return len(self.ids())


@pytest.fixture
def sent(unserved):
    return Sent()


def test_cron_expressions_match_like_crontab():
    monday_0615 = datetime(2026, 11, 23, 6, 15, tzinfo=UTC)
    assert cron_matches("*/15 6 * * 1-5", monday_0615)
    assert not cron_matches("*/15 6 * * 1-5", monday_0615.replace(minute=16))
    assert not cron_matches("*/15 6 * * 1-5", datetime(2026, 11, 22, 6, 15, tzinfo=UTC))  # a Sunday
    assert cron_matches("0 0 1 1 *", datetime(2027, 1, 1, 0, 0, tzinfo=UTC))
    assert cron_matches("30 9 * * 0", datetime(2026, 11, 22, 9, 30, tzinfo=UTC))  # 0 is Sunday


def test_a_bad_schedule_is_refused_when_saved(team_a):
    agent(team_a, "Lead")
    with pytest.raises(DefinitionError, match="not a valid cron expression"):
        define(team_a, WORKFLOW, SCHEDULED.replace("*/15 6 * * 1-5", "61 6 * * *"))
    with pytest.raises(DefinitionError, match="five fields"):
        define(team_a, WORKFLOW, SCHEDULED.replace("*/15 6 * * 1-5", "0 6 * *"))
    assert not Workflow.objects.exists()


def test_a_scheduled_workflow_starts_once_per_due_minute(team_a, team_b, sent):
    agent(team_a, "Lead")
    define(team_a, WORKFLOW, SCHEDULED)
    monday = datetime(2026, 11, 23, 6, 15, 2, tzinfo=UTC)
    [run] = schedules_fire(monday)
    assert (run.workflow, run.input, run.team) == ("morning", "when: 2026-11-23T06:15:00+00:00", team_a)
    assert WorkflowRun.objects.get(run=run).trigger == "schedule"
    # Beat ticks again in the same minute (or a second beat does): nothing more.
    assert schedules_fire(monday.replace(second=40)) == []
    assert schedules_fire(monday.replace(minute=16)) == []
    assert len(schedules_fire(monday.replace(minute=30))) == 1
    assert schedules_fire(datetime(2026, 11, 22, 6, 45, tzinfo=UTC)) == []  # Sunday
    assert Run.objects.count() == 2 and len(sent) == 2
    assert Workflow.objects.get().schedule_last_at == monday.replace(minute=30, second=0)


def test_a_channel_message_starts_the_teams_workflows_on_that_channel(team_a, team_b, sent):
    for team in (team_a, team_b):
        agent(team, "Lead")
        define(team, WORKFLOW, ON_NEWS)
    publisher = run_start(team=team_a, agent="lead", input="x", script={"lead": [{"text": "-"}]})
    channel_publish(run_id=publisher.id, channel="weather", sender="lead", content="sunny")
    assert Run.objects.count() == 1  # another channel: nothing
    channel_publish(run_id=publisher.id, channel="news", sender="lead", content="Tides rise")
    [started] = Run.objects.exclude(pk=publisher.pk)
    assert (started.team, started.workflow, started.input) == (team_a, "on-news", "headline: Tides rise\nextra: ")
    assert WorkflowRun.objects.get(run=started).trigger == "channel"
    # The workflow's own run publishing on its channel does not start it again (no loop).
    channel_publish(run_id=started.id, channel="news", sender="lead", content="again")
    assert Run.objects.count() == 2
