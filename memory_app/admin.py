# Memory rows arrive with the memory issue; their admin (team scoped, on
# agents_app.admin_base.TeamScopedAdmin) comes with them.
