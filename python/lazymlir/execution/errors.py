"""The errors of graph runs (run's jobs): how a job keeps its error, and how
a barrier raises it once, after the frontend gave back what the failed steps
wrote (:data:`on_failure`)."""

import copy
import traceback
from typing import List

# Errors of failed jobs not raised yet by any barrier, oldest first.
unreported: List[BaseException] = []

# Called on the caller's thread right before a job's error is raised there
# (frontend.barriers gives back what failed steps wrote), and after
# wait_device_ops() saw every job finish well (barriers forgets what the
# steps wrote over).
on_failure = None
on_settled = None


class DependencyError(RuntimeError):
    """A graph did not run because a graph it reads from failed."""


def root(e: BaseException) -> BaseException:
    """The error a job failed with: for a DependencyError, the earlier job's."""
    return e.__cause__ if isinstance(e, DependencyError) and e.__cause__ is not None else e


def report(e: BaseException):
    """Raise a job's error ``e`` here: no barrier raises it (or its root) as
    unreported again, and what failed steps wrote is given back first."""
    forget([e])
    if on_failure is not None:
        on_failure()
    reraise(e)


def forget(errors) -> None:
    """These jobs' errors are reported: wait_device_ops does not raise them."""
    roots = {id(root(e)) for e in errors}
    unreported[:] = [e for e in unreported if id(e) not in roots]


def drop_frames(e: BaseException) -> None:
    """A job's error (and its causes) without traceback objects, their text
    kept as a note. The job keeps the error for every waiter, and the job is
    reached from lazy tensors' trace state, which C++ holds out of the cyclic
    GC's sight: frames (the compiled graph and buffers in their locals, and,
    when a waiting thread ran the job, through f_back the waiter's frames
    holding lazy tensors) hanging off it would form cycles never collected."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if e.__traceback__ is not None:
            e.add_note(
                "lazymlir: raised while running a graph, at:\n" + "".join(traceback.format_tb(e.__traceback__)).rstrip()
            )
            e.__traceback__ = None
        e = e.__cause__ or e.__context__


def reraise(e: BaseException):
    """Raise a job's error here. A copy is raised where one can be made (same
    type, arguments, notes and cause): the frames this raise passes through
    (holding lazy tensors, whose trace state reaches the job and its error
    through C++, where the cyclic GC cannot see) then never hang off the
    error the job keeps (see drop_frames)."""
    try:
        copied = copy.copy(e)
    except Exception:
        copied = None
    if type(copied) is not type(e):
        raise e
    raise copied from e.__cause__
