"""The fields grouping sends a key to the same task from every process: Python salts str
hashes per process, and the choice must not depend on that."""
import subprocess
import sys

from squall.grouping import fields_task_index

TASKS = [4, 5, 6, 7]


def test_fields_grouping_is_stable_across_processes():
    words = ["apple", "moon", "cow", "ünïcode", "42"]
    sets = [frozenset(words[:i]) for i in range(2, 6)]  # iterated in an order of the hash seed
    here = [TASKS[fields_task_index([w], 4)] for w in [*words, *sets]]
    code = ("from squall.grouping import fields_task_index; import sys; "
            f"print([[4,5,6,7][fields_task_index([w], 4)] for w in [*{words!r}, *{sets!r}]])")
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={"PYTHONHASHSEED": seed, "PATH": ""}, cwd="/")
        assert out.stdout.strip() == str(here)
