"""Run the pipeline on a two-node Ray cluster on this machine.

Two real nodes (`ray.cluster_utils.Cluster`: a head and a worker, each
its own raylet and worker processes, one CPU each), both on 127.0.0.1, so
the shard tasks spread over two nodes as on a real cluster while no
traffic leaves loopback. The cluster's processes are this script's
children and are stopped when it ends, failed or not.

    python local_cluster.py PIPELINE ARGS...   (those of oapd_pipeline.py)
"""

from __future__ import annotations

import os
import sys
import tempfile

# Read by Ray when it is imported, so set first. Ray turns a loopback
# address into the machine's own network address so that other machines
# can reach it; this switch keeps every address on loopback (Ray's
# single-machine mode). No usage report leaves the machine.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import oapd_pipeline  # noqa: E402


def main() -> int:
    node = {
        "num_cpus": 1,
        "node_ip_address": "127.0.0.1",
        "include_dashboard": False,
        "object_store_memory": 256 * 1024 * 1024,
    }
    # Ray keeps its sockets and the cluster's address file under
    # RAY_TMPDIR: a directory of this run's, short enough for the Unix
    # socket path limit, removed at the end.
    with tempfile.TemporaryDirectory(prefix="rayp-", dir="/tmp") as temp_dir:
        os.environ["RAY_TMPDIR"] = temp_dir
        cluster = Cluster(initialize_head=True, head_node_args=node)
        try:
            cluster.add_node(**node)
            cluster.wait_for_nodes()
            return oapd_pipeline.main([*sys.argv[1:], "--address", cluster.address])
        finally:
            if ray.is_initialized():
                ray.shutdown()
            cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
