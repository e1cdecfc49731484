"""``python -m rlplat.health``: the rules' table of docs/doctor.md."""

from rlplat.health.rules import rules_table

if __name__ == "__main__":
    print(rules_table(), end="")
