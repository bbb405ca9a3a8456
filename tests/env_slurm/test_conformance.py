"""torchplug's conformance suite against env-slurm's ``slurm`` cluster environment.

The checks that need a job run under the variables ``srun`` sets for a job of one task (the
``SRUN_TASK`` of the detection tests, reduced to one task), so they run without a cluster; the
real loopback cluster is exercised by test_cluster.py. Outside a job, those checks are skipped
with the reason, as on a user's machine.
"""

from __future__ import annotations

from tests.env_slurm.test_detection import SRUN_TASK
from torchplug.testing import ClusterEnvironmentSuite

#: ``srun -n1 python train.py``: the variables of its one task.
ONE_TASK = {
    **SRUN_TASK,
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NTASKS": "1",
    "SLURM_STEP_TASKS_PER_NODE": "1",
    "SLURM_TASKS_PER_NODE": "1",
}


class TestSLURMConformance(ClusterEnvironmentSuite):
    plugin = "slurm"
    environment_variables = ONE_TASK


class TestSLURMOutsideAJob(ClusterEnvironmentSuite):
    plugin = "slurm"
