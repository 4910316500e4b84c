"""Watching the file that `optpipe-compile` replaces with each better schedule it finds.

`optpipe-compile -o PATH` writes the best generator's schedule first and then replaces PATH
atomically (a temporary file renamed over it) with every better schedule the optimiser finds, so a
reader always sees a whole file. `ScheduleWatch.poll()` reads the file again when its identity
(inode, size, modification time) changed, opens it (the shim's reader checks its structure), and
keeps it as the candidate when `accept` takes it. A file that cannot be opened or is not accepted
is reported once per version and the previous candidate stays.

The watch decides nothing about switching: `PipelineSchedule` switches between steps, when every
rank proposes the same candidate (by the SHA-256 of its bytes).
"""

import dataclasses
import hashlib
import logging
import os

logger = logging.getLogger("optpipe_rt")


@dataclasses.dataclass
class Candidate:
    """A version of the watched file that opened and was accepted."""

    digest: str          # SHA-256 of the file's bytes, hex: what the ranks compare
    schedule: object     # the opened optpipe_rt.Schedule


def schedule_makespan(schedule):
    """The schedule's predicted step time: the latest end of any action on any rank, in the
    schedule's time unit."""
    return max((action[4] for r in range(schedule.ranks) for action in schedule.actions(r)),
               default=0.0)


class ScheduleWatch:
    """Polls `path` for a newer schedule.

    Args:
        path: the file optpipe-compile writes (`-o`), .opsched or JSON.
        load: bytes -> optpipe_rt.Schedule (raises on a file it cannot open).
        accept: Schedule -> None, raising ValueError when the schedule does not fit the pipeline.
        digest: the SHA-256 of the version already running, so that it is not proposed again.
    """

    def __init__(self, path, load, accept, digest=None):
        self.path = os.fspath(path)
        self._load, self._accept = load, accept
        self._identity = None
        self._refused = None
        self.candidate = None
        self.running_digest = digest

    def _stat_identity(self):
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def poll(self):
        """The newest accepted version of the file that is not the one running, or None."""
        identity = self._stat_identity()
        if identity is None or identity == self._identity:
            return self.candidate
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except OSError as error:
            self._report(identity, f"cannot be read: {error}")
            return self.candidate
        self._identity = identity
        digest = hashlib.sha256(data).hexdigest()
        if digest == self.running_digest:
            self.candidate = None
            return None
        if self.candidate is not None and digest == self.candidate.digest:
            return self.candidate
        try:
            schedule = self._load(data)
            self._accept(schedule)
        except (ValueError, RuntimeError, OSError) as error:
            self._report(digest, str(error))
            return self.candidate
        self.candidate = Candidate(digest, schedule)
        return self.candidate

    def running(self, digest):
        """Records that the version with this digest now runs."""
        self.running_digest = digest
        if self.candidate is not None and self.candidate.digest == digest:
            self.candidate = None

    def _report(self, version, why):
        if version != self._refused:
            self._refused = version
            logger.warning("optpipe_rt: %s: the new schedule is not used (the running one "
                           "stays): %s", self.path, why)
