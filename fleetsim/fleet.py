"""One simulated fleet: start (register nodes, heartbeats, pod watch) and stop. Does API I/O, threads.

`Fleet(options).start()` returns once every node is registered and Ready; the pod watch and the
timers run on background threads until `stop()`. Used by `noderoll sim`, the test helper
(`tests/helpers/fleet.py`), the demo and the benchmarks.
"""

from __future__ import annotations

import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fleetsim import kubelet, nodes
from fleetsim.context import FleetOptions, SimContext, SimNode, jitter_factor
from fleetsim.images import ImageStore
from fleetsim.kube import Kube
from fleetsim.scheduler import Scheduler

log = logging.getLogger(__name__)
REGISTER_THREADS = 8


class Fleet:
    """A running simulated fleet."""

    def __init__(self, options: FleetOptions) -> None:
        self.options = options
        self.ctx = SimContext(
            options=options,
            kube=Kube(options.kubeconfig, pool_size=options.workers + REGISTER_THREADS + 2),
            scheduler=Scheduler(options.workers),
            images=ImageStore(options.image_stores),
        )
        self._watcher: threading.Thread | None = None

    @property
    def node_names(self) -> list[str]:
        """Names of the simulated nodes, in index order."""
        return [n.name for n in sorted(self.ctx.nodes.values(), key=lambda n: n.index)]

    def sandbox(self, node: str) -> Path:
        """The host root of a simulated node."""
        return self.ctx.sandbox(node)

    def gpus(self) -> dict[str, int]:
        """Node name -> its GPUs (allocatable `nvidia.com/gpu`, `FleetOptions.gpus` cycled)."""
        return {n.name: nodes.gpus_of(self.options, n.index) for n in self.ctx.nodes.values()}

    def boot_id(self, node: str) -> str:
        """The node's current boot id as fleetsim knows it."""
        return self.ctx.nodes[node].boot_id

    def start(self) -> Fleet:
        """Register every node (Ready, Lease), then start heartbeats and the pod watch."""
        total = self.options.nodes
        sims = [SimNode(nodes.node_name(self.options.name_prefix, i, total), i, str(uuid.uuid4())) for i in range(total)]
        for sim in sims:
            sim.time_factor = jitter_factor(sim.name, self.options.jitter_percent)
        self.options.sandbox_dir.mkdir(parents=True, exist_ok=True)
        # Registration is the only burst (3 requests per node): a few threads, then back to the pool.
        with ThreadPoolExecutor(REGISTER_THREADS, thread_name_prefix="fleetsim-register") as pool:
            list(pool.map(lambda node: nodes.register_node(self.ctx, node), sims))
        for node in sims:
            self.ctx.nodes[node.name] = node
            # Spread the renewals evenly over one period so the API sees a steady trickle.
            nodes.schedule_heartbeats(self.ctx, node, self.options.heartbeat_seconds * (node.index + 1) / total)
        self._watcher = threading.Thread(target=kubelet.watch_pods, args=(self.ctx,), name="fleetsim-pods", daemon=True)
        self._watcher.start()
        log.info("fleetsim: %d nodes %s..%s registered and Ready", total, sims[0].name if sims else "", sims[-1].name if sims else "")
        return self

    def stop(self) -> None:
        """Stop timers, the watch and running agents; delete the nodes if asked to."""
        self.ctx.stopping.set()
        self.ctx.kube.close_streams()
        for proc in list(self.ctx.procs.values()):
            proc.kill()
        self.ctx.scheduler.stop()
        self.ctx.agents.close()
        if self.options.delete_nodes_on_stop:
            with ThreadPoolExecutor(REGISTER_THREADS) as pool:
                list(pool.map(lambda name: nodes.delete_node(self.ctx, name), list(self.ctx.nodes)))
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        self.ctx.kube.pool.clear()

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
