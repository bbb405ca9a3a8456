"""A CPU-backed stand-in for Intel Gaudi's habana_frameworks, for accel-hpu's tests only.

It implements just the API surface accel-hpu uses, with habana_frameworks' module names:
``habana_frameworks.torch`` (importing it makes ``hpu`` tensors live on the CPU, as importing the
real one makes them live on the HPU), ``.hpu`` (device count, name, memory statistics, random
state), ``.core`` (``mark_step``), ``.distributed.hccl`` (registers an ``hccl`` process-group
backend that, like HCCL, refuses to reduce int64 and float64 tensors) and
``.hpex.experimental.transformer_engine`` (fp8 ``Linear`` and ``fp8_autocast``).

Environment: ``FAKE_HPU_COUNT`` (HPUs, default 8), ``FAKE_HPU_NAME`` (default ``GAUDI2``),
``FAKE_HABANA_NO_FP8=1`` (a release without the transformer engine).
"""
