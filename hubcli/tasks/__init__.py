"""The four tasks: how data is read, encoded, scored and decoded for each head type."""

from __future__ import annotations

from hubcli.errors import UsageError
from hubcli.tasks.base import Columns, Task
from hubcli.tasks.classification import Classification
from hubcli.tasks.qa import QuestionAnswering
from hubcli.tasks.regression import Regression
from hubcli.tasks.tagging import Tagging

TASKS: dict[str, type[Task]] = {task.name: task for task in
                                (Classification, Regression, Tagging, QuestionAnswering)}

__all__ = ["TASKS", "Columns", "Task", "get_task"]


def get_task(name: str, head: dict | None = None) -> Task:
    """A fresh instance of the task called `name`; given a manifest's `head`, one that decodes
    as that head's labels were learnt (its `label_scheme`, none when not recorded).

    Raises:
        UsageError: no task has that name.
    """
    if name not in TASKS:
        raise UsageError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)}",
                         hint="pass --task with one of the names above")
    task = TASKS[name]()
    if head is not None:
        task.label_scheme = head.get("label_scheme")
    return task
