"""The kinds of task, one module each: every module here registers its :class:`pyelmo.tasks.kind.TaskKind`
(:func:`pyelmo.tasks.kind.register`) and is imported when the registry is first asked."""
