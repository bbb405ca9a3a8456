"""Prints, as one JSON line, which cluster environment the core selects here and what it reads (no torch).

``--hold SECONDS``: rank 0 also listens on the rendezvous port for that long, as the process
group's store does, so that two concurrent steps sharing a port would fail to bind.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

from torchplug import plugin_host
from torchplug.environments.detection import select_cluster_environment


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hold", type=float, default=0.0)
    args = parser.parse_args()
    selection = select_cluster_environment(plugin_host().registry("cluster_environment"))
    env = selection.environment
    report: dict[str, object] = {
        "selected": selection.name,
        "trace": list(selection.trace),
        "step": os.environ.get("SLURM_STEP_ID"),
        "job_name": os.environ.get("SLURM_JOB_NAME"),
        "torch_imported": "torch" in sys.modules,
    }
    if selection.name == "slurm":
        report.update(
            rank=env.global_rank(),
            world_size=env.world_size(),
            local_rank=env.local_rank(),
            per_node=env.processes_per_node(),
            address=env.main_address,
            port=env.main_port,
        )
        if args.hold and env.global_rank() == 0:
            with socket.create_server((env.main_address, env.main_port)):
                report["bound_at"] = time.time()
                time.sleep(args.hold)
                report["released_at"] = time.time()
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
