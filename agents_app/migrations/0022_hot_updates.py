"""Room on each page for a run's and a session's next version, so their per-step updates stay HOT.

A step updates its run's row (event counter, usage, script cursor) and its session's (usage, state, write
count), touching no indexed column: PostgreSQL can write the new version beside the old on the same page
without touching any index (a HOT update), but only if the page has room. At the default fill factor a page
is full from the start, and a third of the run's updates went to a new page, each inserting into all thirteen
indexes of the run table (measured by ``bench/kernel_overhead.py``: 370 of 1,178). Pages filled to 50 % leave
room for a version while older ones are pruned. Applies to pages written from now on; ``VACUUM FULL`` rewrites
older ones, when an operator wants.
"""

from django.db import migrations

TABLES = ("agents_app_run", "agents_app_session")


class Migration(migrations.Migration):

    dependencies = [
        ("agents_app", "0021_hot_path_indexes"),
    ]

    operations = [
        migrations.RunSQL(f"ALTER TABLE {table} SET (fillfactor = 50)", reverse_sql=f"ALTER TABLE {table} RESET (fillfactor)")
        for table in TABLES
    ]
