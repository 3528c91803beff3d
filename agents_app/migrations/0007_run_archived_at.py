from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("agents_app", "0006_labels"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="archived_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
