from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("agents_app", "0009_long_sessions")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="is_eval",
            field=models.BooleanField(
                db_index=True, default=False,
                help_text="A case of an eval: left out of the run lists unless asked for; agents its script does "
                          "not name call the team's models (they are the agents under test)"),
        ),
    ]
