"""The verbs behind `python -m zoo <verb>`: each knows no domain; a task's hooks come from zoo.kit.hooks."""
