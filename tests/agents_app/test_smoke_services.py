from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from mas_core.definitions.storage import team_defs_dir
from agents_app.models import DefinitionVersion


def test_save_writes_file_and_version(team_a):
    text = "---\nname: Researcher\ndescription: Finds facts\n---\n\nYou research.\n"
    parsed = definition_parse(kind=AGENT, team=team_a, text=text)
    result = definition_save(kind=AGENT, team=team_a, parsed=parsed)
    assert result.created is True
    assert result.file_status == "written"
    assert (team_defs_dir(team_a) / "agents" / "researcher.md").read_text() == text
    again = definition_save(kind=AGENT, team=team_a, parsed=parsed)
    assert (again.changed, again.file_status) == (False, "unchanged")
    assert list(DefinitionVersion.objects.filter(team=team_a).values_list("number", flat=True)) == [1]
