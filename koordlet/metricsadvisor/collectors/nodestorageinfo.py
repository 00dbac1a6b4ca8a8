"""NodeStorageInfoCollector: the node's disks, partitions, LVM and mount points.

With the BlkIOReconcile gate (the blkio strategy maps volumes to disks with it), every
``--collect-node-storage-info-interval`` (1 s) the storage layout is read
(``koordlet.system.localstorage``) and stored in the key-value store as
``node_local_storage_info``; ``koordlet_collect_node_local_storage_info_status`` counts
successes and failures. A failed round keeps the last good layout.

Reading the layout runs ``lsblk``, ``vgs``, ``lvs`` and ``findmnt``; ``vgs`` and ``lvs``
wait on the LVM lock while a volume is being created, for seconds. Upstream reads it in a
goroutine of its own; here the collector's tick only hands the reading to a thread of its
own (``koordlet-storage-info``), which publishes the layout when it is done, so the shared
collection worker (node and pod usage, the pressure probe) never waits on those commands.
A tick that comes while the previous reading still runs is skipped: there is never more
than one reading at a time, and a stuck one is killed once its time is spent
(``localstorage.SCAN_TIMEOUT_SECONDS`` for the four commands together).
"""

from __future__ import annotations

import logging
import threading

from koordlet.metriccache import kinds
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase
from koordlet.system.localstorage import CommandRunner, LocalStorageError, read_local_storage_info

log = logging.getLogger(__name__)

#: how long ``close()`` waits for the reading thread to end; a reading stuck in a command is
#: not waited for longer (the thread is a daemon, and the command is killed at its deadline)
CLOSE_WAIT_SECONDS = 1.0


class NodeStorageInfoCollector(CollectorBase):
    NAME = "NodeStorageInfoCollector"

    def __init__(self, ctx: CollectContext, run: CommandRunner | None = None) -> None:
        super().__init__(ctx, ctx.config.collect_node_storage_info_interval)
        #: runs the commands (None: the real ones, sharing one deadline per reading)
        self._run = run
        self._last_error = ""
        self._state = threading.Condition()
        self._wanted = False  # a reading was asked for and has not begun
        self._reading = False  # a reading is running
        self._closed = False
        self._thread: threading.Thread | None = None
        #: ticks skipped because the previous reading still ran
        self.skipped = 0

    def enabled(self) -> bool:
        return self.ctx.gates.enabled("BlkIOReconcile")

    def collect(self, now: float) -> None:
        """Ask the reading thread for a reading (started on the first tick); nothing when
        the previous one has not finished."""
        with self._state:
            if self._closed:
                return
            if self._wanted or self._reading:
                self.skipped += 1
                log.debug("the node's storage layout is still being read: this round is skipped")
                return
            if self._thread is None:
                thread = threading.Thread(
                    target=self._read_when_asked, name="koordlet-storage-info", daemon=True
                )
                thread.start()  # a failure to start leaves nothing asked for: the next tick tries again
                self._thread = thread
            self._wanted = True
            self._state.notify_all()

    def _read_when_asked(self) -> None:
        while True:
            with self._state:
                self._state.wait_for(lambda: self._wanted or self._closed)
                if self._closed:
                    return
                self._wanted, self._reading = False, True
            try:
                self.read_layout()
            except Exception:  # a bug must not end the thread: the next tick tries again
                log.exception("reading the node's storage layout failed")
                self._count("failed")
            finally:
                with self._state:
                    self._reading = False
                    self._state.notify_all()

    def read_layout(self) -> None:
        """Read the layout once and publish it (on failure keep the last one); runs on the
        reading thread."""
        try:
            info = read_local_storage_info(self._run)
        except LocalStorageError as err:
            if str(err) != self._last_error:  # the same failure each second is said once
                self._last_error = str(err)
                log.warning("cannot read the node's local storage: %s", err)
            self._count("failed")
            return
        self._last_error = ""
        with self._state:
            if self._closed:  # the agent stopped while the commands ran
                return
            self.ctx.kv.set(kinds.NODE_LOCAL_STORAGE_INFO, info)
        self._count("succeeded")
        self.started = True

    def _count(self, status: str) -> None:
        metrics = self.ctx.metrics
        metrics.collect_node_local_storage_info_status.labels(metrics.node, status).inc()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no reading is asked for (or will be: closed) or running; False when
        ``timeout`` ran out."""
        with self._state:
            return self._state.wait_for(
                lambda: not self._reading and (self._closed or not self._wanted), timeout
            )

    def close(self) -> None:
        """Stop the reading thread: no reading starts or is published after this."""
        with self._state:
            self._closed = True
            self._state.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(CLOSE_WAIT_SECONDS)
            if thread.is_alive():
                log.info("the node's storage layout was still being read at stop; not waited for")
