# The foundation's models (teams, tokens, the definition base, versions, events) are agents_app models by
# label (see mas_core.models): importing them here is what registers them with the app.
from mas_core.models import (  # noqa: F401
    ROLE_CAPABILITIES,
    ApiToken,
    Definition,
    DefinitionVersion,
    Event,
    Invitation,
    Membership,
    PasswordLinkNonce,
    Role,
    Team,
)
from agents_app.models.context import ActivationContext  # noqa: F401
from agents_app.models.definitions import (  # noqa: F401
    Agent, Guardrail, ModelProvider, ProviderModel, RemoteAgent, Skill,
)
from agents_app.models.runs import (  # noqa: F401
    Activation, Run, Session, SessionEntry, Worker, WorkspaceFile, WorkspaceFileVersion,
)
from agents_app.models.approvals import ApprovalRequest  # noqa: F401,E402
