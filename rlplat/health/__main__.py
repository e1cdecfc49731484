"""``python -m rlplat.health``: the rules' table of docs/doctor.md."""

from rlplat.health.rules import rules_table

print(rules_table(), end="")
