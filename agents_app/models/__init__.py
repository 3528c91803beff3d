from agents_app.models.definitions import (  # noqa: F401
    ROLE_CAPABILITIES,
    Agent,
    ApiToken,
    Definition,
    DefinitionVersion,
    Membership,
    ModelProvider,
    ProviderModel,
    Role,
    Skill,
    Team,
)
from agents_app.models.runs import Activation, Event, Run, Session, SessionEntry, WorkspaceFile, WorkspaceFileVersion  # noqa: F401
from agents_app.models.approvals import ApprovalRequest  # noqa: F401,E402
