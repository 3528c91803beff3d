"""Four indexes on a foreign key that a unique or composite index beginning with the same column already serves:
every step inserted into each of them (six events, two history entries, a file and its version), for no lookup
the other index does not answer. Only the indexes go; the foreign keys stay as they are (Django's own
AlterField would drop and re-validate each constraint over the whole table).
"""

import django.db.models.deletion
from django.db import migrations, models

# (model, field, related name, target, the index Django made for the field, its table and column)
DROPPED = [
    ("event", "run", "events", "agents_app.run", "agents_app_event_run_id_fdd48112", "agents_app_event", "run_id"),
    ("sessionentry", "session", "entries", "agents_app.session", "agents_app_sessionentry_session_id_9b7b3c47",
     "agents_app_sessionentry", "session_id"),
    ("workspacefile", "run", "files", "agents_app.run", "agents_app_workspacefile_run_id_052a3bdf",
     "agents_app_workspacefile", "run_id"),
    ("workspacefileversion", "run", "file_versions", "agents_app.run",
     "agents_app_workspacefileversion_run_id_939c098a", "agents_app_workspacefileversion", "run_id"),
]


class Migration(migrations.Migration):

    dependencies = [
        ("agents_app", "0020_suspended"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name=model, name=field,
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name=related, to=target),
                )
                for model, field, related, target, _, _, _ in DROPPED
            ],
            database_operations=[
                migrations.RunSQL(f'DROP INDEX IF EXISTS "{index}"',
                                  reverse_sql=f'CREATE INDEX IF NOT EXISTS "{index}" ON "{table}" ("{column}")')
                for _, _, _, _, index, table, column in DROPPED
            ],
        ),
    ]
